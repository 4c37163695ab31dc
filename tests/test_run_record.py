"""One record of a run (livens.run_record.RunRecord): a Solution is member 0 of its run's record, an
ensemble member member b of the ensemble's (slices of its arrays, no copy), and a flow result answers
the same fields with the same shapes and dtypes; for the same run all three hold the same numbers
and say the same about how it ended."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.run_record import RunRecord

FIELDS = ("t", "q", "p", "v", "lam", "gam", "iterations", "residual")


def _fields(result) -> dict:
    return {k: None if getattr(result, k) is None else np.asarray(getattr(result, k)) for k in FIELDS}


def _same_layout(a: dict, b: dict, what: str) -> None:
    for k in FIELDS:
        assert (a[k] is None) == (b[k] is None), f"{what}: {k}"
        if a[k] is not None:
            assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, (what, k, a[k].shape, b[k].shape)


@pytest.mark.parametrize(("scheme", "save_every"), [("ggl-vi", 1), ("ggl-em", 3)])
def test_solution_ensemble_member_and_flow_result_are_one_record(scheme, save_every):
    """pendulum-3d, 40 steps: lv.simulate, member 1 of a two-member ensemble of the same start (and
    another) and lv.flow. Same fields, shapes and dtypes; the same nodes (to round-off: the ensemble
    may run batched, the flow's forward run is another program) and iterations; SUCCESS and -1
    everywhere; each result's record gives its arrays back."""
    p = lv.examples.load("pendulum-3d")
    n, kw = 40, dict(h=p.h, tol=1e-12)
    sol = lv.simulate(p, scheme, t_end=n * p.h, save_every=save_every, progress=False, **kw)
    q0s, v0s = np.array([p.q0, p.q0]), np.array([0.5 * np.asarray(p.v0), p.v0])
    ens = lv.simulate_ensemble(p, scheme, q0s=q0s, v0s=v0s, t_end=n * p.h, save_every=save_every, **kw)
    F = lv.flow(p, scheme, n_steps=n, save_every=save_every, **kw)
    res = F(jnp.asarray(p.q0), jnp.asarray(p.v0))
    flow_record = RunRecord.of_flow(res, F).member(0)

    member = ens[1]
    expected = _fields(sol)
    assert expected["q"].shape == (n // save_every + 1, 3)
    for what, got in (("ensemble member", _fields(member)), ("flow record", flow_record)):
        _same_layout(expected, got, what)
        for k in FIELDS:
            if expected[k] is not None:
                np.testing.assert_allclose(got[k], expected[k], rtol=1e-12, atol=1e-12, err_msg=f"{what}: {k}")
        np.testing.assert_array_equal(got["iterations"], expected["iterations"])
    if save_every == 1:  # the flow result itself: every step's arrays (its nodes thinned where asked)
        _same_layout(expected, _fields(res), "flow result")

    assert sol.status is member.status is lv.Status.SUCCESS and sol.failed_step == member.failed_step == -1
    assert flow_record["status"] is lv.Status.SUCCESS and flow_record["failed_step"] == -1
    np.testing.assert_array_equal(ens.status, [0, 0])
    np.testing.assert_array_equal(ens.record.steps, [n, n])

    # views, not copies: ens[b] is a slice of the ensemble's arrays, a Solution of its run's record
    assert np.shares_memory(member.q, ens.q) and np.shares_memory(member.lam, ens.lam)
    assert not np.shares_memory(member.q, ens[0].q)
    rec = sol.record
    assert isinstance(rec, lv.RunRecord) and isinstance(ens.record, lv.RunRecord)
    assert rec.members == 1 and np.shares_memory(rec.q, sol.q)
    back = rec.member(0)
    for k in FIELDS:
        if expected[k] is not None:
            assert np.shares_memory(back[k], expected[k]), k
            np.testing.assert_array_equal(back[k], expected[k])
    np.testing.assert_array_equal(rec.index, np.arange(save_every - 1, n, save_every))


def test_a_failed_run_has_one_record_in_every_result():
    """The pendulum released near its top with VI-S and h = 0.15: a step fails (the rescue off).
    err.solution, the failed member of an ensemble (beside one that finishes) and the flow's result
    name the same failed step and status, keep the same steps, and their records agree. The
    ensemble's other member rests at an equilibrium and finishes."""
    h, n = 0.15, 20
    pend = lv.examples.load("pendulum-3d")
    p = pend.replace(q0=[0.05, 0.0, 0.9987492177719089], v0=[0.0, 1.0, 0.0])
    kw = dict(h=h, tol=1e-12)
    with pytest.raises(lv.ConvergenceError) as err:
        lv.simulate(p, "VI-S", t_end=n * h, rescue=False, progress=False, **kw)
    kept, k = err.value.solution, err.value.step
    assert 0 < k < n
    with pytest.warns(RuntimeWarning, match=rf"member 0 in step {k + 1}, counted from 1"):
        ens = lv.simulate_ensemble(
            p,
            "VI-S",
            q0s=np.array([p.q0, [0.0, 0.0, -1.0]]),
            v0s=np.array([p.v0, np.zeros(3)]),
            t_end=n * h,
            rescue=False,
            **kw,
        )
    F = lv.flow(p, "VI-S", n_steps=n, **kw)
    flow = RunRecord.of_flow(jax.jit(F)(jnp.asarray(p.q0), jnp.asarray(p.v0)), F)

    for what, rec in (("solution", kept.record), ("ensemble", ens.record), ("flow", flow)):
        assert rec.status[0] == lv.Status.STEP_FAILED and rec.failed_step[0] == k, what
        assert int(rec.steps[0]) == k and rec.kept(0) == k and not rec.converged[0], what
        got = rec.member(0)
        assert got["q"].shape == kept.q.shape == (k + 1, 3), what
        np.testing.assert_allclose(got["q"], kept.q, rtol=1e-12, atol=1e-12, err_msg=what)
        np.testing.assert_array_equal(got["iterations"], kept.iterations, err_msg=what)
    assert ens.record.status[1] == lv.Status.SUCCESS and ens.record.failed_step[1] == -1
    # the failed step's own iterations and residual stay in the ensemble's row after the last node
    np.testing.assert_allclose(ens.newton_residual[0, k], err.value.residual, rtol=1e-12)
    assert np.all(np.isnan(ens.q[0, k + 1 :]))
    assert ens[0].status is kept.status is lv.Status.STEP_FAILED and ens[0].failed_step == kept.failed_step == k
