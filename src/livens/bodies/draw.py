"""Pictures of mechanisms built with :class:`livens.bodies.Assembly`: snapshots and animated GIFs.

The drawing description is the ``layout`` carried by the Problem's system
(``solution.problem.system.layout``, an :class:`~livens.bodies.Layout`): bodies with a ``shape``
(bars: their two ends) are drawn as thick polylines, rigid bodies in 3D and bodies without a shape
as their director frames (d1 red, d2 green, d3 blue: the rotationless description of KBS23a §5.1,
eq 58), particles as dots; joints as rings at their points, rods as thin lines, springs dotted,
dampers dashed, ground points as grey triangles. Only matplotlib (Agg, no pyplot state) and Pillow
are used; no ffmpeg.

* :func:`snapshot` overlays the configurations at some times in one picture (PNG, PDF, ...).
* :func:`animate` writes an animated GIF (``livens run ... --animate`` calls ``animate(sol, path)``).

Beams are drawn as their deformed centre lines (node to node), point masses on them as dots. With
``color_by`` each element is coloured by a stress resultant (:meth:`~livens.bodies.Beam.stress_resultants`):
``"stress"`` is |n| + |m|, the norm of the force plus the norm of the moment, as in SLO09 Fig. 6 (blue 0,
red ``color_range[1]``); any key "N1" ... "M3" its value. ``view="yz"`` (or "xz", "xy") draws a 3D
mechanism projected onto that coordinate plane (the swing of SLO09 moves in the (e2, e3) plane).
"""

from __future__ import annotations

import os

import numpy as np

from .beam import Beam
from .forces import Damper, Spring
from .joints import Distance, OnAxis
from .layout import Layout
from .rigid import PointMass

_FRAME_COLORS = ("tab:red", "tab:green", "tab:blue")


def layout_of(solution) -> Layout:
    """The mechanism description of a Solution (or Problem) whose system was built by an Assembly."""
    problem = getattr(solution, "problem", solution)
    system = getattr(problem, "system", None)
    layout = getattr(system, "layout", None)
    if not isinstance(layout, Layout):
        what = (
            "has no system attached (loaded from a file of a user-defined system?)"
            if system is None
            else (f"has a system ({getattr(system, 'name', '?')!r}) that was not built with livens.bodies.Assembly")
        )
        raise ValueError(
            f"Cannot draw this solution: it {what}, so there is no description of bodies and joints. "
            "Pictures are available for examples built from livens.bodies (e.g. 'double-four-bar', 'heavy-top')."
        )
    return layout


_VIEWS = {"xy": (0, 1), "xz": (0, 2), "yz": (1, 2), "yx": (1, 0), "zx": (2, 0), "zy": (2, 1)}


def beam_values(b: Beam, qb, color_by: str) -> np.ndarray:
    """Per element values (n, n_el) of ``color_by``: "stress" = |n| + |m| (SLO09 Fig. 6) or a key of
    :meth:`Beam.stress_resultants` ("N1", ..., "M3")."""
    r = b.stress_resultants(qb)
    if color_by == "stress":
        return np.linalg.norm(r["n"], axis=-1) + np.linalg.norm(r["m"], axis=-1)
    if color_by in r and r[color_by].ndim == qb.ndim:
        return r[color_by]
    raise ValueError(f"color_by must be 'stress' or one of N1, N2, N3, M1, M2, M3; got {color_by!r}.")


class _Scene:
    """Positions of everything drawn, for a stack of configurations q (n, d)."""

    def __init__(
        self,
        layout: Layout,
        q: np.ndarray,
        frame_size: float | None = None,
        color_by: str | None = None,
        view: str | None = None,
    ):
        """Evaluate every drawn point for the configurations ``q`` and fix common axis limits."""
        self.layout, self.dim = layout, layout.dim
        q = np.asarray(q, dtype=float)
        self.shapes, self.frames, self.particles, self.beams = [], [], [], []
        for b in layout.bodies:
            if isinstance(b, PointMass):
                self.particles.append((b.name, layout.center(q, b)))
                continue
            if isinstance(b, Beam):
                qb = layout.coordinates(q, b)
                line = b.nodes(qb)[..., 0, :]
                vals = None if color_by is None else beam_values(b, qb, color_by)
                self.beams.append((b.name, line, vals))
                self.particles.extend((f"{b.name}.n{k}", line[:, k]) for k, _ in b.point_masses)
                continue
            qb = layout.coordinates(q, b)
            if b.shape:
                self.shapes.append((b.name, np.stack([b.place(qb, X) for X in b.shape], axis=1)))
            if not b.shape or (self.dim == 3 and view is None):  # projected: shapes only
                dirs = [qb[..., self.dim * (i + 1) : self.dim * (i + 2)] for i in range(self.dim)]
                self.frames.append((b.name, layout.center(q, b), dirs))
        self.joints, self.segments, self.axes = [], [], []
        for j in layout.joints:
            pts = j.points()
            if isinstance(j, Distance):
                self.segments.append(("rod", np.stack([layout.x(q, p) for p in pts], axis=1)))
            else:
                self.joints.append(layout.x(q, pts[0]))
            if isinstance(j, OnAxis):
                self.axes.append((np.asarray(j.through), np.asarray(j.direction)))
        for f in layout.forces:
            if isinstance(f, (Spring, Damper)):
                self.segments.append((f.kind, np.stack([layout.x(q, p) for p in f.points()], axis=1)))
        grounds = [np.asarray(p.X) for el in layout.joints + layout.forces for p in el.points() if p.is_ground]
        grounds += [np.asarray(j.at) for j in layout.joints if getattr(j, "kind", "") == "fixed"]
        self.grounds = np.array(grounds).reshape(-1, self.dim)
        if view is not None:
            self._project(view)
        pts = [a.reshape(-1, self.dim) for _, a in self.shapes + self.particles + self.segments]
        pts += [a.reshape(-1, self.dim) for _, a, _ in self.beams]
        pts += [c.reshape(-1, self.dim) for _, c, _ in self.frames] + [a.reshape(-1, self.dim) for a in self.joints]
        pts.append(self.grounds)
        allp = np.concatenate(pts) if pts else np.zeros((1, self.dim))
        lo, hi = allp.min(axis=0), allp.max(axis=0)
        extent = float(max(np.max(hi - lo), 1e-9))
        self.frame_size = 0.15 * extent if frame_size is None else float(frame_size)
        pad = 0.08 * extent + (self.frame_size if self.frames else 0.0)
        center, half = 0.5 * (lo + hi), 0.5 * float(np.max(hi - lo)) + pad
        self.limits = [(c - half, c + half) for c in center]
        self.labels = ("x", "y", "z") if view is None else tuple("xyz"[i] for i in _VIEWS[view])

    def _project(self, view: str):
        """Keep the two coordinates of ``view`` ("yz": e2 and e3) of every drawn point (3D only)."""
        if self.dim != 3 or view not in _VIEWS:
            raise ValueError(f"view must be one of {', '.join(_VIEWS)} for a 3D mechanism; got {view!r} ({self.dim}D).")
        ix = list(_VIEWS[view])
        cut = lambda a: np.asarray(a)[..., ix]  # noqa: E731
        self.shapes = [(n, cut(a)) for n, a in self.shapes]
        self.particles = [(n, cut(a)) for n, a in self.particles]
        self.segments = [(k, cut(a)) for k, a in self.segments]
        self.beams = [(n, cut(a), v) for n, a, v in self.beams]
        self.frames = [(n, cut(c), [cut(d) for d in ds]) for n, c, ds in self.frames]
        self.joints = [cut(a) for a in self.joints]
        self.axes = [(cut(a), cut(e)) for a, e in self.axes]
        self.grounds = cut(self.grounds)
        self.dim = 2


def _new_axes(fig, dim: int):
    """Equal-aspect axes, 3D where the mechanism is."""
    if dim == 3:
        import mpl_toolkits.mplot3d  # noqa: F401  (registers the 3d projection)

        ax = fig.add_subplot(projection="3d")
        ax.set_box_aspect((1, 1, 1))
    else:
        ax = fig.add_subplot()
        ax.set_aspect("equal")
    return ax


def _setup(ax, scene: _Scene, title: str):
    """Limits, labels, title, ground supports and slider axes (static parts)."""
    lim = scene.limits
    ax.set_xlim(*lim[0])
    ax.set_ylim(*lim[1])
    labels = scene.labels
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    if scene.dim == 3:
        ax.set_zlim(*lim[2])
        ax.set_zlabel(labels[2])
    else:
        ax.grid(True, lw=0.3, alpha=0.5)
    ax.set_title(title, fontsize=9)
    if len(scene.grounds):  # support symbols just below the ground points
        below = scene.grounds - np.eye(scene.dim)[-1] * 0.03 * (lim[-1][1] - lim[-1][0])
        ax.plot(*below.T, ls="none", marker="^", ms=9, color="0.55", zorder=1)
    for a, e in scene.axes:
        span = 2.0 * max(abs(x) for pair in lim for x in pair)
        line = np.stack([a - span * e, a + span * e])
        ax.plot(*line.T, ls="-.", lw=0.8, color="0.6")


class _Artists:
    """Line artists for one configuration, updated in place from frame to frame."""

    def __init__(self, ax, scene: _Scene, color=None, alpha: float = 1.0, norm=None, cmap=None):
        """One artist per drawn item; ``color`` overrides the default colours; beams with values are
        coloured element by element through ``norm`` and ``cmap``."""
        self.scene, self.dim = scene, scene.dim
        cycle = [f"C{i}" for i in range(10)]
        kw = dict(alpha=alpha)
        self.norm, self.cmap = norm, cmap
        self.beams = []
        for i, (_, line, vals) in enumerate(scene.beams):
            if vals is None:
                self.beams.append(
                    ax.plot(
                        *([[]] * self.dim),
                        lw=2.5,
                        solid_capstyle="round",
                        color=color or cycle[(len(scene.shapes) + i) % 10],
                        **kw,
                    )[0]
                )
            else:
                if self.dim == 3:
                    from mpl_toolkits.mplot3d.art3d import Line3DCollection as LC
                else:
                    from matplotlib.collections import LineCollection as LC
                coll = LC(np.stack([line[0, :-1], line[0, 1:]], axis=1), linewidths=3.5, cmap=cmap, norm=norm, **kw)
                (ax.add_collection3d if self.dim == 3 else ax.add_collection)(coll)
                self.beams.append(coll)
        self.shapes = [
            ax.plot(*([[]] * self.dim), lw=3.5, solid_capstyle="round", color=color or cycle[i % 10], **kw)[0]
            for i, _ in enumerate(scene.shapes)
        ]
        self.frames = [
            [ax.plot(*([[]] * self.dim), lw=1.6, color=color or _FRAME_COLORS[k], **kw)[0] for k in range(self.dim)]
            for _ in scene.frames
        ]
        self.particles = [
            ax.plot(*([[]] * self.dim), ls="none", marker="o", ms=8, color=color or "k", **kw)[0]
            for _ in scene.particles
        ]
        styles = {
            "rod": dict(ls="-", lw=1.2, color="k"),
            "spring": dict(ls=":", lw=1.8, color="tab:purple"),
            "damper": dict(ls="--", lw=1.5, color="tab:brown"),
        }
        self.segments = [
            ax.plot(*([[]] * self.dim), **{**styles[k], **({"color": color} if color else {})}, **kw)[0]
            for k, _ in scene.segments
        ]
        self.joints = (
            ax.plot(
                *([[]] * self.dim), ls="none", marker="o", ms=6, mfc="white", mec=color or "k", mew=1.3, zorder=5, **kw
            )[0]
            if scene.joints
            else None
        )

    def _set(self, line, pts):
        """Set a line's points (2D or 3D)."""
        pts = np.asarray(pts).reshape(-1, self.dim)
        if self.dim == 3:
            line.set_data_3d(pts[:, 0], pts[:, 1], pts[:, 2])
        else:
            line.set_data(pts[:, 0], pts[:, 1])

    def update(self, n: int):
        """Show configuration ``n`` of the scene."""
        s = self.scene
        for line, (_, pts) in zip(self.shapes, s.shapes):
            self._set(line, pts[n])
        for lines, (_, c, dirs) in zip(self.frames, s.frames):
            for line, d in zip(lines, dirs):
                self._set(line, np.stack([c[n], c[n] + s.frame_size * d[n]]))
        for line, (_, x) in zip(self.particles, s.particles):
            self._set(line, x[n])
        for line, (_, pts) in zip(self.segments, s.segments):
            self._set(line, pts[n])
        if self.joints is not None:
            self._set(self.joints, np.stack([x[n] for x in s.joints]))
        for art, (_, line, vals) in zip(self.beams, s.beams):
            if vals is None:
                self._set(art, line[n])
            else:
                pts = line[n]
                art.set_segments(np.stack([pts[:-1], pts[1:]], axis=1))
                art.set_array(np.asarray(vals[n]))


def _figure(figsize, dpi):
    """A matplotlib Figure on an Agg canvas (no pyplot, no global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def _title(solution, layout: Layout) -> str:
    """Example name and scheme."""
    problem = getattr(solution, "problem", None)
    name = getattr(problem, "name", None) or layout.name
    scheme = getattr(solution, "scheme", "")
    return f"{name} ({scheme})" if scheme else name


def _color_map(color_range):
    """Norm and colormap of stress colours (blue low, red high, as SLO09 Fig. 6)."""
    import matplotlib as mpl

    lo, hi = (float(x) for x in color_range)
    if not hi > lo:
        raise ValueError(f"color_range must be (low, high) with high > low; got {color_range!r}.")
    return mpl.colors.Normalize(lo, hi), mpl.colormaps["coolwarm"]


def _auto_range(scene: _Scene) -> tuple:
    vals = [v for _, _, v in scene.beams if v is not None]
    hi = max(float(np.max(np.abs(v))) for v in vals) if vals else 1.0
    lo = min(float(np.min(v)) for v in vals) if vals else 0.0
    return (min(lo, 0.0), hi if hi > 0 else 1.0)


def snapshot(
    solution,
    times=None,
    path=None,
    frame_size: float | None = None,
    figsize=(6.0, 5.0),
    dpi: int = 150,
    color_by: str | None = None,
    color_range=None,
    view: str | None = None,
    title: str | None = None,
):
    """Overlay the configurations at ``times`` (nearest nodes; default six evenly spaced) in one
    picture, coloured from early (light) to late (dark), and write it to ``path`` (any format
    matplotlib writes). Returns the path, or the matplotlib Figure when ``path`` is None.
    ``color_by`` colours beam elements by a stress resultant ("stress" = |n| + |m|, SLO09 Fig. 6)
    over ``color_range`` (default: 0 to the largest value drawn); ``view`` projects a 3D mechanism
    onto a coordinate plane ("yz", "xz", "xy")."""
    import matplotlib as mpl

    layout = layout_of(solution)
    t = np.asarray(solution.t)
    times = np.linspace(t[0], t[-1], 6) if times is None else np.atleast_1d(np.asarray(times, dtype=float))
    if times.size == 0 or not np.all(np.isfinite(times)):
        raise ValueError(f"times must be finite numbers; got {times!r}.")
    if np.any(times < t[0] - 1e-12) or np.any(times > t[-1] + 1e-12):
        raise ValueError(f"times must lie in [{t[0]:g}, {t[-1]:g}] (the run's span); got {times.tolist()}.")
    idx = np.abs(t[None, :] - times[:, None]).argmin(axis=1)
    scene = _Scene(layout, np.asarray(solution.q)[idx], frame_size, color_by=color_by, view=view)
    fig = _figure(figsize, dpi)
    ax = _new_axes(fig, scene.dim)
    _setup(ax, scene, title or (_title(solution, layout) + ", t = " + ", ".join(f"{t[i]:.3g}" for i in idx)))
    cmap = mpl.colormaps["viridis"]
    norm = smap = None
    if color_by is not None:
        norm, smap = _color_map(color_range if color_range is not None else _auto_range(scene))
    for k in range(len(idx)):
        frac = k / max(len(idx) - 1, 1)
        art = _Artists(ax, scene, color=cmap(0.8 * (1 - frac)), alpha=0.5 + 0.5 * frac, norm=norm, cmap=smap)
        art.update(k)
    if color_by is not None:
        sm = mpl.cm.ScalarMappable(norm=norm, cmap=smap)
        fig.colorbar(sm, ax=ax, shrink=0.7, label="|n| + |m|" if color_by == "stress" else color_by)
    if path is None:
        return fig
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def animate(
    solution,
    path,
    fps: int = 20,
    max_frames: int = 200,
    frame_size: float | None = None,
    figsize=(5.0, 4.5),
    dpi: int = 80,
    color_by: str | None = None,
    color_range=None,
    view: str | None = None,
):
    """Write an animated GIF of the run to ``path``: at most ``max_frames`` nodes evenly spread over
    the run, shown at ``fps`` frames per second (matplotlib Agg renders, Pillow writes). Returns the path.
    ``color_by``, ``color_range`` and ``view`` as in :func:`snapshot`."""
    from PIL import Image

    layout = layout_of(solution)
    if not (isinstance(fps, (int, float)) and fps > 0):
        raise ValueError(f"fps must be a positive number; got {fps!r}.")
    if not (isinstance(max_frames, int) and max_frames >= 1):
        raise ValueError(f"max_frames must be a positive integer; got {max_frames!r}.")
    q, t = np.asarray(solution.q), np.asarray(solution.t)
    idx = np.unique(np.round(np.linspace(0, len(t) - 1, min(len(t), max_frames))).astype(int))
    scene = _Scene(layout, q[idx], frame_size, color_by=color_by, view=view)
    fig = _figure(figsize, dpi)
    ax = _new_axes(fig, scene.dim)
    title = _title(solution, layout)
    _setup(ax, scene, title)
    norm = smap = None
    if color_by is not None:
        norm, smap = _color_map(color_range if color_range is not None else _auto_range(scene))
    art = _Artists(ax, scene, norm=norm, cmap=smap)
    images = []
    for k, n in enumerate(idx):
        art.update(k)
        ax.set_title(f"{title}, t = {t[n]:.3f}", fontsize=9)
        fig.canvas.draw()
        rgba = np.asarray(fig.canvas.buffer_rgba())
        images.append(Image.fromarray(rgba[..., :3].copy()).quantize(colors=64, method=Image.Quantize.MEDIANCUT))
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    images[0].save(
        path, format="GIF", save_all=True, append_images=images[1:], duration=max(int(round(1000.0 / fps)), 20), loop=0
    )
    return path


__all__ = ["snapshot", "animate", "layout_of", "beam_values"]
