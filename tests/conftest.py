import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# one BLAS thread: the small dense solves of Newton are 10-100x slower when OpenBLAS threads
# compete for a busy CPU (a 148 x 148 solve: 0.3 ms single-threaded, 25-75 ms with contention)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import livens  # noqa: E402,F401  (float64 before tests build arrays)
