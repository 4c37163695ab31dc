"""Command line: ``livens list``, ``livens run``, and the study/reproduce commands (DESIGN: CLI).

A failed run exits non-zero with the message (never a bare traceback from inside JAX), after
writing the steps computed so far.
"""
from __future__ import annotations

import argparse
import os
import sys


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
        print(f"  {name:20s}{aka_s:22s} {sch.paper}" + (f"  [{ps}]" if ps else ""))
        if sch.keeps:
            print(f"  {'':20s}{'':22s} keeps: {sch.keeps}")
    return 0


def _parse_overrides(items):
    import ast

    out = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set expects NAME=VALUE; got {item!r}.")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k.strip()] = v
    return out


def _write_outputs(sol, out: str, stem: str, animate: bool = False) -> list[str]:
    from .plots import overview_figure

    os.makedirs(out, exist_ok=True)
    files = [sol.to_netcdf(os.path.join(out, f"{stem}.nc")), sol.to_csv(os.path.join(out, f"{stem}.csv"))]
    files.append(overview_figure(sol, os.path.join(out, f"{stem}.png")))
    if animate:
        from .bodies.draw import animate as animate_run

        files.append(animate_run(sol, os.path.join(out, f"{stem}.gif")))
    return files


def _print_summary(sol) -> None:
    summary = sol.summary()
    width = max(len(k) for k in summary)
    print(f"{sol.scheme} {sol.params or ''} on {sol.meta.get('example')}, h = {sol.h:g}")
    for k, v in summary.items():
        print(f"  {k:{width}s}  {v:.6g}" if isinstance(v, float) else f"  {k:{width}s}  {v}")


def _cmd_run(args) -> int:
    from . import examples
    from .errors import SimulationError
    from .simulate import simulate

    overrides = _parse_overrides(args.set)
    if args.config:
        from .config import load_run_config

        cfg = load_run_config(args.config)
        problem, run_kw = cfg.problem(), cfg.run_kwargs()
        example = cfg.example or cfg.system
    else:
        if not args.example:
            raise ValueError("Name an example (see `livens list`) or give --config run.toml.")
        example = args.example
        problem = examples.load(args.example, **overrides)
        run_kw = {}
    for key in ("scheme", "h", "t_end", "tol", "max_iter", "guess", "theta", "vartheta", "blowup_factor", "rescue"):
        val = getattr(args, key, None)
        if val is not None:
            run_kw[key] = val
    run_kw.setdefault("scheme", "VI-S")
    run_kw["progress"] = False if args.quiet else None
    stem = f"{example}_{run_kw['scheme']}".replace("/", "_").replace(":", "_")
    try:
        sol = simulate(problem, **run_kw)
    except SimulationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if args.out and exc.solution is not None and exc.solution.n_steps > 0:
            files = _write_outputs(exc.solution, args.out, stem + "_partial")
            print(f"partial results ({exc.solution.n_steps} steps) written: {', '.join(files)}", file=sys.stderr)
        return 3
    _print_summary(sol)
    if args.out:
        files = _write_outputs(sol, args.out, stem, animate=args.animate)
        print("written: " + ", ".join(files))
    elif args.animate:
        raise ValueError("--animate needs --out DIR.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="livens", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="list examples and schemes")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("run", help="simulate one example with one scheme")
    p.add_argument("example", nargs="?", help="example name (see `livens list`)")
    p.add_argument("--scheme", help="scheme name or alias (default VI-S)")
    p.add_argument("--h", type=float, help="step size (default: the paper's)")
    p.add_argument("--t-end", dest="t_end", type=float, help="end time (default: the paper's)")
    p.add_argument("--tol", type=float, help="Newton tolerance (default 1e-9)")
    p.add_argument("--max-iter", dest="max_iter", type=int, help="Newton iterations per step (default 40)")
    p.add_argument("--guess", choices=["simple", "advanced", "extrapolated"],
                   help="Newton initial guess: simple/advanced (002 Table 2) or extrapolated (livens); default: the scheme's")
    p.add_argument("--theta", type=float, help="θ of ggl-theta-a / ggl-theta-b")
    p.add_argument("--vartheta", type=float, help="ϑ of ggl-theta-b")
    p.add_argument("--blowup-factor", dest="blowup_factor", type=float, help="stop when |E-E0| > factor*max(|E0|,1)")
    p.add_argument("--no-rescue", dest="rescue", action="store_const", const=False,
                   help="stop at the first failed Newton step instead of retrying it with damped Newton")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="override an example parameter")
    p.add_argument("--config", help="a run.toml file (see README)")
    p.add_argument("--out", help="directory for netCDF, CSV and PNG")
    p.add_argument("--animate", action="store_true", help="also write an animated GIF (mechanisms)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_run)
    try:
        from .studies.cli import add_parsers
    except ImportError:
        pass
    else:
        add_parsers(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
