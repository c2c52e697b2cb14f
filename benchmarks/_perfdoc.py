"""docs/PERFORMANCE.md is written only by benchmark scripts: each owns one marked block; and the
one timed run of an instance (load, island table, exact frontier) the planner benchmarks share."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parent.parent / "docs" / "PERFORMANCE.md"
HEADER = (
    "# Performance (measured)\n\n"
    "Every section below is written by the benchmark command it names, on this project's 2-core\n"
    "machine; rerun the command to refresh its section. Do not edit by hand.\n"
)


def replace_block(key: str, markdown: str, doc: Path = DOC) -> Path:
    """Replace (or append) the block between `<!-- key -->` and `<!-- /key -->` in `doc`."""
    start, end = f"<!-- {key} -->", f"<!-- /{key} -->"
    block = f"{start}\n{markdown.strip()}\n{end}"
    text = doc.read_text() if doc.is_file() else HEADER
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    return doc



@dataclass(frozen=True, kw_only=True, slots=True)
class TimedSolve:
    """One instance solved from its file, with the wall and CPU seconds of each stage."""

    table: Any
    """The island table (`load_island_table`)."""
    problem: Any
    """The planning problem built from it."""
    frontier: Any
    """Its exact frontier (default solver)."""
    table_s: float
    """Wall seconds to load the instance and build the table."""
    total_s: float
    """Wall seconds to the frontier, table included."""
    table_cpu_s: float
    """CPU seconds of this process for the table."""
    total_cpu_s: float
    """CPU seconds of this process to the frontier, table included."""


def timed_solve(path: Path) -> TimedSolve:
    """Load `path`, build its island table and solve its frontier, timing both stages.
    (`benchmarks.compare_layout_tables` keeps its own copy: it runs on older revisions,
    whose benchmarks package lacks this.)"""
    # lazy: the planner, only for the planner benchmarks (this module also serves the others)
    from planner.analysis.pareto import solve_instance
    from planner.model.instance import load_instance
    from planner.model.island_table import load_island_table

    start, cpu = time.perf_counter(), time.process_time()
    instance = load_instance(path)
    table = load_island_table(instance)
    table_s, table_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    problem, frontier = solve_instance(instance, table)
    return TimedSolve(table=table, problem=problem, frontier=frontier, table_s=table_s,
                      total_s=time.perf_counter() - start, table_cpu_s=table_cpu_s,
                      total_cpu_s=time.process_time() - cpu)


def reference_loop_s(repeats: int = 3) -> float:
    """Median seconds of a fixed pure-Python loop (10^7 integer additions): the speed the host
    gives this VM right now. Load average does not show a host that throttles the VM (the same
    loop's time moves by half within minutes on the 2-core VM), so timings that quote it can be
    compared across runs at the same reference."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        total = 0
        for i in range(10_000_000):
            total += i
        times.append(time.perf_counter() - start)
    return statistics.median(times)
