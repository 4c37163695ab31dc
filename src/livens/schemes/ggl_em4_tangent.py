"""The Newton tangent of ``ggl-em4`` (:mod:`livens.schemes.ggl_em4`) for a constant mass matrix, assembled
from Jacobians at the quadrature points.

A step of ``ggl-em4`` evaluates the system's functions at the N quadrature points of the step and at
its end node; everything else in its residual (the polynomials through the unknowns, the projections
<e>_i = sum_k W_ik e_k onto the tests, the energy and momentum balances and the correction of the force)
is a small computation on these values. The arguments of the evaluations are linear in the unknowns,
with the coefficients of the step's polynomials: at point k, q_k = q^n + l_1(c_k) dq + l_m(c_k) Q_m
(p_k likewise), lambda_k and gamma_k interpolate (lambda_0, lambda_1) and (gamma_0, gamma_1) with
1 - c_k and c_k, and the end node is (q^n + dq, p^n + dp). So every row of the tangent is a sum over
the points of W_ik times a point Jacobian times such a coefficient, and the point Jacobians cost one
``jax.jacfwd`` per point in the point's own arguments, not one pass of the whole residual per unknown.

For a constant M, at a point (q, p, lambda, gamma) with w = M^-1 p, the evaluations are
f = grad_q [V(q) + lambda.g(q) + gamma.G(q) w] (the force of KBS23b eq 37), a = M^-1 G(q)^T gamma,
g(q), g_v = G(q) w and the generators xi(q) of the symmetries; all their derivatives come from one
``jax.jacfwd`` in q, d directions per point:

    D_q f,  G = D_q g,  D_q g_v,  S = D_q [G(q)^T gamma] = sum_j gamma_j D^2 g_j(q),  D_q xi,

since the other arguments enter through these (S is symmetric):

    D_lambda f = G^T,  D_gamma f = (D_q g_v)^T,  D_w f = S,  D_gamma a = M^-1 G^T,  D_q a = M^-1 S,
    D_w g_v = G,  D_p w = M^-1.

At the end node the evaluations are V(q1), g(q1) and g_v(q1, p1) = G(q1) M^-1 p1, with one ``jax.jacfwd``
in q1 and D_p1 g_v = G(q1) M^-1. The corrected force F = F(F^0, a, target_e, x_m, Z, targets) of the
scheme's correction is differentiated by its JVP along the assembled derivatives of its arguments.
The matrix is the derivative of the residual; it differs from ``jax.jacfwd`` of the residual in
round-off only (tests/test_ggl_em4_tangent.py compares them).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..mechanics import Mechanics


def _with_value(fun: Callable) -> Callable:
    """y -> (D fun(y), fun(y)): the Jacobian and the value from one ``jax.jacfwd``."""

    def both(y):
        out = fun(y)
        return out, out

    return jax.jacfwd(both, has_aux=True)


class PointJacobians:
    """The evaluations of a ``ggl-em4`` step with a constant M and their derivatives in q (module
    docstring), at the points (Q, P, lam_k, gam_k), (n, d) and (n, m) (``D``, ``v``: dicts of (n, ...)
    arrays), and at the end node (q1, p1) (``D1``, ``v1``). ``force_potential``: (q, lambda, gamma, w)
    -> V(q) + lambda.g(q) + gamma.G(q) w, whose gradient in q is the force the scheme evaluates
    (:func:`livens.schemes.ggl_em4.constant_mass_force_potential`)."""

    def __init__(self, mech: Mechanics, force_potential: Callable, Q, P, lam_k, gam_k, q1, p1):
        self.mech, self.P = mech, P
        w = jax.vmap(mech.Minv_mul)(P)
        grad = jax.grad(force_potential)

        def point(q, w, lam, gam):
            def fun(y):
                out = {"f": grad(y, lam, gam, w)}
                if mech.m:
                    gy, Gw = jax.jvp(mech.g, (y,), (w,))
                    out.update(g=gy, gv=Gw, GTgam=mech.GT_mul(y, gam))
                if mech.symmetries:
                    out["gens"] = mech.generators(y)
                return out

            return _with_value(fun)(q)

        self.D, self.v = jax.vmap(point)(Q, w, lam_k, gam_k)
        self.v["w"] = w
        self.v["a"] = jax.vmap(mech.Minv_mul)(self.v["GTgam"]) if mech.m else jnp.zeros_like(w)
        w1 = mech.Minv_mul(p1)

        def end(y):
            out = {"energy": mech.V(y)}
            if mech.m:
                gy, Gw = jax.jvp(mech.g, (y,), (w1,))
                out.update(g=gy, gv=Gw)
            return out

        self.D1, self.v1 = _with_value(end)(q1)

    def points(self, Q, P, lam_k, gam_k) -> dict:
        """The values at the points (:meth:`livens.schemes.ggl_em4.Evaluations.points`; the arguments
        are those the Jacobians were taken at)."""
        return {k: self.v[k] for k in ("w", "a", "f", "g", "gv", "gens") if k in self.v}

    def end(self, q1, p1) -> dict:
        """The values at the end node (:meth:`livens.schemes.ggl_em4.Evaluations.end`; g_v with M^-1
        applied as :meth:`livens.mechanics.Mechanics.Minv_mul` does, the same to round-off)."""
        return dict(self.v1)


def _columns(sizes, rows: int, dtype, **blocks) -> jax.Array:
    """The (rows, n) matrix with the (rows, size) block ``blocks[name]`` at the columns of each named
    unknown (``sizes``: ((name, size), ...) in the scheme's order), zero elsewhere."""
    return jnp.concatenate([blocks.get(k, jnp.zeros((rows, n), dtype)) for k, n in sizes], axis=1)


def _pair(T: jax.Array, names: tuple[str, str]) -> dict:
    """The block tensor T (2 tests, 2 unknowns, a, ..., b) as the columns of the two named unknowns,
    the rows test by test: {name_c: (2 a ..., b)}."""
    return {name: T[:, c].reshape(-1, T.shape[-1]) for c, name in enumerate(names)}


def assembled(J: PointJacobians, terms: dict, tab: dict, h, corrected: Callable, sizes) -> jax.Array:
    """dR/dx of ``ggl-em4`` (constant M) in the layout of its unknowns (``sizes``: ((name, size), ...)),
    from the point Jacobians ``J`` (module docstring). ``terms``: the step's terms at the point values
    of ``J`` (:func:`livens.schemes.ggl_em4.step_terms`); ``tab``: its quadrature tables
    (:func:`livens.schemes.ggl_em4.tables`); ``corrected``: its correction of the force."""
    mech, D, D1 = J.mech, J.D, J.D1
    d, m, dtype = mech.d, mech.m, J.P.dtype
    W = jnp.asarray(tab["W"], dtype)
    c2 = jnp.asarray(np.stack([tab["l1"], tab["lm"]]), dtype)  # q_k, p_k in (dq, Qm), (dp, Pm)
    cd = jnp.asarray(np.stack([tab["dl1"], tab["dlm"]]), dtype)  # their tau-derivatives
    lin = jnp.asarray(tab["lin"], dtype)  # lambda_k, gamma_k in (lam0, lam), (gam0, gam)
    eye = jnp.eye(d, dtype=dtype)
    Mi = mech.Minv_mul(eye)

    def proj(C, X):  # (2 tests, 2 unknowns, ...): <C_ck X_k>_i
        return jnp.einsum("ik,ck,k...->ic...", W, C, X)

    def kron(C, B):  # (2, 2, a, b): <C_ck>_i B
        return jnp.einsum("ik,ck,ab->icab", W, C, B)

    def cols(rows, **blocks):
        return _columns(sizes, rows, dtype, **blocks)

    def mean(C, X):  # {name: <C_ck X_k>_0} for the two unknowns of C
        return jnp.einsum("k,ck,kab->cab", W[0], C, X)

    Qs, Ps, Ls, Gs = ("dq", "Qm"), ("dp", "Pm"), ("lam0", "lam"), ("gam0", "gam")
    dA = cols(2 * d, **_pair(kron(cd, eye), Qs))  # a_i = <q'>_i
    dB = cols(2 * d, **_pair(kron(cd, eye), Ps))  # b_i = <p'>_i
    dPi = cols(2 * d, **_pair(kron(c2, Mi), Ps))
    dxm = cols(2 * d, **_pair(kron(c2, eye), Qs))
    F0 = _pair(proj(c2, D["f"]), Qs)
    if m:
        G, Dgv = D["g"], D["gv"]
        MiS = jax.vmap(mech.Minv_mul)(D["GTgam"])  # D_q a
        MiGT = jax.vmap(mech.Minv_mul)(jnp.swapaxes(G, 1, 2))  # D_gamma a
        dGam = cols(2 * d, **_pair(proj(c2, MiS), Qs), **_pair(proj(lin, MiGT), Gs))
        F0.update(_pair(proj(c2, jnp.swapaxes(MiS, 1, 2)), Ps))  # D_w f M^-1 = S M^-1
        F0.update(_pair(proj(lin, jnp.swapaxes(G, 1, 2)), Ls))
        F0.update(_pair(proj(lin, jnp.swapaxes(Dgv, 1, 2)), Gs))
    else:
        dGam = jnp.zeros_like(dA)
    dF0 = cols(2 * d, **F0)
    b, Gam = terms["b"], terms["Gam"]
    de = D1["energy"] @ cols(d, dq=eye) - b.reshape(-1) @ dGam - Gam.reshape(-1) @ dB  # target_e
    args = terms["correction"]  # (F0, a, target_e, x_m, Z, targets)
    Z, dZ, dT = args[4], None, None  # without symmetries Z and targets are None
    if Z is not None:
        r = Z.shape[1]
        dZ = cols(2 * d * r, **_pair(proj(c2, D["gens"]), Qs)).reshape(2 * d, r, -1)
        Pbar = W @ J.P
        cot = jax.vmap(mech.cotangent_generators)(Pbar)  # (2, d, r): -A^T P_i
        Dcot = jax.vmap(jax.jacfwd(mech.cotangent_generators))(Pbar)  # (2, d, r, d)
        dPbar = cols(2 * d, **_pair(kron(c2, eye), Ps)).reshape(2, d, -1)
        dT = -cot.reshape(2 * d, r).T @ dGam - jnp.einsum("idre,id,ien->rn", Dcot, Gam, dPbar)

    def jvp(*t):  # the corrected force along one column of its arguments' derivatives
        return jax.jvp(corrected, args, t)[1]

    axes = (1, 1, 0, 1, None if dZ is None else 2, None if dT is None else 1)
    dF = jax.vmap(jvp, in_axes=axes, out_axes=1)(dF0, dA, de, dxm, dZ, dT)
    rows = [dA - h * (dPi + dGam), dB + h * dF]
    if m:
        G1, GMi = D1["g"], jnp.swapaxes(MiGT, 1, 2)
        rows += [
            cols(m, dq=G1),
            cols(m, **dict(zip(Qs, mean(c2, G)))),
            cols(m, dq=D1["gv"], dp=mech.Minv_mul(G1.T).T),
            cols(m, **dict(zip(Qs, mean(c2, Dgv))), **dict(zip(Ps, mean(c2, GMi)))),
        ]
    return jnp.concatenate(rows)
