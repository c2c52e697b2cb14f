"""Progress reports (perfmodel.progress) and their rich bars on stderr (planner.cli.progress)."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from rich.console import Console

from perfmodel import progress
from perfmodel.spec.paths import REPO_ROOT
from planner.analysis.pareto import compute_frontier
from planner.cli.progress import RichBars, progress_bars
from planner.model.evaluate import build_problem
from planner.model.instance import load_instance
from planner.model.island_table import load_island_table

SMALL = str(REPO_ROOT / "instances" / "small-two-clusters.yaml")


class Recorder:
    """A ProgressSink that keeps every call."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object, object]] = []

    def begin(self, description: str, total: int | None) -> int:
        self.events.append(("begin", description, total))
        return len(self.events)

    def advance(self, task: int, steps: int) -> None:
        self.events.append(("advance", task, steps))

    def end(self, task: int) -> None:
        self.events.append(("end", task, None))


def test_track_reports_each_item_and_nothing_without_a_sink() -> None:
    assert list(progress.track(range(3), "x")) == [0, 1, 2]  # no sink: plain iteration
    sink = Recorder()
    with progress.reporting_to(sink):
        assert list(progress.track(iter("ab"), "letters", total=2)) == ["a", "b"]
        with progress.task("open-ended") as advance:
            advance(5)
    assert sink.events == [("begin", "letters", 2), ("advance", 1, 1), ("advance", 1, 1),
                           ("end", 1, None), ("begin", "open-ended", None), ("advance", 5, 5),
                           ("end", 5, None)]


def test_a_real_frontier_reports_its_solves() -> None:
    instance = load_instance(SMALL)
    problem = build_problem(instance, load_island_table(instance))
    sink = Recorder()
    with progress.reporting_to(sink):
        points = compute_frontier(problem, solver="cpsat").points
    assert sink.events[0] == ("begin", "frontier points (exact solves)", None)
    assert sum(int(str(e[2])) for e in sink.events if e[0] == "advance") == len(points) > 0
    assert sink.events[-1][0] == "end"


def _sink_is_none() -> bool:
    return progress._SINK.get() is None


def test_worker_processes_report_nowhere() -> None:
    # a forked worker inherits the parent's sink; the pool's initializer drops it
    with progress.reporting_to(Recorder()), \
            ProcessPoolExecutor(max_workers=1, initializer=progress.silence) as pool:
        assert pool.submit(_sink_is_none).result(timeout=60)


def _wait(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5.0
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_bars_on_a_terminal_after_the_delay_only() -> None:
    out = io.StringIO()
    bars = RichBars(Console(file=out, force_terminal=True, width=80), delay_s=0.0)
    task = bars.begin("island table of tiny", 4)
    _wait(lambda: bars._shown)
    bars.advance(task, 4)
    bars.end(task)
    assert "island table of tiny" in out.getvalue()
    assert not bars._shown  # the last task's end takes the display down
    # work that ends before the delay draws nothing
    quiet_out = io.StringIO()
    slow = RichBars(Console(file=quiet_out, force_terminal=True, width=80), delay_s=60.0)
    slow.end(slow.begin("fast work", 2))
    assert quiet_out.getvalue() == ""


def test_no_bars_off_a_terminal_or_when_quiet() -> None:
    plain = Console(file=io.StringIO(), force_terminal=False)
    with progress_bars(console=plain, delay_s=0.0) as bars:
        assert bars is None and progress._SINK.get() is None
    terminal = Console(file=io.StringIO(), force_terminal=True)
    with progress_bars(quiet=True, console=terminal, delay_s=0.0) as bars:
        assert bars is None
    with progress_bars(console=terminal, delay_s=0.0) as bars:
        assert isinstance(bars, RichBars) and progress._SINK.get() is bars
    assert progress._SINK.get() is None


def test_cli_output_is_the_same_with_and_without_quiet(run_cli: Callable[..., Any]) -> None:
    # off a terminal (pytest's captured streams) --quiet changes nothing but the solve's clock
    loud, quiet = run_cli("plan", SMALL), run_cli("-q", "plan", SMALL)
    assert loud.code == quiet.code == 0

    def unclocked(text: str) -> str:
        return re.sub(r"[\d.]+ ms", "T ms", text)

    assert unclocked(loud.out) == unclocked(quiet.out) and loud.err == quiet.err == ""
