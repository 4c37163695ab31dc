"""The size thresholds live in one policy object (:class:`livens.engine.SizePolicy`), read by the
solvers, whose one policy takes the form of every scheme's tangent (livens.solvers.choose_form): the
tangent class each system gets is the one it got before the thresholds were gathered (pendulum-3d, the
three-bar swing of 10 elements, the double four-bar, a chain of 32 bodies), and replacing the policy
changes the choice (it is read). The chunk sizes of runs come from it too."""

import dataclasses

import pytest
from _tangents import perturbed_point, tangent_type

import livens as lv
from livens.engine import options
from livens.schemes import get as get_scheme
from livens.solvers import tangent_operator

# (example, options, scheme) -> the class of its Newton tangent, as chosen before the policy object
CHOSEN = {
    ("pendulum-3d", (), "VI-S"): "VISTangent",
    ("pendulum-3d", (), "livens-em"): "Dense",
    ("three-bar-swing", (("n_elements", 10),), "livens-em"): "LowRankUpdate",
    ("three-bar-swing", (("n_elements", 10),), "livens-midpoint"): "BandedTangent",
    ("double-four-bar", (), "VI-S"): "VISTangent",
    ("double-four-bar", (), "livens-em"): "Dense",
    ("pendulum-chain", (("n_bodies", 32),), "VI-S"): "VISTangentBanded",
    ("pendulum-chain", (("n_bodies", 32),), "livens-em"): "LowRankUpdate",
}


def _chosen(example, options, scheme):
    problem = lv.examples.load(example, **dict(options))
    sch = get_scheme(scheme)[0]
    h = problem.h
    sch, vals, mech, st, x = perturbed_point(problem, sch, h, seed=1)
    d, m = mech.d, mech.m
    return tangent_type(lambda x: tangent_operator(sch, sch.unpack(x, d, m), st, h, 0.1, vals, mech), x).__name__


@pytest.mark.parametrize("key", list(CHOSEN), ids=lambda k: f"{k[0]}{dict(k[1])}-{k[2]}")
def test_the_tangent_class_chosen_by_size_is_unchanged(key):
    assert _chosen(*key) == CHOSEN[key]


def test_the_choice_reads_the_policy_in_force(monkeypatch):
    """Raising a threshold of the policy object moves a system to the next smaller form: it is what
    the solvers' policy reads for VI-S and livens-em alike (no copy of a threshold elsewhere)."""
    chain = ("pendulum-chain", (("n_bodies", 32),))
    big = 10**9
    monkeypatch.setattr(options, "SIZES", dataclasses.replace(options.SIZES, vis_banded_coordinates=big))
    assert lv.engine.size_policy() is options.SIZES and lv.solvers.size_policy() is options.SIZES
    assert _chosen(*chain, "VI-S") == "VISTangentMF"
    monkeypatch.setattr(options, "SIZES", dataclasses.replace(options.SIZES, vis_matrix_free_coordinates=big))
    assert _chosen(*chain, "VI-S") == "VISTangent"
    monkeypatch.setattr(options, "SIZES", dataclasses.replace(options.SIZES, banded_unknowns=big))
    assert _chosen(*chain, "livens-em") == "Dense"


def test_the_policy_holds_the_thresholds_it_replaced():
    """The values the module constants had (results bit-identical: the same forms at the same sizes)."""
    assert lv.engine.SizePolicy() == lv.engine.SizePolicy(
        unroll_unknowns=4,
        block_jacobian_unknowns=48,
        banded_unknowns=96,
        vis_banded_coordinates=54,
        vis_matrix_free_coordinates=64,
    )


def test_the_chunk_sizes_come_from_the_policy(monkeypatch):
    """simulate's default chunk, lv.flow's native chunk and an ensemble's chunks are the policy's
    (512; about 65536 member-steps per call of the batched XLA loop, a power of two from 8 to 512),
    and an ensemble reads the policy in force."""
    from livens.driver import DEFAULT_CHUNK, Members, Single
    from livens.driver.native_flow import CHUNK

    sizes = lv.engine.SizePolicy()
    assert DEFAULT_CHUNK == CHUNK == Single().chunk == sizes.chunk == 512
    assert [Members().chunks(b) for b in (1, 128, 129, 1000, 10**6)] == [
        (512, 512),
        (512, 512),
        (512, 256),
        (512, 64),
        (512, 8),
    ]
    assert Members(chunk=20).chunks(1000) == (20, 20)
    monkeypatch.setattr(options, "SIZES", dataclasses.replace(sizes, chunk=64, batched_member_steps=1024))
    assert [Members().chunks(b) for b in (1, 8, 100)] == [(64, 64), (64, 64), (64, 8)]


def test_sizes_replaced_changes_the_policy_in_its_block_only():
    """``lv.engine.sizes_replaced`` replaces the named fields while its block runs and restores the policy
    after it, also where the block raises; an unknown field is named with the fields there are."""
    before = lv.engine.size_policy()
    with lv.engine.sizes_replaced(stage_unknowns=0, chunk=64) as inside:
        assert lv.engine.size_policy() is inside
        assert (inside.stage_unknowns, inside.chunk) == (0, 64)
        assert inside.banded_unknowns == before.banded_unknowns
    assert lv.engine.size_policy() is before
    with pytest.raises(RuntimeError), lv.engine.sizes_replaced(chunk=8):
        raise RuntimeError
    assert lv.engine.size_policy() is before
    with pytest.raises(ValueError, match="no field stage_unknown; its fields are .*stage_unknowns"):
        with lv.engine.sizes_replaced(stage_unknown=0):
            pass
    assert lv.engine.size_policy() is before
