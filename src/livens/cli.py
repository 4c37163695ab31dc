"""Command line: ``livens list``, ``livens run``, and the study/reproduce commands.

``livens run`` streams the run to ``DIR/<example>_<scheme>.nc`` while it goes (``--out DIR``),
keeping one node in every ``--save-every`` K, so that memory stays bounded; the CSV and the figure
are made from the kept nodes at the end. A run that fails exits 3 with a one-line message (never a
bare traceback from inside JAX), Ctrl-C exits 130 at once; both name the file that holds the steps
computed so far (``..._partial.nc``), and Ctrl-C prints the command that continues the run from it
(``--resume FILE``). Python warnings are printed as one line each (``warning: ...``).
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import warnings

from .config import parse_overrides
from .engine import serial_blas


def _cmd_list(args) -> int:
    from . import examples, schemes

    print("Examples:")
    for name in examples.names():
        params = examples.parameters(name)
        print(f"  {name:28s} " + ", ".join(f"{k}={v!r}" for k, v in params.items()))
    print("\nSchemes:")
    al = schemes.aliases()
    for name in schemes.names():
        sch, _ = schemes.get(name)
        aka = sorted(a.upper() for a, (c, _) in al.items() if c == name and a.upper() != name.upper())
        aka_s = f" (alias {', '.join(dict.fromkeys(aka))})" if aka else ""
        ps = ", ".join(f"{p.name}={p.default:g}" for p in sch.params)
        print(f"  {name:20s}{aka_s:22s} {sch.about.paper}" + (f"  [{ps}]" if ps else ""))
        if sch.about.keeps:
            print(f"  {'':20s}{'':22s} keeps: {sch.about.keeps}")
        print(f"  {'':20s}{'':22s} mass matrix: {_mass_matrices(sch.capabilities)}")
    return 0


def _mass_matrices(caps) -> str:
    """The mass matrices a scheme accepts, in words (``livens list``)."""
    if caps.mass_inverse:
        return "constant and regular (it uses M^-1)"
    if caps.configuration_mass and not caps.singular_mass:
        return "regular: constant or configuration-dependent M(q) (linear solves with M(q))"
    kinds = (
        ["constant"]
        + (["singular"] if caps.singular_mass else [])
        + (["configuration-dependent M(q)"] if caps.configuration_mass else [])
    )
    return ", ".join(kinds) + " (no M^-1)"


KEEP_BUDGET = 256 * 2**20
"""Bytes of kept records (t, q, p, v, lambda, gamma, Newton data per node) above which ``livens run``
without --save-every keeps one node in every k, so that memory stays bounded whatever the number of
steps."""
CSV_ROWS = 2000
"""Rows of the default (``--csv summary``) CSV: evenly spaced kept nodes, enough for a smooth curve."""
PLOT_POINTS = 2000
"""Points per curve in the overview figure (envelopes of longer series, see livens.plots.overview)."""
ANIMATION_FRAMES = 200
"""Frames of the GIF of ``livens run --animate`` at most (nodes evenly spread over the run)."""


def _row_bytes(d: int, m: int) -> int:
    """Bytes the time loop keeps per node: t, q, p, v, lambda, gamma, Newton iterations and residual."""
    return 8 * (3 * d + 2 * m + 4)


def _choose_save_every(n_steps: int, d: int, m: int, given: int | None) -> tuple[int, str | None]:
    """``--save-every`` as given, or the smallest k that keeps the run within KEEP_BUDGET; with a note
    for the user where a k was chosen, or where the nodes asked for need much memory."""
    row = _row_bytes(d, m)
    if given is not None:
        need = (n_steps // given + 1) * row
        mem = _physical_memory()
        if mem and need > 0.25 * mem:
            return given, (
                f"warning: keeping {n_steps // given + 1:,} nodes needs about {_size(3 * need)} of memory "
                f"(and {_size(need)} of disk with --out) on a machine with {_size(mem)}; a larger "
                "--save-every keeps fewer."
            )
        return given, None
    if (n_steps + 1) * row <= KEEP_BUDGET:
        return 1, None
    k = _nice(-(-(n_steps + 1) * row // KEEP_BUDGET))
    nodes = n_steps // k + 1
    return k, (
        f"note: {n_steps:,} steps: keeping one node in every {k} ({nodes:,} nodes, {_size(nodes * row)}) "
        "so that memory stays bounded; give --save-every 1 to keep every node."
    )


def _nice(k: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... at least k."""
    scale = 1
    while True:
        for f in (1, 2, 5):
            if f * scale >= k:
                return f * scale
        scale *= 10


CHUNK_SECONDS = 0.25
"""About how long one compiled chunk of steps of ``livens run`` should take: Ctrl-C is answered
between chunks."""
_STEP_SECONDS_PER_UNKNOWN3 = 5e-11
"""Seconds per step per cubed number of unknowns (3d + 2m) that ``livens run`` assumes when it chooses a
chunk's length (a dense Newton step grows like the cube), of the order of VI-S's step on the double
four-bar; a rough guide only."""


def _chunk_for(d: int, m: int) -> int:
    """Steps per compiled chunk: the time loop's default (512) for small systems; for large ones the
    power of two (at least 4) that keeps a chunk near CHUNK_SECONDS, so that Ctrl-C is answered
    within about a second rather than after hundreds of slow steps."""
    from .driver import DEFAULT_CHUNK

    step = _STEP_SECONDS_PER_UNKNOWN3 * float(3 * d + 2 * m) ** 3
    n = CHUNK_SECONDS / step
    if n >= DEFAULT_CHUNK:
        return DEFAULT_CHUNK
    return max(4, 2 ** int(math.floor(math.log2(max(n, 1.0)))))


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return None


def _size(nbytes: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if nbytes < 1000 or unit == "TB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return ""  # pragma: no cover


PROGRESS_AFTER = 1.0
"""Seconds after which ``livens run --out`` says which file it is writing (a figure, an animation, a
large table), so that a pause at the end of a run is explained."""


class _Saying:
    """``with _Saying(path, quiet):`` prints "writing PATH ..." to stderr where the block takes
    longer than :data:`PROGRESS_AFTER` (a timer thread that only prints), and "  done (T s)" after it."""

    def __init__(self, path: str, quiet: bool, what: str = ""):
        import threading

        self.text, self.quiet, self.said = f"writing {path}{what} ...", quiet, threading.Event()
        self.timer = None

    def _say(self):
        print(self.text, file=sys.stderr, flush=True)
        self.said.set()

    def __enter__(self):
        import threading
        import time

        self.began = time.perf_counter()
        if not self.quiet:
            self.timer = threading.Timer(PROGRESS_AFTER, self._say)
            self.timer.daemon = True
            self.timer.start()
        return self

    def __exit__(self, *exc):
        import time

        if self.timer is not None:
            self.timer.cancel()
            self.timer.join()
        if self.said.is_set() and exc[0] is None:
            print(f"  done ({time.perf_counter() - self.began:.1f} s)", file=sys.stderr, flush=True)
        return False


def _write_outputs(
    sol, out: str, stem: str, csv: str = "summary", animate: bool = False, netcdf: bool = True, quiet: bool = True
) -> list[str]:
    """The run's files in ``out``: ``stem.nc`` (unless already streamed there), ``stem.csv`` (``csv``:
    "summary", "full" or "none") and the overview figure ``stem.png``, all made from the kept nodes;
    unless ``quiet``, a line names each file whose writing takes more than :data:`PROGRESS_AFTER`."""
    from .plots import overview_figure

    os.makedirs(out, exist_ok=True)
    files = []
    path = os.path.join(out, f"{stem}.nc")
    if netcdf:
        with _Saying(path, quiet):
            files.append(sol.to_netcdf(path))
    else:
        files.append(path)
    if csv != "none":
        rows, columns = (CSV_ROWS, "summary") if csv == "summary" else (None, "all")
        path = os.path.join(out, f"{stem}.csv")
        with _Saying(path, quiet):
            files.append(sol.to_csv(path, rows=rows, columns=columns))
    path = os.path.join(out, f"{stem}.png")
    with _Saying(path, quiet, " (overview figure)"):
        files.append(overview_figure(sol, path, max_points=PLOT_POINTS))
    if animate:
        from .bodies.draw import animate as animate_run

        path = os.path.join(out, f"{stem}.gif")
        with _Saying(path, quiet, f" (animation, up to {ANIMATION_FRAMES} frames)"):
            files.append(animate_run(sol, path, max_frames=ANIMATION_FRAMES))
    return files


def _scheme_words(sol) -> str:
    """The scheme and its parameters, e.g. "ggl-theta-b (theta=0.5, vartheta=0.25)" or "ggl-em"."""
    params = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in (sol.params or {}).items())
    return f"{sol.scheme} ({params})" if params else sol.scheme


def _print_summary(sol) -> None:
    summary = sol.summary()
    width = max(len(k) for k in summary)
    kept = f", one node in every {sol.save_every} kept" if sol.save_every > 1 else ""
    backend = sol.meta.get("backend")
    how = f", backend {backend}" if backend else ""
    if sol.meta.get("native_fallback"):
        how += f" ({sol.meta['native_fallback']})"
    resumed = sol.meta.get("resumed")
    if resumed:
        how += f", resumed at t = {resumed['t']:g} from {resumed['file']}"
    print(f"{_scheme_words(sol)} on {sol.meta.get('example')}, h = {sol.h:g}{kept}{how}")
    for k, v in summary.items():
        if k == "steps/s" and v != v:
            v = "n/a: every step ran in the first chunk, which is timed with the compilation"
        print(f"  {k:{width}s}  {v:.6g}" if isinstance(v, float) else f"  {k:{width}s}  {v}")


def _kept_words(sol, save_every: int, files: str) -> str:
    """Where the steps of a stopped run are, in a sentence."""
    n = sol.n_steps if sol is not None else 0
    if n == 0:
        return f"The initial state is in {files}."
    if save_every > 1:
        return f"One node in every {save_every} ({n + 1} nodes) is in {files}."
    return f"Every computed step ({n}) is in {files}." if n > 1 else f"The one computed step is in {files}."


def _partial(out: str, stem: str, streamed: str) -> str:
    """Rename the streamed file of a stopped run to ``stem_partial.nc``; its path."""
    target = os.path.join(out, f"{stem}_partial.nc")
    if os.path.exists(streamed):
        os.replace(streamed, target)
    return target


def _exit_on_ctrl_c_before_the_first_step(streamed):
    """While ``simulate`` has computed nothing (:class:`livens.driver.host.NothingComputed`: set-up
    and the first chunk, which includes XLA's compilation, seconds to minutes for a large system),
    answer Ctrl-C at once: exit 130 with one line, removing the streamed file that holds only the
    initial state. Python runs signal handlers only between bytecodes, so the handler alone would
    wait for the compiler; the C-level handler writes to a wakeup file descriptor at once, and a
    thread watching it acts. After the first results the usual flag between chunks takes over.
    Returns a function that undoes the set-up."""
    import signal
    import threading

    from .driver.host import NothingComputed as _NothingComputed

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):  # pragma: no cover - no signals here
        os.close(r)
        os.close(w)
        return lambda: None
    done = threading.Event()

    def watch():
        while not done.is_set():
            try:
                got = os.read(r, 64)
            except OSError:
                return
            if not got:  # the write end closed: the run is over
                os.close(r)
                return
            if signal.SIGINT not in got:
                continue
            with _NothingComputed.lock:  # held: no result is written while we decide
                if _NothingComputed.flag and not done.is_set():
                    if streamed and os.path.exists(streamed):
                        os.remove(streamed)
                    sys.stderr.write(
                        "Interrupted before the first step was computed (set-up or compilation); nothing was saved.\n"
                    )
                    sys.stderr.flush()
                    os._exit(130)

    threading.Thread(target=watch, daemon=True, name="livens-ctrl-c").start()

    def undo():
        done.set()
        signal.set_wakeup_fd(previous)
        os.close(w)  # the watcher's read returns

    return undo


def _run_settings(args):
    """The example's name, the Problem and simulate's keywords of ``livens run`` (before --save-every
    and --resume are applied)."""
    from . import examples

    overrides = parse_overrides(args.set)
    if args.config:
        from .config import load_run_config

        cfg = load_run_config(args.config)
        problem, run_kw = cfg.problem(), cfg.run_kwargs()
        example = cfg.example or cfg.system
        if "save_every" not in cfg.given:
            run_kw.pop("save_every", None)
    else:
        if not args.example:
            raise ValueError("Name an example (see `livens list`) or give --config run.toml.")
        example = args.example
        problem = examples.load(args.example, **overrides)
        run_kw = {}
    for key in (
        "scheme",
        "h",
        "t_end",
        "tol",
        "max_iter",
        "guess",
        "theta",
        "vartheta",
        "blowup_factor",
        "rescue",
        "save_every",
        "final_iteration",
    ):
        val = getattr(args, key, None)
        if val is not None:
            run_kw[key] = val
    if args.animate and not args.out:
        raise ValueError("--animate needs --out DIR.")
    if "scheme" not in run_kw:
        run_kw["scheme"], note = _default_scheme(problem)
        if note:
            print(note, file=sys.stderr)
    run_kw["progress"] = False if args.quiet else None
    return example, problem, run_kw


def _cmd_run(args) -> int:
    from .errors import SimulationError, SimulationInterrupted
    from .mechanics import mechanics
    from .simulate import simulate

    example, problem, run_kw = _run_settings(args)
    before = _resume_from(args.resume, example, problem, run_kw) if args.resume else None
    h = run_kw.get("h", problem.h)
    t_end = run_kw.get("t_end", problem.t_end)
    if h is not None and t_end is not None and h > 0 and t_end > 0:
        mech = mechanics(problem.system, problem.q0)
        given = run_kw.get("save_every")
        if given is not None and (isinstance(given, bool) or not isinstance(given, int) or given < 1):
            raise ValueError(f"--save-every must be a positive integer; got {given!r}.")
        if before is None:
            run_kw["save_every"], note = _choose_save_every(max(1, round(t_end / h)), mech.d, mech.m, given)
            if note:
                print(note, file=sys.stderr)
        run_kw["chunk"] = _chunk_for(mech.d, mech.m)
    stem = f"{example}_{run_kw['scheme']}".replace("/", "_").replace(":", "_")
    streamed = None
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        streamed = os.path.join(args.out, f"{stem}.nc")
        if before is not None and os.path.exists(streamed) and os.path.samefile(args.resume, streamed):
            raise ValueError(
                f"--resume {args.resume}: this run writes that file while it goes; give --resume a copy of it "
                f"(e.g. {os.path.join(args.out, stem + '_partial.nc')})."
            )
        for ext in ("nc", "csv", "png", "gif"):  # results of an earlier stopped run of the same name
            stale = os.path.join(args.out, f"{stem}_partial.{ext}")
            if os.path.exists(stale) and not (before is not None and os.path.samefile(stale, args.resume)):
                os.remove(stale)
        run_kw["out"] = streamed
    undo = _exit_on_ctrl_c_before_the_first_step(streamed)
    try:
        sol = simulate(problem, resume=before, **run_kw)
    except SimulationInterrupted as exc:
        print(_interrupted_words(args, exc, before, run_kw, stem, streamed), file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        # Ctrl-C outside the time loop (set-up, or the final rewrite of the streamed file)
        if before is not None:
            if streamed and os.path.exists(streamed):
                os.remove(streamed)
            print(f"Interrupted; {args.resume} still holds the run up to t = {before.t[-1]:g}.", file=sys.stderr)
        elif streamed and os.path.exists(streamed):
            print(f"Interrupted; the steps computed are in {_partial(args.out, stem, streamed)}.", file=sys.stderr)
        else:
            print("Interrupted; nothing was saved.", file=sys.stderr)
        return 130
    except SimulationError as exc:
        sol = exc.solution
        if sol is not None and before is not None:
            sol = _join(before, sol, args.resume)
        if streamed and sol is not None:
            files = _write_outputs(sol, args.out, stem + "_partial", csv=args.csv, quiet=args.quiet)
            if os.path.exists(streamed):
                os.remove(streamed)
            kept = _kept_words(sol, run_kw.get("save_every", 1), ", ".join(files))
        else:
            kept = "Nothing was saved (no --out)."
        print(f"error: {exc.reason} {kept}", file=sys.stderr)
        return 3
    finally:
        undo()
    if before is not None:
        sol = _join(before, sol, args.resume)
    _print_summary(sol)
    if args.out:
        files = _write_outputs(
            sol, args.out, stem, csv=args.csv, animate=args.animate, netcdf=before is not None, quiet=args.quiet
        )
        consumed = os.path.join(args.out, f"{stem}_partial.nc")
        if before is not None and os.path.exists(consumed) and os.path.samefile(args.resume, consumed):
            os.remove(consumed)  # the complete file holds its nodes
        print("written: " + ", ".join(files))
    else:
        print("Nothing was saved: give --out DIR to write the run as netCDF, CSV and a PNG figure.")
    return 0


def _interrupted_words(args, exc, before, run_kw: dict, stem: str, streamed) -> str:
    """The line of a run stopped by Ctrl-C: how far it got, the file that holds its kept nodes, and
    the command that continues it from that file."""
    if not streamed:
        return f"{exc.reason} Nothing was saved (no --out: with --out DIR a stopped run can be continued)."
    target = os.path.join(args.out, f"{stem}_partial.nc")
    if before is not None:  # the file holds the whole run: the resumed file's nodes and the new ones
        sol = _join(before, exc.solution, args.resume)
        sol.to_netcdf(target)
        if os.path.exists(streamed):
            os.remove(streamed)
    else:
        sol = exc.solution
        _partial(args.out, stem, streamed)
    kept = _kept_words(sol, run_kw.get("save_every", 1), f"{target} (lv.load reads it)")
    if sol is not None and sol.t[-1] >= float(sol.meta.get("t_end", math.inf)) - 0.5 * sol.h:
        return f"{exc.reason} {kept} The run had reached its end (t = {sol.t[-1]:g}): nothing is left to continue."
    return f"{exc.reason} {kept} {_how_to_continue(args, run_kw['scheme'], target)}"


def _how_to_continue(args, scheme: str, target: str) -> str:
    """The sentence that gives the command continuing a stopped run from ``target``: the command of
    the run with ``--resume target``."""
    from . import schemes

    sch, _ = schemes.get(scheme)
    if sch.start is not None:
        return f"({sch.name} carries extra state between steps, so the run cannot be continued from the file.)"
    argv, skip = [], False
    for a in args.argv:
        if skip or a == "--resume" or a.startswith("--resume="):
            skip = a == "--resume"
            continue
        argv.append(a)
    return "Continue it with: " + shlex.join(["livens", *argv, "--resume", target])


def _resume_from(path: str, example: str, problem, run_kw: dict):
    """The Solution in ``path`` that ``--resume`` continues, checked against the run asked for (the
    example, its parameters, the scheme, h, t_end); --save-every is the file's unless given."""
    import json

    from . import schemes
    from .loading import load
    from .result_files import jsonable
    from .solution import Solution

    before = load(path, problem=problem)
    if not isinstance(before, Solution):
        raise ValueError(f"--resume {path}: the file holds an ensemble; --resume continues a single run.")

    def same(a, b):
        return json.dumps(jsonable(a), sort_keys=True) == json.dumps(jsonable(b), sort_keys=True)

    theirs = (before.meta.get("example"), before.meta.get("problem_parameters", {}))
    ours = (problem.name, dict(problem.parameters))
    if not (theirs[0] == ours[0] and same(theirs[1], ours[1])):
        raise ValueError(
            f"--resume {path}: the file holds a run of {theirs[0]} with parameters {theirs[1]}, but this command "
            f"runs {ours[0]} with parameters {ours[1]}; give the example and the --set options of the stopped run."
        )
    sch, _ = schemes.get(run_kw["scheme"])
    if sch.name != before.scheme:
        raise ValueError(f"--resume {path}: the file holds a {before.scheme} run; give --scheme {before.scheme}.")
    if sch.start is not None:
        raise ValueError(
            f"--resume {path}: {sch.name} carries extra state between steps, so its runs cannot be continued "
            "from a file; rerun it without --resume."
        )
    h = run_kw.get("h", problem.h)
    if h is None or abs(before.h - h) > 1e-14 * max(1.0, abs(h)):
        raise ValueError(f"--resume {path}: the file's run has h = {before.h!r}; give --h {before.h!r}.")
    run_kw["h"] = before.h
    t_end = run_kw.get("t_end", problem.t_end)
    if t_end is None or t_end < before.t[-1] + 0.5 * before.h:
        raise ValueError(
            f"--resume {path}: the file already reaches t = {before.t[-1]:g}; give a --t-end beyond it (got {t_end!r})."
        )
    given = run_kw.get("save_every")
    if given is not None and given != before.save_every:
        raise ValueError(
            f"--resume {path}: the file keeps one node in every {before.save_every}; give --save-every "
            f"{before.save_every} or leave it out."
        )
    run_kw["save_every"] = before.save_every
    return before


def _join(before, after, path: str):
    """One Solution of a run continued from a file: the nodes and steps of ``before`` (the file's)
    followed by those of ``after`` (the continuation, which starts at ``before``'s last node);
    ``meta["resumed"]`` records the file, the time and the steps it held."""
    import numpy as np

    from .solution import Solution

    def cat(a, b, nodes: bool):
        return None if a is None else np.concatenate([a, b[1:] if nodes else b])

    span = int(round((before.t[-1] - before.t[0]) / before.h))
    meta = dict(after.meta)
    meta.update(
        t_start=before.meta.get("t_start", float(before.t[0])),
        step_offset=before.meta.get("step_offset", 0),
        steps=span + int(after.meta.get("steps", after.n_steps * after.save_every)),
        rescued_steps=[*before.meta.get("rescued_steps", []), *after.meta.get("rescued_steps", [])],
        resumed={"file": os.fspath(path), "t": float(before.t[-1]), "steps": span},
    )
    return Solution(
        t=cat(before.t, after.t, True),
        q=cat(before.q, after.q, True),
        p=cat(before.p, after.p, True),
        v=cat(before.v, after.v, after.velocity_kind == "nodal"),
        lam=cat(before.lam, after.lam, False),
        gam=cat(before.gam, after.gam, False),
        newton_iterations=cat(before.newton_iterations, after.newton_iterations, False),
        newton_residual=cat(before.newton_residual, after.newton_residual, False),
        velocity_kind=after.velocity_kind,
        scheme=after.scheme,
        params=after.params,
        meta=meta,
        problem=after.problem,
    )


#: the schemes ``livens run`` tries, in this order, when no --scheme is given: the first that accepts the
#: system (its mass matrix, dampers, external force) runs it
DEFAULT_SCHEMES = ("VI-S", "vi-lagrange", "livens-em")


def _default_scheme(problem) -> tuple[str, str | None]:
    """The scheme ``livens run`` uses without --scheme: VI-S where it accepts the system, else the first
    of :data:`DEFAULT_SCHEMES` (then of every scheme) that does, with a note saying why; VI-S (whose
    refusal names the schemes that accept the system) where none does."""
    from . import schemes
    from .driver.setup import check_capabilities
    from .mechanics import mechanics

    mech = mechanics(problem.system, problem.q0)
    why = None
    for name in DEFAULT_SCHEMES + tuple(n for n in schemes.names() if n not in DEFAULT_SCHEMES):
        try:
            sch, _ = schemes.get(name)
            check_capabilities(sch, problem, mech)
        except ValueError as exc:
            why = why or str(exc)
            continue
        if name == DEFAULT_SCHEMES[0]:
            return name, None
        return name, (
            f"note: the default scheme VI-S cannot run this system ({why.split('. ')[0]}); running {name} "
            "instead. Give --scheme to choose (`livens list` names the schemes)."
        )
    return DEFAULT_SCHEMES[0], None


def _tolerance(text: str):
    """--tol: a positive number or "roundoff"."""
    if text.strip().lower() == "roundoff":
        return "roundoff"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number (e.g. 1e-9) or 'roundoff'; got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="livens",
        description="Simulate constrained mechanical systems with structure-preserving integrators: "
        "`livens list` names the examples and schemes, `livens run` runs one, `livens study` and "
        "`livens reproduce` run studies and the papers' figures.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="list examples and schemes")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("run", help="simulate one example with one scheme")
    p.add_argument("example", nargs="?", help="example name (see `livens list`)")
    p.add_argument(
        "--scheme",
        help="scheme name or alias (default: VI-S, or, where VI-S cannot run the system, the first of "
        "vi-lagrange, livens-em that can, with a note)",
    )
    p.add_argument("--h", type=float, help="step size (default: the paper's)")
    p.add_argument("--t-end", dest="t_end", type=float, help="end time (default: the paper's)")
    p.add_argument(
        "--tol",
        type=_tolerance,
        help="Newton tolerance (default 1e-9), or 'roundoff': iterate until the "
        "increment stops decreasing (long runs at the round-off limit)",
    )
    p.add_argument(
        "--final-iteration",
        dest="final_iteration",
        action="store_const",
        const=True,
        help="one more Newton iteration after ||R|| <= tol (removes most of the stopping bias)",
    )
    p.add_argument("--max-iter", dest="max_iter", type=int, help="Newton iterations per step (default 40)")
    p.add_argument(
        "--guess",
        choices=["simple", "advanced", "extrapolated"],
        help="Newton initial guess: simple/advanced (KBS23b Table 2) or extrapolated (livens); default: the scheme's",
    )
    p.add_argument("--theta", type=float, help="θ of ggl-theta-a / ggl-theta-b")
    p.add_argument("--vartheta", type=float, help="ϑ of ggl-theta-b")
    p.add_argument("--blowup-factor", dest="blowup_factor", type=float, help="stop when |E-E0| > factor*max(|E0|,1)")
    p.add_argument(
        "--no-rescue",
        dest="rescue",
        action="store_const",
        const=False,
        help="stop at the first failed Newton step instead of retrying it with damped Newton",
    )
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="override an example parameter")
    p.add_argument(
        "--save-every",
        dest="save_every",
        type=int,
        metavar="K",
        help="keep one node in every K (and the step ending there), in memory and on disk; "
        "default 1, or the smallest K that keeps a very long run within "
        f"{KEEP_BUDGET // 2**20} MiB of kept data (a note says so)",
    )
    p.add_argument("--config", help="a run.toml file (format: docs/guide/cli.md, section 'Configuration files')")
    p.add_argument(
        "--resume",
        metavar="FILE",
        help="continue the run stopped in FILE (the _partial.nc a Ctrl-C left; its message gives the "
        "command) from its last kept node up to --t-end, writing the files of one uninterrupted run; "
        "give the stopped run's example and options",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write DIR/<example>_<scheme>.nc (netCDF, streamed while the run goes: loadable at any "
        "moment, complete with diagnostics at the end), .csv (see --csv) and .png (overview "
        "figure); a run that stops early leaves <...>_partial.nc (and .csv, .png). "
        "Without --out nothing is saved",
    )
    p.add_argument(
        "--csv",
        choices=["summary", "full", "none"],
        default="summary",
        help=f"the CSV: 'summary' (default): at most {CSV_ROWS} evenly spaced kept nodes with t, q, "
        "energies, momentum maps, the largest constraint residuals and Newton iterations; "
        "'full': every kept node and every column (p, v, each residual, lambda, gamma); "
        "'none': no CSV (the .nc file has everything)",
    )
    p.add_argument("--animate", action="store_true", help="also write an animated GIF (mechanisms)")
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (otherwise shown on a terminal once a run has taken 2 s) and no line naming "
        f"a file that takes more than {PROGRESS_AFTER:g} s to write",
    )
    p.set_defaults(func=_cmd_run)
    try:
        from .studies.cli import add_parsers
    except ImportError:
        pass
    else:
        add_parsers(sub)
    return parser


def _show_warning(seen: set):
    """``warnings.showwarning`` of the command line: one line "warning: ..." (or "note: ..." for
    livens' notices), without the file and line that raised it, each text once."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = " ".join(str(message).split())
        text = text.removeprefix("livens: ")
        if text in seen:
            return
        seen.add(text)
        kind = "note" if category.__name__.endswith("Notice") else "warning"
        print(f"{kind}: {text}", file=sys.stderr if file is None else file)

    return show


def main(argv=None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the command as given (the Ctrl-C message repeats it with --resume)
    try:
        with serial_blas(), warnings.catch_warnings():  # the runs, their diagnostics and studies
            warnings.showwarning = _show_warning(set())
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
