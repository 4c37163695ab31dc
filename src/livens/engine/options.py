"""The engine's options: one object, one switch.

:class:`EngineOptions` holds every choice the engine makes about how a run's programs are compiled
and every size threshold it uses; :func:`engine_options` makes it from a run's ``backend`` argument
and the environment. The one switch is the backend:

- ``"auto"`` (the default): a time loop of a small system, or of one whose Newton tangent is
  factorized by bodies in small dense blocks, is translated to C and compiled by the system's C
  compiler (:mod:`livens.engine.native`), larger ones are compiled by XLA, large XLA
  programs in two tiers (:mod:`livens.engine.tiers`), small matrix products rewritten
  (:mod:`livens.engine.small_products`);
- ``"native"``: the C translation, or an error where it is not possible;
- ``"xla"``: XLA only, with the engine's compile options, tiers and rewrites;
- ``"plain"``: ``jax.jit`` with XLA's defaults and nothing of the engine (no C, no tiers, no
  rewriting, no compile options): the reference to compare with when something looks wrong.

It is given per run (``simulate(..., backend=...)``, ``simulate_ensemble``, ``flow``) or for the
process by the environment variable ``LIVENS_BACKEND``. Every backend computes the same equations
with the same Newton iteration; results agree to round-off.

Beside it, :class:`SizePolicy` holds the sizes at which the solvers change how a Newton step's
linear system is formed and solved (unrolled, dense, block by block, banded, matrix-free), for
every backend alike, and the steps per compiled chunk of a run; :func:`size_policy` is the one
place they are read from.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

BACKENDS = ("auto", "native", "xla", "plain")


@dataclass(frozen=True)
class EngineOptions:
    """How a run's programs are compiled (module docstring).

    backend: "auto", "native", "xla" or "plain".
    max_native_unknowns: with "auto", a system whose Newton unknowns per step, or coordinates and
        multipliers, number more than this runs with XLA (large systems have banded or
        matrix-free tangents that XLA runs well, and their C source would be long to compile) --
        unless its Newton tangent is factorized by groups of coordinates (bodies): then the limit
        bounds the largest dense matrix the tangent factorizes (:func:`factorized_size`), whose
        cost, not the number of unknowns, decides between native code and XLA. A solver that
        factorizes by groups says so while the step is traced (:func:`tangent_by_groups`), and a
        loop above the limit is traced once before the choice (JAX keeps the trace, which the native
        translation or XLA's compile then reuses). ``backend="native"`` compiles any size natively.
    max_native_lines: with "auto", a loop whose C translation is longer than this many lines runs
        with XLA: the C compiler's time grows far faster than the length of the one function it
        compiles (a many-stage scheme on a system with M(q) at its limit).
    written_once_unknowns: a loop of more unknowns than this (or coordinates and multipliers,
        :func:`loop_size`) holds its residual once in its extrapolated guess (a loop of one or two
        passes in place of a ``cond``: :func:`livens.guess.extrapolated_guess`), whichever backend
        compiles it: a large residual written twice is compiled twice. The same results either way.
    large_program_unknowns, large_program_equations: with "auto", a loop of one member above
        :attr:`max_native_unknowns` still runs natively where its step has at most
        ``large_program_unknowns`` Newton unknowns (or coordinates and multipliers) and its traced
        program at least ``large_program_equations`` equations (sub-programs included; the same trace
        that finds a tangent by groups): :func:`large_program`. XLA compiles such a program more
        slowly than its C translation is made and compiled at ``-O0``, and the native kernel runs its
        steps faster (the dense LU of up to about 200 unknowns as row updates the C compiler
        vectorizes): the overconstrained mechanisms four-bar-3d and bennett-linkage are such programs
        (``python -m benchmarks`` measures their first calls and steps). A smaller program of as
        many unknowns XLA compiles faster than C (the double four-bar's VI-S, the heavy top's
        ggl-galerkin), and it keeps XLA (its first call then holds one more trace, of the native
        loop, to decide); so do ensembles' lane kernels and every program asked about before it is
        traced (:func:`runs_natively`).
    tier_equations: an XLA time loop of at least this many equations is compiled quickly first
        (XLA's level 0) and optimized once its runs have paid for it (:mod:`livens.engine.tiers`).
    small_product_unknowns: the step's small matrix products are rewritten as fusible sums up to
        this many Newton unknowns (:mod:`livens.engine.small_products`).
    small_product_limit: the largest product (entries of its product tensor) rewritten; 0: none
        (``LIVENS_FUSE_DOTS=0``, or an integer to choose it).
    lanes: members per lane kernel of an ensemble (:mod:`livens.engine.native.member_lanes`): eight
        doubles are one AVX-512 vector; ensembles of at least twice as many members run in lane
        kernels where possible.

    The solvers' size thresholds (the form of a Newton tangent) are :class:`SizePolicy`'s.
    """

    backend: str = "auto"
    max_native_unknowns: int = 64
    max_native_lines: int = 60_000
    written_once_unknowns: int = 64
    large_program_unknowns: int = 200
    large_program_equations: int = 1800
    tier_equations: int = 1000
    small_product_unknowns: int = 256
    small_product_limit: int = 2048
    lanes: int = 8

    @property
    def plain(self) -> bool:
        return self.backend == "plain"


@dataclass(frozen=True)
class SizePolicy:
    """The sizes at which the Newton step's linear algebra changes form, read by
    :mod:`livens.solvers` through :func:`size_policy`: a scheme lists the forms its tangent can take
    and :func:`livens.solvers.choose_form` takes one by these sizes. Each form is an exact solve of the same equations: the thresholds change
    the cost of a step, and its results only by round-off. Each was found by timing the forms
    side by side (``python -m benchmarks``).

    unroll_unknowns: a dense system of at most this many unknowns is solved by unrolled Gaussian
        elimination with partial pivoting (:func:`livens.solvers.dense.small_solve`), a larger one
        by one LU factorization: below it a LAPACK call costs more to launch than its arithmetic.
    block_jacobian_unknowns: from this many unknowns on, the AD tangent
        (:func:`livens.solvers.ad_jacobian`) is built one block of named unknowns at a time; below
        it the extra, smaller kernels cost more than they save.
    banded_unknowns: from this many Newton unknowns on, a scheme's AD tangent is factorized over
        its band where the system's couplings make one (:func:`livens.solvers.banded_tangent`);
        below it the dense matrix and LU cost less (vi-lagrange on the pendulum chain: faster banded
        from 96 unknowns on; the three-bar swing from 4 elements, 142 unknowns, on).
    vis_banded_coordinates: from this many coordinates on, VI-S uses its banded tangent
        (``VISTangentBanded``) where its reduced system is a narrow band; below it the band LU's
        many small factorizations cost more than the dense form's few large ones (the pendulum
        chain, about equal at 18 bodies, d = 54).
    vis_matrix_free_coordinates: from this many coordinates on, VI-S uses its matrix-free tangent
        (``VISTangentMF``) where the banded one does not apply (no narrow band).
    stage_unknowns: from this many Newton unknowns on, ``ggl-galerkin`` assembles its tangent from
        per-point Jacobians (:mod:`livens.schemes.stage_tangents`); below it the dense AD Jacobian
        costs as much or less (s = 2 and 3 on the 3D pendulum, 20 unknowns, Andrews' squeezer, 76, and
        the heavy top, 120). ``ggl-spark`` keeps the dense AD tangent at every size measured.
    vis_block_constraints: from this many constraints on, VI-S's dense tangent (``VISTangent``) solves
        its 2m x 2m system in (dlambda, dgamma) by block elimination on the (55d) rows
        (:func:`livens.solvers.dense.block_solve`): two LU of m x m instead of one of 2m x 2m; faster
        for the double four-bar (m = 29), slower for the heavy top (m = 9) and the chain of 16
        (m = 16), where the LAPACK calls, not their arithmetic, cost. Not used by the matrix-free
        tangent (``VISTangentMF``), whose steps on the chain of 32 took longer with it.
    symmetric_unroll_unknowns: up to this many unknowns, :func:`livens.solvers.dense.symmetric_solver`
        eliminates unrolled, without pivoting, in the trace of a native kernel of one member.
    em_group_unknowns: from this many Newton unknowns on, EM's tangent is factorized body by body
        where the system's bodies make groups (:mod:`livens.schemes.ggl_em_blocks`; the chain of 3D
        rods from four rods, 216 unknowns, on); below it the papers' mechanisms (at most 178) keep
        the dense elimination and their results bit for bit. Such a tangent runs as native code
        under "auto" where its largest dense block is within
        :attr:`EngineOptions.max_native_unknowns`.

    The chunks of a run: how many steps one call of its compiled loop takes, where the host loop
    (:mod:`livens.driver.host`) takes over between calls to keep the nodes, stream them, show
    progress and answer Ctrl-C. They change where a run pauses, not the equations its steps solve.

    chunk: steps per call of a run's compiled loop. Its default here is :func:`livens.simulate`'s
        default ``chunk`` and the chunk of :func:`livens.flow`'s native forward run and replayed
        derivatives (``livens.driver.DEFAULT_CHUNK``, read once at import); an ensemble's native
        kernels take the value in force. Fixed per run, so that h and t_end never recompile.
    batched_member_steps: an ensemble that runs as one ``vmap``-ped XLA call for all its members
        takes about this many member-steps per call (:meth:`batched_chunk`), so that the records of
        one call stay small.
    batched_min_chunk: the fewest steps per call of that batched loop, however many members.

    The lanes of native kernels (:attr:`EngineOptions.lanes` members per call of a lane kernel, each
    lane computing one member's operations: the same bits as the member's own run). They change
    which kernel runs a member, not its results.

    ensemble_lane_groups: an ensemble runs in lane kernels from this many groups of lanes on (two
        groups of eight: 16 members); a smaller one runs member by member through the single run's
        kernel, whose compile it shares.
    flow_lanes_from: the fewest members of a batched call of :func:`livens.flow` (``jax.vmap`` of a
        run or of its derivatives) that run together in a lane kernel; fewer run member by member.
    lane_scratch_bytes: the bytes of scratch arrays (the large arrays off the C stack: a replay's
        stored steps) that a lane kernel may hold, its single kernel's times its lanes: a kernel
        with more is bound by its memory traffic, which lanes multiply by their number (a lane's
        arrays then leave the caches), so its members run one by one through the single kernel,
        spread over the cores.
    """

    unroll_unknowns: int = 4
    block_jacobian_unknowns: int = 48
    banded_unknowns: int = 96
    vis_banded_coordinates: int = 54
    vis_matrix_free_coordinates: int = 64
    stage_unknowns: int = 48
    vis_block_constraints: int = 24
    symmetric_unroll_unknowns: int = 16
    em_group_unknowns: int = 200
    chunk: int = 512
    batched_member_steps: int = 65536
    batched_min_chunk: int = 8
    ensemble_lane_groups: int = 2
    flow_lanes_from: int = 2
    lane_scratch_bytes: int = 32 << 20

    def batched_chunk(self, members: int) -> int:
        """Steps per call of the ``vmap``-ped XLA loop of ``members`` members: the largest power
        of two at most :attr:`batched_member_steps` / members, between :attr:`batched_min_chunk` and
        :attr:`chunk` (512 for up to 128 members, 64 for 1000)."""
        per_member = max(1, self.batched_member_steps // max(1, members))
        return int(min(self.chunk, max(self.batched_min_chunk, 2 ** int(math.log2(per_member)))))


SIZES = SizePolicy()
"""The sizes in force (:func:`size_policy`); a test that needs a large system's form on a small one
replaces it (``dataclasses.replace(SIZES, banded_unknowns=0)``)."""


def size_policy() -> SizePolicy:
    """The :class:`SizePolicy` in force (:data:`SIZES`), read when a step is traced."""
    return SIZES


@contextlib.contextmanager
def sizes_replaced(**changes: int) -> Iterator[SizePolicy]:
    """Within the ``with`` block, the :class:`SizePolicy` in force with the fields ``changes`` replaced
    (e.g. ``stage_unknowns=0``: every ggl-galerkin step takes its assembled stage tangent); the policy
    before is restored after the block, also where it raises. The policy is read when a step is
    traced: a time loop compiled before the block (cached per system) keeps the forms it was traced
    with, so use a new :class:`~livens.Problem` (a new System) to see the change."""
    global SIZES
    known = {f.name for f in dataclasses.fields(SizePolicy)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ValueError(f"SizePolicy has no field {', '.join(unknown)}; its fields are {', '.join(sorted(known))}.")
    before = SIZES
    SIZES = dataclasses.replace(before, **changes)
    try:
        yield SIZES
    finally:
        SIZES = before


def _small_product_limit(default: int) -> int:
    value = os.environ.get("LIVENS_FUSE_DOTS", "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return 0
    return int(value) if value.isdigit() and int(value) > 1 else default


def engine_options(backend: str | None = None) -> EngineOptions:
    """The options of a run: ``backend`` (else ``$LIVENS_BACKEND``, else "auto"), the thresholds'
    defaults, and the environment's choice of the small-product rewrite."""
    value = backend if backend is not None else (os.environ.get("LIVENS_BACKEND", "").strip().lower() or "auto")
    if value not in BACKENDS:
        source = "backend" if backend is not None else "LIVENS_BACKEND"
        raise ValueError(f"{source} must be one of {', '.join(BACKENDS)}; got {value!r}.")
    return EngineOptions(backend=value, small_product_limit=_small_product_limit(EngineOptions.small_product_limit))


def loop_size(unknowns: int, d: int, m: int) -> tuple[int, str]:
    """The size :attr:`EngineOptions.max_native_unknowns` bounds, and its words: a step's Newton
    unknowns, or d + m where that is larger (a scheme with few unknowns may still work on d x m
    matrices: vi-nullspace's QR of G^T)."""
    if d + m > unknowns:
        return d + m, f"{d} coordinates and {m} multipliers"
    return unknowns, f"{unknowns} Newton unknowns per step"


_BLOCKS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("livens_tangent_blocks", default=None)


def tangent_by_groups(largest_block: int) -> None:
    """Said by a solver while a step is traced: the step's Newton tangent is factorized by groups of
    coordinates, the largest dense matrix it factorizes being ``largest_block`` square
    (:mod:`livens.solvers.groups`). Heard by :func:`reported_blocks` (the engine's choice between
    native code and XLA, :attr:`EngineOptions.max_native_unknowns`); nothing elsewhere."""
    heard = _BLOCKS.get()
    if heard is not None:
        heard.append(int(largest_block))


@contextlib.contextmanager
def reported_blocks() -> Iterator[list[int]]:
    """Within the ``with`` block (one thread), the ``largest_block`` of every :func:`tangent_by_groups`
    said, in a list (empty where the traced step's tangent is not by groups)."""
    heard: list[int] = []
    token = _BLOCKS.set(heard)
    try:
        yield heard
    finally:
        _BLOCKS.reset(token)


def factorized_size(size: tuple[int, str], blocks: list[int]) -> tuple[int, str]:
    """The size :attr:`EngineOptions.max_native_unknowns` bounds for a loop of :func:`loop_size`
    ``size`` whose trace reported ``blocks`` (:func:`reported_blocks`): where its tangent is factorized
    by groups, the largest dense matrix factorized, with its words; else ``size``."""
    if not blocks:
        return size
    return max(blocks), f"its Newton tangent by groups factorizes a dense block of {max(blocks)} unknowns"


def large_program(options: EngineOptions, size: tuple[int, str], equations: int) -> bool:
    """Whether a loop of one member of :func:`loop_size` (or :func:`factorized_size`) ``size``, whose
    trace holds ``equations`` equations, runs natively under "auto" although it is above
    :attr:`EngineOptions.max_native_unknowns`: a large program of a step of at most
    :attr:`EngineOptions.large_program_unknowns` unknowns (:attr:`EngineOptions.large_program_equations`)."""
    return size[0] <= options.large_program_unknowns and equations >= options.large_program_equations
