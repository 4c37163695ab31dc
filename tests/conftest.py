import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import livens  # noqa: E402,F401  (float64 before tests build arrays)
