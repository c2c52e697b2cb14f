"""perfmodel.sim.graph: the multi-stream task-graph simulator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.sim.graph import Task, TaskGraph, contended_end_s, simulate


def _hand_graph() -> TaskGraph:
    """compute: C1(2) C2(1, needs X1) C3(1)      comm: X1(3, needs C1) X2(1)

    Hand schedule:
      C1 [0,2]; X1 waits for C1 -> [2,5]; C2 waits for X1 -> [5,6]; X2 follows X1 -> [5,6];
      C3 follows C2 -> [6,7]. Makespan 7; compute gaps [2,5]; comm gaps [0,2], [6,7].
      Exposed comm = X1 not under compute = [2,5] = 3 (X2 overlaps C2).
      Critical path: C1 -> X1 -> C2 -> C3.
    """
    g = TaskGraph()
    c1 = g.add("C1", island="i", stream="compute", kind="forward", duration_s=2)
    x1 = g.add("X1", island="i", stream="comm", kind="all_gather", duration_s=3, deps=[c1])
    g.add("C2", island="i", stream="compute", kind="forward", duration_s=1, deps=[x1])
    g.add("X2", island="i", stream="comm", kind="all_gather", duration_s=1)
    g.add("C3", island="i", stream="compute", kind="backward", duration_s=1)
    return g


def test_hand_graph_schedule() -> None:
    sched = _hand_graph().simulate()
    assert [(iv.start_s, iv.end_s) for iv in sched.intervals] == [
        (0, 2), (2, 5), (5, 6), (5, 6), (6, 7),
    ]
    assert sched.makespan_s == 7
    assert [sched.intervals[i].task.name for i in sched.critical_path] == ["C1", "X1", "C2", "C3"]
    assert sched.streams[("i", "compute")].gaps == ((2, 5),)
    assert sched.streams[("i", "comm")].gaps == ((0, 2), (6, 7))
    assert sched.exposed_comm_s() == 3
    assert sched.exposed_compute_s() == 3  # C1 and C3; C2 overlaps X2
    assert sched.compute_idle_s() == 3
    assert sched.busy_s(comm=True) == 4 and sched.busy_s(comm=False) == 4


def test_in_stream_order_is_add_order() -> None:
    """A task whose dependencies are ready early still waits for its stream predecessor."""
    g = TaskGraph()
    slow = g.add("slow", island="i", stream="s", kind="compute", duration_s=5)
    g.add("ready", island="i", stream="s", kind="compute", duration_s=1)
    g.add("other", island="i", stream="t", kind="all_gather", duration_s=1, deps=[slow])
    sched = g.simulate()
    assert sched.intervals[1].start_s == 5
    assert sched.intervals[2].start_s == 5


def test_pure_and_validating() -> None:
    g = _hand_graph()
    assert g.simulate() == g.simulate()
    with pytest.raises(ValueError, match="added before"):
        Task(task_id=0, name="x", island="i", stream="s", kind="forward", duration_s=1, deps=(0,))
    with pytest.raises(ValueError, match="unknown kind"):
        g.add("bad", island="i", stream="s", kind="nap", duration_s=1)
    with pytest.raises(ValueError, match="duration_s"):
        g.add("bad", island="i", stream="s", kind="forward", duration_s=-1)
    assert simulate([]).makespan_s == 0


def test_islands_are_accounted_separately() -> None:
    g = TaskGraph()
    g.add("a", island="A", stream="comm", kind="all_gather", duration_s=2)
    g.add("b", island="B", stream="compute", kind="forward", duration_s=2)
    sched = g.simulate()
    # B's compute does not hide A's communication.
    assert sched.exposed_comm_s("A") == 2 and sched.exposed_comm_s() == 2
    assert sched.islands() == ("A", "B")


@st.composite
def _random_graph(draw: st.DrawFn) -> list[Task]:
    n = draw(st.integers(1, 25))
    tasks = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        tasks.append(
            Task(
                task_id=i,
                name=f"t{i}",
                island=draw(st.sampled_from(["a", "b"])),
                stream=draw(st.sampled_from(["compute", "comm"])),
                kind=draw(st.sampled_from(["forward", "all_gather"])),
                duration_s=draw(st.floats(0, 10, allow_nan=False)),
                deps=tuple(sorted(deps)),
            )
        )
    return tasks


@settings(max_examples=150, deadline=None)
@given(_random_graph())
def test_random_graphs_start_as_early_as_allowed(tasks: list[Task]) -> None:
    sched = simulate(tasks)
    last: dict[tuple[str, str], float] = {}
    for iv in sched.intervals:
        t = iv.task
        earliest = max([last.get(t.stream_key, 0.0), *(sched.intervals[d].end_s for d in t.deps)])
        assert iv.start_s == earliest
        assert iv.end_s == iv.start_s + t.duration_s
        last[t.stream_key] = iv.end_s
    # The critical path is a chain of back-to-back tasks from time 0 to the makespan.
    path = [sched.intervals[i] for i in sched.critical_path]
    assert path[0].start_s == 0 and path[-1].end_s == sched.makespan_s
    assert all(a.end_s == b.start_s for a, b in zip(path, path[1:], strict=False))
    for stats in sched.streams.values():
        assert stats.busy_s + stats.idle_s == pytest.approx(sched.makespan_s)


def test_overlap_slowdown_by_hand() -> None:
    """W [0,1] then X [1,3] are in flight while C (4 s of work, from 0) runs: 3 s at half rate
    (1.5 s of work), then 2.5 s alone -> C ends at 5.5. The other island is unaffected."""
    g = TaskGraph()
    g.set_overlap_slowdown("i", 2.0)
    g.add("W", island="i", stream="comm", kind="all_gather", duration_s=1)
    g.add("X", island="i", stream="comm", kind="all_gather", duration_s=2)
    g.add("C", island="i", stream="compute", kind="forward", duration_s=4)
    g.add("D", island="j", stream="compute", kind="forward", duration_s=4)
    g.add("Y", island="j", stream="comm", kind="all_gather", duration_s=2)
    sched = g.simulate()
    assert [(iv.start_s, iv.end_s) for iv in sched.intervals] == [
        (0, 1), (1, 3), (0, 5.5), (0, 4), (0, 2),
    ]
    assert sched.busy_s(comm=False, island="i") == 5.5  # the compute stream was occupied 5.5 s
    assert g.overlap_slowdown == {"i": 2.0}


def test_contended_end_matches_by_hand_and_vectorised() -> None:
    spans = [(1.0, 3.0), (4.0, 4.0), (5.0, 9.0)]
    # 1 alone, 2 at 1/4 (0.5 work), 2 alone (1->3.5 work done at 5), 0.5 more at 1/4 -> 7
    assert contended_end_s(0.0, 4.0, spans, 4.0) == pytest.approx(7.0)
    assert contended_end_s(0.0, 0.5, spans, 4.0) == 0.5
    assert contended_end_s(10.0, 1.0, spans, 4.0) == 11.0
    starts = np.array([0.0, 0.0, 10.0])
    np.testing.assert_array_equal(contended_end_s(starts, np.array([4.0, 0.5, 1.0]), spans, 4.0),
                                  [contended_end_s(0.0, 4.0, spans, 4.0), 0.5, 11.0])


def test_late_communication_under_slowed_compute_is_rejected() -> None:
    g = TaskGraph()
    g.set_overlap_slowdown("i", 1.5)
    g.add("C", island="i", stream="compute", kind="forward", duration_s=4)
    g.add("X", island="i", stream="comm", kind="all_gather", duration_s=2)
    with pytest.raises(ValueError, match="before the compute it overlaps"):
        g.simulate()
    with pytest.raises(ValueError, match=">= 1"):
        g.set_overlap_slowdown("i", 0.5)
