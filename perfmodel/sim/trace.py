"""Outputs of simulated timelines: Chrome trace-event JSON (Perfetto) and PNG figures.

* `chrome_trace`: one process (pid) per island, one thread (tid) per stream, "X" complete events
  in microseconds, "M" metadata events naming processes and threads. Opens in ui.perfetto.dev
  and chrome://tracing.
* `plot_timelines`: stream rows in the style of the paper's figures 3 and 6 (all_gather red,
  reduce_scatter orange, compute blue, outer all_reduce green, blocking grey and hatched).
* `plot_sweep` / `plot_throughput`: figures 4 (iteration time vs micro-batch, absolute and
  relative) and 5 (throughput vs runtime, grey markers where the micro-batch does not fit).

matplotlib is imported lazily with the Agg backend, so importing this module stays cheap.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfmodel.sim.graph import Schedule

if TYPE_CHECKING:
    import pandas as pd

BLOCKED = "blocked"
"""Span kind of compute-stream time lost waiting for a late outer exchange."""
COLOURS = {
    "all_gather": "#d62728", "reduce_scatter": "#ff7f0e", "forward": "#4a90d9",
    "backward": "#1f4e8c", "optimizer": "#9ecae1", "compute": "#1f77b4", "inner_step": "#1f77b4",
    "all_reduce": "#2ca02c", "outer_all_reduce": "#2ca02c", "all_to_all": "#9467bd",
    BLOCKED: "#9e9e9e",
}
LABELS = {
    "all_gather": "all_gather", "reduce_scatter": "reduce_scatter", "forward": "forward",
    "backward": "backward (+recompute)", "optimizer": "optimizer", "compute": "compute",
    "inner_step": "inner step", "all_reduce": "all_reduce",
    "outer_all_reduce": "outer-step all_reduce", "all_to_all": "all_to_all (MoE)",
    BLOCKED: "outer-step induced blocking",
}
_EDGED_SPANS = 600
"""Panels with at most this many spans draw task edges."""
_STREAM_ORDER = {"compute": 0, "train": 0, "comm": 1, "outer": 2}


@dataclass(frozen=True, kw_only=True, slots=True)
class Span:
    """One drawn/traced interval."""

    island: str
    """Process row group (trace pid)."""
    stream: str
    """Row within the island (trace tid)."""
    kind: str
    """Task kind (colour), or BLOCKED."""
    name: str
    """Label."""
    start_s: float
    """Start, seconds."""
    end_s: float
    """End, seconds."""


def schedule_spans(schedule: Schedule, *, offset_s: float = 0.0,
                   island: str | None = None) -> list[Span]:
    """Every interval of a schedule as spans (optionally shifted and moved to another island)."""
    return [Span(island=island or iv.task.island, stream=iv.task.stream, kind=iv.task.kind,
                 name=iv.task.name, start_s=iv.start_s + offset_s, end_s=iv.end_s + offset_s)
            for iv in schedule.intervals]


def expand_steps(outer: Schedule, step: Schedule, *, kind: str = "inner_step") -> list[Span]:
    """Spans of a two-level schedule with each `kind` task replaced by the nested step schedule
    shifted to its start (paper §III-C-1: a second-level task is a nested island graph)."""
    spans: list[Span] = []
    for iv in outer.intervals:
        if iv.task.kind == kind:
            spans.extend(schedule_spans(step, offset_s=iv.start_s, island=iv.task.island))
        else:
            spans.append(Span(island=iv.task.island, stream=iv.task.stream, kind=iv.task.kind,
                              name=iv.task.name, start_s=iv.start_s, end_s=iv.end_s))
    return spans


def blocked_spans(schedule: Schedule, *, island: str, stream: str,
                  kind: str = "inner_step") -> list[Span]:
    """Gaps between consecutive `kind` tasks of one stream: time the stream was held back."""
    ivs = [iv for iv in schedule.stream_intervals(island, stream) if iv.task.kind == kind]
    return [Span(island=island, stream="compute", kind=BLOCKED,
                 name=f"blocked before {b.task.name}", start_s=a.end_s, end_s=b.start_s)
            for a, b in zip(ivs, ivs[1:], strict=False) if b.start_s > a.end_s]


# ---- Chrome trace-event format ---------------------------------------------------------------

def chrome_trace(spans: Iterable[Span], *,
                 metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """Trace-event JSON object:
    {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": ...}."""
    spans = list(spans)
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    for sp in _ordered(spans):
        pids.setdefault(sp.island, len(pids) + 1)
        tids.setdefault((sp.island, sp.stream), len(tids) + 1)
    events: list[dict[str, Any]] = []
    for island, pid in pids.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": island}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
    for (island, stream), tid in tids.items():
        events.append({"name": "thread_name", "ph": "M", "pid": pids[island], "tid": tid,
                       "args": {"name": stream}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pids[island], "tid": tid,
                       "args": {"sort_index": tid}})
    for sp in spans:
        events.append({"name": sp.name, "cat": sp.kind, "ph": "X", "pid": pids[sp.island],
                       "tid": tids[(sp.island, sp.stream)], "ts": sp.start_s * 1e6,
                       "dur": (sp.end_s - sp.start_s) * 1e6, "args": {"kind": sp.kind}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": metadata or {}}


def write_chrome_trace(spans: Iterable[Span], path: str | Path, *,
                       metadata: dict[str, Any] | None = None) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(chrome_trace(spans, metadata=metadata)))
    return out


def _ordered(spans: Sequence[Span]) -> list[Span]:
    islands = list(dict.fromkeys(sp.island for sp in spans))
    return sorted(spans, key=lambda sp: (islands.index(sp.island),
                                         _STREAM_ORDER.get(sp.stream, 9), sp.stream))


# ---- PNG figures ---------------------------------------------------------------------------------

def _pyplot() -> Any:
    # lazy: matplotlib loads only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib loads only when a figure is drawn
    import matplotlib.pyplot as plt

    return plt


def plot_timelines(panels: Sequence[tuple[str, Sequence[Span]]], path: str | Path, *,
                   title: str | None = None) -> Path:
    """One timeline panel per (title, spans): a row per (island, stream), coloured by kind."""
    plt = _pyplot()
    # lazy: matplotlib loads only when a figure is drawn
    from matplotlib.patches import Patch

    rows_per_panel = [len({(sp.island, sp.stream) for sp in spans}) for _, spans in panels]
    fig, axes = plt.subplots(len(panels), 1, squeeze=False,
                             figsize=(11, 0.9 + sum(0.45 * r + 0.6 for r in rows_per_panel)),
                             gridspec_kw={"height_ratios": [max(r, 1) for r in rows_per_panel]})
    kinds: dict[str, None] = {}
    for ax, (panel_title, spans) in zip(axes[:, 0], panels, strict=True):
        rows = list(dict.fromkeys((sp.island, sp.stream) for sp in _ordered(spans)))
        islands = {island for island, _ in rows}
        bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for sp in spans:
            y = len(rows) - 1 - rows.index((sp.island, sp.stream))
            bars.setdefault((y, sp.kind), []).append((sp.start_s, sp.end_s - sp.start_s))
        for (y, kind), xranges in bars.items():  # one artist per row and kind keeps big plots fast
            kinds.setdefault(kind)
            blocked = kind == BLOCKED
            # Thin white edges separate adjacent tasks; on crowded panels they would paint it white.
            edge = "#555555" if blocked else ("white" if len(spans) <= _EDGED_SPANS else "none")
            ax.broken_barh(xranges, (y - 0.4, 0.8), facecolors=COLOURS.get(kind, "#777777"),
                           edgecolor=edge, linewidth=0.6 if blocked else 0.3,
                           hatch="///" if blocked else None)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{isl}/{st}" if len(islands) > 1 else st
                            for isl, st in reversed(rows)])
        ax.set_title(panel_title, fontsize=9, loc="left")
        ax.set_xlim(left=0)
    axes[-1, 0].set_xlabel("time (s)")
    handles = [Patch(facecolor=COLOURS.get(k, "#777777"), hatch="///" if k == BLOCKED else None,
                     edgecolor="#555555", label=LABELS.get(k, k)) for k in kinds]
    if title:
        fig.suptitle(title, fontsize=10)
    ncol = min(len(handles), 4)
    # Reserve the legend's height in inches, so short one-panel figures keep the axis label clear.
    legend_in = 0.22 * -(-len(handles) // max(ncol, 1)) + 0.15
    fig.tight_layout(rect=(0, min(0.4, legend_in / fig.get_figheight()), 1, 1))
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    return _save(fig, path, plt)


def plot_sweep(sweep: pd.DataFrame, path: str | Path) -> Path:
    """Figure 4: iteration time vs micro-batch per (model, GPUs) — absolute (left), relative
    (right)."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for (model, gpus), part in sweep.groupby(["model", "gpus"], sort=False):
        label = f"{model} ({gpus} GPUs)"
        line = left.plot(part["micro_batch"], part["step_time_s"], marker="o", label=label)[0]
        right.plot(part["micro_batch"], part["relative_step_time"], marker="o",
                   color=line.get_color(), label=label)
        bad = part[~part["fits"]]
        left.scatter(bad["micro_batch"], bad["step_time_s"], color="grey", zorder=3)
        right.scatter(bad["micro_batch"], bad["relative_step_time"], color="grey", zorder=3)
    for ax, ylabel in ((left, "iteration time (s)"),
                       (right, "relative increase (x of smallest micro-batch)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("micro-batch per GPU")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    right.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path, plt)


def plot_throughput(sweep: pd.DataFrame, path: str | Path) -> Path:
    """Figure 5: throughput vs iteration time, one panel per GPU count; grey = does not fit."""
    plt = _pyplot()
    # lazy: matplotlib loads only when a figure is drawn
    from matplotlib.ticker import NullFormatter

    gpu_counts = list(dict.fromkeys(sweep["gpus"]))
    fig, axes = plt.subplots(1, len(gpu_counts), figsize=(5.5 * len(gpu_counts), 4), squeeze=False)
    for ax, gpus in zip(axes[0], gpu_counts, strict=True):
        for model, part in sweep[sweep["gpus"] == gpus].groupby("model", sort=False):
            line = ax.plot(part["step_time_s"], part["tokens_per_s"], marker="o",
                           label=str(model))[0]
            bad = part[~part["fits"]]
            ax.scatter(bad["step_time_s"], bad["tokens_per_s"], color="grey", zorder=3)
            line.set_markevery([bool(f) for f in part["fits"]])
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # less than a decade: minor labels collide
        ax.set_xlabel("iteration time (s)")
        ax.set_ylabel("throughput (tokens/s)")
        ax.set_title(f"{gpus} GPUs (grey: micro-batch does not fit)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path, plt)


def _save(fig: Any, path: str | Path, plt: Any) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
