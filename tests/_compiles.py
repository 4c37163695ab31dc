"""The XLA programs compiled while a block of a test runs, counted by JAX's monitoring events, under
every JAX version pyproject.toml allows (removing a listener is public API from JAX 0.8 on; JAX 0.7
has it under ``jax._src.monitoring``)."""

import contextlib

import jax

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def _unregister(listener) -> None:
    public = getattr(jax.monitoring, "unregister_event_duration_listener", None)
    if public is not None:
        public(listener)
    else:  # JAX 0.7
        from jax._src import monitoring

        monitoring._unregister_event_duration_listener_by_callback(listener)


@contextlib.contextmanager
def backend_compiles():
    """``with backend_compiles() as seen:``: ``seen`` lists the duration of each XLA backend compile
    made inside the block (a program found in the persistent cache is not compiled)."""
    seen: list = []

    def listener(event, duration, **_):
        if event == BACKEND_COMPILE:
            seen.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield seen
    finally:
        _unregister(listener)
