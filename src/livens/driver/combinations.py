"""Which option objects and keywords of :func:`livens.driver.run` go together: one table.

Each executor (:class:`~livens.driver.options.Single`, :class:`~livens.driver.options.Members`,
:class:`~livens.driver.options.InGraph`) names the outputs, failure policies and adjoints it
runs with (exact types: a :class:`~livens.driver.options.Stream` is not an
:class:`~livens.driver.options.Arrays`), its defaults, and the keywords of :func:`~livens.driver.run`
it reads; :func:`checked` refuses every other combination with an error that names it and says
what works, so that no option is silently dropped.
"""

from __future__ import annotations

from typing import NamedTuple

from .options import Arrays, Implicit, InGraph, Members, Memory, NaNFlag, PerMember, Raise, Single, Stream


class Row(NamedTuple):
    """One executor's row of the table: the option types it takes (the first its default, None
    where the default is none), the keywords only it reads, and what to use instead of each
    option it refuses."""

    outputs: tuple
    policies: tuple
    adjoints: tuple
    instead: dict


_OUTPUT = "output=Memory(save_every) or output=Stream(save_every, path)"
TABLE: dict[type, Row] = {
    Single: Row(
        (Memory, Stream),
        (Raise,),
        (None,),
        {
            "output": _OUTPUT + " (Arrays is the in-graph output: executor=InGraph())",
            "on_failure": "on_failure=Raise(rescue) (PerMember: executor=Members(); NaNFlag: executor=InGraph())",
            "adjoint": "adjoint=None (derivatives of a run: executor=InGraph(), lv.flow)",
        },
    ),
    Members: Row(
        (Memory, Stream),
        (PerMember,),
        (None,),
        {
            "output": _OUTPUT + " (Arrays is the in-graph output: executor=InGraph())",
            "on_failure": "on_failure=PerMember(rescue): the member that failed stops, the others go on",
            "adjoint": "adjoint=None (derivatives of a run: executor=InGraph(), lv.flow)",
        },
    ),
    InGraph: Row(
        (Arrays,),
        (NaNFlag,),
        (Implicit,),
        {
            "output": "output=Arrays(save_every): the in-graph run returns its nodes as arrays of the program "
            "(Memory or Stream: executor=Single() or Members())",
            "on_failure": 'on_failure=NaNFlag() or NaNFlag("hold") (Raise: executor=Single(); PerMember: '
            "executor=Members())",
            "adjoint": "adjoint=Implicit() or None",
        },
    ),
}
"""The table (module docstring)."""

KEYWORDS: dict[str, tuple[tuple, object, str]] = {
    "members": (
        (Members,),
        None,
        "members=(q0s, v0s) are an ensemble's initial states: run them with executor=Members()",
    ),
    "blowup_factor": (
        (Single,),
        None,
        "blowup_factor stops one member's run: use executor=Single() (lv.simulate) for it, or leave it out",
    ),
    "resume": (
        (Single,),
        None,
        "resume continues a single run (executor=Single(), lv.simulate); an ensemble or an in-graph run "
        "cannot be resumed",
    ),
    "n_steps": ((InGraph,), None, "give the run's length as t_end = n_steps * h"),
    "t_end": ((Single, Members), None, "give the in-graph run's length as n_steps (lv.flow takes t_end)"),
    "parameters": (
        (Single, Members),
        None,
        "the in-graph run takes the System's parameters as an argument: F(q0, v0, parameters)",
    ),
    "final_iteration": ((Single, Members), False, "the in-graph run has no final iteration: leave it out"),
    "progress": ((Single, Members), None, "the in-graph run shows no progress: leave it out"),
}
"""run()'s keywords that only some executors read: (the executors, the value that means "not
given", what to do instead)."""


def _name(x) -> str:
    return "None" if x is None else repr(x)


def checked(executor, output, on_failure, adjoint, given: dict) -> tuple:
    """(output, on_failure, adjoint) of a run, None replaced by the executor's default; refuses a
    combination the table does not hold (module docstring). ``given``: the keywords of
    :data:`KEYWORDS` as the run got them."""
    row = TABLE.get(type(executor))
    if row is None:
        raise ValueError(f"executor must be Single(), Members() or InGraph(); got {executor!r}.")
    chosen = []
    for what, value, kinds in (
        ("output", output, row.outputs),
        ("on_failure", on_failure, row.policies),
        ("adjoint", adjoint, row.adjoints),
    ):
        if value is None:
            value = None if kinds[0] is None else kinds[0]()
        elif type(value) not in kinds:
            raise ValueError(f"{what}={_name(value)} does not go with executor={executor!r}; use {row.instead[what]}.")
        chosen.append(value)
    for key, value in given.items():
        executors, unset, instead = KEYWORDS[key]
        if type(executor) not in executors and value is not unset and value is not None:
            raise ValueError(f"{key}={value!r} does not go with executor={executor!r}: {instead}.")
    return tuple(chosen)


__all__ = ["KEYWORDS", "TABLE", "Row", "checked"]
