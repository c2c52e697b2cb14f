"""The resumable runner of the fake-tensor memory grids (layouts, issue 23; MoE, issue 26).

Claim: `run_tracked_cases` tracks every case whose key is not yet in the CSV, each in a fresh
spawned process, over `jobs` processes, and the parent appends each finished row as it arrives,
so an interrupted run loses only the cases in flight and a rerun tracks only the rest.
Why: one case per process because torch caches objects keyed by a device mesh across process
groups (a second case with the same mesh in one process fails to resolve the first case's
destroyed fake group); one writer (the parent) so that rows never interleave in the file.
Checked by: tests/test_memory_layouts.py and tests/test_memory_moe.py (a tiny case run live
through `run_layout_cases` / `run_moe_cases`, then resumed).
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from perfmodel.bench.common import CsvLog
from perfmodel.bench.environment import append_environment, environment_record

Case = TypeVar("Case")


def run_tracked_cases(cases: Sequence[Case], out_path: str | Path, *,
                      worker: Callable[[Case], dict[str, Any]],
                      key: Callable[[Case], dict[str, Any]],
                      steps: Callable[[Case], int],
                      columns: Sequence[str], key_columns: Sequence[str], benchmark: str,
                      ground_truth: Mapping[str, str],
                      on_row: Callable[[dict[str, Any]], None],
                      jobs: int = 1, limit: int | None = None,
                      draw: dict[str, Any] | None = None) -> dict[str, int]:
    """Track every case not yet in `out_path` (resume on `key(case)` over `key_columns`), at
    most `limit` new ones, with `worker` (a module-level function: it is pickled into the
    spawned processes) over `jobs` processes, one case each; the parent appends each row and
    then calls `on_row(row)` (the caller's log line). The session is recorded in the CSV's
    env.json: `benchmark`, jobs, cases, the tracked `steps` of the cases, `ground_truth` (the
    column's values and what each means) and `draw` (how the cases were drawn).
    Returns {"measured": new cases tracked, "skipped": cases already in the file}."""
    log = CsvLog(out_path, columns, key_columns)
    done = log.done_keys()
    todo = [c for c in cases if log.key_of(key(c)) not in done]
    skipped = len(cases) - len(todo)
    todo = todo[:limit] if limit is not None else todo
    append_environment(out_path, environment_record(
        device="fake", threads=1,
        extra={"benchmark": benchmark, "jobs": jobs, "cases": len(todo),
               "tracked_steps": sorted({steps(c) for c in todo}),
               "ground_truth": dict(ground_truth), "draw": draw or {}}))
    with mp.get_context("spawn").Pool(max(jobs, 1), maxtasksperchild=1) as pool:
        for row in pool.imap_unordered(worker, todo):
            log.append([row])
            on_row(row)
    return {"measured": len(todo), "skipped": skipped}
