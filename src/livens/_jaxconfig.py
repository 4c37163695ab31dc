"""float64 everywhere (DESIGN: Newton, time loop), set before any array is created.

Also: HDF5 file locking off (before h5py loads), so that a streamed result file can be read while
the run that writes it is still going (see :mod:`livens.stream`).
"""
import os

os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
