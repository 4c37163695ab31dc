"""The GGL energy-momentum scheme EM (002 §5, eq 84-91).

A direct discretization of the Euler-Lagrange equations of the GGL principle (002 eq 37) with
discrete derivatives in the sense of Gonzalez:

    q^{n+1} - q^n = h v^{n+1/2} + h (D^G_p g_v)^T gamma^{n+1}                                (84a)
    p^{n+1} - p^n = h D^G_q L - h (D^G g)^T lambda^{n+1} - h (D^G_q g_v)^T gamma^{n+1}         (84b)
    p^{n+1/2} = D^G_v L                                                                      (84c)
    g(q^{n+1}) = 0                                                                           (84d)
    g_v(q^{n+1}, p^{n+1}) = G(q^{n+1}) M^-1 p^{n+1} = 0                                      (84e)

with (.)^{n+1/2} the mean of the nodal values. Unknowns per step: q^{n+1}, p^{n+1}, v^{n+1} (nodal),
lambda^{n+1}, gamma^{n+1} (3d + 2m).

Discrete derivatives (:mod:`livens.discrete_gradients`):
- (D^G_q L, D^G_v L): the partitioned discrete gradient of L(q, v) (003 eq 29). For the constant
  mass matrix this scheme requires, L = 1/2 v.M v - V(q) is separable and the partitioned
  gradient is exactly (-D^G V, M v^{n+1/2}), with D^G V Greenspan's invariant-based gradient
  (002 eq 126) when the System declares ``invariants``, else Gonzalez's (003 eq 26).
- (D^G_q g_v, D^G_p g_v): the partitioned discrete derivative of g_v(q, p) (002 eq 86b);
  D^G g: Gonzalez's discrete derivative of g, row by row (002 eq 86c).
For at most quadratic L, g, g_v all of these equal the midpoint derivatives (002 eq 99).

Properties (002 §5.1-5.2): the energy E(q, v, p) = p.v - L(q, v) (eq 4) is conserved (eq 89),
momentum maps J = p . xi q are conserved (eq 91) when the discrete derivatives satisfy the
orthogonality conditions (eq 85) -- true for the midpoint derivatives of quadratic functions
and for Greenspan's gradient on symmetric invariants -- and both constraints hold at the nodes.
With p^0 = M v^0, (84c) gives p^n = M v^n at every node (003 Prop. 5.5), so E = T + V.
Second order; not symplectic.

Speed (issue 7). The discrete derivatives enter (84b) only through

    f = D^G V + (D^G g)^T lambda + (D^G_q g_v)^T gamma,

and Gonzalez's formula is linear in the function it is applied to, with the same increment and
the same fade-out weight for every row. So f is evaluated as the discrete gradient of one scalar
function, D^G[V + lambda.g + gamma.G(.) M^-1 p^{n+1/2}] (Greenspan's gradient of V kept apart
where the System declares invariants): the same values up to round-off, without forming the
m x d Jacobians, and a residual whose derivative costs a fraction of that of the row-wise form.
The Newton tangent is structured (:class:`EMTangent`): its blocks by AD, its inverse applied by
eliminating v and p and a Schur complement on the constraints (tested against ``jax.jacfwd`` of
the residual).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import discrete_gradients as dg
from .._linalg import solver
from . import register
from .base import Scheme, State
from .ggl_theta import _guess, _update  # same unknowns q1, p1, v1, lam, gam
from .ggl_vi import _mass_operators


def _gv_derivative(mech, q0, p0, q1, p1):
    """Partitioned discrete derivative (D^G_q g_v, D^G_p g_v) of g_v(q, p) = G(q) M^-1 p.

    Equal to :func:`livens.discrete_gradients.partitioned_jacobian` of g_v, evaluated with two
    exact simplifications because g_v is linear in p: Gonzalez's derivative of a linear function
    is its Jacobian, so D^G_p g_v = 1/2 (G(q^n) + G(q^{n+1})) M^-1; and Gonzalez's formula is
    linear in the function, so D^G_q g_v = D^G [q -> G(q) M^-1 p^{n+1/2}](q^n, q^{n+1}).
    (Half the work of the generic formula; the tests compare the two.)
    """
    Minv = mech.Minv()
    w = Minv @ (0.5 * (p0 + p1))
    Dq = dg.gonzalez_jacobian(lambda q: mech.G(q) @ w, q0, q1)
    Dp = 0.5 * (mech.G(q0) + mech.G(q1)) @ Minv
    return Dq, Dp


def _force(mech, q0, q1, w, lam, gam):
    """f = D^G V + (D^G g)^T lambda + (D^G_q g_v)^T gamma, with (84b) reading p^{n+1} - p^n + h f = 0.

    ``w`` = M^-1 p^{n+1/2}. By the linearity of Gonzalez's formula (003 eq 26) in the function,
    (D^G g)^T lambda = D^G[lambda.g] and, as in :func:`_gv_derivative`, (D^G_q g_v)^T gamma =
    D^G[q -> gamma.G(q) w] (002 eq 86b, c): one scalar discrete gradient (with V when the System
    declares no invariants; Greenspan's D^G V, 002 eq 126, apart when it does).
    """
    g = mech.g

    def phi(q):  # lambda.g(q) + gamma.G(q) w
        gq, Gw = jax.jvp(g, (q,), (w,))
        return lam @ gq + gam @ Gw

    if mech.system.invariants is not None:
        return dg.potential_gradient(mech.system, q0, q1) + dg.gonzalez(phi, q0, q1)
    return dg.gonzalez(lambda q: mech.V(q) + phi(q), q0, q1)


def _residual(u, s: State, h, t, params, mech):
    """Residual of 002 eq 84a-e (84b through :func:`_force`)."""
    q1, p1, v1, lam, gam = u["q1"], u["p1"], u["v1"], u["lam"], u["gam"]
    q0, p0, v0 = s.q, s.p, s.v
    g = mech.g
    Minv = mech.Minv()
    # (D^G_p g_v)^T gamma = 1/2 M^-1 (G(q^n) + G(q^{n+1}))^T gamma (see _gv_derivative)
    GsT_gam = jax.vjp(g, q0)[1](gam)[0] + jax.vjp(g, q1)[1](gam)[0]
    return jnp.concatenate([
        q1 - q0 - 0.5 * h * (v0 + v1) - 0.5 * h * Minv @ GsT_gam,                    # (84a)
        p1 - p0 + h * _force(mech, q0, q1, Minv @ (0.5 * (p0 + p1)), lam, gam),       # (84b)
        0.5 * (p0 + p1) - mech.M(q0) @ (0.5 * (v0 + v1)),                             # (84c)
        g(q1),                                                                        # (84d)
        jax.jvp(g, (q1,), (Minv @ p1,))[1],                                           # (84e)
    ])


def _residual_rowwise(u, s: State, h, t, params, mech):
    """002 eq 84a-e with the discrete derivatives formed as matrices, row by row (the reference
    for :func:`_residual`; used by the tests)."""
    q1, p1, v1, lam, gam = u["q1"], u["p1"], u["v1"], u["lam"], u["gam"]
    q0, p0, v0 = s.q, s.p, s.v
    DqL = -dg.potential_gradient(mech.system, q0, q1)        # D^G_q L = -D^G V (L separable)
    DvL = mech.M(q0) @ (0.5 * (v0 + v1))                      # D^G_v L = M v^{n+1/2} (T quadratic)
    Dg = dg.gonzalez_jacobian(mech.g, q0, q1)                 # D^G g
    Dq_gv, Dp_gv = _gv_derivative(mech, q0, p0, q1, p1)
    return jnp.concatenate([
        q1 - q0 - 0.5 * h * (v0 + v1) - h * Dp_gv.T @ gam,                # (84a)
        p1 - p0 - h * DqL + h * Dg.T @ lam + h * Dq_gv.T @ gam,            # (84b)
        0.5 * (p0 + p1) - DvL,                                             # (84c)
        mech.g(q1),                                                        # (84d)
        mech.gv(q1, p1),                                                   # (84e)
    ])


def _enforced(sol):
    """The constraints EM is built to meet: g(q^{n+1}) and g_v(q^{n+1}, p^{n+1}) (002 eq 84d, e)."""
    return {
        "position g(q^{n+1})": sol.constraint_residual("position")[1:],
        "velocity G(q^{n+1}) M^-1 p^{n+1}": sol.constraint_residual("velocity")[1:],
    }


# --- structured tangent (issue 7: speed) ---------------------------------------------------------
class EMTangent:
    """The Jacobian of the EM residual (002 eq 84a-e) in its blocks, and its inverse.

    With x = (q1, p1, v1, lambda, gamma), f of :func:`_force` at w = M^-1 p^{n+1/2},
    G0 = G(q^n), G1 = G(q^{n+1}), Gs = G0 + G1, H1 = sum_k gamma_k D^2 g_k(q^{n+1}),
    K1 = D_q[G(q) M^-1 p^{n+1}](q^{n+1}), F_x = D_x f (F_lambda = (D^G g)^T,
    F_gamma = (D^G_q g_v)^T), the rows of dR/dx are

        (84a)  [ I - h/2 M^-1 H1,  0,                    -h/2 I,  0,            -h/2 M^-1 Gs^T ]
        (84b)  [ h F_q,            I + h/2 F_w M^-1,      0,       h F_lambda,   h F_gamma      ]
        (84c)  [ 0,                1/2 I,                -1/2 M,   0,            0              ]
        (84d)  [ G1,               0,                     0,       0,            0              ]
        (84e)  [ K1,               G1 M^-1,               0,       0,            0              ]

    :meth:`solve` eliminates dp (84c) and dv (84a), which are affine in dq and dgamma:
    M dv = (2/h) M (dq - b1) - H1 dq - Gs^T dgamma, dp = M dv + 2 b3. (84b) times h/2 becomes
    S dq + B_lambda dlambda + B_gamma dgamma = r with S = M + O(h) (d x d), and (84d, e) in
    terms of dq and dgamma remain: one LU of S for 1 + 2m right-hand sides and one of the
    2m x 2m Schur complement, instead of the (3d + 2m) square dense matrix. The same Newton
    iterates up to round-off. :meth:`matrix` assembles the dense Jacobian (for tests).
    """

    def __init__(self, mech, h, G0, G1, K1, H1, Fq, Fw, Fl, Fg):
        self.Mop, self.Miop, self.M, self.Mi = _mass_operators(mech)
        self.d, self.m, self.h = mech.d, mech.m, h
        self.G0, self.G1, self.K1, self.H1 = G0, G1, K1, H1
        self.Fq, self.Fw, self.Fl, self.Fg = Fq, Fw, Fl, Fg

    def matrix(self):
        """The dense Jacobian dR/dx (3d + 2m square), assembled from the blocks."""
        h, d, m = self.h, self.d, self.m
        M, Mi = jnp.asarray(self.M), jnp.asarray(self.Mi)
        I, Z = jnp.eye(d), jnp.zeros((d, d))
        Zdm, Zmd, Zmm = jnp.zeros((d, m)), jnp.zeros((m, d)), jnp.zeros((m, m))
        GsT = (self.G0 + self.G1).T
        return jnp.block([
            [I - 0.5 * h * Mi @ self.H1, Z, -0.5 * h * I, Zdm, -0.5 * h * Mi @ GsT],
            [h * self.Fq, I + 0.5 * h * self.Fw @ Mi, Z, h * self.Fl, h * self.Fg],
            [Z, 0.5 * I, -0.5 * M, Zdm, Zdm],
            [self.G1, Zmd, Zmd, Zmm, Zmm],
            [self.K1, self.G1 @ Mi, Zmd, Zmm, Zmm],
        ])

    def solve(self, b):
        """dR/dx^-1 b by block elimination (see the class docstring)."""
        h, d, m = self.h, self.d, self.m
        Mop, Miop, G1, H1, Fw = self.Mop, self.Miop, self.G1, self.H1, self.Fw
        b1, b2, b3, b4, b5 = b[:d], b[d:2 * d], b[2 * d:3 * d], b[3 * d:3 * d + m], b[3 * d + m:]
        hh = 0.5 * h
        GsT = (self.G0 + G1).T

        def P(X):  # I + h/2 F_w M^-1
            return X + hh * (Fw @ Miop(X))

        # dp = Wq dq - Gs^T dgamma + c with Wq = (2/h) M - H1; hh Wq = M - hh H1
        c = 2.0 * b3 - Mop(b1) / hh
        hWq = jnp.asarray(self.M) - hh * H1
        S = (hh * h) * self.Fq + P(hWq)
        rhs = jnp.concatenate([(hh * (b2 - P(c)))[:, None], (hh * h) * self.Fl,
                               hh * (h * self.Fg - P(GsT))], axis=1)
        X = solver(S)(rhs)
        z = X[:, 0]
        if m:
            Zl, Zg = X[:, 1:1 + m], X[:, 1 + m:]
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
        Mdv = Mop(dq - b1) / hh - H1 @ dq - GsT @ dg_
        return jnp.concatenate([dq, Mdv + 2.0 * b3, Miop(Mdv), dl, dg_])


def _tangent(u, s: State, h, t, params, mech):
    """The structured tangent of EM (:class:`EMTangent`); every block by AD of g, V (and the
    invariants) through :func:`_force`, each derivative taken on its own (one batched jacfwd over
    all of them costs more on small systems)."""
    q1, p1, lam, gam = u["q1"], u["p1"], u["lam"], u["gam"]
    q0, p0 = s.q, s.p
    g = mech.g
    Minv = mech.Minv()
    w1 = Minv @ p1

    def second_order(q):  # g(q), G(q) M^-1 p^{n+1}, G(q)^T gamma
        gq, Gw = jax.jvp(g, (q,), (w1,))
        return gq, Gw, jax.vjp(g, q)[1](gam)[0]

    G1, K1, H1 = jax.jacfwd(second_order)(q1)

    def f(q1, w, lam, gam):
        return _force(mech, q0, q1, w, lam, gam)

    w = Minv @ (0.5 * (p0 + p1))
    Fq = jax.jacfwd(f, 0)(q1, w, lam, gam)
    Fw = jax.jacfwd(f, 1)(q1, w, lam, gam)
    Fl, Fg = jax.jacfwd(f, (2, 3))(q1, w, lam, gam)
    return EMTangent(mech, h, mech.G(q0), G1, K1, H1, Fq, Fw, Fl, Fg)


GGL_EM = register(
    Scheme(
        name="ggl-em",
        supports_external_force=False,  # 002 eq 79/82/84 and Gonzalez 1999 have no F term
        paper="002 eq 84-91",
        unknowns=(("q1", "d"), ("p1", "d"), ("v1", "d"), ("lam", "m"), ("gam", "m")),
        residual=_residual,
        guess=_guess,
        update=_update,
        velocity_kind="nodal",
        description="GGL energy-momentum scheme with discrete gradients",
        has_gamma=True,
        enforced=_enforced,
        tangent=_tangent,
        keeps="energy, momentum maps, both constraints at nodes; order 2",
        order=2,
    ),
    aliases={"EM": {}},
)
