"""Progress of long work: library loops report into a sink the caller installs, or into nothing.

Claim: library code says what it is doing (`track` over a loop, or `task` around one whose length
is unknown) without knowing who shows it; with no sink installed (every library caller, every
test, the CLI off a terminal or under --quiet) a report costs one context-variable read per loop
and prints nothing. Why: the answer on stdout (tables, JSON, CSV) must never change with the
terminal, and the library must not import rich or decide about terminals; the CLI installs the
one renderer (planner/cli/progress.py: rich bars on stderr for work over about 2 s). The sink is
a context variable, so a sink installed in one thread is not seen by another (worker processes
and threads report nothing; their parent reports the grid).
Checked by: tests/test_progress.py (the reports a loop makes, none without a sink, the
renderer's bars on a forced terminal and nothing on a plain stream).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sized
from contextvars import ContextVar
from typing import Protocol, TypeVar

T = TypeVar("T")


class ProgressSink(Protocol):
    """What shows progress (planner.cli.progress.RichBars; a list in tests)."""

    def begin(self, description: str, total: int | None) -> int:
        """A task starts: `total` steps (None: unknown). Returns its id."""
        ...

    def advance(self, task: int, steps: int) -> None:
        """`steps` more steps of task `task` are done."""
        ...

    def end(self, task: int) -> None:
        """Task `task` is over (finished, left early or failed)."""
        ...


_SINK: ContextVar[ProgressSink | None] = ContextVar("shardmeter_progress_sink", default=None)


@contextlib.contextmanager
def reporting_to(sink: ProgressSink | None) -> Iterator[None]:
    """Send the progress of the work inside the block to `sink` (None: nowhere)."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


@contextlib.contextmanager
def task(description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
    """A task around a block; yields `advance(steps=1)` to call as steps finish."""
    sink = _SINK.get()
    if sink is None:
        yield _ignore
        return
    task_id = sink.begin(description, total)

    def advance(steps: int = 1) -> None:
        sink.advance(task_id, steps)

    try:
        yield advance
    finally:
        sink.end(task_id)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """`items`, one step per item (total: `len(items)` when it has one)."""
    if _SINK.get() is None:
        yield from items
        return
    if total is None and isinstance(items, Sized):
        total = len(items)
    with task(description, total) as advance:
        for item in items:
            yield item
            advance(1)


def silence() -> None:
    """Report nowhere from here on in this context: called first by each task of a worker
    process (`planner.executor`), which a fork gives a copy of the parent's sink (bars drawn
    twice, from two processes)."""
    _SINK.set(None)


def _ignore(steps: int = 1) -> None:
    """`advance` without a sink."""
