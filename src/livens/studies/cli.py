"""``livens study convergence|stability|effort|velocity-bound ...`` and ``livens reproduce PAPER``.
Added to the main parser by :func:`add_parsers`.

Examples::

    livens study convergence heavy-top --schemes VI-S,VI-A --h 1e-4,5e-5,2.5e-5 --t-end 0.001 \\
        --quantity "q[2]" --exact 0.0375 --out runs/orders
    livens study convergence four-particle --schemes EM,EM-G --h 0.01,0.005,0.0025 --t-end 0.1 \\
        --quantity "q[9:12]" --reference EM:1e-4
    livens study stability four-particle --schemes VI-S,VI-A,VI-B,EM --h 0.05,0.25 --t-end 100
    livens study effort four-particle --schemes VI-S,VI-A,VI-B,EM --h 0.01 --t-end 10
    livens study velocity-bound double-spherical-pendulum --scheme vi-nullspace --h 0.1,0.01 --t-end 10
    livens reproduce nody-2023 --out figures/ --quick
    livens reproduce nody-2023 --out figures/ --scheduler tcp://127.0.0.1:8786
"""

from __future__ import annotations

import os
import re


def split_list(text: str) -> list[str]:
    """Split "A,B(x=1,y=2),C" at the commas outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def floats(text: str, what: str) -> list[float]:
    """A comma-separated list of numbers, or a ValueError naming the option."""
    try:
        vals = [float(x) for x in split_list(text)]
    except ValueError:
        raise ValueError(f"{what} must be a comma-separated list of numbers; got {text!r}.") from None
    if not vals:
        raise ValueError(f"{what} is empty.")
    return vals


def parse_quantity(text: str, exact=None):
    """ "q", "p", "lam", "q[2]", "q[9:12]", "p[0,1,2]" -> Quantity."""
    from .convergence import Quantity

    m = re.fullmatch(r"\s*(q|p|lam|lambda)\s*(?:\[([^\]]*)\])?\s*", text)
    if not m:
        raise ValueError(
            f"--quantity must read q, p or lam with optional components, e.g. 'q[2]' or 'p[0:3]'; got {text!r}."
        )
    field = "lam" if m.group(1) in ("lam", "lambda") else m.group(1)
    idx = None
    if m.group(2):
        sel = m.group(2)
        if ":" in sel:
            a, b = sel.split(":", 1)
            idx = tuple(range(int(a or 0), int(b)))
        else:
            idx = tuple(int(x) for x in sel.split(",") if x.strip())
    return Quantity(text.strip(), field, idx, exact=exact)


def _schemes(text: str) -> list:
    from .runs import parse_scheme

    return [parse_scheme(s) for s in split_list(text)]


def _overrides(items) -> dict:
    from ..config import parse_overrides as _parse_overrides

    return _parse_overrides(items)


def _tolerance(text: str) -> float | str:
    """--tol: a positive number or "roundoff"."""
    import argparse

    from .runs import newton_tol

    try:
        return newton_tol(text if text.strip().lower() == "roundoff" else float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive number (e.g. 1e-9) or 'roundoff'; got {text!r}"
        ) from None


def _common(p, schemes=True, guess=True):
    p.add_argument("example", help="example name (see `livens list`)")
    if schemes:
        p.add_argument(
            "--schemes",
            required=True,
            help="comma-separated schemes, with parameters as NAME(theta=0.5,...), e.g. VI-S,VI-A,EM",
        )
    p.add_argument("--t-end", dest="t_end", type=float, required=True, help="end time of every run")
    p.add_argument(
        "--tol",
        type=_tolerance,
        default=None,
        help="Newton tolerance (by the papers' rule ||R||_inf <= tol), or 'roundoff': iterate until the "
        "Newton increment stops decreasing",
    )
    p.add_argument("--max-iter", dest="max_iter", type=int, default=40, help="Newton iterations per step")
    if guess:  # effort compares guesses (--guesses)
        p.add_argument(
            "--guess",
            default="simple",
            choices=("simple", "advanced", "extrapolated"),
            help="Newton's first guess (default: the papers' 'simple', the unknowns of step n)",
        )
    p.add_argument(
        "--rescue",
        action="store_true",
        help="retry a failed Newton step with damped least-squares Newton (livens' rescue; "
        "default off, as in the papers); rescued steps are counted in the results",
    )
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="override an example parameter")
    p.add_argument("--out", help="directory for the CSV table and the figure")
    p.add_argument("--scheduler", help="address of an existing Dask scheduler, e.g. tcp://127.0.0.1:8786")
    p.add_argument("--processes", type=int, default=None, help="local worker processes (default: this process)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _run(study, args):
    from . import run_study

    return run_study(study, scheduler=args.scheduler, processes=args.processes, progress=False if args.quiet else None)


def _cmd_convergence(args) -> int:
    from .convergence import ConvergenceStudy

    exact = None
    if args.exact:
        exact = tuple(floats(args.exact, "--exact"))
        exact = exact[0] if len(exact) == 1 else exact
    qty = parse_quantity(args.quantity, exact)
    ref = None
    if exact is None:
        if not args.reference:
            raise ValueError("Give --reference SCHEME:H (a run with a much smaller step) or --exact VALUE.")
        if ":" not in args.reference:
            raise ValueError(f"--reference must read SCHEME:H, e.g. EM:1e-5; got {args.reference!r}.")
        name, h = args.reference.rsplit(":", 1)
        from .runs import parse_scheme

        sname, sparams = parse_scheme(name)
        ref = {"scheme": sname, "h": float(h), "params": sparams}
    study = ConvergenceStudy.make(
        args.example,
        _schemes(args.schemes),
        floats(args.h, "--h"),
        args.t_end,
        [qty],
        reference=ref,
        tol=args.tol or 1e-12,
        max_iter=args.max_iter,
        example_params=_overrides(args.set),
        guess=args.guess,
        rescue=args.rescue,
    )
    res = _run(study, args)
    print(res.table())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        files = [res.to_csv(os.path.join(args.out, "errors.csv")), res.orders_csv(os.path.join(args.out, "orders.csv"))]
        files += res.figure(os.path.join(args.out, "convergence"), qty.name)
        print("written: " + ", ".join(files))
    return 0


def _cmd_stability(args) -> int:
    from .stability import StabilityStudy

    hs = floats(args.h, "--h")
    study = StabilityStudy.make(
        args.example,
        _schemes(args.schemes),
        hs,
        args.t_end,
        blowup_factor=args.blowup_factor,
        tol=args.tol or 1e-9,
        max_iter=args.max_iter,
        example_params=_overrides(args.set),
        guess=args.guess,
        rescue=args.rescue,
    )
    res = _run(study, args)
    print(res.table())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        files = [res.to_csv(os.path.join(args.out, "stability.csv"))]
        for h in hs:  # the figure's CSV holds the plotted energies (series, t, E)
            files += res.figure(os.path.join(args.out, f"stability_h{h:g}"), h)
        print("written: " + ", ".join(files))
    return 0


def _cmd_effort(args) -> int:
    from .effort import EffortStudy

    hs = floats(args.h, "--h")
    if len(hs) != 1:
        raise ValueError(f"livens study effort takes one step size --h; got {args.h!r}.")
    study = EffortStudy.make(
        args.example,
        _schemes(args.schemes),
        hs[0],
        args.t_end,
        guesses=tuple(split_list(args.guesses)),
        repeat=args.repeat,
        normalize_to=args.normalize_to,
        tol=args.tol or 1e-9,
        max_iter=args.max_iter,
        example_params=_overrides(args.set),
        rescue=args.rescue,
    )
    res = _run(study, args)
    print(res.table())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        print("written: " + res.to_csv(os.path.join(args.out, "effort.csv")))
    return 0


def _cmd_velocity_bound(args) -> int:
    from .runs import parse_scheme
    from .velocity_bound import VelocityBoundStudy

    name, params = parse_scheme(args.scheme)
    study = VelocityBoundStudy.make(
        args.example,
        name,
        floats(args.h, "--h"),
        args.t_end,
        scheme_params=params,
        tol=args.tol or 1e-12,
        max_iter=args.max_iter,
        example_params=_overrides(args.set),
        guess=args.guess,
        rescue=args.rescue,
    )
    res = _run(study, args)
    print(res.table())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        print("written: " + res.to_csv(os.path.join(args.out, "velocity_bound.csv")))
    return 0


def _cmd_reproduce(args) -> int:
    from .reproduce import reproduce, reproduce_all

    kw = dict(
        quick=args.quick, scheduler=args.scheduler, processes=args.processes, progress=False if args.quiet else None
    )
    if args.paper == "all":
        if args.section:
            print(
                "livens reproduce: --section selects sections of one paper; give the paper, not 'all'.",
                file=__import__("sys").stderr,
            )
            return 2
        reps, index = reproduce_all(args.out, **kw)
    else:
        reps, index = [reproduce(args.paper, args.out, sections=args.section, **kw)], None
    errors = []
    for rep in reps:
        counts = rep.summary()
        print(
            f"{rep.paper.key} ({rep.paper.cite}): "
            + ", ".join(f"{v} {k}" for k, v in counts.items())
            + f"; {len(rep.files)} files in {os.path.dirname(rep.report)}; {rep.wall_time:.1f} s"
        )
        print(f"report: {rep.report}")
        errors += [(rep.paper.key, c) for c in rep.errors]
    if index:
        print(f"index: {index}")
    if errors:
        import sys

        for key, c in errors:
            print(f"error: {key} {c.where}: {c.text}: {c.reason}", file=sys.stderr)
        print(f"{len(errors)} claim(s) could not be evaluated (verdict 'error'); see the report.", file=sys.stderr)
        return 1
    return 0


def add_parsers(sub) -> None:
    """Add ``study`` (convergence, stability, effort, velocity-bound) and ``reproduce`` to the
    ``livens`` command (called by :func:`livens.cli.build_parser`)."""
    st = sub.add_parser("study", help="convergence, stability, effort or velocity-bound study of an example")
    ss = st.add_subparsers(dest="study", required=True)

    p = ss.add_parser("convergence", help="errors over step sizes and fitted orders (KBS23b Figs 18-19, 28-30)")
    _common(p)
    p.add_argument("--h", required=True, help="comma-separated step sizes")
    p.add_argument("--quantity", default="q", help="q, p or lam, optionally with components: 'q[2]', 'p[9:12]'")
    p.add_argument("--reference", help="reference run SCHEME:H, e.g. EM:1e-5")
    p.add_argument("--exact", help="analytic value(s) of the quantity instead of a reference run")
    p.set_defaults(func=_cmd_convergence)

    p = ss.add_parser("stability", help="long runs, energy blow-up and its time (KBS23b Figs 31-33)")
    _common(p)
    p.add_argument("--h", required=True, help="comma-separated step sizes")
    p.add_argument(
        "--blowup-factor",
        dest="blowup_factor",
        type=float,
        default=1.0,
        help="blow-up when |E - E0| > factor * max(|E0|, 1) (default 1)",
    )
    p.set_defaults(func=_cmd_stability)

    p = ss.add_parser("effort", help="mean Newton iterations and normalized time (KBS23b Table 2)")
    _common(p, guess=False)
    p.add_argument("--h", required=True, help="the step size")
    p.add_argument("--guesses", default="simple,advanced", help="initial guesses to compare")
    p.add_argument("--repeat", type=int, default=3, help="timed runs after the compiling one (fastest counts)")
    p.add_argument("--normalize-to", dest="normalize_to", default="VI-S", help="scheme whose time is 1")
    p.set_defaults(func=_cmd_effort)

    p = ss.add_parser("velocity-bound", help="max ||(q_{i+1} - q_i)/h|| per step size (SLO09 Tables 1, 2)")
    _common(p, schemes=False)
    p.add_argument("--scheme", required=True, help="the scheme")
    p.add_argument("--h", required=True, help="comma-separated step sizes")
    p.set_defaults(func=_cmd_velocity_bound)

    p = sub.add_parser("reproduce", help="every figure and table of a paper, with report.md")
    p.add_argument(
        "paper",
        help="mubo-2023 (KBS23a), nody-2023 (KBS23b), livens-2023 (KB23), jns-2009 (SLO09), "
        "or all (each into OUT/<paper>/, with an index OUT/report.md)",
    )
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--quick", action="store_true", help="cheap variant: shorter runs, fewer step sizes")
    p.add_argument("--scheduler", help="address of an existing Dask scheduler, e.g. tcp://127.0.0.1:8786")
    p.add_argument("--processes", type=int, default=None, help="local worker processes (default: this process)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--section",
        action="append",
        default=None,
        metavar="KEY",
        help="only this section of the paper (e.g. 4.1; repeatable); an unknown key lists the sections",
    )
    p.set_defaults(func=_cmd_reproduce)
