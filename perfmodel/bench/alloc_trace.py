"""The CPU allocator's own view of one process, from a torch profiler trace (`profile_memory=True`).

The profiler records every allocation and free of a thread that has profiling state; gloo's
worker threads free some buffers without it (the free of an all-gather output or reduce-scatter
input whose last reference a gloo work object held), so those frees are missing from the trace,
and "Total Allocated" never drops for them. This module rebuilds the training thread's live
bytes from the events themselves: frees matched to allocations by address, a buffer whose free
was lost counted until its address is allocated again (the latest it can have been freed), and
the collective backend's own staging copies (allocated inside c10d ops, below the dispatcher
where no tracker sees them) kept apart. Used by `memory_real` (is the tracker right?) and by the
FSDP2 benchmark's CPU peak.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Event = tuple[float, Any, int, int, int]
"""A profiler memory event: (ts, tid, addr, bytes, the process's "Total Allocated")."""


STAGING_OPS = ("c10d::",)
"""Ops whose allocations are the collective backend's own staging (gloo clones a reduce-scatter
input; NCCL keeps such buffers outside the caching allocator), below the dispatcher where no
tracker sees them."""
COLLECTIVE_OPS = ("FSDP::all_gather", "FSDP::post_backward_reduce")
"""FSDP's spans that allocate its collective buffers (all-gather outputs, reduce-scatter inputs)."""
Spans = dict[Any, list[tuple[float, float]]]


def trace_events(prof: Any, window: str
                 ) -> tuple[list[dict[str, Any]], list[Event], Spans, Spans]:
    """(the `window` ranges, the memory events in time order, per thread the spans of
    `STAGING_OPS`, per thread the spans of `COLLECTIVE_OPS`)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    windows = [e for e in events if e.get("name") == window and e.get("ph") == "X"]
    if not windows:
        raise RuntimeError(f"profiler trace has no {window!r} range")
    memory = sorted((float(e.get("ts", -1)), e.get("tid"), int(e["args"].get("Addr", 0)),
                     int(e["args"].get("Bytes", 0)), int(e["args"]["Total Allocated"]))
                    for e in events
                    if e.get("name") == "[memory]" and "Total Allocated" in e.get("args", {}))
    ops = [e for e in events if e.get("ph") == "X"]
    return windows, memory, _spans(ops, STAGING_OPS), _spans(ops, COLLECTIVE_OPS)


def _spans(ops: list[dict[str, Any]], prefixes: tuple[str, ...]) -> Spans:
    spans: Spans = {}
    for e in ops:
        if str(e.get("name", "")).startswith(prefixes):
            start = float(e["ts"])
            spans.setdefault(e.get("tid"), []).append((start, start + float(e["dur"])))
    return spans


def _inside(spans: list[tuple[float, float]], ts: float) -> bool:
    return any(start <= ts <= end for start, end in spans)


def _unrecorded_frees(memory: list[Event]) -> set[int]:
    """Indexes of the allocations whose free the profiler did not record: their address was
    allocated again while they were live, or they were live when profiling stopped."""
    live: dict[int, int] = {}
    lost: set[int] = set()
    for i, (_, _, addr, nbytes, _) in enumerate(memory):
        if nbytes > 0:
            if addr in live:
                lost.add(live[addr])
            live[addr] = i
        elif nbytes < 0:
            live.pop(addr, None)
    return lost | set(live.values())


def _kind(i: int, ts: float, staging: list[tuple[float, float]],
          collective: list[tuple[float, float]], unrecorded: set[int]) -> int:
    """0: an allocation the tracker should see; 1: backend staging (not counted); 2: an FSDP
    collective buffer whose free the profiler lost (gloo's worker threads released it after
    Python, and so the tracker, had: counted until its address is reused, and kept apart)."""
    if _inside(staging, ts):
        return 1
    return 2 if i in unrecorded and _inside(collective, ts) else 0


def _live_series(memory: list[Event], staging: Spans, collective: Spans
                 ) -> list[tuple[float, int, list[int], int]]:
    """(ts, the training thread's live bytes, its live bytes by `_kind`, process total) per event.

    Frees are matched by address to the allocation, so whichever thread frees a buffer, it
    counts until it is freed; one whose free was not recorded counts until its address is
    allocated again (the latest it can have been freed)."""
    main_tid = Counter(tid for _, tid, _, _, _ in memory).most_common(1)[0][0]
    main_staging, main_collective = staging.get(main_tid, []), collective.get(main_tid, [])
    unrecorded = _unrecorded_frees(memory)
    live: dict[int, tuple[int, int]] = {}
    by_kind = [0, 0, 0]
    series = []
    for i, (ts, tid, addr, nbytes, total) in enumerate(memory):
        if nbytes != 0 and addr in live:
            size, kind = live.pop(addr)
            by_kind[kind] -= size
        if nbytes > 0 and tid == main_tid:
            kind = _kind(i, ts, main_staging, main_collective, unrecorded)
            live[addr] = (nbytes, kind)
            by_kind[kind] += nbytes
        series.append((ts, by_kind[0] + by_kind[2], list(by_kind), total))
    return series



@dataclass(frozen=True, kw_only=True, slots=True)
class WindowPeak:
    """The training thread's allocator peak inside one `record_function` window."""

    live_bytes: int
    """Peak of the training thread's live bytes (staging left out, lost frees counted)."""
    staging_bytes: int
    """Backend staging bytes live at that moment (not in `live_bytes`)."""
    retained_bytes: int
    """Of `live_bytes`, FSDP collective buffers whose free the profiler lost."""
    process_bytes: int
    """Peak of the process's "Total Allocated" in the window (every thread, staging included)."""


def window_peaks(prof: Any, window: str) -> list[WindowPeak]:
    """One `WindowPeak` per `record_function(window)` range of the finished profile `prof`."""
    windows, memory, staging, collective = trace_events(prof, window)
    series = _live_series(memory, staging, collective)
    peaks = []
    for w in windows:
        start, end = float(w["ts"]), float(w["ts"]) + float(w["dur"])
        inside = [row for row in series if start <= row[0] <= end]
        if not inside:
            raise RuntimeError(f"profiler trace has no memory event inside {window!r}")
        _, live, by_kind, _ = max(inside, key=lambda row: row[1])
        peaks.append(WindowPeak(live_bytes=live, staging_bytes=by_kind[1],
                                retained_bytes=by_kind[2],
                                process_bytes=max(row[3] for row in inside)))
    return peaks
