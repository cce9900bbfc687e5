"""Plots of the performance suite as PNG files in a case directory (the report links every ``*.png``).

matplotlib is optional (the ``plots`` extra): it is imported lazily, with the Agg backend and the
object-oriented API only (``matplotlib.figure.Figure``, no pyplot global state, safe in threads and
without a display). When it is missing, or drawing fails, a function returns ``None`` and the reason in
:data:`PlotResult.note`; a plot never fails a case or crashes a run.

* :func:`runtime_vs_quota` - runtime (s) against the compute quota (%), with the ideal ``B * 100 / q``;
* :func:`throughput_timeline` - W5 iterations/s over time (s from the first probe) with vertical
  markers at the quota changes (annotate calls);
* :func:`scale_ladder` - per-pod and aggregate throughput (runs/s) against the number of pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xpushare.model.atomic_file import atomic_write_bytes


@dataclass(frozen=True)
class PlotResult:
    """``path`` of the written PNG (None when not drawn) and ``note`` (why not, or "")."""

    path: Path | None
    note: str = ""


def _figure() -> tuple[Any, Any] | str:
    """A fresh (Figure, Axes) on the Agg canvas, or the reason matplotlib cannot be used."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # the optional dependency is missing
        return f"matplotlib not installed ({exc}); plot skipped (pip install 'xpushare[plots]')"
    fig = Figure(figsize=(7.0, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _save(fig: Any, path: Path) -> PlotResult:
    fig.tight_layout()
    atomic_write_bytes(path, lambda fh: fig.savefig(fh, format="png"))
    return PlotResult(path)


def draw_png(draw: Any, path: Path) -> PlotResult:
    """``draw(axes)`` on a fresh figure saved as PNG at ``path``; never raises (the reason in ``note``)."""
    return _guard(draw, path)


def _guard(draw: Any, path: Path) -> PlotResult:
    made = _figure()
    if isinstance(made, str):
        return PlotResult(None, made)
    fig, ax = made
    try:
        draw(ax)
        return _save(fig, path)
    except Exception as exc:  # a plot is a convenience: never let it break a verdict
        return PlotResult(None, f"plot {path.name} not drawn: {type(exc).__name__}: {exc}")


def _axes(ax: Any, xlabel: str, ylabel: str, title: str, *, from_zero: bool = False) -> None:
    """The common dress of every plot: axis labels, title, a light grid, a small legend (y from 0 if asked)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if from_zero:
        ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def runtime_vs_quota(
    path: Path,
    *,
    baseline_s: float | None,
    runtimes: Mapping[float, float | None],
    tolerance: float | None = None,
    title: str = "Runtime vs compute quota",
) -> PlotResult:
    """Measured runtime (s) per quota (%) as points, the baseline at 100 %, the ideal ``B * 100 / q``
    curve and, with ``tolerance`` (fraction), its band. Quotas without a runtime are left out."""
    pts = sorted((float(q), float(v)) for q, v in runtimes.items() if v is not None)

    def draw(ax: Any) -> None:
        if baseline_s:
            lo = min([q for q, _ in pts] + [10.0])
            qs = [lo + (100 - lo) * i / 100 for i in range(101)]
            ideal = [baseline_s * 100 / q for q in qs]
            ax.plot(qs, ideal, "-", color="tab:gray", label="ideal B·100/q")
            if tolerance:
                ax.fill_between(qs, [v * (1 - tolerance) for v in ideal], [v * (1 + tolerance) for v in ideal],
                                color="tab:gray", alpha=0.2, label=f"±{tolerance:.0%}")
            ax.plot([100], [baseline_s], "s", color="tab:green", label=f"baseline {baseline_s:.2f} s")
        if pts:
            ax.plot([q for q, _ in pts], [v for _, v in pts], "o", color="tab:blue", label="measured")
            for q, v in pts:
                ax.annotate(f"{v:.1f}s", (q, v), textcoords="offset points", xytext=(5, 5), fontsize=8)
        _axes(ax, "compute quota (%)", "runtime (s)", title)

    return _guard(draw, path)


def throughput_timeline(
    path: Path,
    *,
    series: Sequence[tuple[float, float]],
    markers: Sequence[tuple[float, str]] = (),
    title: str = "W5 throughput",
) -> PlotResult:
    """Throughput (iterations/s) at each probe interval's end time (unix s) as a step line, with a vertical
    marker per ``(unix time, label)`` (quota changes). Time axis: seconds from the first point."""
    if not series:
        return PlotResult(None, f"plot {path.name} not drawn: no throughput points")
    t0 = min([t for t, _ in series] + [t for t, _ in markers])

    def draw(ax: Any) -> None:
        ax.step([t - t0 for t, _ in series], [v for _, v in series], where="pre", color="tab:blue",
                label="iterations/s")
        for t, label in markers:
            ax.axvline(t - t0, color="tab:red", linestyle="--", alpha=0.8)
            ax.annotate(label, (t - t0, 0), textcoords="offset points", xytext=(3, 5), fontsize=8,
                        color="tab:red", rotation=90)
        _axes(ax, "time (s)", "iterations/s", title, from_zero=True)

    return _guard(draw, path)


def scale_ladder(
    path: Path,
    *,
    steps: Sequence[Mapping[str, Any]],
    cap: int | None = None,
    title: str = "Scale ladder",
) -> PlotResult:
    """Per step ``{"n", "aggregate_runs_per_s", "per_pod_runs_per_s": {pod: v}}``: aggregate throughput as a
    line, each pod's throughput as points, against the pod count (log2 x axis), with the cap marked."""
    if not steps:
        return PlotResult(None, f"plot {path.name} not drawn: no steps")

    def draw(ax: Any) -> None:
        ns = [int(s["n"]) for s in steps]
        agg = [s.get("aggregate_runs_per_s") for s in steps]
        ax.plot([n for n, a in zip(ns, agg, strict=True) if a is not None], [a for a in agg if a is not None],
                "o-", color="tab:blue", label="aggregate (runs/s)")
        xs, ys = [], []
        for s in steps:
            for v in (s.get("per_pod_runs_per_s") or {}).values():
                if v is not None:
                    xs.append(int(s["n"]))
                    ys.append(v)
        ax.plot(xs, ys, ".", color="tab:orange", alpha=0.7, label="per pod (runs/s)")
        if cap:
            ax.axvline(cap, color="tab:red", linestyle="--", label=f"cap {cap}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns)
        ax.set_xticklabels([str(n) for n in ns])
        _axes(ax, "pods", "throughput (runs/s)", title, from_zero=True)

    return _guard(draw, path)
