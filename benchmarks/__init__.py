"""Speed and scale of livens: ``python -m benchmarks [--quick] [--update-baseline]``.

- steps/s and compile time of every scheme on every example (pairs a scheme refuses are skipped),
- the yardsticks (:mod:`benchmarks.yardsticks`): livens beside a VI-S written by hand in Numba
  (:mod:`benchmarks.reference_numba`, the limit of the method), Exudyn's generalized-α
  (:mod:`benchmarks.reference_exudyn`, the tool users would otherwise pick) and a pure-NumPy VI-S
  (:mod:`benchmarks.reference_numpy`), side by side in one process, as same-run ratios,
- ensemble throughput (``lv.simulate_ensemble``) against single runs,
- the cost per step of the pendulum chain for growing N (and of the three-bar swing, where it exists),
- the persistent compilation cache (a second process),

with the targets, and the raw figures beside the committed ``benchmarks/baseline.json``.
"""
