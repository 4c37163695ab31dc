"""A compiled VI-S written by hand in Numba: the yardstick at the limit of the method.

The first-order GGL variational integrator VI-S (KBS23b eq 55) for constant diagonal M, a potential V
and quadratic constraints g (every D^2 g_k constant, D^3 g = 0). With q_bar = q^n + h v^n and
w = M^-1 p^{n+1} the residual in x = (q^{n+1}, p^{n+1}, v^n, lambda^n, gamma^{n+1}) is

    R1 = q1 - q0 - h v0 - h M^-1 G(q_bar)^T gamma                        (55a)
    R2 = p1 - p0 + h DV(q0) + h G(q0)^T lambda + h Hg w                  (55b)
    R3 = M v0 - p1 - h Hg w                                              (55c)
    R4 = g(q1)                                                           (55d)
    R5 = G(q_bar) w                                                      (55e)

with Hg = sum_k gamma_k D^2 g_k, and its Jacobian (K: the rows (D^2 g_k w)^T)

    [ I,   0,              -h I - h^2 M^-1 Hg,   0,        -h M^-1 G(q_bar)^T ]
    [ 0,   I + h Hg M^-1,   0,                    h G0^T,   h K^T              ]
    [ 0,  -I - h Hg M^-1,   M,                    0,       -h K^T              ]
    [ G1,  0,               0,                    0,        0                  ]
    [ 0,   G(q_bar) M^-1,   h K,                  0,        0                  ]

Newton's method as livens runs it, stop on ||R||_inf <= tol, at most ``max_iter`` iterations; the
increments by a dense LU with partial pivoting of this (3d + 2m) square matrix, written out here
(:func:`_lu_solve`; it skips the row updates whose multiplier is zero, as the matrix is mostly
zeros), where livens eliminates its blocks (the same iterates up to round-off). The whole time
loop is one ``@njit`` function that allocates nothing per step; Numba compiles it on the first call
(seconds) and keeps it in ``benchmarks/__pycache__``.
First guesses (``guess=``), as :func:`livens.simulate` names them: "simple" (the unknowns of step n,
KBS23b Table 2), "advanced" (q^{n+1} = q^n + h v^n) and "extrapolated" (livens' default,
:mod:`livens.guess`: the quartic through the last five solutions (the increments q^{n+1} - q^n,
p^{n+1} - p^n and the other unknowns, as livens solves for them) where its residual is below the
advanced guess's, the comparison skipped for up to 7 steps once the prediction's residual is below
a tenth of it), ported line by line so that both take the same Newton iterations.

The systems' functions g, G, Hg, K and DV are written by hand from the papers' formulas, and the
initial states computed here from them (the test compares them with livens' examples):

* :func:`pendulum_3d`: KBS23b §6.1 (eq 92-98), d = 3, m = 1.
* :func:`heavy_top`: KBS23b §6.2 (eq 100-112), director coordinates, d = 12, m = 9.
* :func:`pendulum_chain`: N spherical pendulums in absolute coordinates (livens'
  ``pendulum-chain``), d = 3N, m = N. Each rod couples two bodies, so that with the unknowns
  ordered body by body the Jacobian is block tridiagonal, and the same LU runs over its band
  (21 sub- and superdiagonals): the factorization grows like N, the residual's and Jacobian's
  dense loops over (d, d) and (m, d) like N^2. ``dense=True`` factorizes the full matrix instead.

Benchmarks and tests only; needs ``numba`` (the ``bench`` extra).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from numba import njit

GUESSES = {"simple": 0, "advanced": 1, "extrapolated": 2}
HISTORY, TRUST, CHECK_EVERY = 5, 0.1, 8  # as livens.guess

_WEIGHTS = np.zeros((HISTORY + 1, HISTORY))
for _k in range(2, HISTORY + 1):
    for _j in range(_k):
        _WEIGHTS[_k, _j] = (-1) ** _j * math.comb(_k, _j + 1)  # Newton's backward differences


@njit(cache=True)
def _band_lu_solve(A, b, kl, ku):
    """Solve A x = b in place (x in b) by LU with partial pivoting, A (overwritten) with kl
    subdiagonals and ku superdiagonals (kl = ku = n - 1: a dense matrix); the row updates whose
    multiplier is zero are skipped."""
    n = A.shape[0]
    for k in range(n):
        imax = min(n, k + kl + 1)
        jmax = min(n, k + kl + ku + 1)  # the pivot row's reach after row exchanges
        p, amax = k, abs(A[k, k])
        for i in range(k + 1, imax):
            if abs(A[i, k]) > amax:
                p, amax = i, abs(A[i, k])
        if p != k:
            for j in range(k, jmax):
                A[k, j], A[p, j] = A[p, j], A[k, j]
            b[k], b[p] = b[p], b[k]
        inv = 1.0 / A[k, k]
        for i in range(k + 1, imax):
            f = A[i, k] * inv
            if f != 0.0:
                for j in range(k + 1, jmax):
                    A[i, j] -= f * A[k, j]
                b[i] -= f * b[k]
    for i in range(n - 1, -1, -1):
        s = b[i]
        for j in range(i + 1, min(n, i + kl + ku + 1)):
            s -= A[i, j] * b[j]
        b[i] = s / A[i, i]


@njit(cache=True)
def _lu_solve(A, b):
    """Solve A x = b in place (x in b) by dense LU with partial pivoting; A is overwritten."""
    _band_lu_solve(A, b, A.shape[0] - 1, A.shape[0] - 1)


# The time loop calls the system's hand-written functions through _g, _G, _Hg, _K, _dV below,
# which branch on the system's number ``kind`` (one compiled loop for all, cached on disk); each
# writes into its last argument, so that the loop allocates nothing: g(q, c, out (m,)),
# G(q, c, out (m, d)), Hg(gam, c, out (d, d)) = sum_k gam_k D^2 g_k, K(w, c, out (m, d)) with rows
# (D^2 g_k w)^T, dV(q, c, out (d,)); c: the system's constants.


@njit(cache=True)
def _residual(kind, x, q0, p0, G0, dV0, mdiag, h, c, d, m, r, qb, w, Gb, H):
    for i in range(d):
        qb[i] = q0[i] + h * x[2 * d + i]
        w[i] = x[d + i] / mdiag[i]
    _G(kind, qb, c, Gb)
    _Hg(kind, x[3 * d + m :], c, H)
    for i in range(d):
        Hw = 0.0
        for j in range(d):
            Hw += H[i, j] * w[j]
        GbTg = 0.0
        G0Tl = 0.0
        for k in range(m):
            GbTg += Gb[k, i] * x[3 * d + m + k]
            G0Tl += G0[k, i] * x[3 * d + k]
        v0 = x[2 * d + i]
        r[i] = x[i] - q0[i] - h * v0 - h * GbTg / mdiag[i]  # (55a)
        r[d + i] = x[d + i] - p0[i] + h * dV0[i] + h * G0Tl + h * Hw  # (55b)
        r[2 * d + i] = mdiag[i] * v0 - x[d + i] - h * Hw  # (55c)
    _g(kind, x[0:d], c, r[3 * d : 3 * d + m])  # (55d)
    for k in range(m):  # (55e)
        s = 0.0
        for i in range(d):
            s += Gb[k, i] * w[i]
        r[3 * d + m + k] = s


@njit(cache=True)
def _jacobian(kind, x, q0, G0, mdiag, h, c, d, m, J, qb, w, Gb, G1, H, Kw, P, kl, ku):
    """dR/dx with its rows and columns in the order P (unknown u at P[u]); only the band of kl
    sub- and ku + kl superdiagonals is cleared (the rest of J stays zero)."""
    for i in range(d):
        qb[i] = q0[i] + h * x[2 * d + i]
        w[i] = x[d + i] / mdiag[i]
    _G(kind, qb, c, Gb)
    _G(kind, x[0:d], c, G1)
    _Hg(kind, x[3 * d + m :], c, H)
    _K(kind, w, c, Kw)
    n = J.shape[0]
    for r in range(n):
        for col in range(max(0, r - kl), min(n, r + kl + ku + 1)):
            J[r, col] = 0.0
    a, b_, c_, l_, g_ = 0, d, 2 * d, 3 * d, 3 * d + m  # offsets of q1, p1, v0, lambda, gamma
    for i in range(d):
        J[P[a + i], P[a + i]] = 1.0
        J[P[a + i], P[c_ + i]] = -h
        J[P[c_ + i], P[c_ + i]] = mdiag[i]
        J[P[b_ + i], P[b_ + i]] = 1.0
        J[P[c_ + i], P[b_ + i]] = -1.0
        for j in range(d):
            if H[i, j] != 0.0:
                J[P[a + i], P[c_ + j]] -= h * h * H[i, j] / mdiag[i]
                J[P[b_ + i], P[b_ + j]] += h * H[i, j] / mdiag[j]
                J[P[c_ + i], P[b_ + j]] -= h * H[i, j] / mdiag[j]
        for k in range(m):
            if Gb[k, i] != 0.0 or G0[k, i] != 0.0 or G1[k, i] != 0.0 or Kw[k, i] != 0.0:
                J[P[a + i], P[g_ + k]] = -h * Gb[k, i] / mdiag[i]
                J[P[b_ + i], P[l_ + k]] = h * G0[k, i]
                J[P[b_ + i], P[g_ + k]] = h * Kw[k, i]
                J[P[c_ + i], P[g_ + k]] = -h * Kw[k, i]
                J[P[l_ + k], P[a + i]] = G1[k, i]
                J[P[g_ + k], P[b_ + i]] = Gb[k, i] / mdiag[i]
                J[P[g_ + k], P[c_ + i]] = h * Kw[k, i]


@njit(cache=True)
def _norm_inf(r):
    s = 0.0
    for i in range(r.shape[0]):
        a = abs(r[i])
        if not a <= s:  # NaN propagates
            s = a
    return s


@njit(cache=True)
def _run(kind, q0, v0, mdiag, c, m, h, n_steps, tol, max_iter, mode, weights, P, kl, ku):
    d = q0.shape[0]
    n = 3 * d + 2 * m
    q = np.empty((n_steps + 1, d))
    p = np.empty((n_steps + 1, d))
    v = np.empty((n_steps, d))
    lam = np.empty((n_steps, m))
    gam = np.empty((n_steps, m))
    its = np.zeros(n_steps, np.int32)
    q[0] = q0
    p[0] = mdiag * v0
    x, xs, r, rs = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
    J = np.zeros((n, n))  # in the order P, banded (kl, ku); outside the band it stays zero
    dx = np.empty(n)
    qb, w, dV0 = np.empty(d), np.empty(d), np.empty(d)
    G0, Gb, G1, Kw = np.empty((m, d)), np.empty((m, d)), np.empty((m, d)), np.empty((m, d))
    H = np.empty((d, d))
    X = np.zeros((HISTORY, n))  # the "extrapolated" guess's history, X[0] the latest solution
    known, advanced, since = 0, np.inf, 0
    xs[2 * d : 3 * d] = v0
    xs[3 * d :] = 0.0
    for step in range(n_steps):
        qn, pn = q[step], p[step]
        _G(kind, qn, c, G0)
        _dV(kind, qn, c, dV0)
        # the scheme's guess: the unknowns of step n (v, lambda, gamma kept in xs from the
        # last step), with q1 = q^n + h v^n if "advanced" or "extrapolated"
        for i in range(d):
            xs[i] = qn[i] + h * xs[2 * d + i] if mode >= 1 else qn[i]
            xs[d + i] = pn[i]
        if mode == 2:
            if known >= 2:
                for i in range(n):
                    s = 0.0
                    for j in range(known):
                        s += weights[known, j] * X[j, i]
                    x[i] = s
                for i in range(d):  # livens extrapolates the increments q^{n+1} - q^n, p^{n+1} - p^n
                    x[i] += qn[i]
                    x[d + i] += pn[i]
            else:
                x[:] = xs
            _residual(kind, x, qn, pn, G0, dV0, mdiag, h, c, d, m, r, qb, w, Gb, H)
            ne = _norm_inf(r)
            if known >= 2 and since < CHECK_EVERY - 1 and np.isfinite(advanced) and ne < TRUST * advanced:
                since += 1
            else:
                _residual(kind, xs, qn, pn, G0, dV0, mdiag, h, c, d, m, rs, qb, w, Gb, H)
                ns = _norm_inf(rs)
                if not (known >= 2 and ne < ns):
                    x[:] = xs
                    r[:] = rs
                advanced, since = ns, 0
        else:
            x[:] = xs
            _residual(kind, x, qn, pn, G0, dV0, mdiag, h, c, d, m, r, qb, w, Gb, H)
        k = 0
        nr = _norm_inf(r)
        while k < max_iter and not nr <= tol and np.isfinite(nr):
            _jacobian(kind, x, qn, G0, mdiag, h, c, d, m, J, qb, w, Gb, G1, H, Kw, P, kl, ku)
            for i in range(n):
                dx[P[i]] = -r[i]
            _band_lu_solve(J, dx, kl, ku)  # dx <- -J^-1 r, in the order P
            for i in range(n):
                x[i] += dx[P[i]]
            _residual(kind, x, qn, pn, G0, dV0, mdiag, h, c, d, m, r, qb, w, Gb, H)
            nr = _norm_inf(r)
            k += 1
        its[step] = k
        if not nr <= tol:
            return q, p, v, lam, gam, its, step  # Newton failed in this step
        if mode == 2:
            for j in range(HISTORY - 1, 0, -1):
                X[j] = X[j - 1]
            X[0] = x
            for i in range(d):
                X[0, i] -= qn[i]
                X[0, d + i] -= pn[i]
            known = min(known + 1, HISTORY)
        q[step + 1], p[step + 1] = x[0:d], x[d : 2 * d]
        v[step], lam[step], gam[step] = x[2 * d : 3 * d], x[3 * d : 3 * d + m], x[3 * d + m :]
        xs[2 * d :] = x[2 * d :]
    return q, p, v, lam, gam, its, n_steps


# --- the systems -------------------------------------------------------------------------------
# c: the constants each system's functions read (an array, so that one compiled loop serves
# every parameter value); every function writes into ``out``


@njit(cache=True)
def _pendulum_g(q, c, out):  # c = (mass, length, gravity); 1/2 (q.q / l^2 - 1) (eq 93)
    out[0] = 0.5 * ((q[0] * q[0] + q[1] * q[1] + q[2] * q[2]) / (c[1] * c[1]) - 1.0)


@njit(cache=True)
def _pendulum_G(q, c, out):
    for i in range(3):
        out[0, i] = q[i] / (c[1] * c[1])


@njit(cache=True)
def _pendulum_Hg(gam, c, out):
    out[:, :] = 0.0
    for i in range(3):
        out[i, i] = gam[0] / (c[1] * c[1])


_pendulum_K = _pendulum_G  # D^2 g w = G(w): g is a quadratic form


@njit(cache=True)
def _pendulum_dV(q, c, out):  # V = m g e3.q
    out[0] = 0.0
    out[1] = 0.0
    out[2] = c[0] * c[2]


# heavy top: q = (phi, d1, d2, d3); constraints in livens' order: 1/2 (d_i.d_i - 1) (i = 1..3),
# d1.d2, d1.d3, d2.d3 (eq 103), then phi/l - d3 (eq 104, the tip fixed); c = (mass, l, gravity)
_PAIRS = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))


@njit(cache=True)
def _top_g(q, c, out):
    for k in range(6):
        i, j = _PAIRS[k]
        s = 0.0
        for a in range(3):
            s += q[3 + 3 * i + a] * q[3 + 3 * j + a]
        out[k] = 0.5 * (s - 1.0) if i == j else s
    for a in range(3):
        out[6 + a] = q[a] / c[1] - q[9 + a]


@njit(cache=True)
def _top_K(w, c, out):  # rows (D^2 g_k w)^T: the director part of G(w); the joint is linear
    out[:, :] = 0.0
    for k in range(6):
        i, j = _PAIRS[k]
        for a in range(3):
            out[k, 3 + 3 * i + a] += w[3 + 3 * j + a]
            if i != j:
                out[k, 3 + 3 * j + a] += w[3 + 3 * i + a]


@njit(cache=True)
def _top_G(q, c, out):
    _top_K(q, c, out)
    for a in range(3):
        out[6 + a, a] = 1.0 / c[1]
        out[6 + a, 9 + a] = -1.0


@njit(cache=True)
def _top_Hg(gam, c, out):
    out[:, :] = 0.0
    for k in range(6):
        i, j = _PAIRS[k]
        for a in range(3):
            out[3 + 3 * i + a, 3 + 3 * j + a] += gam[k]
            if i != j:
                out[3 + 3 * j + a, 3 + 3 * i + a] += gam[k]


@njit(cache=True)
def _top_dV(q, c, out):  # V = m g e3.phi
    out[:] = 0.0
    out[2] = c[0] * c[2]


# pendulum chain: q = (x_1, ..., x_N), rods r_k = x_k - x_{k-1} (x_0 = 0), g_k = 1/2 (|r_k|^2 - l^2);
# c = (mass, length, gravity)
@njit(cache=True)
def _chain_g(q, c, out):
    for k in range(q.shape[0] // 3):
        s = 0.0
        for a in range(3):
            rk = q[3 * k + a] - (q[3 * k - 3 + a] if k else 0.0)
            s += rk * rk
        out[k] = 0.5 * (s - c[1] * c[1])


@njit(cache=True)
def _chain_G(q, c, out):
    out[:, :] = 0.0
    for k in range(q.shape[0] // 3):
        for a in range(3):
            rk = q[3 * k + a] - (q[3 * k - 3 + a] if k else 0.0)
            out[k, 3 * k + a] = rk
            if k:
                out[k, 3 * k - 3 + a] = -rk


_chain_K = _chain_G  # D^2 g_k w = D g_k(w): g_k is a quadratic form


@njit(cache=True)
def _chain_Hg(gam, c, out):
    n = gam.shape[0]
    out[:, :] = 0.0
    for k in range(n):
        s = gam[k] + (gam[k + 1] if k + 1 < n else 0.0)
        for a in range(3):
            out[3 * k + a, 3 * k + a] = s
            if k + 1 < n:
                out[3 * k + a, 3 * k + 3 + a] = -gam[k + 1]
                out[3 * k + 3 + a, 3 * k + a] = -gam[k + 1]


@njit(cache=True)
def _chain_dV(q, c, out):
    out[:] = 0.0
    for k in range(q.shape[0] // 3):
        out[3 * k + 2] = c[0] * c[2]


PENDULUM, TOP, CHAIN = 0, 1, 2


@njit(cache=True)
def _g(kind, q, c, out):
    if kind == PENDULUM:
        _pendulum_g(q, c, out)
    elif kind == TOP:
        _top_g(q, c, out)
    else:
        _chain_g(q, c, out)


@njit(cache=True)
def _G(kind, q, c, out):
    if kind == PENDULUM:
        _pendulum_G(q, c, out)
    elif kind == TOP:
        _top_G(q, c, out)
    else:
        _chain_G(q, c, out)


@njit(cache=True)
def _Hg(kind, gam, c, out):
    if kind == PENDULUM:
        _pendulum_Hg(gam, c, out)
    elif kind == TOP:
        _top_Hg(gam, c, out)
    else:
        _chain_Hg(gam, c, out)


@njit(cache=True)
def _K(kind, w, c, out):
    if kind == PENDULUM:
        _pendulum_K(w, c, out)
    elif kind == TOP:
        _top_K(w, c, out)
    else:
        _chain_K(w, c, out)


@njit(cache=True)
def _dV(kind, q, c, out):
    if kind == PENDULUM:
        _pendulum_dV(q, c, out)
    elif kind == TOP:
        _top_dV(q, c, out)
    else:
        _chain_dV(q, c, out)


@dataclass
class NumbaSystem:
    """A system for :func:`simulate_vis`: its diagonal mass matrix, constants, initial state."""

    name: str
    mdiag: np.ndarray
    constants: np.ndarray
    m: int
    q0: np.ndarray
    v0: np.ndarray
    kind: int  # PENDULUM, TOP or CHAIN
    bodies: int = 0  # > 0: a chain of bodies of 3 coordinates, each coupled to its neighbours only


def _order(system: "NumbaSystem", dense: bool):
    """(P, kl, ku): the unknowns' order in the Jacobian and its band. Dense systems keep the order
    (q1, p1, v0, lambda, gamma); a chain orders them body by body (q1_k, p1_k, v0_k, lambda_k,
    gamma_k: 11 per body), where the Jacobian is block tridiagonal: kl = ku = 21."""
    d, m = system.q0.size, system.m
    n = 3 * d + 2 * m
    if dense or not system.bodies:
        return np.arange(n), n - 1, n - 1
    P = np.empty(n, np.int64)
    for i in range(d):
        body, comp = divmod(i, 3)
        for block in range(3):  # q1, p1, v0
            P[block * d + i] = 11 * body + 3 * block + comp
    for k in range(m):
        P[3 * d + k] = 11 * k + 9
        P[3 * d + m + k] = 11 * k + 10
    return P, 21, 21


def pendulum_3d(mass=1.0, length=1.0, gravity=9.81, q0=(1.0, 0.0, 0.0), v0=(0.0, 1.0, 0.0)) -> NumbaSystem:
    """The 3D pendulum of KBS23b §6.1 (eq 92-98): M = m I, V = m g e3.q, g = 1/2 (q.q / l^2 - 1)."""
    return NumbaSystem(
        "pendulum-3d",
        np.full(3, float(mass)),
        np.array([mass, length, gravity], float),
        1,
        np.array(q0, float),
        np.array(v0, float),
        PENDULUM,
    )


def heavy_top(
    mass=0.7069, inertia=(5.3014e-4, 5.3014e-4, 5.3014e-4), length=0.075, gravity=9.81, alpha0=np.pi / 3, omega_p=10.0
) -> NumbaSystem:
    """The heavy top of KBS23b §6.2 in director coordinates, in steady precession (eq 100-112)."""
    J1, J2, J3 = inertia
    E = (0.5 * (J2 + J3 - J1), 0.5 * (J3 + J1 - J2), 0.5 * (J1 + J2 - J3))  # eq 101
    mdiag = np.concatenate([np.full(3, mass)] + [np.full(3, e) for e in E])
    ca, sa = np.cos(alpha0), np.sin(alpha0)
    R = np.array([[1.0, 0.0, 0.0], [0.0, ca, -sa], [0.0, sa, ca]])  # eq 108
    d1, d2, d3 = R.T  # eq 109: d_i = R e_i
    phi = length * d3  # eq 110
    omega_s = mass * gravity * length / (J3 * omega_p) + (J1 + mass * length**2 - J3) / J3 * omega_p * ca  # eq 112
    omega = omega_p * np.array([0.0, 0.0, 1.0]) + omega_s * d3  # eq 111
    q0 = np.concatenate([phi, d1, d2, d3])
    v0 = np.concatenate([np.cross(omega, x) for x in (phi, d1, d2, d3)])
    return NumbaSystem("heavy-top", mdiag, np.array([mass, length, gravity], float), 9, q0, v0, TOP)


def pendulum_chain(n_bodies=8, mass=1.0, length=1.0, gravity=9.81) -> NumbaSystem:
    """N spherical pendulums in a chain, absolute coordinates (livens' ``pendulum-chain``): straight
    along e1, body 1 moving with e2 and the others with e2 + e3."""
    n = int(n_bodies)
    e1, e2, e3 = np.eye(3)
    q0 = np.concatenate([length * (k + 1) * e1 for k in range(n)])
    v0 = np.concatenate([e2] + [e2 + e3] * (n - 1))
    return NumbaSystem(
        f"pendulum-chain-{n}",
        np.full(3 * n, float(mass)),
        np.array([mass, length, gravity], float),
        n,
        q0,
        v0,
        CHAIN,
        bodies=n,
    )


@dataclass
class Result:
    """Nodes q, p (steps + 1, d); per step v^n, lambda^n, gamma^{n+1} and Newton iterations;
    ``wall``: seconds of the compiled loop (excluding its compilation)."""

    q: np.ndarray
    p: np.ndarray
    v: np.ndarray
    lam: np.ndarray
    gam: np.ndarray
    iterations: np.ndarray
    wall: float


def simulate_vis(
    system: NumbaSystem,
    h: float,
    n_steps: int,
    tol: float = 1e-9,
    max_iter: int = 40,
    guess: str = "extrapolated",
    q0=None,
    v0=None,
    dense: bool = False,
) -> Result:
    """VI-S (KBS23b eq 55) from the system's initial state (or ``q0``, ``v0``) for ``n_steps`` steps.

    ``guess``: "simple", "advanced" or "extrapolated" (see the module docstring). A chain's
    Jacobian is factorized as a band matrix in the bodies' order, unless ``dense``. The first call
    for a system compiles the loop (seconds). Raises RuntimeError if Newton fails in a step.
    """
    if guess not in GUESSES:
        raise ValueError(f"guess must be one of {', '.join(map(repr, GUESSES))}; got {guess!r}.")
    q0 = system.q0 if q0 is None else np.asarray(q0, float)
    v0 = system.v0 if v0 is None else np.asarray(v0, float)
    P, kl, ku = _order(system, dense)
    t0 = time.perf_counter()
    q, p, v, lam, gam, its, done = _run(
        system.kind,
        q0,
        v0,
        system.mdiag,
        system.constants,
        system.m,
        float(h),
        int(n_steps),
        float(tol),
        int(max_iter),
        GUESSES[guess],
        _WEIGHTS,
        P,
        kl,
        ku,
    )
    wall = time.perf_counter() - t0
    if done < n_steps:
        raise RuntimeError(
            f"Numba VI-S ({system.name}): Newton did not converge in step {done} ({its[done]} iterations, tol {tol:g})."
        )
    return Result(q, p, v, lam, gam, its, wall)
