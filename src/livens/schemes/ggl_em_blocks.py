"""The EM Newton tangent by groups of coordinates (bodies): its cost grows with the number of bodies,
not with its cube.

The tangent of EM (KBS23b eq 84a-e; :class:`livens.schemes.ggl_em.EMTangent` names its blocks) is,
with the quotients of the discrete gradient held fixed (:mod:`livens.solvers.couplings`), made of

- d x d blocks (M, M^-1, Hm = sum_k gamma_k D^2 g_k, F_q and F_w of the force) that couple the
  coordinates of one body among themselves, and
- m x d blocks (G1, K1, Gs and the transposes F_lambda, F_gamma) that couple each constraint with the
  coordinates of the few bodies it involves;

the quotients add a matrix of rank k (three for one symmetry), whose inverse the Sherman-Morrison-
Woodbury formula applies exactly (:class:`livens.solvers.tangent.LowRankUpdate`). :class:`EMBlockTangent`
eliminates as :class:`~livens.schemes.ggl_em.EMTangent` does (dp and dv from (84c, a), then
S dq + B_lambda dlambda + B_gamma dgamma = r), but S is block diagonal in the groups of coordinates
(:class:`livens.solvers.groups.GroupStructure`, found once per system from the blocks' sparsity at
random points), so it is factorized group by group, and the Schur complement on the multipliers,
W = [G1; C] S^-1 [B_lambda, B_gamma] + [[0, 0], [0, h/2 G1 M^-1 Gs^T]], is summed from one small
product per group; the multipliers of a body's internal constraints are eliminated body by body,
and one LU solves for those of the joints. Its blocks are taken from one Jacobian-vector product
per colour of the groups' columns (Curtis, Powell, Reid 1974) instead of one per coordinate; where
the force is the midpoint gradient of lambda.g + gamma.G(.) w with g at most quadratic (KBS23b eq 99,
:func:`midpoint_force`), F_w and F_q come from the midpoint's one linearization of g, without a product
with the whole force per colour. The same Newton iterates as the dense elimination up to round-off
(the tests compare the matrix with ``jax.jacfwd`` of the residual); pivots are chosen within each
group's S and within W.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..solvers import banded as _banded
from ..solvers.couplings import split
from ..solvers.groups import GroupStructure, batched_lu, batched_lu_solve, find_groups
from ..solvers.tangent import LowRankUpdate
from .base import next_node
from .ggl_vi import mass_operators


def _maps(mech, force, q0, p0, cq, dq, dp, lam, gam, c=None):
    """The linear maps whose values are the tangent's blocks, at the unknowns (dq, dp, lam, gam):
    "node" e -> (G1 e, K1 e), "mid" e -> (Gm e, Hm e), "fq", "fw", "fl", "fg": the derivatives of
    the force f (``force``, :func:`livens.schemes.ggl_em._force`) with its coupling values held at
    ``c`` (default: their values here) along dq, w (= 2 x along M^-1 dp), lambda, gamma; "fc": along
    c. Also the packed arguments z of f, c, and the function z -> c."""
    d, m = mech.d, mech.m
    Minv = mech.Minv()
    g = mech.g
    q1, qm = next_node(q0, dq, cq), q0 + 0.5 * dq
    w0, dw, w1 = Minv @ p0, Minv @ dp, Minv @ (p0 + dp)

    def at_node(q):  # g(q), G(q) M^-1 p^{n+1}
        return jax.jvp(g, (q,), (w1,))

    def at_midpoint(q):  # g(q), G(q)^T gamma
        return g(q), jax.vjp(g, q)[1](gam)[0]

    def at_midpoint_both(q):  # g(q), G(q)^T gamma, G(q)^T lambda: one linearization of g
        gq, pullback = jax.vjp(g, q)
        return gq, pullback(gam)[0], pullback(lam)[0]

    frozen, values = split(lambda z: force(mech, q0, w0, z[:d], z[d : 2 * d], z[2 * d : 2 * d + m], z[2 * d + m :], cq))
    parts = (dq, dw, lam, gam)
    z = jnp.concatenate(parts)
    c = values(z) if c is None else c

    def along(i, scale=1.0, of=parts):
        def fn(y):
            return frozen(jnp.concatenate([*of[:i], y, *of[i + 1 :]]), c)

        return lambda e: scale * jax.jvp(fn, (of[i],), (e,))[1]

    # the force without its multipliers' terms: known zeros for lambda and gamma, which the native
    # translation folds away (x * 0 taken as zero), so that only the potential's gradient is differentiated
    unloaded = (dq, dw, jnp.zeros_like(lam), jnp.zeros_like(gam))

    maps = {
        "node": lambda e: jax.jvp(at_node, (q1,), (e,))[1],
        "mid": lambda e: jax.jvp(at_midpoint, (qm,), (e,))[1],
        # (G e, sum_k gamma_k D^2 g_k e, sum_k lambda_k D^2 g_k e) at q^{n+1/2}
        "mid2": lambda e: jax.jvp(at_midpoint_both, (qm,), (e,))[1],
        # D_q[G(q) w](q^{n+1/2}) e, w = M^-1 p^{n+1/2}: F_gamma^T (see block_tangent)
        "midw": lambda e: jax.jvp(lambda q: jax.jvp(g, (q,), (w0 + 0.5 * dw,))[1], (qm,), (e,))[1],
        "fq": along(0),
        "fq_potential": along(0, of=unloaded),  # the potential's part of "fq"
        "fw": along(1, 2.0),  # the derivative with respect to w = M^-1 p^{n+1/2} = w0 + dw/2
        "fl": along(2),
        "fg": along(3),
        "fc": lambda e: jax.jvp(lambda cc: frozen(z, cc), (c,), (e,))[1],
    }
    return maps, z, c, values


def _columns(f, E):
    """f applied to the columns of E (the outputs' columns)."""
    return jax.vmap(f, in_axes=1, out_axes=1)(E)


def group_structure(mech, s, force, k: int) -> GroupStructure | None:
    """The :class:`~livens.solvers.groups.GroupStructure` of EM's tangent blocks for this system, or
    None where the groups are not worth it or the pattern misses an entry
    (:func:`livens.solvers.groups.find_groups`); found once per system. ``k``: the number of
    coupling values of the force."""
    with_carry = s.comp is not None
    d, m = mech.d, mech.m

    def dense(prm, q0, p0, cq, dq, dp, lam, gam, c):
        maps = _maps(mech.bind(prm), force, q0, p0, cq if with_carry else None, dq, dp, lam, gam, c)[0]
        Id, Im = jnp.eye(d), jnp.eye(m)
        G1, K1 = _columns(maps["node"], Id)
        Gm, Hm = _columns(maps["mid"], Id)
        Fq, Fw = _columns(maps["fq"], Id), _columns(maps["fw"], Id)
        return G1, K1, Gm, Hm, Fq, Fw, _columns(maps["fl"], Im), _columns(maps["fg"], Im)

    def random_point(rng):
        prm = _banded.random_parameters(mech.system.parameters, rng)
        return (prm, *(rng.standard_normal(n) for n in (d, d, d, d, d, m, m, k)))

    def blocks_of(out):
        G1, K1, Gm, Hm, Fq, Fw, Fl, Fg = out
        return [Hm, Fq, Fw], [G1, K1, Gm, Fl.T, Fg.T]

    key = ("ggl-em groups", mech.system, mech.symmetries, mech.invariant_constraints, d, m, with_carry, k)
    return find_groups(key, dense, random_point, blocks_of, (mech.M_const, mech.Minv_const))


def midpoint_force(mech) -> bool:
    """Whether EM's force (:func:`livens.schemes.ggl_em._force`) is, for this system, the discrete
    gradient of the potential (Greenspan's, or the midpoint gradient of a V at most quadratic) plus
    the midpoint gradient of phi = lambda.g + gamma.G(.) w, with g at most quadratic (KBS23b eq 99):
    its branch for constraints at most quadratic and invariant under the symmetries (or none)."""
    return bool(
        mech.quadratic_constraints
        and (not mech.symmetries or mech.invariant_constraints)
        and (mech.invariants is not None or mech.quadratic_potential)
    )


def _tr(X):
    return jnp.swapaxes(X, 1, 2)


class EMBlockTangent:
    """EM's tangent with the coupling values held (module docstring), by groups: ``G1``, ``K1``,
    ``Gs`` (ng, r, s) the entries of G(q^{n+1}), K1 and 2 G(q^{n+1/2}) of each group's constraints and
    coordinates, ``Hm``, ``Fq``, ``Fw`` (ng, s, s) the groups' diagonal blocks, ``Fl``, ``Fg`` (ng, s, r);
    the names as in :class:`livens.schemes.ggl_em.EMTangent`. ``solve`` takes one right-hand side
    (n,) or several (n, r')."""

    def __init__(self, gs: GroupStructure, mech, h, G1, K1, Gs, Hm, Fq, Fw, Fl, Fg):
        self.gs, self.h, self.d, self.m = gs, h, mech.d, mech.m
        self.Mop, self.Miop, M, Mi = mass_operators(mech)
        self.M, self.Mi = M, Mi
        ext = np.zeros((gs.d + 1, gs.d + 1))
        ext[: gs.d, : gs.d] = Mi
        self.Mig = jnp.asarray(ext[gs.gidx[:, :, None], gs.gidx[:, None, :]])
        # M^-1 by groups; where M is diagonal, its diagonal (ng, s, 1) (zero in the padding)
        self._mig_diagonal = None if mech.Minv_diagonal is None else jnp.asarray(np.diagonal(ext)[gs.gidx][:, :, None])
        ext[: gs.d, : gs.d] = M
        Mg = jnp.asarray(ext[gs.gidx[:, :, None], gs.gidx[:, None, :]])
        pad = np.zeros(Mg.shape)
        pad[~gs.gvalid] = np.eye(gs.s)[np.nonzero(~gs.gvalid)[1]]  # 1 on the padding's diagonal
        pad = jnp.asarray(pad)
        self.blocks = dict(G1=G1, K1=K1, Gs=Gs, Hm=Hm, Fq=Fq, Fw=Fw, Fl=Fl, Fg=Fg)
        hh = 0.5 * h
        self.Hm, self.Fw, self.G1, self.Gs = Hm, Fw, G1, Gs
        hWq = Mg - hh * Hm
        S = (hh * h) * Fq + self.P(hWq) + pad
        self.lu, self.rows = batched_lu(S)
        self.X = batched_lu_solve(
            self.lu, self.rows, jnp.concatenate([(hh * h) * Fl, hh * (h * Fg - self.P(_tr(Gs)))], axis=2)
        )
        self.C = hh * K1 + G1 @ self.Mi_groups(hWq)
        r = gs.r
        Wg = jnp.concatenate([G1, self.C], axis=1) @ self.X
        Wg = Wg.at[:, r:, r:].add(hh * (G1 @ self.Mi_groups(_tr(Gs))))
        self.W_solve = gs.multiplier_solver(Wg)

    def Mi_groups(self, X):
        """M^-1 X by groups, X (ng, s, k): the groups' blocks of M^-1 times X, or where M is diagonal the
        products of their one live term per row (the same numbers, without a table of the blocks' entries)."""
        if self._mig_diagonal is None:
            return self.Mig @ X
        return self._mig_diagonal * X

    def P(self, X):
        """(I + h/2 F_w M^-1) X, by groups."""
        return X + (0.5 * self.h) * (self.Fw @ self.Mi_groups(X))

    def solve(self, b):
        """dR/dx^-1 b (the elimination of :meth:`livens.schemes.ggl_em.EMTangent.solve`, by groups)."""
        gs, h, d, m = self.gs, self.h, self.d, self.m
        hh, r = 0.5 * h, gs.r
        B = b[:, None] if b.ndim == 1 else b
        b1, b2, b3, b4, b5 = B[:d], B[d : 2 * d], B[2 * d : 3 * d], B[3 * d : 3 * d + m], B[3 * d + m :]
        c = 2.0 * b3 - self.Mop(b1) / hh
        cg = gs.gather_d(c)
        z = batched_lu_solve(self.lu, self.rows, hh * (gs.gather_d(b2) - self.P(cg)))
        rho = jnp.concatenate(
            [
                gs.scatter_add_m(self.G1 @ z) - b4,
                gs.scatter_add_m(self.C @ z) - hh * (b5 - gs.scatter_add_m(self.G1 @ self.Mi_groups(cg))),
            ]
        )
        y = self.W_solve(rho)
        yg = gs.gather_l(y)
        dqg = z - self.X @ yg
        dq = gs.scatter_d(dqg)
        Mdv = self.Mop(dq - b1) / hh - gs.scatter_d(self.Hm @ dqg + _tr(self.Gs) @ yg[:, r:])
        out = jnp.concatenate([dq, Mdv + 2.0 * b3, self.Miop(Mdv), y[:m], y[m:]])
        return out[:, 0] if b.ndim == 1 else out

    def matrix(self):
        """The dense Jacobian (3d + 2m square), assembled from the blocks (for tests)."""
        gs, h, d, m = self.gs, self.h, self.d, self.m
        hh = 0.5 * h
        bl = self.blocks
        G1, K1, Gs = gs.dense_md(bl["G1"]), gs.dense_md(bl["K1"]), gs.dense_md(bl["Gs"])
        Hm, Fq, Fw = gs.dense_dd(bl["Hm"]), gs.dense_dd(bl["Fq"]), gs.dense_dd(bl["Fw"])
        Fl, Fg = gs.dense_dm(bl["Fl"]), gs.dense_dm(bl["Fg"])
        M, Mi = jnp.asarray(self.M), jnp.asarray(self.Mi)
        I, Z = jnp.eye(d), jnp.zeros((d, d))
        Zdm, Zmd, Zmm = jnp.zeros((d, m)), jnp.zeros((m, d)), jnp.zeros((m, m))
        return jnp.block(
            [
                [I - hh * Mi @ Hm, Z, -hh * I, Zdm, -hh * Mi @ Gs.T],
                [h * Fq, I + hh * Fw @ Mi, Z, h * Fl, h * Fg],
                [Z, 0.5 * I, -0.5 * M, Zdm, Zdm],
                [G1, Zmd, Zmd, Zmm, Zmm],
                [K1, G1 @ Mi, Zmd, Zmm, Zmm],
            ]
        )


def block_tangent(u, s, h, mech, force):
    """EM's tangent by groups (module docstring) for a constant M, where the system's bodies make groups
    (:func:`group_structure`); else None. The size from which a step takes it is the solvers' policy's
    (:func:`livens.solvers.choose_form`, rule ``"ggl-em"``), not this function's. ``force``:
    :func:`livens.schemes.ggl_em._force`."""
    d, m = mech.d, mech.m
    if not mech.constant_mass or m == 0:
        return None
    cq = None if s.comp is None else s.comp[0]
    maps, z, c, values = _maps(mech, force, s.q, s.p, cq, u["dq"], u["dp"], u["lam"], u["gam"])
    k = int(c.shape[0])
    gs = group_structure(mech, s, force, k)
    if gs is None:
        return None
    # F_lambda, F_gamma: the force's derivatives with the coupling values held are those of the midpoint
    # gradient of lambda.g + gamma.G(.) w (:func:`livens.schemes.ggl_em._force`), G(q^{n+1/2})^T and
    # D_q[G(q) w](q^{n+1/2})^T: no product with the force per multiplier's colour (tested against AD)
    Ed = jnp.asarray(gs.seeds_d())
    idd, imd = gs.index_dd(), gs.index_md()
    G1, K1 = _columns(maps["node"], Ed)
    if midpoint_force(mech):
        # the force is P(q^n, q^{n+1}) + grad phi(q^{n+1/2}), phi = lambda.g + gamma.G(.) w, g at most
        # quadratic: F_q = dP/ddq + 1/2 sum_k lambda_k D^2 g_k and F_w = sum_k gamma_k D^2 g_k = Hm (the
        # third derivatives of g vanish), from the midpoint's one linearization of g instead of two
        # products with the whole force per colour
        Gm, Hm, Hl = _columns(maps["mid2"], Ed)
        Fq, Fw = _columns(maps["fq_potential"], Ed) + 0.5 * Hl, Hm
    else:
        Gm, Hm = _columns(maps["mid"], Ed)
        Fq, Fw = _columns(maps["fq"], Ed), _columns(maps["fw"], Ed)
    Gm = gs.take(Gm, imd)
    take = gs.take
    base = EMBlockTangent(
        gs,
        mech,
        h,
        G1=take(G1, imd),
        K1=take(K1, imd),
        Gs=2.0 * Gm,
        Hm=take(Hm, idd),
        Fq=take(Fq, idd),
        Fw=take(Fw, idd),
        Fl=_tr(Gm),
        Fg=_tr(take(_columns(maps["midw"], Ed), imd)),
    )
    if k == 0:
        return base
    # the coupling values: dR/dc (rows of (84b) only) and dc/dx
    eye = jnp.eye(k, dtype=z.dtype)
    Uf = _columns(maps["fc"], eye)
    pullback = jax.vjp(values, z)[1]
    Vz = jax.vmap(lambda e: pullback(e)[0])(eye)
    Vq, Vw, Vl, Vg = Vz[:, :d], Vz[:, d : 2 * d], Vz[:, 2 * d : 2 * d + m], Vz[:, 2 * d + m :]
    Vp = base.Miop(Vw.T).T  # dc/ddp = dc/dw M^-1 (M symmetric)
    zd, zm = jnp.zeros((d, k), z.dtype), jnp.zeros((m, k), z.dtype)
    U = jnp.concatenate([zd, h * Uf, zd, zm, zm])
    Vt = jnp.concatenate([Vq, Vp, jnp.zeros((k, d), z.dtype), Vl, Vg], axis=1)
    return LowRankUpdate(base, U, Vt)
