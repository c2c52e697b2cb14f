"""perfmodel.sim.trace: Chrome trace-event JSON and PNG timelines."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from perfmodel.diloco.fragments import StreamingConfig
from perfmodel.diloco.streaming import simulate_streaming
from perfmodel.sim.fsdp import StepCosts, UnitCosts, simulate_step
from perfmodel.sim.trace import (
    BLOCKED,
    blocked_spans,
    chrome_trace,
    expand_steps,
    plot_sweep,
    plot_throughput,
    plot_timelines,
    schedule_spans,
    write_chrome_trace,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STEP = simulate_step(
    StepCosts(
        units=(
            UnitCosts(name="u0", forward_s=2, backward_s=4, all_gather_s=1, reduce_scatter_s=1),
            UnitCosts(name="u1", forward_s=1, backward_s=2, all_gather_s=3, reduce_scatter_s=2),
        ),
        optimizer_s=0.5,
    )
)
RUN = simulate_streaming(
    step_s=STEP.step_time_s,
    exchange_s=[20.0, 5.0],
    config=StreamingConfig(num_fragments=2, sync_every=2, delay_steps=1),
    num_steps=4,
)


def _spans() -> list:
    return expand_steps(RUN.schedule, STEP.schedule) + blocked_spans(
        RUN.schedule, island="train", stream="compute"
    )


def test_chrome_trace_is_valid_trace_event_json(tmp_path: Path) -> None:
    path = write_chrome_trace(_spans(), tmp_path / "t.json", metadata={"title": "x"})
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    assert doc["displayTimeUnit"] == "ms" and doc["otherData"] == {"title": "x"}
    assert {e["ph"] for e in events} == {"X", "M"}
    for e in events:
        assert {"name", "ph", "pid", "tid"} <= e.keys()
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert {"ts", "dur", "cat"} <= e.keys() and e["dur"] >= 0 and e["ts"] >= 0
        else:
            assert e["name"] in {
                "process_name",
                "thread_name",
                "process_sort_index",
                "thread_sort_index",
            }
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
    }
    assert sorted(threads.values()) == ["comm", "compute", "outer"]
    used = {(e["pid"], e["tid"]) for e in events if e["ph"] == "X"}
    assert used <= threads.keys()
    blocked = [e for e in events if e.get("cat") == BLOCKED]
    assert blocked and all(threads[(e["pid"], e["tid"])] == "compute" for e in blocked)


def test_trace_times_are_microseconds() -> None:
    events = chrome_trace(schedule_spans(STEP.schedule))["traceEvents"]
    opt = next(e for e in events if e["name"] == "optimizer")
    # FSDP2 order: the optimizer follows the root's reduce_scatter, which ends at 16 s.
    assert opt["ts"] == pytest.approx(16e6) and opt["dur"] == pytest.approx(0.5e6)


def test_expand_steps_shifts_nested_schedules() -> None:
    spans = expand_steps(RUN.schedule, STEP.schedule)
    starts = [iv.start_s for iv in RUN.schedule.intervals if iv.task.kind == "inner_step"]
    optimizers = [s.end_s for s in spans if s.name == "optimizer"]
    assert optimizers == pytest.approx([s + STEP.step_time_s for s in starts])
    assert sum(s.kind == "outer_all_reduce" for s in spans) == 4
    gaps = blocked_spans(RUN.schedule, island="train", stream="compute")
    assert sum(g.end_s - g.start_s for g in gaps) == pytest.approx(RUN.blocked_s)


def test_pngs(tmp_path: Path) -> None:
    out = plot_timelines(
        [("step", schedule_spans(STEP.schedule)), ("streaming", _spans())],
        tmp_path / "t.png",
        title="timelines",
    )
    assert out.read_bytes()[:8] == PNG_MAGIC
    sweep = pd.DataFrame(
        {
            "model": ["a"] * 3 + ["b"] * 3,
            "gpus": [8] * 6,
            "micro_batch": [1, 2, 4] * 2,
            "step_time_s": [1.0, 1.1, 2.0, 2.0, 2.5, 4.0],
            "relative_step_time": [1, 1.1, 2, 1, 1.25, 2],
            "tokens_per_s": [10.0, 18, 20, 5, 8, 10],
            "fits": [True, True, False] * 2,
        }
    )
    assert plot_sweep(sweep, tmp_path / "s.png").read_bytes()[:8] == PNG_MAGIC
    assert plot_throughput(sweep, tmp_path / "p.png").read_bytes()[:8] == PNG_MAGIC
