"""The single kernel's LU factors a matrix in its own array where it is the last to read it
(:meth:`livens.engine.native.last_read.LastRead._last_read`), else in a copy: every output is the
copying kernel's bytes, and values that equations after the LU compute again from the same
operands are not read from the factored array."""

import jax
import numpy as np
import pytest
from _lu_in_place import made_here

from livens.engine import native
from livens.engine.native.last_read import LastRead

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


def _bits(x):
    """The bytes of an array (-0.0 and +0.0 apart)."""
    return np.ascontiguousarray(x).view(np.uint8)


@jax.jit
def _factor(b):
    return jax.lax.linalg.lu(b * 0.5)


def _after_calls(a):
    """LUs inside calls written in line: of a matrix the call makes and reads no more (in place),
    and of the call's argument, which its caller reads after the call (copied); one in a loop's
    body of the loop's carry (copied: the body reads it again)."""
    b = a + 3.0
    first = _factor(b)
    second = jax.jit(jax.lax.linalg.lu)(b)

    def body(c, _):
        lu, _, perm = jax.lax.linalg.lu(c)
        return c * 0.5 + lu[perm] * 1e-3, lu[0, 0]

    carry, diag = jax.lax.scan(body, b, None, length=3)
    return (*first, *second, b.sum(), carry, diag)


def _compiled(fn, a, monkeypatch, in_place):
    with monkeypatch.context() as m:
        if not in_place:
            m.setattr(LastRead, "_last_read", lambda self, b: False)
        kernel = native.compile_function(fn, a)
    native.wait()
    return kernel


@pytest.mark.parametrize("n", [6, 18, 40])
@pytest.mark.parametrize("fn", [made_here, _after_calls])
def test_an_lu_in_place_gives_the_bits_of_an_lu_of_a_copy(fn, n, monkeypatch):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n))
    own = _compiled(fn, a, monkeypatch, True)
    copying = _compiled(fn, a, monkeypatch, False)
    assert own.source.count("memcpy(") < copying.source.count("memcpy(")  # one copy fewer at least
    got, want = own(a), copying(a)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_bits(g), _bits(w))
    reference = jax.jit(fn)(a)
    for g, r in zip(got, reference):
        if np.issubdtype(np.asarray(r).dtype, np.integer):
            np.testing.assert_array_equal(g, r)
        else:
            np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-9)
    if fn is made_here:
        np.testing.assert_array_equal(_bits(got[3]), _bits(a * 2.0 + 1.0))
    else:
        np.testing.assert_allclose(got[6], np.sum(a + 3.0), rtol=1e-13)  # b read after its LU's call
