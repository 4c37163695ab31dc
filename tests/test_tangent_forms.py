"""The size policy is the one place that picks the form of a Newton tangent: a scheme describes the forms
it offers (:class:`livens.solvers.TangentForms`) and :func:`livens.solvers.choose_form` takes one.

- :func:`livens.solvers.preferred_forms` reads the table ``FORM_RULES`` against the policy given or in
  force: the forms offered whose size reaches their threshold, in the table's order, then the dense
  one; :func:`~livens.solvers.choose_form` builds only the form it takes, and passes over one that
  builds None (no narrow band).
- Replacing the policy's thresholds moves VI-S on a chain of 8 bodies through its four forms (band,
  matrix-free, dense blocks with and without the block elimination of the multipliers' system), and
  each of them solves as the dense AD Jacobian does, to round-off.
- Replacing the policy function makes VI-S, ggl-em, livens-em, ggl-em4, ggl-galerkin and the solvers' default
  tangent take the form it names, whatever the system's size, each having asked it with its rule and
  sizes: no scheme decides by size on its own; and no scheme module reads the size policy.
"""

import dataclasses
import pathlib

import jax
import pytest
from _tangents import assert_tangent_equals_ad, perturbed_point

import livens as lv
from livens.schemes import get as get_scheme
from livens.schemes import ggl_em, ggl_vi
from livens.solvers import TangentForms, choose_form, preferred_forms, tangent_operator
from livens.solvers import banded as _banded
from livens.solvers import tangent as _tangent

VIS_FORMS = ("banded", "matrix_free", "block_elimination")


def test_preferred_forms_are_those_whose_size_reaches_the_policys_threshold():
    sizes = lv.engine.SizePolicy()
    # VI-S: bands from 54 coordinates, matrix-free from 64, the block elimination from 24 constraints
    assert preferred_forms("vi-s", VIS_FORMS, d=96, m=32, sizes=sizes) == (*VIS_FORMS, "dense")
    assert preferred_forms("vi-s", VIS_FORMS, d=60, m=20, sizes=sizes) == ("banded", "dense")
    assert preferred_forms("vi-s", VIS_FORMS, d=48, m=29, sizes=sizes) == ("block_elimination", "dense")
    assert preferred_forms("vi-s", VIS_FORMS, d=53, m=23, sizes=sizes) == ("dense",)
    assert preferred_forms("vi-s", ("block_elimination",), d=96, m=32, sizes=sizes) == ("block_elimination", "dense")
    # the band form of an AD tangent from 96 Newton unknowns, the assembled stage tangent from 48
    assert [preferred_forms("unknowns", ("banded",), n=n, sizes=sizes) for n in (95, 96)] == [
        ("dense",),
        ("banded", "dense"),
    ]
    assert preferred_forms("unknowns", (), n=1000, sizes=sizes) == ("dense",)
    assert [preferred_forms("stages", ("assembled",), n=n, sizes=sizes) for n in (47, 48)] == [
        ("dense",),
        ("assembled", "dense"),
    ]
    lower = dataclasses.replace(sizes, banded_unknowns=10, vis_matrix_free_coordinates=3)
    assert preferred_forms("unknowns", ("banded",), n=10, sizes=lower) == ("banded", "dense")
    assert preferred_forms("vi-s", VIS_FORMS, d=3, m=1, sizes=lower) == ("matrix_free", "dense")
    # without sizes: the policy in force
    assert preferred_forms("stages", ("assembled",), n=1) == ("dense",)
    with lv.engine.sizes_replaced(stage_unknowns=0):
        assert preferred_forms("stages", ("assembled",), n=1) == ("assembled", "dense")


def test_choose_form_builds_only_the_form_it_takes():
    built = []

    def form(name, value):
        def build():
            built.append(name)
            return value

        return build

    forms = TangentForms(
        "vi-s",
        form("dense", "D"),
        d=100,
        m=30,
        banded=form("banded", None),  # no narrow band: the next form is taken
        matrix_free=form("matrix_free", "MF"),
        block_elimination=form("block_elimination", "B"),
    )
    assert forms.offered() == ("banded", "matrix_free", "block_elimination")
    assert choose_form(forms) == "MF" and built == ["banded", "matrix_free"]
    built.clear()
    small = dataclasses.replace(forms, d=10, m=3)
    assert choose_form(small) == "D" and built == ["dense"]
    built.clear()
    assert choose_form(small, dataclasses.replace(lv.engine.SizePolicy(), vis_block_constraints=3)) == "B"
    assert built == ["block_elimination"]
    with pytest.raises(ValueError, match="no rule .vis.; the rules are unknowns, vi-s, stages, ggl-em"):
        TangentForms("vis", form("dense", "D"))


def _tangent_object(T, x):
    """The tangent object T(x) from a trace (its arrays are tracers; its class and flags are read)."""
    seen = []
    jax.eval_shape(lambda x: seen.append(T(x)) or x, x)
    return seen[0]


VI_S = get_scheme("VI-S")[0]


@pytest.mark.parametrize(
    "sizes, kind, by_blocks",
    [
        ({}, ggl_vi.VISTangent, False),
        ({"vis_block_constraints": 8}, ggl_vi.VISTangent, True),
        ({"vis_matrix_free_coordinates": 24}, ggl_vi.VISTangentMF, None),
        ({"vis_banded_coordinates": 24}, ggl_vi.VISTangentBanded, None),
    ],
    ids=["dense", "dense, block elimination", "matrix-free", "banded"],
)
def test_the_policys_thresholds_pick_each_vi_s_form_and_each_solves_as_the_ad_jacobian(sizes, kind, by_blocks):
    """A chain of 8 bodies (d = 24, m = 8) takes each of VI-S's forms where the policy's threshold is
    its size, and each form's solve is the dense solve of ``jax.jacfwd`` of the residual to round-off."""
    problem = lv.examples.load("pendulum-chain", n_bodies=8)
    h, t = 0.01, 0.2
    sch, vals, mech, st, x = perturbed_point(problem, VI_S, h, seed=3)
    d, m = mech.d, mech.m
    assert (d, m) == (24, 8)

    def R(x):
        return sch.residual(sch.unpack(x, d, m), st, h, t, vals, mech)

    def T(x):
        return sch.tangent(sch.unpack(x, d, m), st, h, t, vals, mech)

    with lv.engine.sizes_replaced(**sizes):
        chosen = _tangent_object(T, x)
        assert type(chosen) is kind
        if by_blocks is not None:
            assert chosen.by_blocks is by_blocks
        if kind is ggl_vi.VISTangentBanded:
            assert isinstance(chosen.banded, _banded.BandedTangent)
        assert_tangent_equals_ad(R, T, x, 3 * d + 2 * m)


CASES = [
    # (example, its options, scheme, the rule asked, the form the default policy takes there)
    ("pendulum-chain", {"n_bodies": 32}, "VI-S", "vi-s", "VISTangentBanded"),
    ("three-bar-swing", {"n_elements": 4}, "livens-em", "unknowns", "LowRankUpdate"),
    ("three-bar-swing", {"n_elements": 4}, "livens-midpoint", "unknowns", "BandedTangent"),
    ("heavy-top", {}, "ggl-galerkin", "stages", "Dense"),
    ("double-four-bar", {}, "ggl-em4", "unknowns", "LowRankUpdate"),
    ("double-four-bar", {}, "ggl-em", "ggl-em", "EMTangent"),
    ("chain-3d", {"n_bodies": 4}, "ggl-em", "ggl-em", "EMBlockTangent"),
]


@pytest.mark.parametrize("example, options, scheme, rule, default", CASES, ids=lambda v: str(v))
def test_every_scheme_takes_the_form_the_policy_names(example, options, scheme, rule, default, monkeypatch):
    """With the policy replaced by one that names the dense form alone, the chain of 32, the swing of
    four elements and ggl-em4 on the double four-bar, whose default tangents are band forms, and EM on
    the chain of four rods, whose default tangent is factorized by bodies, take their dense ones: each
    scheme asked the policy, with its rule and its sizes, and took what it answered."""
    problem = lv.examples.load(example, **options)
    sch, vals, mech, st, x = perturbed_point(problem, get_scheme(scheme)[0], problem.h, seed=5)
    d, m = mech.d, mech.m

    def T(x):
        return tangent_operator(sch, sch.unpack(x, d, m), st, problem.h, 0.1, vals, mech)

    assert type(_tangent_object(T, x)).__name__ == default
    asked = []

    def dense_only(rule, offered, n=0, d=0, m=0, sizes=None):
        asked.append((rule, n, d, m))
        return ("dense",)

    monkeypatch.setattr(_tangent, "preferred_forms", dense_only)
    chosen = _tangent_object(T, x)
    sizes = (0, d, m) if rule == "vi-s" else (int(x.shape[0]), 0, 0)
    assert asked == [(rule, *sizes)]
    dense = {"vi-s": ggl_vi.VISTangent, "ggl-em": ggl_em.EMTangent}.get(rule, _tangent.Dense)
    assert type(chosen) is dense


def test_no_scheme_module_reads_the_size_policy():
    """The thresholds are read by the solvers' policy alone: no module of livens.schemes names it."""
    schemes = pathlib.Path(ggl_vi.__file__).parent
    readers = {p.name for p in schemes.glob("*.py") if "size_policy" in p.read_text()}
    assert readers == set()
