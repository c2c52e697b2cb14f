"""The allocator-trace rebuild (`perfmodel.bench.alloc_trace`) on hand-written event sequences.

The real profiler traces are checked end to end in test_bench_memory (tracker vs allocator on
real 2-rank gloo runs); here each rule is pinned on its own: frees matched by address, a lost
free counted until the address is reused, staging copies left out, other threads ignored."""

from __future__ import annotations

from perfmodel.bench.alloc_trace import _live_series, _unrecorded_frees

MAIN, GLOO = 1, 2
NO_SPANS: dict[int, list[tuple[float, float]]] = {}


def _ev(ts: float, tid: int, addr: int, nbytes: int) -> tuple[float, int, int, int, int]:
    return (ts, tid, addr, nbytes, 0)


def _live(events: list, staging=NO_SPANS, collective=NO_SPANS) -> list[int]:
    return [row[1] for row in _live_series(events, staging, collective)]


def test_frees_are_matched_by_address_whichever_thread_frees() -> None:
    events = [_ev(0, MAIN, 10, 100), _ev(1, MAIN, 20, 50), _ev(2, MAIN, 10, -100),
              _ev(3, GLOO, 20, -50), _ev(4, MAIN, 30, 7)]
    assert _live(events) == [100, 150, 50, 0, 7]


def test_other_threads_allocations_never_count() -> None:
    events = [_ev(0, MAIN, 10, 100), _ev(1, GLOO, 40, 999), _ev(2, MAIN, 11, 1),
              _ev(3, GLOO, 40, -999), _ev(4, MAIN, 12, 1)]
    assert _live(events) == [100, 100, 101, 101, 102]


def test_a_lost_free_counts_until_its_address_is_reused() -> None:
    # 10 is freed by a thread the profiler does not record; the allocator hands 10 out again
    events = [_ev(0, MAIN, 10, 100), _ev(1, MAIN, 11, 5), _ev(2, MAIN, 10, 60), _ev(3, MAIN, 12, 5)]
    assert _unrecorded_frees(events) == {0, 1, 2, 3}  # 0: its address reused; 1-3: live at the end
    assert _live(events) == [100, 105, 65, 70]


def test_lost_collective_buffers_are_reported_apart_and_staging_left_out() -> None:
    staging = {MAIN: [(1.5, 2.5)]}
    collective = {MAIN: [(0.0, 1.0)]}
    events = [_ev(0.5, MAIN, 10, 100), _ev(2.0, MAIN, 20, 30), _ev(3.0, MAIN, 30, 8),
              _ev(4.0, MAIN, 20, -30)]
    series = _live_series(events, staging, collective)
    assert [row[1] for row in series] == [100, 100, 108, 108]
    # by kind: tracked, staging (left out), lost collective buffer (counted, kept apart)
    assert series[1][2] == [0, 30, 100] and series[3][2] == [8, 0, 100]
