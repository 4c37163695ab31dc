"""Walking a jaxpr with its sub-jaxprs (loop bodies, branches, called functions): shared by the
rewrite of small products (:mod:`livens.engine.small_products`) and the native translator
(:mod:`livens.engine.native.codegen`), which both treat large called functions apart from small ones."""

from __future__ import annotations

from jax.extend import core as jcore


def sub_jaxprs(eqn):
    """The jaxprs in an equation's parameters (loop bodies, branches, called functions)."""
    for v in eqn.params.values():
        for x in v if isinstance(v, (tuple, list)) else (v,):
            if isinstance(x, jcore.ClosedJaxpr):
                yield x.jaxpr
            elif isinstance(x, jcore.Jaxpr):
                yield x


def equations(jaxpr):
    """Every equation of ``jaxpr`` and of its sub-jaxprs, depth first."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in sub_jaxprs(eqn):
            yield from equations(sub)


def size(jaxpr, at_least: int | None = None) -> int:
    """The number of equations of ``jaxpr``, those of its sub-jaxprs included; with ``at_least``,
    counting stops there (the answer is then min(size, at_least))."""
    n = 0
    for _ in equations(jaxpr):
        n += 1
        if at_least is not None and n >= at_least:
            break
    return n
