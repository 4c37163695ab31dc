"""Diagnostics of a scheme's one-step map: the symplecticity defect (KBS23b §2.2.3, §3.2.3, App. A).

A one-step method Psi: (q^n, p^n) -> (q^{n+1}, p^{n+1}) is symplectic on the phase-space
constraint manifold M = {g(q) = 0, G(q) M^-1 p = 0} (KBS23b eq 31) when

    P^T (Psi'^T J Psi' - J) P = 0,     J = [[0, I], [-I, 0]],

for P an orthonormal basis of the tangent space T_z M at the start point z = (q^n, p^n)
(the restriction of the two-form dq ^ dp to M is preserved, KBS23b eq 23; Leimkuhler & Skeel).

Psi' is obtained by AD through the converged Newton solution, by the implicit function theorem:
with R(x; z) = 0 the scheme's residual in its unknowns x, dx/dz = -R_x^-1 R_z, and
Psi' = d(update)/dx dx/dz + d(update)/dz. Nothing is differentiated by hand or by finite
differences.

Which manifold. VI-S (KBS23b eq 55) and VI-B (eq 82-83) attach the position constraint to a node
(lambda^n g(q^n), resp. the trapezoidal g_d of eq 80 with g(q^{n+1}) = 0 imposed): their
generating-function argument gives d(p^{n+1}.dq^{n+1} - p^n.dq^n) = h c dg(q^n) ^ d lambda, which
vanishes for tangent vectors with G(q^n) dq^n = 0 -- so they are symplectic on T M (the default,
``manifold="constraint"``). VI-A (eq 79) imposes g_d = h g(q^{n+theta}) = 0 as an equation between
q^n and q^{n+1} only; its nodes (q^n, p^n) do not lie on M (after the first step, KBS23b Fig 13, 15),
and the same argument gives d(p^{n+1}.dq^{n+1} - p^n.dq^n) = dg_d ^ d lambda = 0 on the whole set
of discrete solutions: VI-A is symplectic on the full phase space R^{2d}. Its defect is therefore
measured with ``manifold="full"`` (P = I) as well; the App. A.7 text is missing from our copy of
KBS23b, so this derivation (ours) is what the test checks numerically.

Configuration-dependent M(q). The two-form is the canonical dq ^ dp of the cotangent bundle
whatever M; the manifold is {g(q) = 0, G(q) M(q)^-1 p = 0} (KBS23b Remark 3), and the state's
velocity is v = M(q)^-1 p (a linear solve with M(q)) where M(q) is regular at the start point. The
same arguments apply to the GGL variational integrators derived for M(q)
(:mod:`livens.schemes.ggl_mass`): nothing in them uses a constant M.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from . import _jaxconfig  # noqa: F401
from .engine import CompiledCache
from .mechanics import Mechanics
from .problem import Problem
from .schemes.base import Scheme, State

_JACOBIANS = CompiledCache(16)


def _regular_configuration_mass(mech, q) -> bool:
    """M depends on q (or on the System's parameters) and M(q) is regular at q."""
    from .mechanics import mass_inverse

    if mech.constant_mass:
        return False
    return mass_inverse(np.asarray(mech.M(jnp.asarray(q)), dtype=float)) is not None


def _velocity(mech, q, p, solve_mass: bool):
    """The state's velocity from (q, p): M^-1 p for a constant regular M, M(q)^-1 p (a linear solve)
    where ``solve_mass``, else None (the given velocity is kept)."""
    if mech.Minv_const is not None:
        return jnp.asarray(mech.Minv_const) @ p
    if solve_mass:
        return jnp.linalg.solve(mech.M(q), p)
    return None


def _jacobian_runner(sch, mech, state: State, solve_mass: bool = False):
    """(z, aux, h, t, params, tol, max_iter) -> (Psi', x, ||R||_inf): Newton and the
    implicit-function derivative on one jit-compiled function, cached per (scheme, system,
    structure of the state, velocity rule)."""
    key = (
        sch,
        mech,
        jax.tree_util.tree_structure(state),
        tuple(jnp.shape(a) for a in jax.tree_util.tree_leaves(state)),
        solve_mass,
    )
    hit = _JACOBIANS.get(key)
    if hit is not None:
        return hit
    d, m = mech.d, mech.m

    def make(z, aux):
        q, p = z[:d], z[d:]
        v = _velocity(mech, q, p, solve_mass)
        return State(q=q, p=p, v=aux.v if v is None else v, lam=aux.lam, gam=aux.gam, extra=aux.extra)

    @jax.jit
    def parts(x, z, aux, h, t, jp):
        """R(x; z), its Jacobian w.r.t. (x, z), and that of the update's (q^{n+1}, p^{n+1})."""
        nx = x.shape[0]

        def R(xz):
            return sch.residual(sch.unpack(xz[:nx], d, m), make(xz[nx:], aux), h, t, jp, mech)

        def out(xz):
            new, _ = sch.update(sch.unpack(xz[:nx], d, m), make(xz[nx:], aux), h, t, jp, mech)
            return jnp.concatenate([new.q, new.p])

        xz = jnp.concatenate([x, z])
        return R(xz), jax.jacfwd(R)(xz), jax.jacfwd(out)(xz)

    @jax.jit
    def first_guess(z, aux, h, t, jp):
        return sch.pack(sch.guess(make(z, aux), h, t, jp, mech, "simple"), d, m)

    def run(z, aux, h, t, jp, tol, max_iter):
        # Newton in Python on the jitted parts (one compilation serves the solve and the derivative)
        x = first_guess(z, aux, h, t, jp)
        nx = x.shape[0]
        for it in range(int(max_iter) + 1):
            r, dR, dout = parts(x, z, aux, h, t, jp)
            rn = float(jnp.max(jnp.abs(r))) if r.size else 0.0
            if not np.isfinite(rn) or rn <= float(tol) or it == int(max_iter):
                break
            x = x - jnp.linalg.solve(dR[:, :nx], r)
        # implicit function theorem: dx/dz = -R_x^-1 R_z; Psi' = out_x dx/dz + out_z
        dxdz = -jnp.linalg.solve(dR[:, :nx], dR[:, nx:])
        Psi = dout[:, :nx] @ dxdz + dout[:, nx:]
        return Psi, x, rn

    _JACOBIANS[key] = run
    return run


def one_step_jacobian(
    problem: Problem,
    scheme: str | Scheme,
    h: float,
    state: State | None = None,
    t: float = 0.0,
    tol: float = 1e-14,
    max_iter: int = 50,
    **params: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Psi'(z) of the one-step map (q^n, p^n) -> (q^{n+1}, p^{n+1}) at z = (q^n, p^n), shape
    (2d, 2d), by the implicit function theorem through the Newton solution (see module docstring).

    ``state`` defaults to the problem's initial state. The state's velocity is taken as
    v = M^-1 p where M^-1 exists (p = M v holds at the nodes of the schemes with nodal velocities
    and constant M; the other schemes use v only in the first guess), v = M(q)^-1 p where M is
    configuration dependent and regular at the start point, else kept fixed.
    Returns (Psi', z, x, ||R||_inf at the solution).
    """
    from .driver.setup import initial_state, resolve

    sch, vals, mech = resolve(problem, scheme, params)
    if state is None:
        state = initial_state(problem, mech)
        if sch.start is not None:
            jp0 = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in vals.items()}
            state, _ = jax.jit(lambda s, hh: sch.start(s, hh, jp0, mech))(state, jnp.asarray(h, jnp.float64))
    state = jax.tree_util.tree_map(jnp.asarray, state)
    jp = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in vals.items()}
    z0 = jnp.concatenate([state.q, state.p])
    run = _jacobian_runner(sch, mech, state, _regular_configuration_mass(mech, state.q))
    Psi, x, rn = run(
        z0,
        state,
        jnp.asarray(h, dtype=jnp.float64),
        jnp.asarray(t, dtype=jnp.float64),
        jp,
        jnp.asarray(tol, dtype=jnp.float64),
        jnp.asarray(max_iter, dtype=jnp.int32),
    )
    rn = float(rn)
    if not (rn <= max(1e3 * tol, 1e-10)):
        raise RuntimeError(
            f"one_step_jacobian: Newton did not converge for {sch.name} with h = {float(h):g} "
            f"(||R||_inf = {rn:.3e} after {max_iter} iterations); the implicit-function derivative "
            "needs a converged step. Try a smaller h."
        )
    return np.asarray(Psi), np.asarray(z0), np.asarray(x), rn


def defect_of(
    Psi: np.ndarray, z: ArrayLike, mech: Mechanics, manifold: str = "constraint", relative: bool = False
) -> float:
    """|| P^T (Psi'^T J Psi' - J) P ||_F for a given one-step Jacobian Psi' at z (see
    :func:`symplecticity_defect`)."""
    if manifold not in ("constraint", "full"):
        raise ValueError(f"manifold must be 'constraint' or 'full'; got {manifold!r}.")
    d = mech.d
    J = symplectic_form(d)
    P = constraint_manifold_basis(mech, z) if manifold == "constraint" else np.eye(2 * d)
    A = P.T @ (Psi.T @ J @ Psi) @ P
    B = P.T @ J @ P
    defect = float(np.linalg.norm(A - B))
    if relative:
        defect /= float(np.linalg.norm(A) + np.linalg.norm(B))
    return defect


def constraint_manifold_basis(mech: Mechanics, z: ArrayLike) -> np.ndarray:
    """Orthonormal basis P (2d, 2d - 2m) of the tangent space at z = (q, p) of the phase-space
    constraint manifold {g(q) = 0, G(q) M^-1 p = 0} (KBS23b eq 31; G(q) M(q)^-1 p for a
    configuration-dependent M, KBS23b Remark 3): the null space of its Jacobian."""
    d = mech.d

    def c(z):
        q, p = z[:d], z[d:]
        if mech.constant_mass:
            gv = mech.gv(q, p)
        else:
            gv = jax.jvp(mech.g, (q,), (jnp.linalg.solve(mech.M(q), p),))[1]
        return jnp.concatenate([mech.g(q), gv])

    C = np.asarray(jax.jacfwd(c)(jnp.asarray(z)))
    if C.shape[0] == 0:
        return np.eye(2 * d)
    _, s, vt = np.linalg.svd(C)
    rank = int(np.sum(s > 1e-12 * s.max()))
    return vt[rank:].T


def symplectic_form(d: int) -> np.ndarray:
    """J = [[0, I], [-I, 0]] of the canonical two-form dq ^ dp (KBS23b eq 23)."""
    eye = np.eye(d)
    zero = np.zeros((d, d))
    return np.block([[zero, eye], [-eye, zero]])


def symplecticity_defect(
    problem: Problem,
    scheme: str | Scheme,
    h: float,
    state: State | None = None,
    manifold: str = "constraint",
    relative: bool = False,
    **params: Any,
) -> float:
    """|| P^T (Psi'^T J Psi' - J) P ||_F for one step of ``scheme`` with step ``h`` from ``state``
    (default: the problem's initial state); see the module docstring.

    manifold: "constraint" -- P spans the tangent space of {g = 0, G M^-1 p = 0} at the start
        point (KBS23b eq 31; G(q) M(q)^-1 p for a configuration-dependent M; for VI-S, VI-B, EM);
        "full" -- P = I (the whole phase space; VI-A).
    relative: divide by ||P^T Psi'^T J Psi' P||_F + ||P^T J P||_F, so that the number compares
        with the machine epsilon whatever the scaling of q and p.
    **params: the scheme's parameters (e.g. theta=0.5).
    """
    from .mechanics import mechanics

    if manifold not in ("constraint", "full"):
        raise ValueError(f"manifold must be 'constraint' or 'full'; got {manifold!r}.")
    Psi, z, _, rn = one_step_jacobian(problem, scheme, h, state=state, **params)
    return defect_of(Psi, z, mechanics(problem.system, problem.q0), manifold, relative)


__all__ = ["symplecticity_defect", "one_step_jacobian", "defect_of", "constraint_manifold_basis", "symplectic_form"]
