"""Process-wide settings that livens cannot work without, made at import: float64 everywhere (JAX's
``jax_enable_x64``, before any array is created), and HDF5 file locking off where the user has not
set it (``HDF5_USE_FILE_LOCKING``, before h5py loads), so that a result file streamed by a running
run can be read meanwhile (:mod:`livens.stream`).

Everything about compiling (options, the persistent compilation cache, native code) is the engine's
(:mod:`livens.engine`); it changes nothing at import.
"""

import os

os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
