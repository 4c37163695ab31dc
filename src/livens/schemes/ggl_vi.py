"""The first-order GGL variational integrator VI-S (KBS23b eq 55; KBS23a eq 41, damped form KBS23a eq 57).

Unknowns per step: the increments dq = q^{n+1} - q^n, dp = p^{n+1} - p^n, v^n, lambda^n,
gamma^{n+1} (3d + 2m; the time loop adds the increments by compensated summation). With
q_bar = q^n + h v^n (KBS23b eq 53):

    q^{n+1} - q^n = h v^n + h M^-1 G(q_bar)^T gamma                                (55a)
    p^{n+1} - p^n = h D_1 L(q^n, v^n) - h G(q^n)^T lambda
                    - h sum_k gamma_k D^2 g_k(q_bar) M^-1 p^{n+1} - h C(q^n) v^n     (55b, 57b)
    D_2 L(q^n, v^n) = p^{n+1} + h sum_k gamma_k D^2 g_k(q_bar) M^-1 p^{n+1}         (55c)
    g(q^{n+1}) = 0                                                                 (55d)
    G(q_bar) M^-1 p^{n+1} = 0                                                      (55e)

KBS23a eq 41b and 57b print M^-1 p^n in the gamma term; the derivation (KBS23a eq 40b) and KBS23b eq 55b
give M^-1 p^{n+1}, which is used here. An external force enters like the damping force, at t^n.
Symplectic, conserves momentum maps, g(q) = 0 at the nodes; first order.

Configuration-dependent M(q) (new; the discrete action KBS23b eq 52 with the secondary constraint
g_v(q, p) = G(q) M(q)^-1 p of KBS23b Remark 3 at (q_bar, p^{n+1}); derivation in the theory pages):
the same equations with M^-1 G(q_bar)^T gamma -> a = M(q_bar)^-1 G(q_bar)^T gamma in (55a),
sum_k gamma_k D^2 g_k(q_bar) M^-1 p^{n+1} -> D_1 g_v(q_bar, p^{n+1})^T gamma
= sum_k gamma_k D^2 g_k(q_bar) w - D_q[a . M(q) w](q_bar), w = M(q_bar)^-1 p^{n+1}, in (55b, c), and
(55e) G(q_bar) M(q_bar)^-1 p^{n+1} = 0 (:func:`_residual_mass`; M(q) enters only through linear
solves). D_1 L and D_2 L are those of L(q, v) = 1/2 v.M(q)v - V(q). With a constant M the
residual is the one above, operation for operation.

Newton's tangent dR/dx is structured (:func:`_tangent`), each form tested against the AD Jacobian:
:class:`VISTangent` (dense blocks, block elimination), :class:`VISTangentBanded` where the reduced
Newton system is a narrow band in some order of the unknowns (chains: found once per system by
:func:`band_structure`), factorized by LU over the band at a cost per iteration linear in d, and the
matrix-free :class:`VISTangentMF`. The scheme offers these forms (:class:`livens.solvers.TangentForms`);
the size policy takes one (:func:`livens.solvers.choose_form`, rule ``"vi-s"``): the banded one from
``vis_banded_coordinates`` (:class:`livens.solvers.SizePolicy`) on where it is found, else the
matrix-free one from ``vis_matrix_free_coordinates`` on, else the dense blocks (small systems).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..solvers import TangentForms, choose_form
from ..solvers import banded as _banded
from ..solvers.dense import block_solve, solver, symmetric_solver
from . import ggl_mass, register
from .base import About, Capabilities, Enforced, Scheme, State, next_node
from .stage_tangents import ad_tangent


def _nodes(u, s: State):
    """q^{n+1}, p^{n+1} as the time loop will store them (:func:`~livens.schemes.base.next_node`)."""
    cq, cp = (None, None) if s.comp is None else s.comp
    return next_node(s.q, u["dq"], cq), next_node(s.p, u["dp"], cp)


def _residual(u, s: State, h, t, params, mech):
    """KBS23b eq 55 (KBS23a eq 57) in the increments dq = q^{n+1} - q^n, dp = p^{n+1} - p^n: no
    difference of nodal values is formed, so the residual resolves the increments to their own
    precision (the time loop adds them by compensated summation). A configuration-dependent M:
    :func:`_residual_mass`."""
    if not mech.constant_mass:
        return _residual_mass(u, s, h, t, params, mech)
    dq, dp, v0, lam, gam = u["dq"], u["dp"], u["v0"], u["lam"], u["gam"]
    q0 = s.q
    q1, p1 = _nodes(u, s)
    qbar = q0 + h * v0
    w = mech.Minv_mul(p1)
    # G(q_bar)^T gamma, G(q_bar) w and G(q^n)^T lambda as AD vector products: the cost follows
    # that of g, without forming the m x d Jacobians (large systems)
    GbarT_gam = mech.GT_mul(qbar, gam)
    Gbar_w = jax.jvp(mech.g, (qbar,), (w,))[1]
    hess = mech.hess_g_vec(qbar, gam, w)
    force = _force(mech, q0, v0, lam, t)
    return jnp.concatenate(
        [
            dq - h * v0 - h * mech.Minv_mul(GbarT_gam),
            dp - h * force + h * hess,
            mech.D2L(q0, v0) - p1 - h * hess,
            mech.g(q1),
            Gbar_w,
        ]
    )


def _force(mech, q0, v0, lam, t):
    """The force of eq 55b at the node: D_1 L(q^n, v^n) - G(q^n)^T lambda, with - C(q^n) v^n
    (KBS23a eq 57) and + F(q^n, v^n, t^n) where the system has them."""
    force = mech.D1L(q0, v0) - mech.GT_mul(q0, lam)
    if mech.has_dissipation:
        force = force - mech.C(q0) @ v0
    if mech.has_external_force:
        force = force + mech.F(q0, v0, t)
    return force


def _residual_mass(u, s: State, h, t, params, mech):
    """KBS23b eq 55 (KBS23a eq 57) for a configuration-dependent M(q), derived from the discrete
    action KBS23b eq 52 with h gamma.g_v(q_bar, p^{n+1}), g_v(q, p) = G(q) M(q)^-1 p (module docstring):

        q^{n+1} - q^n = h v^n + h a,                          a = M(q_bar)^-1 G(q_bar)^T gamma
        p^{n+1} - p^n = h D_1 L(q^n, v^n) - h G(q^n)^T lambda - h D_1 g_v(q_bar, p^{n+1})^T gamma
                        (- h C(q^n) v^n + h F(q^n, v^n, t^n))
        D_2 L(q^n, v^n) = p^{n+1} + h D_1 g_v(q_bar, p^{n+1})^T gamma
        g(q^{n+1}) = 0,   G(q_bar) M(q_bar)^-1 p^{n+1} = 0

    with D_1 g_v^T gamma from :func:`livens.schemes.ggl_mass.secondary_q_term`."""
    dq, dp, v0, lam, gam = u["dq"], u["dp"], u["v0"], u["lam"], u["gam"]
    q0 = s.q
    q1, p1 = _nodes(u, s)
    qbar = q0 + h * v0
    a, w = ggl_mass.solve_at(mech, qbar, gam, p1)  # one solve with M(q_bar)
    dgv = jax.grad(ggl_mass.secondary_potential(mech, gam, w, a))(qbar)
    force = _force(mech, q0, v0, lam, t)
    return jnp.concatenate(
        [
            dq - h * v0 - h * a,
            dp - h * force + h * dgv,
            mech.D2L(q0, v0) - p1 - h * dgv,
            mech.g(q1),
            jax.jvp(mech.g, (qbar,), (w,))[1],
        ]
    )


# --- structured tangent (speed) ----------------------------------------------------------------
def mass_operators(mech):
    """X -> M X and X -> M^-1 X for the constant mass matrix; elementwise where M is diagonal."""
    M = np.asarray(mech.M_const, dtype=float)
    Mi = np.asarray(mech.Minv_const, dtype=float)
    if not np.any(M - np.diag(np.diag(M))):
        md, mid = np.diag(M).copy(), 1.0 / np.diag(M)

        def scale(c):
            return lambda X: (c if X.ndim == 1 else c[:, None]) * X

        return scale(md), scale(mid), M, Mi
    return (lambda X: M @ X), (lambda X: Mi @ X), M, Mi


class VISTangent:
    """The Jacobian of the VI-S residual (KBS23b eq 55, damped KBS23a eq 57) in its blocks.

    With x = (dq, dp, v0, lambda, gamma) (derivatives with respect to dq, dp are those with
    respect to q^{n+1}, p^{n+1}), q_bar = q^n + h v^n, w = M^-1 p^{n+1} and
    G0 = G(q^n), G1 = G(q^{n+1}), Gb = G(q_bar), Hg = sum_k gamma_k D^2 g_k(q_bar),
    K = D_q[G(q) w](q_bar), Tq = D_q[Hg(q) w](q_bar), A = M - h D_v f (f the force of eq 55b/57b;
    A = M without damping and external force), P = I + h Hg M^-1, the rows of dR/dx are

        (55a)  [ I,   0,  -h I - h^2 M^-1 Hg,   0,       -h M^-1 Gb^T ]
        (55b)  [ 0,   P,   A - M + h^2 Tq,      h G0^T,   h K^T        ]
        (55c)  [ 0,  -P,   M - h^2 Tq,          0,       -h K^T        ]
        (55d)  [ G1,  0,   0,                   0,        0            ]
        (55e)  [ 0,   Gb M^-1,  h K,            0,        0            ]

    :meth:`solve` applies its inverse by block elimination, which gives the same Newton iterates
    as the dense solve (up to round-off) at a fraction of the cost: (55b) + (55c) give
    A dv + h G0^T dlambda = b2 + b3, so dv is affine in dlambda; (55c) gives
    M^-1 dp1 = S^-1(-b3 + Y dv - h K^T dgamma) with the symmetric S = M + h Hg and
    Y = M - h^2 Tq; (55a) gives dq1. What remains is (55d, e) in (dlambda, dgamma), a
    2m x 2m system. Cost: one factorization of S (d x d) and one of the 2m x 2m matrix, instead
    of the (3d + 2m) x (3d + 2m) dense one; S by :func:`livens.solvers.dense.symmetric_solver`
    (in a native kernel, elimination without pivoting that skips the zeros of M and Hg, checked by
    its pivots). ``by_blocks``: the 2m x 2m system by block elimination on the (55d) rows
    (:func:`livens.solvers.dense.block_solve`, two m x m factorizations), the form the size policy
    takes for many constraints (:func:`livens.solvers.choose_form`). :meth:`matrix` assembles the
    dense Jacobian (for tests).
    """

    by_blocks = False

    def __init__(self, mech, h, A, G0, G1, Gb, K, Hg, Tq, by_blocks: bool = False):
        self.Mop, self.Miop, self.M, self.Mi = mass_operators(mech)
        self.d, self.m, self.by_blocks = mech.d, mech.m, by_blocks
        self.h, self.A, self.G0, self.G1, self.Gb, self.K, self.Hg, self.Tq = h, A, G0, G1, Gb, K, Hg, Tq

    def matrix(self):
        """The dense Jacobian dR/dx (3d + 2m square), assembled from the blocks."""
        h, d, m = self.h, self.d, self.m
        M, Mi = jnp.asarray(self.M), jnp.asarray(self.Mi)
        I, Z = jnp.eye(d), jnp.zeros((d, d))
        Zdm, Zmd, Zmm = jnp.zeros((d, m)), jnp.zeros((m, d)), jnp.zeros((m, m))
        P = I + h * self.Hg @ Mi
        AmM = Z if self.A is None else self.A - M
        return jnp.block(
            [
                [I, Z, -h * I - h * h * Mi @ self.Hg, Zdm, -h * Mi @ self.Gb.T],
                [Z, P, AmM + h * h * self.Tq, h * self.G0.T, h * self.K.T],
                [Z, -P, M - h * h * self.Tq, Zdm, -h * self.K.T],
                [self.G1, Zmd, Zmd, Zmm, Zmm],
                [Zmd, self.Gb @ Mi, h * self.K, Zmm, Zmm],
            ]
        )

    def solve(self, b):
        """dR/dx^-1 b by block elimination (see the class docstring)."""
        h, d, m = self.h, self.d, self.m
        Mop, Miop, G0, G1, Gb, K, Hg, Tq = self.Mop, self.Miop, self.G0, self.G1, self.Gb, self.K, self.Hg, self.Tq
        b1, b2, b3, b4, b5 = b[:d], b[d : 2 * d], b[2 * d : 3 * d], b[3 * d : 3 * d + m], b[3 * d + m :]
        # dv = a + Al dlambda from (55b) + (55c)
        rhs0 = jnp.concatenate([(b2 + b3)[:, None], G0.T], axis=1)
        X = Miop(rhs0) if self.A is None else solver(self.A)(rhs0)
        aAl = X * jnp.concatenate([jnp.ones((1,)), -h * jnp.ones((m,))])[None, :]
        a, Al = aAl[:, 0], aAl[:, 1:]
        Y_aAl = Mop(aAl) - (h * h) * (Tq @ aAl)  # Y [a | Al]
        Wq_aAl = h * aAl + (h * h) * Miop(Hg @ aAl)  # (h I + h^2 M^-1 Hg) [a | Al]
        K_aAl = K @ aAl
        MiGbT = Miop(Gb.T)
        S_inv = symmetric_solver(jnp.asarray(self.M) + h * Hg)  # symmetric, positive definite for small h
        if m:
            Z = S_inv(Gb.T)  # S^-1 Gb^T
            GG = G1 @ jnp.concatenate([(b1 + Wq_aAl[:, 0])[:, None], Wq_aAl[:, 1:], MiGbT], axis=1)
            ZY = Z.T @ jnp.concatenate([Y_aAl, K.T], axis=1)
            top = jnp.concatenate([GG[:, 1 : 1 + m], h * GG[:, 1 + m :]], axis=1)
            bot = jnp.concatenate([ZY[:, 1 : 1 + m] + h * K_aAl[:, 1:], -h * ZY[:, 1 + m :]], axis=1)
            rhs = jnp.concatenate([b4 - GG[:, 0], b5 - h * K_aAl[:, 0] - ZY[:, 0] + Z.T @ b3])
            if self.by_blocks:  # (55d) block first: G1 W Al ~ -h^2 G1 M^-1 G0^T, regular
                dl, dg = block_solve(top[:, :m], top[:, m:], bot[:, :m], bot[:, m:], rhs[:m], rhs[m:], after=Z)
            else:
                sol = solver(jnp.concatenate([top, bot], axis=0))(rhs)
                dl, dg = sol[:m], sol[m:]
        else:
            dl = dg = jnp.zeros((0,), b.dtype)
        dv = a + Al @ dl
        dq1 = b1 + h * dv + (h * h) * Miop(Hg @ dv) + h * (MiGbT @ dg)
        dp1 = Mop(S_inv(-b3 + Mop(dv) - (h * h) * (Tq @ dv) - h * (K.T @ dg)))
        return jnp.concatenate([dq1, dp1, dv, dl, dg])


def _columns(f):
    """A linear map of vectors applied to the columns of a matrix."""
    return jax.vmap(f, in_axes=1, out_axes=1)


class VISTangentMF:
    """The VI-S tangent of :class:`VISTangent` without its d x d blocks (large systems).

    The same block elimination, with every product by Hg, Tq, K and the constraint Jacobians
    taken as a Hessian- or Jacobian-vector product of AD (``jax.linearize``/``jax.vjp``), whose
    cost follows the sparsity of g (for a chain, O(d) per vector), and S^-1 = (M + h Hg)^-1
    applied by the fixed-point iteration X <- M^-1 (C - h Hg X) (h M^-1 Hg is small), iterated to
    round-off; where it does not converge in :data:`NEUMANN_MAX` sweeps, S is formed and
    factorized instead. What remains dense is the 2m x 2m system and its m x d factors, so that
    a step costs O(m^2 d) instead of O(d^3).
    """

    NEUMANN_MAX = 60

    def __init__(self, mech, h, A, q0, q1, qbar, w, gam):
        self.Mop, self.Miop, self.M, self.Mi = mass_operators(mech)
        self.d, self.m, self.h, self.A = mech.d, mech.m, h, A
        g = mech.g
        grad_gam = jax.grad(lambda y: gam @ g(y))
        self.Gb = jax.linearize(g, qbar)[1]  # V -> G(q_bar) V
        self.GbT = jax.vjp(g, qbar)[1]  # y -> G(q_bar)^T y
        Gw = lambda q: jax.jvp(g, (q,), (w,))[1]
        self.K = jax.linearize(Gw, qbar)[1]  # V -> K V
        self.KT = jax.vjp(Gw, qbar)[1]  # y -> K^T y
        self.Hg = jax.linearize(grad_gam, qbar)[1]  # V -> Hg V
        self.Tq = jax.linearize(lambda q: jax.jvp(grad_gam, (q,), (w,))[1], qbar)[1]  # V -> Tq V
        self.G1 = jax.linearize(g, q1)[1]
        self.G0T = jax.vjp(g, q0)[1]

    def _mat(self, f, X, vjp=False):
        if vjp:
            return _columns(lambda y: f(y)[0])(X)
        return _columns(f)(X)

    def matrix(self):
        """The dense Jacobian (for tests): the blocks of :class:`VISTangent` from the products."""
        d, m = self.d, self.m
        I, Im = jnp.eye(d), jnp.eye(m)
        G0 = self._mat(self.G0T, Im, vjp=True).T
        dense = VISTangent.__new__(VISTangent)
        dense.Mop, dense.Miop, dense.M, dense.Mi = self.Mop, self.Miop, self.M, self.Mi
        dense.d, dense.m, dense.h, dense.A, dense.G0 = d, m, self.h, self.A, G0
        dense.G1, dense.Gb, dense.K = self._mat(self.G1, I), self._mat(self.Gb, I), self._mat(self.K, I)
        dense.Hg, dense.Tq = self._mat(self.Hg, I), self._mat(self.Tq, I)
        return dense.matrix()

    def _S_solver(self):
        """C -> (M + h Hg)^-1 C by the fixed-point iteration, or by LU where it does not converge."""
        h, Miop, Hg = self.h, self.Miop, _columns(self.Hg)

        def solve(C):
            vec = C.ndim == 1
            C = C[:, None] if vec else C
            X0 = Miop(C)

            def cond(c):
                X, dX, k = c
                return (k < self.NEUMANN_MAX) & ~(jnp.max(jnp.abs(dX)) <= 4e-16 * jnp.max(jnp.abs(X)))

            def body(c):
                X, _, k = c
                Xn = Miop(C - h * Hg(X))
                return Xn, Xn - X, k + 1

            X, dX, _ = lax.while_loop(cond, body, (X0, X0, jnp.int32(0)))
            ok = jnp.max(jnp.abs(dX)) <= 4e-16 * jnp.max(jnp.abs(X))
            X = lax.cond(ok, lambda: X, lambda: solver(jnp.asarray(self.M) + h * Hg(jnp.eye(self.d)))(C))
            return X[:, 0] if vec else X

        return solve

    def solve(self, b):
        """dR/dx^-1 b (the elimination of :meth:`VISTangent.solve`, matrix-free)."""
        h, d, m = self.h, self.d, self.m
        Mop, Miop = self.Mop, self.Miop
        b1, b2, b3, b4, b5 = b[:d], b[d : 2 * d], b[2 * d : 3 * d], b[3 * d : 3 * d + m], b[3 * d + m :]
        G0T = self._mat(self.G0T, jnp.eye(m), vjp=True)  # d x m
        rhs0 = jnp.concatenate([(b2 + b3)[:, None], G0T], axis=1)
        X = Miop(rhs0) if self.A is None else solver(self.A)(rhs0)
        aAl = X * jnp.concatenate([jnp.ones((1,)), -h * jnp.ones((m,))])[None, :]
        a, Al = aAl[:, 0], aAl[:, 1:]
        Y_aAl = Mop(aAl) - (h * h) * _columns(self.Tq)(aAl)
        Wq_aAl = h * aAl + (h * h) * Miop(_columns(self.Hg)(aAl))
        K_aAl = _columns(self.K)(aAl)
        GbT = self._mat(self.GbT, jnp.eye(m), vjp=True)  # d x m
        MiGbT = Miop(GbT)
        S_inv = self._S_solver()
        Z = S_inv(GbT)  # S^-1 Gb^T
        GG = _columns(self.G1)(jnp.concatenate([(b1 + Wq_aAl[:, 0])[:, None], Wq_aAl[:, 1:], MiGbT], axis=1))
        ZY = Z.T @ Y_aAl
        ZKT = _columns(self.K)(Z).T  # Z^T K^T = (K Z)^T
        top = jnp.concatenate([GG[:, 1 : 1 + m], h * GG[:, 1 + m :]], axis=1)
        bot = jnp.concatenate([ZY[:, 1:] + h * K_aAl[:, 1:], -h * ZKT], axis=1)
        rhs = jnp.concatenate([b4 - GG[:, 0], b5 - h * K_aAl[:, 0] - ZY[:, 0] + Z.T @ b3])
        sol = solver(jnp.concatenate([top, bot], axis=0))(rhs)
        dl, dg = sol[:m], sol[m:]
        dv = a + Al @ dl
        dq1 = b1 + h * dv + (h * h) * Miop(self.Hg(dv)) + h * (MiGbT @ dg)
        dp1 = Mop(S_inv(-b3 + Mop(dv) - (h * h) * self.Tq(dv) - h * self.KT(dg)[0]))
        return jnp.concatenate([dq1, dp1, dv, dl, dg])


class VISTangentBanded:
    """The VI-S tangent of :class:`VISTangent` reduced to a band matrix (chains, beams).

    The elimination of :class:`VISTangent` forms S^-1 = (M + h Hg)^-1, which is dense even where
    Hg is sparse. Here y = M^-1 dp^{n+1} stays an unknown instead: with (55a) solved for dq1 and
    (55b) + (55c) for dv (A dv + h G0^T dlambda = b2 + b3, dv = a + Al dlambda where A = M), what
    remains is, in z = (y, dlambda, dgamma),

        (55c)  S y - Y Al dlambda + h K^T dgamma   = Y a - b3
        (55d)  G1 Wq Al dlambda + h G1 M^-1 Gb^T dgamma = b4 - G1 (b1 + Wq a)
        (55e)  Gb y + h K Al dlambda               = b5 - h K a

    (Y = M - h^2 Tq, Wq = h I + h^2 M^-1 Hg; with damping or an external force, A is not M and
    dv stays an unknown too, with the row A dv + h G0^T dlambda = b2 + b3). Every block is a
    product of the constraint Jacobians and Hessians, whose couplings are those of g: for a chain
    the matrix is a band in a suitable order. Its entries come from one application of this
    linear map per colour of a :class:`livens.solvers.banded.BandStructure` (AD products, as in
    :class:`VISTangentMF`), and it is factorized by LU over its band: a Newton iteration costs
    O(d) where the dense forms cost O(d^3) or O(m^2 d).
    """

    def __init__(self, structure, mech, h, A, q0, q1, qbar, w, gam):
        self.mf = VISTangentMF(mech, h, A, q0, q1, qbar, w, gam)
        self.s = structure
        self.d, self.m, self.h = mech.d, mech.m, h
        self.banded = _banded.BandedTangent(structure, self.apply)

    @property
    def keeps_dv(self) -> bool:
        return self.mf.A is not None

    def _dv(self, dl):
        """The part of dv that depends on dlambda (Al dlambda), or None when dv is an unknown."""
        return None if self.keeps_dv else -self.h * self.mf.Miop(self.mf.G0T(dl)[0])

    def apply(self, z):
        """The reduced matrix times z (see the class docstring)."""
        mf, h, d, m = self.mf, self.h, self.d, self.m
        Mop, Miop = mf.Mop, mf.Miop
        y, rest = z[:d], z[d:]
        if self.keeps_dv:
            dv, dl, dg = rest[:d], rest[d : d + m], rest[d + m :]
        else:
            dl, dg = rest[:m], rest[m:]
            dv = self._dv(dl)
        rows_c = Mop(y) + h * mf.Hg(y) - (Mop(dv) - (h * h) * mf.Tq(dv)) + h * mf.KT(dg)[0]
        dq = h * dv + (h * h) * Miop(mf.Hg(dv)) + h * Miop(mf.GbT(dg)[0])
        rows = [rows_c, mf.G1(dq), mf.Gb(y) + h * mf.K(dv)]
        if self.keeps_dv:
            rows.insert(0, mf.A @ dv + h * mf.G0T(dl)[0])
        return jnp.concatenate(rows)

    def matrix(self):
        """The dense Jacobian (for tests), from the blocks of :class:`VISTangentMF`."""
        return self.mf.matrix()

    def reduced_matrix(self):
        """The band matrix of the reduced system, dense, in the order of z (for tests)."""
        return self.banded.matrix()

    def solve(self, b):
        """dR/dx^-1 b: the reduced system by band LU, then dq1, dp1, dv (class docstring)."""
        mf, h, d, m = self.mf, self.h, self.d, self.m
        Mop, Miop = mf.Mop, mf.Miop
        b1, b2, b3, b4, b5 = b[:d], b[d : 2 * d], b[2 * d : 3 * d], b[3 * d : 3 * d + m], b[3 * d + m :]
        if self.keeps_dv:
            rhs = jnp.concatenate([b2 + b3, -b3, b4 - mf.G1(b1), b5])
            z = self.banded.solve(rhs)
            y, dv, dl, dg = z[:d], z[d : 2 * d], z[2 * d : 2 * d + m], z[2 * d + m :]
        else:
            a = Miop(b2 + b3)
            Wa = h * a + (h * h) * Miop(mf.Hg(a))
            rhs = jnp.concatenate([Mop(a) - (h * h) * mf.Tq(a) - b3, b4 - mf.G1(b1 + Wa), b5 - h * mf.K(a)])
            z = self.banded.solve(rhs)
            y, dl, dg = z[:d], z[d : d + m], z[d + m :]
            dv = a + self._dv(dl)
        dq1 = b1 + h * dv + (h * h) * Miop(mf.Hg(dv)) + h * Miop(mf.GbT(dg)[0])
        return jnp.concatenate([dq1, Mop(y), dv, dl, dg])


def band_structure(mech, keeps_dv: bool):
    """The :class:`livens.solvers.banded.BandStructure` of :class:`VISTangentBanded`'s reduced system for
    this system, or None where its band is not narrow (cached per system: found once, at the
    compilation of the first run, for every h).

    The pattern is the union of the nonzeros of the reduced matrix at a few random points
    (:func:`livens.solvers.banded.find_structure`): random states, multipliers, h, t and System
    parameters, with the damping and external force's velocity derivative by AD at each point
    (``keeps_dv``); the band assembled from it is checked against the matrix at one more point
    (:func:`livens.solvers.banded.checked`), and given up (None) where they differ."""
    key = ("VI-S reduced", mech.system, mech.symmetries, keeps_dv)  # found once: find_structure's cache
    d, m = mech.d, mech.m
    n = (2 * d if keeps_dv else d) + 2 * m

    def random_point(rng):
        prm = _banded.random_parameters(mech.system.parameters, rng)
        q0, v0, q1, qbar, w = (rng.standard_normal(d) for _ in range(5))
        gam = rng.standard_normal(m)
        h, t = float(rng.uniform(0.01, 0.1)), float(rng.uniform(0.0, 1.0))
        return prm, h, t, q0, v0, q1, qbar, w, gam

    @_banded.ImmediateProgram  # evaluated at a few sample points, also while the time loop is traced
    def columns(prm, h, t, q0, v0, q1, qbar, w, gam, E):
        bound = mech.bind(prm)
        A = _velocity_matrix(bound, q0, v0, t, h)
        probe = VISTangentBanded.__new__(VISTangentBanded)
        probe.mf = VISTangentMF(bound, h, A, q0, q1, qbar, w, gam)
        probe.d, probe.m, probe.h = d, m, h
        return _columns(probe.apply)(E)

    def columns_at(point, E):
        return columns(*point, E)

    return _banded.find_structure(key, n, columns_at, random_point)


def _velocity_matrix(mech, q0, v0, t, h):
    """A = M - h D_v f (f the force of KBS23b eq 55b / KBS23a eq 57b: -C(q^n) v^n + F(q^n, v^n, t^n)),
    or None without damping and external force (then A = M)."""
    if not (mech.has_dissipation or mech.has_external_force):
        return None
    Dvf = jnp.zeros((mech.d, mech.d))
    if mech.has_dissipation:
        Dvf = Dvf - mech.C(q0)
    if mech.has_external_force:
        Dvf = Dvf + jax.jacfwd(lambda v: mech.F(q0, v, t))(v0)
    return mech.M(q0) - h * Dvf


def _tangent(u, s: State, h, t, params, mech):
    """The structured tangent of VI-S in the form the size policy takes (:func:`livens.solvers.choose_form`,
    rule ``"vi-s"``) of those offered: with constraints, :class:`VISTangentBanded` where its reduced
    system is a narrow band and :class:`VISTangentMF`; :class:`VISTangent` at every size, its 2m x 2m
    system by blocks or not; their blocks by AD of g, C and F. A configuration-dependent M: the AD Jacobian of
    :func:`_residual_mass`, one named unknown at a time (:func:`livens.schemes.stage_tangents.ad_tangent`)."""
    if not mech.constant_mass:
        return ad_tangent(_residual_mass, u, s, h, t, params, mech, by_block=True)
    v0, gam = u["v0"], u["gam"]
    q0 = s.q
    q1, p1 = _nodes(u, s)
    qbar = q0 + h * v0
    w = mech.Minv_mul(p1)
    A = _velocity_matrix(mech, q0, v0, t, h)

    def banded():  # None where the reduced system is no narrow band
        structure = band_structure(mech, A is not None)
        return None if structure is None else VISTangentBanded(structure, mech, h, A, q0, q1, qbar, w, gam)

    def matrix_free():
        return VISTangentMF(mech, h, A, q0, q1, qbar, w, gam)

    def dense(by_blocks=False):
        def second_order(q):
            Gw = jax.jvp(mech.g, (q,), (w,))[1]  # G(q) w
            grad_gam = jax.grad(lambda y: gam @ mech.g(y))  # G(q)^T gamma
            Gtg, Hgw = jax.jvp(grad_gam, (q,), (w,))  # and Hg(q) w
            return Gw, Gtg, Hgw

        K, Hg, Tq = jax.jacfwd(second_order)(qbar)
        return VISTangent(mech, h, A, mech.G(q0), mech.G(q1), mech.G(qbar), K, Hg, Tq, by_blocks)

    reduced = mech.m > 0  # the banded and matrix-free forms eliminate down to the multipliers' system
    forms = TangentForms(
        "vi-s",
        dense,
        d=mech.d,
        m=mech.m,
        banded=banded if reduced else None,
        matrix_free=matrix_free if reduced else None,
        block_elimination=lambda: dense(by_blocks=True),
    )
    return choose_form(forms)


VI_S = register(
    Scheme(
        name="ggl-vi",
        unknowns=(("dq", "d"), ("dp", "d"), ("v0", "d"), ("lam", "m"), ("gam", "m")),
        residual=_residual,
        tangent=_tangent,
        capabilities=Capabilities(
            velocity_kind="leading",
            gamma=True,
            dissipation=True,
            mass_inverse=False,
            configuration_mass=True,
            applies_to=ggl_mass.refusal("ggl-vi"),
        ),
        about=About(
            paper="KBS23b eq 55; KBS23a eq 41 (typo in 41b corrected), damped KBS23a eq 57; M(q) by KBS23b Remark 3",
            description="first-order symplectic GGL variational integrator",
            enforced=(Enforced("position"), Enforced("velocity", at="bar")),  # 55d, e
            keeps="symplectic, momentum maps, g(q) at nodes; order 1",
            order=1,
        ),
    ),
    aliases={"VI-S": {}, "vi-s": {}},
)
