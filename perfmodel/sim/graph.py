"""Multi-stream task graphs and their simulator (paper §III-C, Fig. 1; DESIGN §2).

A graph holds tasks; each task belongs to one stream of one island (a stream is a sequential
resource: a CUDA compute stream, an NCCL communication stream, a WAN link) and may depend on
tasks of other streams (synchronisation edges). Tasks of one stream run strictly in the order
they were added, so an island with one compute and one communication stream has at most one
compute and one communication task active at a time, as in the paper's Fig. 1.

Dependencies may only name tasks added earlier. The add order is then a topological order that
agrees with every stream's order, and the schedule is a single pass:

    start(t) = max(end of the previous task of t's stream, end of every dependency of t)

Contention (`TaskGraph.set_overlap_slowdown`): on an island with factor f >= 1, a compute task
progresses at rate 1/f while any communication task of the same island is in flight, so its end
is found by walking the island's communication intervals (`contended_end_s`). The single pass
sees the communication added before the compute task; a communication task added later that
would start under an earlier compute task of such an island is rejected (ValueError), so the
result is exact. FSDP graphs issue every collective before the compute it overlaps. f = 1 (the
default) is the plain rule above.

Every quantity is derived from that schedule; the simulator is pure (same tasks -> same result)
and logs nothing at info level.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

COMPUTE_KINDS = frozenset({"forward", "backward", "optimizer", "compute", "inner_step"})
"""Task kinds that occupy a compute stream."""
COMM_KINDS = frozenset({"all_gather", "reduce_scatter", "all_reduce", "outer_all_reduce",
                        "send_recv", "all_to_all"})
"""Task kinds that are communication."""
KINDS = COMPUTE_KINDS | COMM_KINDS

StreamKey = tuple[str, str]
"""(island, stream) — a stream is identified within its island."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Task:
    """One unit of work on one stream."""

    task_id: int
    """Position in the graph (add order)."""
    name: str
    """Human-readable label (e.g. 'F3', 'AG root', 'step 4')."""
    island: str
    """Island (trace process) the task runs on."""
    stream: str
    """Stream (trace thread) within the island; tasks of a stream run in add order."""
    kind: str
    """One of KINDS; decides compute vs communication accounting and plot colours."""
    duration_s: float
    """Run time, seconds (>= 0)."""
    deps: tuple[int, ...] = ()
    """Tasks (earlier task_ids) that must end before this one starts."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"task {self.name!r}: unknown kind {self.kind!r}; "
                             f"expected one of {sorted(KINDS)}")
        if not (math.isfinite(self.duration_s) and self.duration_s >= 0):
            raise ValueError(f"task {self.name!r}: duration_s must be finite and >= 0, "
                             f"got {self.duration_s}")
        if any(d < 0 or d >= self.task_id for d in self.deps):
            raise ValueError(f"task {self.name!r} (id {self.task_id}): dependencies {self.deps} "
                             "must name tasks added before it")

    @property
    def is_comm(self) -> bool:
        return self.kind in COMM_KINDS

    @property
    def stream_key(self) -> StreamKey:
        return (self.island, self.stream)


class TaskGraph:
    """Builder: add tasks stream by stream, then `simulate()`."""

    def __init__(self) -> None:
        self._tasks: list[Task] = []
        self._slowdown: dict[str, float] = {}

    def set_overlap_slowdown(self, island: str, factor: float) -> None:
        """Compute of `island` runs `factor` (>= 1) times slower while its communication runs."""
        if not (math.isfinite(factor) and factor >= 1):
            raise ValueError(f"overlap slowdown of {island!r} must be finite and >= 1, "
                             f"got {factor}")
        self._slowdown[island] = float(factor)

    def add(self, name: str, *, island: str, stream: str, kind: str, duration_s: float,
            deps: Iterable[int | None] = ()) -> int:
        """Append a task; `None` entries in deps are ignored (convenient for optional edges)."""
        task = Task(task_id=len(self._tasks), name=name, island=island, stream=stream, kind=kind,
                    duration_s=float(duration_s),
                    deps=tuple(sorted({d for d in deps if d is not None})))
        self._tasks.append(task)
        return task.task_id

    @property
    def tasks(self) -> tuple[Task, ...]:
        return tuple(self._tasks)

    @property
    def overlap_slowdown(self) -> dict[str, float]:
        """Islands with a contention factor other than 1."""
        return {k: v for k, v in self._slowdown.items() if v != 1.0}

    def simulate(self) -> Schedule:
        return simulate(self._tasks, overlap_slowdown=self._slowdown)


@dataclass(frozen=True, kw_only=True, slots=True)
class Interval:
    """A scheduled task."""

    task: Task
    """The task."""
    start_s: float
    """Start time, seconds from the start of the graph."""
    end_s: float
    """End time, seconds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamStats:
    """Busy time and idle gaps of one stream over [0, makespan]."""

    island: str
    """Island of the stream."""
    stream: str
    """Stream name."""
    busy_s: float
    """Sum of task durations on the stream."""
    gaps: tuple[tuple[float, float], ...]
    """Idle (start_s, end_s) periods within [0, makespan], leading and trailing ones included."""

    @property
    def idle_s(self) -> float:
        return sum(end - start for start, end in self.gaps)


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """Result of simulating a task graph."""

    intervals: tuple[Interval, ...]
    """One interval per task, in task order."""
    makespan_s: float
    """End of the last task."""
    critical_path: tuple[int, ...]
    """Task ids of the longest dependency chain ending at the makespan, earliest first."""
    streams: dict[StreamKey, StreamStats] = field(default_factory=dict)
    """Per-stream busy time and idle gaps."""

    def stream_intervals(self, island: str, stream: str) -> tuple[Interval, ...]:
        return tuple(iv for iv in self.intervals if iv.task.stream_key == (island, stream))

    def islands(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(iv.task.island for iv in self.intervals))

    def busy_s(self, *, comm: bool, island: str | None = None) -> float:
        """Busy time of compute (comm=False) or communication tasks: summed durations, compute
        tasks slowed by contention counted as long as they ran."""
        return sum(iv.task.duration_s if comm else iv.end_s - iv.start_s for iv in self.intervals
                   if iv.task.is_comm == comm and (island is None or iv.task.island == island))

    def exposed_comm_s(self, island: str | None = None) -> float:
        """Time some communication of `island` runs while none of its compute does.

        Over all islands when island is None (each island counted separately, then summed).
        """
        islands = self.islands() if island is None else (island,)
        return sum(_exposed(self._spans(isl, comm=True), self._spans(isl, comm=False))
                   for isl in islands)

    def exposed_compute_s(self, island: str | None = None) -> float:
        """Time compute runs while no communication does (the mirror of exposed_comm_s)."""
        islands = self.islands() if island is None else (island,)
        return sum(_exposed(self._spans(isl, comm=False), self._spans(isl, comm=True))
                   for isl in islands)

    def compute_idle_s(self, island: str | None = None) -> float:
        """Makespan minus the union of compute intervals of the island(s), summed per island."""
        islands = self.islands() if island is None else (island,)
        return sum(self.makespan_s - _measure(_union(self._spans(isl, comm=False)))
                   for isl in islands)

    def _spans(self, island: str, *, comm: bool) -> list[tuple[float, float]]:
        return [(iv.start_s, iv.end_s) for iv in self.intervals
                if iv.task.island == island and iv.task.is_comm == comm and iv.end_s > iv.start_s]


def simulate(tasks: Sequence[Task], *,
             overlap_slowdown: Mapping[str, float] | None = None) -> Schedule:
    """Schedule tasks in add order (see module docstring)."""
    slow = {k: float(v) for k, v in (overlap_slowdown or {}).items() if v != 1.0}
    ends: list[float] = []
    stream_last: dict[StreamKey, int] = {}
    binding: list[int | None] = []  # predecessor that fixed each start (for the critical path)
    intervals: list[Interval] = []
    comm_seen: dict[str, list[int]] = {}  # contended islands: their communication so far
    compute_end: dict[str, float] = {}  # contended islands: latest compute end so far
    compute_streams: dict[str, set[str]] = {}  # contended islands: their compute streams
    for idx, task in enumerate(tasks):
        if task.task_id != idx:
            raise ValueError(f"task {task.name!r} has task_id {task.task_id}, expected {idx}")
        start, why = 0.0, None
        prev = stream_last.get(task.stream_key)
        if prev is not None:
            start, why = ends[prev], prev
        for dep in task.deps:
            # On a tie the first cross-stream dependency is named the cause: it is the wait.
            if ends[dep] > start or (ends[dep] == start and why in (None, prev)):
                start, why = ends[dep], dep
        end = start + task.duration_s
        if task.island in slow:
            end = _contended(task, start, end, intervals, comm_seen, compute_end, compute_streams,
                             slow[task.island])
        ends.append(end)
        binding.append(why)
        stream_last[task.stream_key] = idx
        intervals.append(Interval(task=task, start_s=start, end_s=end))
    makespan = max(ends, default=0.0)
    return Schedule(intervals=tuple(intervals), makespan_s=makespan,
                    critical_path=_critical_path(ends, binding, makespan),
                    streams=_stream_stats(intervals, makespan))


def _contended(task: Task, start: float, end: float, intervals: list[Interval],
               comm_seen: dict[str, list[int]], compute_end: dict[str, float],
               compute_streams: dict[str, set[str]], factor: float) -> float:
    """End of `task` on an island with contention factor `factor` (and the bookkeeping)."""
    island = task.island
    if task.is_comm:
        if start < compute_end.get(island, 0.0):
            raise ValueError(f"task {task.name!r} would start under compute added before it on "
                             f"island {island!r} with an overlap slowdown: add communication "
                             "before the compute it overlaps")
        comm_seen.setdefault(island, []).append(task.task_id)
        return end
    live = [i for i in comm_seen.get(island, ()) if intervals[i].end_s > start]
    streams = compute_streams.setdefault(island, set())
    streams.add(task.stream)
    if len(streams) == 1:  # later compute of this stream starts later: ended spans never matter
        comm_seen[island] = live
    spans = [(intervals[i].start_s, intervals[i].end_s) for i in live]
    if len({intervals[i].task.stream for i in live}) > 1:
        spans = _union(spans)  # several communication streams: in flight = their union
    end = float(contended_end_s(start, task.duration_s, spans, factor)) if spans else end
    compute_end[island] = max(compute_end.get(island, 0.0), end)
    return end


def contention_delay(start: np.ndarray, end: np.ndarray, spans: Sequence[tuple[Any, Any]],
                     extra_in: np.ndarray, lost: np.ndarray) -> np.ndarray:
    """`contended_end_s` from the uncontended `end` = start + work, with f − 1 and 1 − 1/f given
    (the fast path computes them once per pass)."""
    for a, b in spans:
        lo = np.maximum(a, start)
        delay = (end - lo) * extra_in
        span = b - lo
        np.maximum(span, 0.0, out=span)
        span *= lost
        np.minimum(delay, span, out=delay)
        np.maximum(delay, 0.0, out=delay)
        end = end + delay
    return end


def contended_end_s(start_s: Any, work_s: Any, spans: Sequence[tuple[Any, Any]],
                    slowdown: Any) -> Any:
    """End of `work_s` seconds of compute starting at `start_s` that progresses at rate 1/slowdown
    inside the time-ordered, disjoint communication `spans` ((start, end) pairs) and at rate 1
    outside them. Broadcasts over numpy arrays (the fast path calls it with (N,) arrays).

    E is the end if no further span slowed the task. A span clipped to the task, [lo, b] with
    lo = max(a, start), delays it only if E > lo: the x = E − lo seconds of work left at lo take
    x·f inside the span if they fit ((b − lo)/f), else the span costs (b − lo)·(1 − 1/f) extra,
    so E grows by max(0, min(x·(f − 1), (b − lo)·(1 − 1/f)))."""
    start = np.atleast_1d(np.asarray(start_s, dtype=float))  # 1-d: the delays are computed in place
    f = np.asarray(slowdown, dtype=float)
    end = contention_delay(start, start + np.asarray(work_s, dtype=float), spans, f - 1.0,
                           1.0 - 1.0 / f)
    if max(np.ndim(start_s), np.ndim(work_s), np.ndim(slowdown)) == 0:
        return float(end[0])
    return end


def _critical_path(ends: list[float], binding: list[int | None],
                   makespan: float) -> tuple[int, ...]:
    if not ends:
        return ()
    # The last task to finish at the makespan (ties: the latest added) ends the chain.
    cur: int | None = max(i for i, e in enumerate(ends) if e == makespan)
    path: list[int] = []
    while cur is not None:
        path.append(cur)
        cur = binding[cur]
    return tuple(reversed(path))


def _stream_stats(intervals: list[Interval], makespan: float) -> dict[StreamKey, StreamStats]:
    by_stream: dict[StreamKey, list[Interval]] = {}
    for iv in intervals:
        by_stream.setdefault(iv.task.stream_key, []).append(iv)
    out: dict[StreamKey, StreamStats] = {}
    for key, ivs in by_stream.items():
        gaps, cursor = [], 0.0
        for iv in ivs:  # stream order == time order: a stream never overlaps itself
            if iv.start_s > cursor:
                gaps.append((cursor, iv.start_s))
            cursor = max(cursor, iv.end_s)
        if makespan > cursor:
            gaps.append((cursor, makespan))
        out[key] = StreamStats(island=key[0], stream=key[1], gaps=tuple(gaps),
                               busy_s=sum(iv.task.duration_s if iv.task.is_comm
                                          else iv.end_s - iv.start_s for iv in ivs))
    return out


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _measure(spans: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in spans)


def _exposed(mine: list[tuple[float, float]], others: list[tuple[float, float]]) -> float:
    """Measure of union(mine) minus union(others)."""
    a, b = _union(mine), _union(others)
    total, j = 0.0, 0
    for start, end in a:
        covered = 0.0
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            covered += min(end, b[k][1]) - max(start, b[k][0])
            k += 1
        total += (end - start) - covered
    return total
