"""The pure part of ``python -m benchmarks --only work-precision`` (benchmarks/work_precision.py), on
given numbers (no timing): the CPU time at the error TARGET = 1e-8 read off the log-log line between
the bracketing runs, exact for a power law, and no reading where no pair of runs brackets the target.
The comparison itself (the fastest order-4 scheme against the fastest second-order one on the heavy
top) is the benchmark's, run on a quiet machine."""

import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchmarks import work_precision  # noqa: E402


def test_the_target_is_the_done_when_error_and_the_references_rtol():
    assert work_precision.TARGET == 1e-8
    assert "heavy-top" in work_precision.EXAMPLES
    assert {"VI-A", "EM", "rattle"} <= set(work_precision.SECOND_ORDER)
    assert "ggl-spark(stages=3)" in work_precision.HIGHER_ORDER and "ggl-em4" in work_precision.HIGHER_ORDER


@pytest.mark.parametrize("order", [2, 4])
def test_time_at_the_target_is_exact_on_a_power_law(order):
    """Runs with error C h^p and time K / h: the time at the error TARGET is K / h* with
    C h*^p = TARGET, whichever pair of runs brackets it, in any order of the points."""
    C, K = 3.0, 2e-4
    hs = [0.02 / 2**k for k in range(16)]  # errors from 1e-3 (order 2) down past 1e-8
    points = [(C * h**order, K / h) for h in hs]
    points = points[1::2] + points[0::2]  # not sorted
    h_star = (work_precision.TARGET / C) ** (1.0 / order)
    assert work_precision._at_target(points) == pytest.approx(K / h_star, rel=1e-12)


def test_no_time_where_no_pair_brackets_the_target():
    assert work_precision._at_target([(1e-6, 1.0), (1e-7, 2.0)]) is None
    assert work_precision._at_target([(1e-9, 1.0), (1e-10, 2.0)]) is None
    assert work_precision._at_target([(1e-7, 1.0)]) is None
    assert work_precision._at_target([]) is None


def test_a_bracketing_pair_between_other_runs():
    """The pair that brackets the target is the one read, not the first two points."""
    points = [(1e-4, 0.1), (1e-6, 0.4), (1e-9, 3.0), (1e-11, 9.0)]
    w = (math.log(1e-6) - math.log(1e-8)) / (math.log(1e-6) - math.log(1e-9))
    expected = math.exp((1 - w) * math.log(0.4) + w * math.log(3.0))
    assert work_precision._at_target(points) == pytest.approx(expected, rel=1e-14)


def test_the_order_four_group_is_the_higher_order_schemes_that_report_order_four():
    """The strict reading of the verdict (the fastest scheme of order 4) compares the schemes whose
    reported order is 4, no other: ggl-galerkin with three stages (order 6) is left out."""
    import livens as lv
    from livens.studies import parse_scheme

    def order(spelling):
        name, params = parse_scheme(spelling)
        scheme, alias = lv.schemes.get(name)
        return scheme.specialized(scheme.resolve_params(params, alias)).about.order

    assert set(work_precision.ORDER_FOUR) == {s for s in work_precision.HIGHER_ORDER if order(s) == 4}
    assert order("ggl-galerkin(stages=3)") == 6
