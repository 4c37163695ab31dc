"""The hand-written derivative of vi-nullspace's complete QR factorization G(q)^T = [N P] [R1; 0]
(SLO09 §4) against JAX's AD of the reduced factorization and against central differences.

(dN, dR1) is the derivative of the reduced factorization A = N R1, which JAX differentiates itself:
they must agree to round-off. The complement basis P is not unique; its derivative must keep
[N P] orthogonal to first order (P^T dP = 0, N^T dP + dN^T P = 0) and move the projector P P^T =
I - N N^T as its central differences do. At a matrix with zero rows (G(q) at a configuration on a
coordinate axis, where JAX's derivative of the complete factorization is NaN) it must be finite.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from livens.schemes.vi_lagrange import _complete_qr


@pytest.mark.parametrize("d, m", [(3, 1), (6, 2), (9, 4)])
def test_complete_qr_derivative_against_ad_and_differences(d, m):
    rng = np.random.default_rng(d + m)
    A = jnp.asarray(rng.standard_normal((d, m)))
    dA = jnp.asarray(rng.standard_normal((d, m)))
    (P, N, R1), (dP, dN, dR1) = jax.jit(lambda A, dA: jax.jvp(_complete_qr, (A,), (dA,)))(A, dA)
    (N_ad, R_ad), (dN_ad, dR_ad) = jax.jvp(lambda A: jnp.linalg.qr(A, mode="reduced"), (A,), (dA,))
    np.testing.assert_allclose(np.asarray(N), np.asarray(N_ad), atol=1e-14)
    np.testing.assert_allclose(np.asarray(dN), np.asarray(dN_ad), atol=1e-12)
    np.testing.assert_allclose(np.asarray(dR1), np.asarray(dR_ad), atol=1e-12)
    P, N, dP, dN = (np.asarray(x) for x in (P, N, dP, dN))
    assert np.max(np.abs(P.T @ dP)) < 1e-13
    assert np.max(np.abs(N.T @ dP + dN.T @ P)) < 1e-13

    def projector(e):
        P_e = np.asarray(_complete_qr(A + e * dA)[0])
        return P_e @ P_e.T

    eps = 1e-5
    fd = (projector(eps) - projector(-eps)) / (2 * eps)
    np.testing.assert_allclose(dP @ P.T + P @ dP.T, fd, atol=1e-8)


def test_complete_qr_derivative_is_finite_with_zero_rows():
    """G(q)^T of the pendulum at q = (0, 0, -1): two zero rows."""
    A = jnp.array([[0.0], [0.0], [-1.0]])
    dA = jnp.array([[0.3], [-0.2], [0.1]])
    out, tangents = jax.jvp(_complete_qr, (A,), (dA,))
    assert all(np.all(np.isfinite(np.asarray(t))) for t in tangents)
    P, N = np.asarray(out[0]), np.asarray(out[1])
    dP, dN = np.asarray(tangents[0]), np.asarray(tangents[1])
    assert np.max(np.abs(N.T @ dP + dN.T @ P)) < 1e-14 and np.max(np.abs(P.T @ dP)) < 1e-14
