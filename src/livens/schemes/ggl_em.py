"""The GGL energy-momentum scheme EM (KBS23b §5, eq 84-91).

A direct discretization of the Euler-Lagrange equations of the GGL principle (KBS23b eq 37) with
discrete derivatives in the sense of Gonzalez:

    q^{n+1} - q^n = h v^{n+1/2} + h (D^G_p g_v)^T gamma^{n+1}                                (84a)
    p^{n+1} - p^n = h D^G_q L - h (D^G g)^T lambda^{n+1} - h (D^G_q g_v)^T gamma^{n+1}         (84b)
    p^{n+1/2} = D^G_v L                                                                      (84c)
    g(q^{n+1}) = 0                                                                           (84d)
    g_v(q^{n+1}, p^{n+1}) = G(q^{n+1}) M^-1 p^{n+1} = 0                                      (84e)

with (.)^{n+1/2} the mean of the nodal values. Unknowns per step: the increments
dq = q^{n+1} - q^n, dp = p^{n+1} - p^n, v^{n+1} (nodal), lambda^{n+1}, gamma^{n+1} (3d + 2m);
the time loop adds the increments by compensated summation
(:func:`livens.schemes.base.compensated_add`), so that q and p keep their digits over long runs.

Discrete derivatives (:mod:`livens.discrete_gradients`):
- (D^G_q L, D^G_v L): for the constant mass matrix this scheme requires, L = 1/2 v.M v - V(q) is
  separable and the partitioned gradient (KB23 eq 29) is (-D^G V, M v^{n+1/2}).
- D^G_p g_v = G(q^{n+1/2}) M^-1 (g_v is linear in p); D^G g and D^G_q g_v, and D^G V, are
  :func:`livens.discrete_gradients.corrected` gradients: the midpoint derivative plus a correction
  along the part of q^{n+1} - q^n outside the symmetry directions, which meets the directionality
  conditions (KBS23b eq 86) and, for every symmetry of the Problem that is an exact symmetry of V, g
  and M (checked at set-up: :func:`livens.symmetries.symmetry_defect`), the orthogonality conditions
  (KBS23b eq 85) -- whether or not the potential is written in invariants. Where the System declares
  ``invariants``, D^G V is Greenspan's gradient instead (KBS23b eq 126). For V, g at most quadratic
  (the papers' examples) all of these are the midpoint derivatives (KBS23b eq 99).

Properties (KBS23b §5.1-5.2): the energy E(q, v, p) = p.v - L(q, v) (eq 4) is conserved (eq 89),
the momentum maps J = p . xi q of the exact symmetries are conserved (eq 90-91), and both
constraints hold at the nodes. With p^0 = M v^0, (84c) gives p^n = M v^n at every node
(KB23 Prop. 5.5), so E = T + V. Second order; not symplectic.

Speed. The discrete derivatives enter (84b) only through

    f = D^G V + (D^G g)^T lambda + (D^G_q g_v)^T gamma,

and Gonzalez's formula is linear in the function it is applied to, with the same increment and
the same corrections for every row. So f is evaluated as the discrete gradient of one scalar
function, D^G[V + lambda.g + gamma.G(.) M^-1 p^{n+1/2}] (Greenspan's gradient of V kept apart
where the System declares invariants; :func:`_force`): the same values up to round-off as the
row-wise form (:func:`_residual_rowwise`), without forming the
m x d Jacobians, and a residual whose derivative costs a fraction of that of the row-wise form.
The Newton tangent is structured (:class:`EMTangent`): its blocks by AD, its inverse applied by
eliminating v and p and a Schur complement on the constraints (tested against ``jax.jacfwd`` of
the residual). For a system of several bodies with many Newton unknowns the same elimination runs
body by body (:mod:`livens.schemes.ggl_em_blocks`), at a cost that grows with the number of bodies.

Configuration-dependent M(q) (new; KBS23b §7 leaves it open: "scheme (84) in general differs from
the EM scheme due to Gonzalez in the case of non-constant mass matrices"; derivation in the theory
pages). L(q, v) = 1/2 v.M(q)v - V(q) is no longer separable and g_v(q, p) = G(q) M(q)^-1 p (KBS23b
Remark 3) no longer bilinear. :func:`_residual_mass` takes

- (D^G_q L, D^G_v L) the partitioned discrete derivative of L (KB23 eq 29, as ``livens-em``):
  D^G_v L = 1/2 (M(q^n) + M(q^{n+1})) v^{n+1/2} (exact: T is quadratic in v), D^G_q L the mean of
  the discrete gradients of q -> L(q, v^n) and q -> L(q, v^{n+1});
- D^G_p g_v = G(q^{n+1/2}) M(q^{n+1/2})^-1 (g_v is linear in p), so (84a) reads
  q^{n+1} - q^n = h v^{n+1/2} + h M(q^{n+1/2})^-1 G(q^{n+1/2})^T gamma, and D^G_q g_v whatever
  meets the directionality condition KBS23b eq 86b with it;
- f = -D^G_q L + (D^G g)^T lambda + (D^G_q g_v)^T gamma as one
  :func:`livens.discrete_gradients.corrected` gradient (Gonzalez's formula is linear in the
  function: without symmetries it is the sum of the separate Gonzalez gradients): the midpoint
  gradient of V - 1/2 (T(., v^n) + T(., v^{n+1})) + lambda.g + gamma.g_v(., p^{n+1/2}), corrected so
  that f . (q^{n+1} - q^n) is the sum of the directionality conditions KBS23b eq 86a-c, and, for each
  exact symmetry xi, f . xi q^{n+1/2} = D^G_v L . xi v^{n+1/2} + gamma . D^G_p g_v xi^T p^{n+1/2}
  (the orthogonality conditions KBS23b eq 85 summed as they enter the momentum balance eq 90; for a
  constant M both right-hand terms are those the constant-M correction imposes, and
  M v . xi v = 0).

Then E(q, v, p) = p.v - L(q, v) (KB23 eq 31) is conserved by the proof of KBS23b eq 87-89 and the
momentum maps by that of eq 90-91. p^n = M(q^n) v^n no longer holds exactly (KB23 Prop. 5.5), so
the nodal velocity is the unknown v^{n+1} (not M^-1 p^{n+1}) and T + V is not exactly conserved.
The Newton tangent is structured (:class:`livens.schemes.mq_tangent.EMMassTangent`, tested against
``jax.jacfwd`` of the residual) where the force is one Gonzalez gradient (no symmetries or invariants
declared), else the AD Jacobian. With a constant M the residual is the one above, operation
for operation. A singular M is refused (g_v needs M^-1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import discrete_gradients as dg
from ..solvers import TangentForms, choose_form
from ..solvers.dense import solver
from . import ggl_em_blocks, ggl_mass, mq_tangent, register
from .base import BOTH_NODAL, About, Capabilities, Scheme, State, default_update, next_node
from .ggl_vi import mass_operators
from .stage_tangents import ad_tangent


def _gv_derivative(mech, q0, p0, dq, dp):
    """The discrete derivatives (D^G_q g_v, D^G_p g_v) of g_v(q, p) = G(q) M^-1 p that EM uses, as
    matrices (for the tests and :func:`_residual_rowwise`; the scheme itself forms only their
    products with gamma, :func:`_force`).

    D^G_p g_v = G(q^{n+1/2}) M^-1, the Jacobian at the midpoint (the derivative of a function linear
    in p, taken where the symmetry argument of KBS23b eq 85b needs it), and row k of D^G_q g_v is
    :func:`livens.discrete_gradients.corrected` of D_q[G_k(q) w](q^{n+1/2}), w = M^-1 p^{n+1/2}, so
    that the directionality condition (KBS23b eq 86b) holds row by row,

        D^G_q g_v (q^{n+1} - q^n) + D^G_p g_v (p^{n+1} - p^n) = g_v(q^{n+1}, p^{n+1}) - g_v(q^n, p^n),

    and, for each exact symmetry xi of the system (``mech.symmetries``), the orthogonality
    condition KBS23b eq 85b, D^G_q g_v xi q^{n+1/2} = D^G_p g_v xi^T p^{n+1/2}. For constraints at most
    quadratic (the papers' examples) both are the midpoint derivatives (KBS23b eq 99).
    """
    Minv = mech.Minv()
    q1, qm = q0 + dq, q0 + 0.5 * dq
    w0, dw = Minv @ p0, Minv @ dp
    w = w0 + 0.5 * dw
    Gm = mech.G(qm)
    Dp = Gm @ Minv
    Z = mech.generators(qm)
    dgv = mech.G(q1) @ (w0 + dw) - mech.G(q0) @ w0 - Gm @ dw
    rows = jax.jacfwd(lambda q: mech.G(q) @ w)(qm)
    if Z is None or mech.invariant_constraints:
        targets = [None] * mech.m
    else:
        Zp = mech.cotangent_generators(mech.M(qm) @ w)
        targets = [-(Zp.T @ (Minv @ Gm[k])) for k in range(mech.m)]
    Dq = (
        jnp.stack([dg.corrected(rows[k], dq, dgv[k], qm, Z, targets[k]) for k in range(mech.m)])
        if mech.m
        else jnp.zeros((0, mech.d))
    )
    return Dq, Dp


def _force(mech, q0, w0, dq, dw, lam, gam, cq=None):
    """f = D^G V + (D^G g)^T lambda + (D^G_q g_v)^T gamma, with (84b) reading p^{n+1} - p^n + h f = 0.

    ``dq`` = q^{n+1} - q^n, ``w0`` = M^-1 p^n, ``dw`` = M^-1 (p^{n+1} - p^n), ``cq`` the carry of the
    compensated summation (q^{n+1} is evaluated where the time loop will store it,
    :func:`livens.schemes.base.next_node`). Every discrete derivative
    of KBS23b eq 84 is linear in the function it is taken of, so f is one discrete gradient
    (:func:`livens.discrete_gradients.corrected`) of the scalar Phi(q) = V(q) + lambda.g(q) +
    gamma.G(q) w, taken at the midpoint and corrected so that

    - f . (q^{n+1} - q^n) = V^{n+1} - V^n + lambda.(g^{n+1} - g^n)
      + gamma.(g_v(q^{n+1}, p^{n+1}) - g_v(q^n, p^n) - G(q^{n+1/2}) M^-1 (p^{n+1} - p^n))
      (the directionality conditions KBS23b eq 86 with D^G_p g_v = G(q^{n+1/2}) M^-1), and
    - f . xi q^{n+1/2} = gamma.G(q^{n+1/2}) M^-1 xi^T p^{n+1/2} for each exact symmetry xi of the
      system (``mech.symmetries``): the orthogonality conditions KBS23b eq 85a-c, which make the
      momentum maps of KBS23b eq 45 exact invariants of the scheme (eq 90-91).

    Where the System declares ``invariants``, D^G V is Greenspan's gradient (KBS23b eq 126) and the
    correction acts on the constraint terms alone. For V, g at most quadratic this is the
    midpoint gradient (KBS23b eq 99).
    """
    g = mech.g
    q1, qm = next_node(q0, dq, cq), q0 + 0.5 * dq
    w = w0 + 0.5 * dw

    def phi(q):  # lambda.g(q) + gamma.G(q) w
        gq, Gw = jax.jvp(g, (q,), (w,))
        return lam @ gq + gam @ Gw

    # g at most quadratic and invariant (or no symmetry): the midpoint derivatives meet eq 85-86
    # exactly (eq 99), and the correction below would only add round-off
    if mech.quadratic_constraints and (not mech.symmetries or mech.invariant_constraints):
        if mech.invariants is not None:
            return dg.potential_gradient(mech, q0, q1) + jax.grad(phi)(qm)
        if mech.quadratic_potential:
            return jax.grad(lambda q: mech.V(q) + phi(q))(qm)

    g0, Gw0 = jax.jvp(g, (q0,), (w0,))
    g1, Gw1 = jax.jvp(g, (q1,), (w0 + dw,))
    Gm_dw = jax.jvp(g, (qm,), (dw,))[1]
    dphi = lam @ (g1 - g0) + gam @ (Gw1 - Gw0 - Gm_dw)
    Z = mech.generators(qm)
    targets = None
    if Z is not None and not mech.invariant_constraints:
        # g only equivariant: impose f . xi q_m = gamma.G(q_m) M^-1 xi^T p_m
        # = -(M^-1 G(q_m)^T gamma) . (cotangent generator at p_m); for an invariant g the midpoint
        # derivatives meet it by themselves (differentiate G(exp(a xi) q) exp(a xi) = G(q))
        Mi_GmT_gam = mech.Minv() @ mech.GT_mul(qm, gam)
        targets = -(mech.cotangent_generators(mech.M(qm) @ w).T @ Mi_GmT_gam)
    if mech.invariants is not None:
        DV = dg.potential_gradient(mech, q0, q1)
        if targets is not None:
            targets = targets - Z.T @ DV
        return DV + dg.corrected(jax.grad(phi)(qm), dq, dphi, qm, Z, targets)
    a0 = jax.grad(lambda q: mech.V(q) + phi(q))(qm)
    return dg.corrected(a0, dq, mech.V(q1) - mech.V(q0) + dphi, qm, Z, targets)


def _residual(u, s: State, h, t, params, mech):
    """Residual of KBS23b eq 84a-e in the increments dq = q^{n+1} - q^n, dp = p^{n+1} - p^n (84b
    through :func:`_force`; (D^G_p g_v)^T gamma = M^-1 G(q^{n+1/2})^T gamma in 84a, see
    :func:`_gv_derivative`). No difference of nodal values is formed, so the residual resolves the
    increments to their own precision rather than to that of q (see :func:`_increments`). A
    configuration-dependent M: :func:`_residual_mass`."""
    if not mech.constant_mass:
        return _residual_mass(u, s, h, t, params, mech)
    dq, dp, v1, lam, gam = u["dq"], u["dp"], u["v1"], u["lam"], u["gam"]
    q0, p0, v0 = s.q, s.p, s.v
    cq = None if s.comp is None else s.comp[0]
    Minv = mech.Minv()
    GmT_gam = mech.GT_mul(q0 + 0.5 * dq, gam)
    return jnp.concatenate(
        [
            dq - 0.5 * h * (v0 + v1) - _h_minv_mul(mech, h, GmT_gam),  # (84a)
            dp + h * _force(mech, q0, Minv @ p0, dq, Minv @ dp, lam, gam, cq),  # (84b)
            p0 + 0.5 * dp - mech.M(q0) @ (0.5 * (v0 + v1)),  # (84c)
            *_nodal_constraints(mech, s, dq, dp),  # (84d, e)
        ]
    )


def _h_minv_mul(mech, h, x):
    """(h M^-1) x for a constant M: the matrix product, or where M is diagonal the products (h m_i) x_i
    of its one live term per row, the same numbers without the d x d matrix h M^-1 and its d^2
    products at every residual."""
    diag = mech.Minv_diagonal
    if diag is None:
        return h * mech.Minv() @ x
    return (h * diag) * x


def _force_mass(mech, s: State, dq, dp, v1, lam, gam):
    """The terms of :func:`_residual_mass` (module docstring): f = -D^G_q L + (D^G g)^T lambda +
    (D^G_q g_v)^T gamma with (84b) reading p^{n+1} - p^n + h f = 0, a = M(q^{n+1/2})^-1 G(q^{n+1/2})^T gamma
    = (D^G_p g_v)^T gamma of (84a), M(q^n) and M(q^{n+1}), and g(q^{n+1}), g_v(q^{n+1}, p^{n+1}) of
    (84d, e); q^{n+1}, p^{n+1} where the time loop stores them (:func:`livens.schemes.base.next_node`).
    M is evaluated once per point, and one linear solve with M(q^{n+1/2}) serves (84a) and f."""
    cq, cp = (None, None) if s.comp is None else s.comp
    q0, p0, v0 = s.q, s.p, s.v
    q1, p1 = next_node(q0, dq, cq), next_node(p0, dp, cp)
    qm, pm, vm = q0 + 0.5 * dq, p0 + 0.5 * dp, 0.5 * (v0 + v1)
    M0, M1 = mech.M(q0), mech.M(q1)
    a, wm, w_dp = ggl_mass.solve_at(mech, qm, gam, pm, dp)
    g0, gv0 = jax.jvp(mech.g, (q0,), (ggl_mass.mass_solve(mech, q0, p0),))
    g1, gv1 = jax.jvp(mech.g, (q1,), (ggl_mass.mass_solve(mech, q1, p1),))

    def kinetic_mean(M):  # 1/2 (T(q, v^n) + T(q, v^{n+1})): the q-part of the partitioned gradient (KB23 eq 29)
        return 0.25 * (v0 @ (M @ v0) + v1 @ (M @ v1))

    def rest(y):
        # lambda.g - 1/2 (T(., v^n) + T(., v^{n+1})) + [gamma.G(.) w_m - a.M(.) w_m]: the last bracket's
        # gradient at q_m is D_1 g_v(q_m, p_m)^T gamma (livens.schemes.ggl_mass)
        My = mech.M(y)
        if not mech.m:
            return -kinetic_mean(My)
        gy, Gw = jax.jvp(mech.g, (y,), (wm,))
        return lam @ gy - kinetic_mean(My) + gam @ Gw - a @ (My @ wm)

    a0 = jax.grad(rest)(qm)
    # f . (q^{n+1} - q^n) must be (KBS23b eq 86a-c): V^{n+1} - V^n - (L^{n+1} - L^n - D^G_v L . dv)'s
    # kinetic part, + lambda.(g^{n+1} - g^n) + gamma.(g_v^{n+1} - g_v^n - D^G_p g_v (p^{n+1} - p^n))
    Gm_w_dp = jax.jvp(mech.g, (qm,), (w_dp,))[1]
    drest = lam @ (g1 - g0) - (kinetic_mean(M1) - kinetic_mean(M0)) + gam @ (gv1 - gv0 - Gm_w_dp)
    Z = mech.generators(qm)
    targets = None
    if Z is not None:
        # f . xi q_m = D^G_v L . xi v_m + gamma . G(q_m) M(q_m)^-1 xi^T p_m, with D^G_v L = M_bar v_m
        xi_vm = jax.jvp(mech.generators, (qm,), (vm,))[1]  # xi v_m (zero for a translation)
        targets = xi_vm.T @ (0.5 * (M0 @ vm + M1 @ vm)) - mech.cotangent_generators(pm).T @ a
    if mech.invariants is not None:
        DV = dg.potential_gradient(mech, q0, q1)
        if targets is not None:
            targets = targets - Z.T @ DV
        f = DV + dg.corrected(a0, dq, drest, qm, Z, targets)
    else:
        a0 = a0 + jax.grad(mech.V)(qm)
        f = dg.corrected(a0, dq, mech.V(q1) - mech.V(q0) + drest, qm, Z, targets)
    return f, a, M0, M1, g1, gv1


def _residual_mass(u, s: State, h, t, params, mech):
    """KBS23b eq 84a-e for a configuration-dependent M(q) (module docstring), in the increments
    dq, dp:

        q^{n+1} - q^n = h v^{n+1/2} + h M(q^{n+1/2})^-1 G(q^{n+1/2})^T gamma       (84a)
        p^{n+1} - p^n + h f = 0        (:func:`_force_mass`)                         (84b)
        p^{n+1/2} = 1/2 (M(q^n) + M(q^{n+1})) v^{n+1/2}                              (84c)
        g(q^{n+1}) = 0,   G(q^{n+1}) M(q^{n+1})^-1 p^{n+1} = 0                        (84d, e)
    """
    dq, dp, v1, lam, gam = u["dq"], u["dp"], u["v1"], u["lam"], u["gam"]
    p0, v0 = s.p, s.v
    f, a, M0, M1, g1, gv1 = _force_mass(mech, s, dq, dp, v1, lam, gam)
    vm = 0.5 * (v0 + v1)
    return jnp.concatenate(
        [
            dq - h * vm - h * a,  # (84a)
            dp + h * f,  # (84b)
            p0 + 0.5 * dp - 0.5 * (M0 @ vm + M1 @ vm),  # (84c)
            g1,  # (84d)
            gv1,  # (84e)
        ]
    )


def _nodal_constraints(mech, s: State, dq, dp):
    """g(q^{n+1}) and g_v(q^{n+1}, p^{n+1}) = G(q^{n+1}) M^-1 p^{n+1} (KBS23b eq 84d, e), at the node
    q^{n+1} = q^n + y_q, p^{n+1} = p^n + y_p that the time loop accumulates (y = the increment less
    the carry of the compensated summation, :func:`livens.schemes.base.next_node`).

    For constraints at most quadratic (``mech.quadratic_constraints``: the papers' examples) both
    are evaluated in increment form, from the values at q^n plus their exact increments,

        g(q^{n+1}) = g(q^n) + G(q^n) y_q + 1/2 y_q . D^2 g(q^n) y_q,
        G(q^{n+1}) w^{n+1} = G(q^n) w^n + G(q^n) y_w + (D^2 g(q^n) y_q) w^{n+1},   w = M^-1 p,

    so that the residual resolves the increments to their own precision. Formed at the rounded
    node, g(q^{n+1}) changes only in steps of an ulp of q: the multipliers are then fixed only to
    within a plateau of that width, Newton leaves them where its first guess put them, and the
    work lambda . (g^{n+1} - g^n) of the constraint force, which the energy balance of KBS23b eq 89
    needs to telescope, picks up a bias that adds up linearly over a long run. For other
    constraints g is evaluated at the rounded node q^{n+1} itself."""
    g = mech.g
    Minv = mech.Minv()
    cq, cp = (None, None) if s.comp is None else s.comp
    if not mech.quadratic_constraints:
        q1 = next_node(s.q, dq, cq)
        return g(q1), jax.jvp(g, (q1,), (Minv @ next_node(s.p, dp, cp),))[1]
    yq = dq if cq is None else dq - cq
    yw = Minv @ (dp if cp is None else dp - cp)
    w0 = Minv @ s.p

    def G_times(w):  # q -> G(q) w
        return lambda q: jax.jvp(g, (q,), (w,))[1]

    Gy, yHy = jax.jvp(G_times(yq), (s.q,), (yq,))
    dGw = jax.jvp(G_times(w0 + yw), (s.q,), (yq,))[1]
    return g(s.q) + (Gy + 0.5 * yHy), G_times(w0)(s.q) + (G_times(yw)(s.q) + dGw)


def _residual_rowwise(u, s: State, h, t, params, mech):
    """KBS23b eq 84a-e with the discrete derivatives formed as matrices, row by row (the reference
    for :func:`_residual`; used by the tests): D^G V and each row of D^G g and D^G_q g_v is its own
    :func:`livens.discrete_gradients.corrected` gradient."""
    dq, dp, v1, lam, gam = u["dq"], u["dp"], u["v1"], u["lam"], u["gam"]
    q0, p0, v0 = s.q, s.p, s.v
    q1, p1, qm = q0 + dq, p0 + dp, q0 + 0.5 * dq
    Z = mech.generators(qm)
    if mech.invariants is not None:
        DV = dg.potential_gradient(mech, q0, q1)
    else:
        DV = dg.corrected(jax.grad(mech.V)(qm), dq, mech.V(q1) - mech.V(q0), qm, Z)
    Gm = mech.G(qm)
    dgs = mech.g(q1) - mech.g(q0)
    zero = None if (Z is None or mech.invariant_constraints) else jnp.zeros(Z.shape[1])
    Dg = (
        jnp.stack([dg.corrected(Gm[k], dq, dgs[k], qm, Z, zero) for k in range(mech.m)])
        if mech.m
        else jnp.zeros((0, mech.d))
    )
    Dq_gv, Dp_gv = _gv_derivative(mech, q0, p0, dq, dp)
    DvL = mech.M(q0) @ (0.5 * (v0 + v1))  # D^G_v L = M v^{n+1/2} (T quadratic)
    return jnp.concatenate(
        [
            dq - 0.5 * h * (v0 + v1) - h * Dp_gv.T @ gam,  # (84a)
            dp + h * DV + h * Dg.T @ lam + h * Dq_gv.T @ gam,  # (84b)
            p0 + 0.5 * dp - DvL,  # (84c)
            mech.g(q1),  # (84d)
            mech.gv(q1, p1),  # (84e)
        ]
    )


_UNKNOWNS = (("dq", "d"), ("dp", "d"), ("v1", "d"), ("lam", "m"), ("gam", "m"))
_update_unknowns = default_update(tuple(n for n, _ in _UNKNOWNS))


def _update(u, s: State, h, t, params, mech):
    """The state after the step, with the nodal velocity v^{n+1} = M^-1 p^{n+1} (p^{n+1} as the
    time loop stores it) in place of the unknown v1.

    The two are equal in exact arithmetic: (84c) ties only their means, M v^{n+1/2} = p^{n+1/2},
    so from p^0 = M v^0 on, p^n = M v^n at every node (KB23 Prop. 5.5). In floating point the
    unknown v1 carries e^{n+1} = p^{n+1} - M v^{n+1} = -e^n + r^n, r^n the round-off of the step:
    an alternating sum that (84c) never corrects, while q and p see only e^n + e^{n+1} = r^n.
    The energy E = 1/2 v.M v + V evaluated with that v then wanders away from the conserved
    1/2 p.M^-1 p + V by far more than round-off over a long run (Brouwer's law holds for p, not
    for the accumulated v). Starting each step from v^n = M^-1 p^n ends the accumulation; the
    trajectory of q and p is the same up to round-off.

    For a configuration-dependent M the unknown v^{n+1} is kept: there p^n = M(q^n) v^n does not
    hold (KB23 Prop. 5.5), and E(q, v, p) is conserved with the v of (84c)."""
    new, out = _update_unknowns(u, s, h, t, params, mech)
    if not mech.constant_mass:
        return new, out
    v = mech.Minv_mul(new.p)
    return new._replace(v=v), {**out, "v": v}


# --- structured tangent (speed) ----------------------------------------------------------------
class EMTangent:
    """The Jacobian of the EM residual (KBS23b eq 84a-e) in its blocks, and its inverse.

    With x = (dq, dp, v1, lambda, gamma) (a derivative with respect to dq or dp is the one with
    respect to q^{n+1} or p^{n+1}), f of :func:`_force` at w = M^-1 p^{n+1/2},
    G1 = G(q^{n+1}), Gs = 2 G(q^{n+1/2}), Hm = sum_k gamma_k D^2 g_k(q^{n+1/2}),
    K1 = D_q[G(q) M^-1 p^{n+1}](q^{n+1}), F_x = D_x f (F_lambda = (D^G g)^T,
    F_gamma = (D^G_q g_v)^T), the rows of dR/dx are

        (84a)  [ I - h/2 M^-1 Hm,  0,                    -h/2 I,  0,            -h/2 M^-1 Gs^T ]
        (84b)  [ h F_q,            I + h/2 F_w M^-1,      0,       h F_lambda,   h F_gamma      ]
        (84c)  [ 0,                1/2 I,                -1/2 M,   0,            0              ]
        (84d)  [ G1,               0,                     0,       0,            0              ]
        (84e)  [ K1,               G1 M^-1,               0,       0,            0              ]

    :meth:`solve` eliminates dp (84c) and dv (84a), which are affine in dq and dgamma:
    M dv = (2/h) M (dq - b1) - Hm dq - Gs^T dgamma, dp = M dv + 2 b3. (84b) times h/2 becomes
    S dq + B_lambda dlambda + B_gamma dgamma = r with S = M + O(h) (d x d), and (84d, e) in
    terms of dq and dgamma remain: one LU of S for 1 + 2m right-hand sides and one of the
    2m x 2m Schur complement, instead of the (3d + 2m) square dense matrix. The same Newton
    iterates up to round-off. :meth:`matrix` assembles the dense Jacobian (for tests).
    """

    def __init__(self, mech, h, Gs, G1, K1, Hm, Fq, Fw, Fl, Fg):
        self.Mop, self.Miop, self.M, self.Mi = mass_operators(mech)
        self.d, self.m, self.h = mech.d, mech.m, h
        self.Gs, self.G1, self.K1, self.Hm = Gs, G1, K1, Hm
        self.Fq, self.Fw, self.Fl, self.Fg = Fq, Fw, Fl, Fg

    def matrix(self):
        """The dense Jacobian dR/dx (3d + 2m square), assembled from the blocks."""
        h, d, m = self.h, self.d, self.m
        M, Mi = jnp.asarray(self.M), jnp.asarray(self.Mi)
        I, Z = jnp.eye(d), jnp.zeros((d, d))
        Zdm, Zmd, Zmm = jnp.zeros((d, m)), jnp.zeros((m, d)), jnp.zeros((m, m))
        GsT = self.Gs.T
        return jnp.block(
            [
                [I - 0.5 * h * Mi @ self.Hm, Z, -0.5 * h * I, Zdm, -0.5 * h * Mi @ GsT],
                [h * self.Fq, I + 0.5 * h * self.Fw @ Mi, Z, h * self.Fl, h * self.Fg],
                [Z, 0.5 * I, -0.5 * M, Zdm, Zdm],
                [self.G1, Zmd, Zmd, Zmm, Zmm],
                [self.K1, self.G1 @ Mi, Zmd, Zmm, Zmm],
            ]
        )

    def solve(self, b):
        """dR/dx^-1 b by block elimination (see the class docstring)."""
        h, d, m = self.h, self.d, self.m
        Mop, Miop, G1, Hm, Fw = self.Mop, self.Miop, self.G1, self.Hm, self.Fw
        b1, b2, b3, b4, b5 = b[:d], b[d : 2 * d], b[2 * d : 3 * d], b[3 * d : 3 * d + m], b[3 * d + m :]
        hh = 0.5 * h
        GsT = self.Gs.T

        def P(X):  # I + h/2 F_w M^-1
            return X + hh * (Fw @ Miop(X))

        # dp = Wq dq - Gs^T dgamma + c with Wq = (2/h) M - Hm; hh Wq = M - hh Hm
        c = 2.0 * b3 - Mop(b1) / hh
        hWq = jnp.asarray(self.M) - hh * Hm
        S = (hh * h) * self.Fq + P(hWq)
        rhs = jnp.concatenate([(hh * (b2 - P(c)))[:, None], (hh * h) * self.Fl, hh * (h * self.Fg - P(GsT))], axis=1)
        X = solver(S)(rhs)
        z = X[:, 0]
        if m:
            Zl, Zg = X[:, 1 : 1 + m], X[:, 1 + m :]
            # (84d): G1 dq = b4; (84e) times h/2: C dq - hh G1 M^-1 Gs^T dgamma = hh (b5 - G1 M^-1 c)
            C = hh * self.K1 + G1 @ Miop(hWq)
            GMiGs = G1 @ Miop(GsT)
            top = jnp.concatenate([G1 @ Zl, G1 @ Zg], axis=1)
            bot = jnp.concatenate([C @ Zl, C @ Zg + hh * GMiGs], axis=1)
            r = jnp.concatenate([G1 @ z - b4, C @ z - hh * (b5 - G1 @ Miop(c))])
            y = solver(jnp.concatenate([top, bot], axis=0))(r)
            dl, dg_ = y[:m], y[m:]
            dq = z - Zl @ dl - Zg @ dg_
        else:
            dl = dg_ = jnp.zeros((0,), b.dtype)
            dq = z
        Mdv = Mop(dq - b1) / hh - Hm @ dq - GsT @ dg_
        return jnp.concatenate([dq, Mdv + 2.0 * b3, Miop(Mdv), dl, dg_])


def _tangent(u, s: State, h, t, params, mech):
    """The structured tangent of EM in the form the size policy takes (:func:`livens.solvers.choose_form`,
    rule ``"ggl-em"``): for a constant M and constraints, by groups of coordinates (bodies) where the
    system has them (:func:`livens.schemes.ggl_em_blocks.block_tangent`), else :class:`EMTangent`
    (:func:`_dense_tangent`). A configuration-dependent M: the structured
    :class:`livens.schemes.mq_tangent.EMMassTangent` where it applies
    (:func:`livens.schemes.mq_tangent.em_applies`), else the AD Jacobian of :func:`_residual_mass`."""
    if not mech.constant_mass:
        if mq_tangent.em_applies(mech):
            return mq_tangent.em_mass_tangent(u, s, h, mech)
        return ad_tangent(_residual_mass, u, s, h, t, params, mech, by_block=True)

    def by_groups():  # None where the system's bodies make no groups
        return ggl_em_blocks.block_tangent(u, s, h, mech, _force)

    forms = TangentForms(
        "ggl-em",
        lambda: _dense_tangent(u, s, h, mech),
        n=3 * mech.d + 2 * mech.m,
        by_groups=by_groups if mech.m else None,
    )
    return choose_form(forms)


def _dense_tangent(u, s: State, h, mech):
    """:class:`EMTangent` for a constant M; every block by AD of g, V (and the invariants) through
    :func:`_force`, each derivative taken on its own (one batched jacfwd over all of them costs more
    on small systems)."""
    dq, dp, lam, gam = u["dq"], u["dp"], u["lam"], u["gam"]
    q0, p0 = s.q, s.p
    cq = None if s.comp is None else s.comp[0]
    q1, p1 = next_node(q0, dq, cq), p0 + dp
    g = mech.g
    Minv = mech.Minv()
    w1 = Minv @ p1

    def at_node(q):  # g(q), G(q) M^-1 p^{n+1}
        return jax.jvp(g, (q,), (w1,))

    def at_midpoint(q):  # g(q), G(q)^T gamma
        return g(q), jax.vjp(g, q)[1](gam)[0]

    G1, K1 = jax.jacfwd(at_node)(q1)
    Gm, Hm = jax.jacfwd(at_midpoint)(q0 + 0.5 * dq)
    w0 = Minv @ p0

    def f(dq, dw, lam, gam):
        return _force(mech, q0, w0, dq, dw, lam, gam, cq)

    dw = Minv @ dp
    Fq = jax.jacfwd(f, 0)(dq, dw, lam, gam)
    # the class's F_w is the derivative with respect to w = M^-1 p^{n+1/2} = w0 + dw/2
    Fw = 2.0 * jax.jacfwd(f, 1)(dq, dw, lam, gam)
    Fl, Fg = jax.jacfwd(f, (2, 3))(dq, dw, lam, gam)
    return EMTangent(mech, h, 2.0 * Gm, G1, K1, Hm, Fq, Fw, Fl, Fg)


GGL_EM = register(
    Scheme(
        name="ggl-em",
        unknowns=_UNKNOWNS,
        residual=_residual,
        update=_update,
        tangent=_tangent,
        capabilities=Capabilities(
            external_force=False,
            velocity_kind="nodal",
            gamma=True,
            symmetries=True,
            mass_inverse=False,
            configuration_mass=True,
            applies_to=ggl_mass.refusal("ggl-em"),
        ),
        about=About(
            paper="KBS23b eq 84-91; M(q) by KBS23b Remark 3 with KB23 eq 29",
            description="GGL energy-momentum scheme with discrete gradients",
            enforced=BOTH_NODAL,  # (84d, e); M(q^{n+1})^-1 p^{n+1} for a configuration-dependent M
            keeps="energy, momentum maps, both constraints at nodes; order 2",
            order=2,
        ),
    ),
    aliases={"EM": {}},
)
