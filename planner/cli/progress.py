"""rich progress bars on stderr for the library's progress reports (perfmodel.progress).

Claim: a command whose work lasts over `DELAY_S` shows one bar per running task on stderr
(description, bar or spinner, done/total, elapsed, ETA), cleared when the task ends; a command
that ends sooner shows nothing, and off a terminal or under `shardmeter --quiet` nothing is ever
drawn, so stdout (tables, JSON, CSV) and stderr of scripted runs are unchanged.
Why: users waited minutes on `validate` and infeasible plans with no sign of life (issue 29); a
bar that flashes for 0.2 s on a fast command is noise, hence the delay. The display starts from
a timer thread, so a task whose first step is long still appears on time; stdout is not
redirected (the answer is printed after the bars end).
Checked by: tests/test_progress.py (bars on a forced terminal after the delay, none before it,
none on a plain stream, the CLI output unchanged).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from perfmodel.progress import reporting_to

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

DELAY_S = 2.0
"""Work shorter than this shows no bar (issue 29: bars for anything over about 2 s)."""


class RichBars:
    """A `perfmodel.progress.ProgressSink` drawing rich bars on `console` after `delay_s`."""

    def __init__(self, console: Console, *, delay_s: float = DELAY_S) -> None:
        # lazy: rich.progress only where a terminal shows it
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress: Progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True,
            redirect_stdout=False, redirect_stderr=False)
        self.delay_s = delay_s
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._shown = False
        self._open = 0

    def begin(self, description: str, total: int | None) -> int:
        with self._lock:
            task = self.progress.add_task(description, total=total)
            self._open += 1
            if self._open == 1 and not self._shown and self._timer is None:
                self._timer = threading.Timer(self.delay_s, self._show)
                self._timer.daemon = True
                self._timer.start()
            return int(task)

    def advance(self, task: int, steps: int) -> None:
        self.progress.advance(_task_id(task), steps)

    def end(self, task: int) -> None:
        with self._lock:
            self.progress.remove_task(_task_id(task))
            self._open -= 1
            if self._open == 0:
                self._hide()

    def close(self) -> None:
        """Stop drawing (the command is over, normally or not)."""
        with self._lock:
            self._hide()

    def _show(self) -> None:
        with self._lock:
            self._timer = None
            if self._open > 0 and not self._shown:
                self.progress.start()
                self._shown = True

    def _hide(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._shown:
            self.progress.stop()
            self._shown = False


def _task_id(task: int) -> TaskID:
    from rich.progress import TaskID  # lazy: as in RichBars

    return TaskID(task)


@contextlib.contextmanager
def progress_bars(*, quiet: bool = False, console: Console | None = None,
                  delay_s: float = DELAY_S) -> Iterator[RichBars | None]:
    """Show the library's progress for the block's duration: on `console` (default: stderr)
    when it is a terminal and not `quiet`; otherwise report nowhere."""
    if quiet or (console is None and not sys.stderr.isatty()):
        yield None
        return
    if console is None:
        from rich.console import Console  # lazy: only on a terminal

        console = Console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    bars = RichBars(console, delay_s=delay_s)
    try:
        with reporting_to(bars):
            yield bars
    finally:
        bars.close()
