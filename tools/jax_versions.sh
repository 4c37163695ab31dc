#!/usr/bin/env bash
# The native tests under one JAX version: a fresh virtual environment under /tmp with
# jax==VERSION and jaxlib==VERSION from PyPI, livens installed in it, then the tests of the
# native code and of lv.flow's native reverse pass (which leans on JAX's transposition of
# custom_linear_solve). With no argument, the lowest version pyproject.toml allows.
#
#   tools/jax_versions.sh            # the lowest supported jax/jaxlib
#   tools/jax_versions.sh 0.10.2     # another version
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-$(sed -n 's/^ *"jax>=\([0-9.]*\).*/\1/p' pyproject.toml)}"
python="${PYTHON:-python3}"
venv="${JAX_VERSIONS_VENV:-/tmp/livens-jax-$version}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q "jax==$version" "jaxlib==$version" -e ".[test]"
"$venv/bin/python" -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__)"
"$venv/bin/python" -m pytest -q -rs -p no:cacheprovider -o addopts="-m 'not slow'" -n 2 --dist loadfile \
    tests/test_native.py tests/test_native_gather.py tests/test_lanes.py tests/test_native_cache.py \
    tests/test_native_primitives.py tests/test_native_stack.py tests/test_native_interrupt.py \
    tests/test_native_ctrl_c.py tests/test_flow_native_derivatives.py
