"""Write tests/slow_cases.txt from the durations of a whole run of the suite.

    python -m pytest -p no:cacheprovider --durations=0 > run.log; python tools/slow_cases.py run.log

The suite's default run keeps, of each parametrized test whose cases together took at least
FAMILY_S seconds, its cheapest quarter of cases (at least one) and every case quicker than CASE_S;
the other cases are listed, and tests/conftest.py marks them ``slow`` (``python -m pytest -m slow``
runs them). The documentation's code blocks are all kept: the pages promise what they show.
Cases listed before stay listed (a default run does not time them); new ones are added.
"""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

FAMILY_S = 12.0
CASE_S = 2.0
KEEP_ALL = ("tests/test_documentation.py::",)
LIST = Path(__file__).resolve().parent.parent / "tests" / "slow_cases.txt"
HEADER = """\
# Cases of parametrized tests that run only with `python -m pytest -m slow` (tests/conftest.py marks
# them): each test keeps its cheapest quarter of cases, and every case under a few seconds, in the
# default run. Written by tools/slow_cases.py from a whole run's --durations=0; one node id a line.
"""


def durations(log: str) -> dict[str, float]:
    """Seconds per node id (setup, call and teardown together) from pytest's --durations output."""
    seconds: dict[str, float] = collections.defaultdict(float)
    for line in log.splitlines():
        m = re.match(r"^([0-9.]+)s (setup|call|teardown) +(\S.*)$", line.strip())
        if m:
            seconds[m.group(3)] += float(m.group(1))
    return seconds


def slow_cases(seconds: dict[str, float]) -> list[str]:
    families: dict[str, list] = collections.defaultdict(list)
    for node, s in seconds.items():
        if "[" in node and not node.startswith(KEEP_ALL):
            families[node.split("[", 1)[0]].append((s, node))
    out = []
    for cases in families.values():
        if len(cases) < 2 or sum(s for s, _ in cases) < FAMILY_S:
            continue
        cases.sort()
        out += [node for s, node in cases[max(1, len(cases) // 4) :] if s >= CASE_S]
    return sorted(out)


def main(argv: list[str]) -> None:
    seconds = durations(Path(argv[1]).read_text())
    known = set()
    if LIST.exists():
        known = {ln.strip() for ln in LIST.read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    cases = sorted(set(slow_cases(seconds)) | known)
    LIST.write_text(HEADER + "".join(c + "\n" for c in cases))
    print(f"{len(cases)} cases in {LIST}")


if __name__ == "__main__":
    main(sys.argv)
