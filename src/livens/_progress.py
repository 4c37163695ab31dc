"""A progress bar on standard error: steps done, rate and time left (tqdm).

Shown on a terminal once a run has taken ``delay`` seconds (``enabled=None``; the environment
variable ``LIVENS_PROGRESS_DELAY`` sets it in seconds, 0 shows the bar at once), always
(``enabled=True``, also when standard error is a file or a pipe) or never (``enabled=False``).
A terminal may report its size as 0 x 0 (a pseudo-terminal nobody has sized, as under
``script(1)``, a CI runner or ``pty.fork``); tqdm then draws nothing at all, so the size is
given to it explicitly, 80 x 24 where the terminal does not say.
"""

from __future__ import annotations

import os
import sys


def terminal_size(stream=None) -> tuple[int, int]:
    """(columns, rows) of the terminal behind ``stream`` (standard error by default), with
    $COLUMNS / $LINES and then 80 x 24 wherever the terminal reports 0 or cannot be asked."""
    stream = sys.stderr if stream is None else stream
    cols = rows = 0
    try:
        size = os.get_terminal_size(stream.fileno())
        cols, rows = size.columns, size.lines
    except (OSError, ValueError, AttributeError):
        pass

    def env(name):
        try:
            return max(int(os.environ.get(name, "0")), 0)
        except ValueError:
            return 0

    return (cols or env("COLUMNS") or 80), (rows or env("LINES") or 24)


def default_delay() -> float:
    """Seconds a run takes before its bar appears: $LIVENS_PROGRESS_DELAY, else 2."""
    text = os.environ.get("LIVENS_PROGRESS_DELAY", "")
    try:
        return max(float(text), 0.0) if text.strip() else 2.0
    except ValueError:
        raise ValueError(f"LIVENS_PROGRESS_DELAY must be a number of seconds; got {text!r}.") from None


def progress_bar(
    total: int, enabled: bool | None = None, unit: str = "step", delay: float | None = None, desc: str | None = None
):
    """A tqdm bar for ``total`` units on standard error, or None where none is shown.

    It shows the count done, the rate (units per second) and the estimated time left.
    ``enabled=None`` (the default of :func:`livens.simulate`): only when standard error is a
    terminal, and only once ``delay`` seconds (default :func:`default_delay`) have passed
    (short runs print nothing);
    ``True``: always, from the start; ``False``: never.
    """
    if enabled is False:
        return None
    stream = sys.stderr
    if enabled is None:
        try:
            if not stream.isatty():
                return None
        except (AttributeError, ValueError):
            return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover  (tqdm is a dependency)
        return None
    delay = default_delay() if delay is None else delay
    cols, rows = terminal_size(stream)
    return tqdm(
        total=total,
        unit=unit,
        unit_scale=True,
        desc=desc,
        file=stream,
        leave=False,
        delay=delay if enabled is None else 0.0,
        ncols=min(cols, 120),
        nrows=max(rows, 2),
        dynamic_ncols=False,
        mininterval=0.25,
    )
