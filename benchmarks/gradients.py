"""The cost of a derivative of ``lv.flow``: per step, in one process and in turns, ``lv.simulate``,
the forward run of ``lv.flow`` (``jax.jit`` of a loss), its gradient (``jax.grad``, reverse mode)
and a forward-mode derivative (``jax.jvp``), with the first calls of the forward run and of the
gradient (cold where the benchmark runs with a fresh compilation cache), and ``jax.vmap`` of the
gradient over :data:`MEMBERS` members (initial velocities about the problem's) against one gradient,
in alternating calls. Same scheme, same tolerance (1e-12), the papers' h; the loss reads the last
node and the momenta of every node.
"""

from __future__ import annotations

import time

# (example, scheme, steps, steps with --quick)
SYSTEMS = [
    ("pendulum-3d", "VI-S", 20_000, 4_000),
    ("pendulum-3d", "EM", 20_000, 4_000),
    ("heavy-top", "EM", 4_000, 1_000),
]
TOL = 1e-12
MEMBERS = 8
"""Members of the batched gradient (``jax.vmap``) compared with one gradient."""


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def _alternating(fns: dict, repeats: int) -> dict:
    """The median wall time of each of ``fns``, called in turns ``repeats`` times, each timed call right
    after an untimed one of the same function (memory left idle during the others' calls can be slow to
    touch again on a virtual machine: :mod:`benchmarks.yardsticks`)."""
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            fn()
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: sorted(t)[len(t) // 2] for k, t in times.items()}


def measure(lv, example: str, scheme: str, n_steps: int, repeats: int = 3) -> dict:
    """us/step of simulate, flow's forward run, its gradient and a jvp; first calls in s."""
    import jax
    import jax.numpy as jnp

    problem = lv.examples.load(example)
    h = problem.h
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    F = lv.flow(problem, scheme, h=h, n_steps=n_steps, tol=TOL)

    def loss(q, v):
        r = F(q, v)
        return jnp.sum(r.q[-1] ** 2) + 0.1 * jnp.sum(r.p**2) / n_steps

    fwd = jax.jit(loss)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    jvp = jax.jit(lambda q, v: jax.jvp(loss, (q, v), (q, v)))
    vgrad = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1))))
    q0s = jnp.broadcast_to(q0, (MEMBERS, *q0.shape))
    v0s = v0 * (1.0 + 0.01 * jnp.arange(MEMBERS))[:, None]
    out = {"steps": n_steps}
    with lv.engine.serial_blas():
        t0 = time.perf_counter()
        jax.block_until_ready(fwd(q0, v0))
        out["first_forward_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        jax.block_until_ready(grad(q0, v0))
        out["first_grad_s"] = round(time.perf_counter() - t0, 2)
        jax.block_until_ready(jvp(q0, v0))
        t0 = time.perf_counter()
        jax.block_until_ready(vgrad(q0s, v0s))
        out["first_vmap_grad_s"] = round(time.perf_counter() - t0, 2)
        lv.engine.wait()  # the optimized native libraries in use

        def sim():
            lv.simulate(problem, scheme, h=h, t_end=n_steps * h, tol=TOL, rescue=False, progress=False)

        sim()
        lv.engine.wait()
        parts = {
            "simulate": sim,
            "forward": lambda: jax.block_until_ready(fwd(q0, v0)),
            "grad": lambda: jax.block_until_ready(grad(q0, v0)),
            "jvp": lambda: jax.block_until_ready(jvp(q0, v0)),
        }
        for name, fn in parts.items():
            out[f"{name}_us"] = round(_median(fn, repeats) / n_steps * 1e6, 3)
        pair = _alternating(
            {
                "grad": lambda: jax.block_until_ready(grad(q0, v0)),
                "vmap": lambda: jax.block_until_ready(vgrad(q0s, v0s)),
            },
            repeats,
        )
    out["vmap_grad_over_grad"] = round(pair["vmap"] / pair["grad"], 2)
    out["grad_over_forward"] = round(out["grad_us"] / out["forward_us"], 2)
    out["forward_over_simulate"] = round(out["forward_us"] / out["simulate_us"], 2)
    return out


def print_row(key: str, r: dict) -> None:
    print(
        f"  {key:<20} simulate {r['simulate_us']:>8.2f}  flow {r['forward_us']:>8.2f}  grad {r['grad_us']:>8.2f}  "
        f"jvp {r['jvp_us']:>8.2f} us/step | grad/flow {r['grad_over_forward']:>5.2f}  flow/simulate "
        f"{r['forward_over_simulate']:>5.2f} | first call: flow {r['first_forward_s']:.1f} s, grad "
        f"{r['first_grad_s']:.1f} s, vmap(grad) {r['first_vmap_grad_s']:.1f} s ({r['steps']} steps) | "
        f"vmap of grad over {MEMBERS} / grad {r['vmap_grad_over_grad']:>5.2f}",
        flush=True,
    )
