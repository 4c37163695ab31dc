"""A program whose LUs test the native translator's factorization in place (the single kernel's and the
lane kernel's): tests/test_native_lu_in_place.py, tests/test_lanes_lu.py."""

import jax


def made_here(a):
    """LUs of matrices the program makes: one read by nothing after its LU (factored in its own
    array), made again after it by the same equations (which must not read the factors), and one
    read after its LU through a reshape (factored in a copy)."""
    b = a * 2.0 + 1.0
    lu_b = jax.lax.linalg.lu(b)
    again = a * 2.0 + 1.0
    d = a - 1.0
    lu_d = jax.lax.linalg.lu(d)
    return (*lu_b, again, *lu_d, d.reshape(-1) * 3.0)
