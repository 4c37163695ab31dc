"""Speed and scale of livens (issue 7): ``python -m benchmarks [--quick] [--update-baseline]``.

- steps/s and compile time of every scheme on every example (pairs a scheme refuses are skipped),
- a pure-NumPy VI-S for the pendulum (:mod:`benchmarks.reference_numpy`) as the yardstick,
- ensemble throughput (``lv.simulate_ensemble``) against single runs,
- the cost per step of the pendulum chain for growing N,
- the persistent compilation cache (a second process),

compared with the committed ``benchmarks/baseline.json``.
"""
