"""Hostile inputs to the benchmarks (issue 30): bad flags caught before torch runs, measured CSVs
with impossible numbers, resumes that must not lose rows (a CSV truncated behind an intact
`.progress`), resumes under another environment, and worker failures reported without their
tracebacks.

Fast: no torch measurement runs here (the hard kills of real runs are in
tests/test_hostile_kills.py, marked slow). Ids start with the kind (tests/hostile.py).
"""

from __future__ import annotations

import csv
import json
import logging
import sys
from pathlib import Path

import pytest
from hostile import refused, run, tiny_space

from perfmodel.bench import compute as cb
from perfmodel.bench.comm import launch
from perfmodel.bench.common import CsvLog
from perfmodel.bench.environment import append_environment
from perfmodel.bench.space import load_space
from perfmodel.profiles import fsdp_compare
from perfmodel.spec.errors import ShardMeterError

SPACE = tiny_space("hostile", max_micro_batch=4)


@pytest.fixture
def space(tmp_path: Path) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(SPACE)
    return path


# ---- flags refused before any measurement -------------------------------------------------

@pytest.mark.parametrize(("kind", "flags", "needle"), [
    ("types", ["--memory-cap-gib", "-1"], "--memory-cap-gib"),
    ("types", ["--memory-cap-gib", "0"], "--memory-cap-gib"),
    ("types", ["--max-time-s", "-5"], "--max-time-s"),
    ("types", ["--memory-cap-gib", "1e300"], "--memory-cap-gib"),
    ("types", ["-n", "0"], "-n"),
    ("work", ["-n", "1000000000"], "-n"),
    ("types", ["--seed", "-1"], "--seed"),
    ("types", ["--limit", "0"], "--limit"),
], ids=lambda v: v if isinstance(v, str) and v in ("types", "work") else None)
def test_bench_compute_flags(tmp_path: Path, space: Path, kind: str, flags: list[str],
                             needle: str) -> None:
    refused(run("bench", "compute", "--space", space, "-o", tmp_path / "out.csv", "--dry-run",
                *flags), needle)


@pytest.mark.torch
def test_work_bench_comm_payload_bound(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    refused(run("bench", "comm", "-o", tmp_path / "c.csv", "--max-mib", "1e9"), "--max-mib")


def test_environment_space_not_utf8_and_duplicate_keys(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_bytes(SPACE.encode().replace(b"hostile", b"host\xffile"))
    refused(run("bench", "compute", "--space", path, "-o", tmp_path / "o.csv", "--dry-run"),
            str(path), "not UTF-8")
    path.write_text(SPACE + "seq_len: [32]\n")
    refused(run("bench", "compute", "--space", path, "-o", tmp_path / "o.csv", "--dry-run"),
            str(path), "duplicate key 'seq_len'")


# ---- measured datasets with impossible numbers --------------------------------------------------

ROW = {
    "model": "t", "family": "llama", "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "intermediate_size": 176, "vocab_size": 512, "tie_word_embeddings": "false", "seq_len": 32,
    "micro_batch": 1, "grad_accum": 2, "world_size": 2, "backend": "gloo",
    "link": "gloo-loopback", "device": "cpu", "dtype": "float32", "threads": 1,
    "step_time_s": 0.05, "step_time_iqr_s": 0.001, "iters": 3, "peak_memory_bytes": 4_000_000,
    "memory_source": "profiler+persistent",
}


@pytest.mark.parametrize(("column", "value"), [
    ("step_time_s", "-0.05"), ("step_time_s", "0"), ("step_time_s", "nan"), ("step_time_s", "inf"),
    ("micro_batch", "1.5"), ("world_size", "0"), ("peak_memory_bytes", "-1"), ("seq_len", "abc"),
])
def test_types_fsdp_compare_refuses_impossible_measurements(tmp_path: Path, column: str,
                                                            value: str) -> None:
    data = tmp_path / "fsdp.csv"
    with data.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fsdp_compare.COLUMNS)
        writer.writeheader()
        writer.writerow({**ROW, column: value})
    refused(run("bench", "fsdp-compare", data, "--profile", "cpu-x86-2core"), str(data),
            "line 2", column, repr(value))


def test_environment_fsdp_compare_not_utf8(tmp_path: Path) -> None:
    data = tmp_path / "fsdp.csv"
    data.write_bytes(b"model,step_time_s\n\xff,1\n")
    refused(run("bench", "fsdp-compare", data, "--profile", "cpu-x86-2core"), str(data),
            "not UTF-8")


# ---- resume: nothing lost behind an intact progress file --------------------------------------

def _rows_for(cfg: cb.BenchConfig, micro_batches: list[int]) -> list[dict[str, object]]:
    base = cb.shape_row(cfg) | {"iters": 2, "device": "cpu", "dtype": "float32", "threads": 1}
    return [base | {"micro_batch": mb, "phase": p, "time_s": 0.001 * mb, "time_iqr_s": 0.0}
            for mb in micro_batches for p in cb.PHASES]


def _finished(out: Path, configs: list[cb.BenchConfig]) -> set[str]:
    """The configurations a resume would skip (the function run_compute decides with)."""
    log = CsvLog(out, cb.COLUMNS, cb.KEY_COLUMNS)
    measured = cb._measured_steps(log)
    written: dict[tuple[str, int], set[int]] = {}
    for r in log.rows():
        written.setdefault((r["model"], int(r["seq_len"])), set()).add(int(r["micro_batch"]))
    reasons = cb._finished_configs(Path(f"{out}.progress"))
    keys = cb.progress_keys(configs)
    return {c.config_id for c in configs
            if cb._is_finished(c, reasons.get(keys[c.config_id, c.seq_len]), written, measured)}


@pytest.mark.parametrize("progress_line", ["{id} time-cap 2", "{id} time-cap", "{id} memory-cap",
                                           "{id} oom 2", "{id} done 4"])
def test_consistency_truncated_csv_behind_intact_progress(tmp_path: Path, space: Path,
                                                          progress_line: str) -> None:
    """A configuration whose rows were lost (the CSV truncated after its progress line was
    written) is measured again, whatever its line says; one whose rows are all there is not."""
    configs = cb.sample_configs(load_space(space), 3, 0)
    first, second, third = configs
    out = tmp_path / "out.csv"
    log = CsvLog(out, cb.COLUMNS, cb.KEY_COLUMNS)
    mbs = list(first.micro_batches)
    log.append(_rows_for(first, mbs[:2] if "done" not in progress_line else mbs))
    log.append(_rows_for(second, mbs[:2] if "done" not in progress_line else mbs))
    progress = Path(f"{out}.progress")
    progress.write_text("".join(progress_line.format(id=c.config_id) + "\n"
                                for c in (first, second, third)))
    finished = _finished(out, configs)
    assert third.config_id not in finished  # no row at all: never finished, whatever the line
    assert {first.config_id, second.config_id} <= finished
    # truncate: the second configuration's rows go
    keep = [line for line in out.read_text().splitlines(keepends=True)
            if not line.startswith(second.config_id + ",")]
    out.write_text("".join(keep))
    assert second.config_id not in _finished(out, configs)
    assert first.config_id in _finished(out, configs)


def test_consistency_a_half_measured_micro_batch_is_measured_again(tmp_path: Path,
                                                                   space: Path) -> None:
    configs = cb.sample_configs(load_space(space), 1, 0)
    out = tmp_path / "out.csv"
    rows = _rows_for(configs[0], [1, 2])
    CsvLog(out, cb.COLUMNS, cb.KEY_COLUMNS).append(rows[:-1])  # mb 2 lacks its last phase
    Path(f"{out}.progress").write_text(f"{configs[0].config_id} time-cap 2\n")
    assert _finished(out, configs) == set()


# ---- resume under another environment ----------------------------------------------------------

def test_consistency_resume_under_another_environment_warns(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "data.csv"
    first = {"benchmark": "compute", "torch": "2.13.0", "threads": 1, "space": "a.yaml"}
    append_environment(out, first)
    out.write_text("header\nrow\n")  # the dataset has rows now
    with caplog.at_level(logging.WARNING):
        append_environment(out, first)
    assert "another environment" not in caplog.text
    with caplog.at_level(logging.WARNING):
        append_environment(out, {**first, "torch": "2.12.0", "threads": 4, "space": "b.yaml"})
    for needle in ("another environment", "torch: '2.13.0' -> '2.12.0'", "threads: 1 -> 4",
                   "space: 'a.yaml' -> 'b.yaml'", str(out)):
        assert needle in caplog.text, needle
    sessions = json.loads(Path(f"{out}.env.json").read_text())["sessions"]
    assert len(sessions) == 3


# ---- worker failures: one message, no traceback --------------------------------------------------

WORKER = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
logging.getLogger("perfmodel.bench.worker").info("case 1 done")
print("[rank0]: Traceback (most recent call last):", file=sys.stderr)
print('[rank0]:   File "worker.py", line 3, in <module>', file=sys.stderr)
raise ValueError("shape mismatch in case 2")
"""


def test_environment_worker_traceback_stays_in_the_log(tmp_path: Path,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    """`launch` (what runs torchrun) forwards the workers' log lines, keeps their tracebacks in
    `<out>.workers.log`, and fails with one message quoting the first exception."""
    log = tmp_path / "out.csv.workers.log"
    with pytest.raises(ShardMeterError) as info:
        launch([sys.executable, "-c", WORKER], threads=1, what="test benchmark", log_path=log)
    message = str(info.value)
    assert "ValueError: shape mismatch in case 2" in message and str(log) in message
    assert "To fix:" in message and "Traceback" not in message
    err = capfd.readouterr().err
    assert "INFO perfmodel.bench.worker: case 1 done" in err and "Traceback" not in err
    assert "Traceback" in log.read_text()


def test_consistency_n_with_named_is_refused(tmp_path: Path, space: Path) -> None:
    refused(run("bench", "compute", "--space", space, "-o", tmp_path / "o.csv", "--named", "-n",
                "5", "--dry-run"), "-n", "--named")
