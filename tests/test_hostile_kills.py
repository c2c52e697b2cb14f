"""Hard kills (SIGKILL of the whole process group) during `bench compute`, `bench fsdp` and a
scenario sweep, then a resume: nothing lost, nothing duplicated (issue 30), including a CSV
truncated behind its intact `.progress` file.

These run real torch measurements and real torchrun processes, so they are marked slow (CI runs
them; `pytest -m "not slow"` skips them while you work).
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile import INSTANCES, accepted, run, tiny_space

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-c", "from planner.cli import main; main()"]
ROOT = Path(__file__).resolve().parent.parent


def _kill_when(cmd: list[str], ready: Callable[[], bool], *, timeout_s: float = 180) -> None:
    """Start `cmd` in its own process group, SIGKILL the whole group (torchrun and its workers
    included) once `ready()` holds; fail if it finished first."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.is_file() else 0


def _cut_last_row_in_half(path: Path) -> None:
    data = path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: start + (len(data) - start) // 2])


def _counts(path: Path, *keys: str) -> Counter[tuple[str, ...]]:
    with path.open(newline="") as fh:
        return Counter(tuple(r[k] for k in keys) for r in csv.DictReader(fh))


# ---- bench compute ----------------------------------------------------------------------------

SPACE = tiny_space("kills", max_micro_batch=4)
N_CONFIGS = 6


@pytest.mark.torch
def test_bench_compute_kill_and_truncation_behind_progress(tmp_path: Path) -> None:
    """Time-capped sweeps (each stops after its first micro-batch): SIGKILL mid-run, cut the last
    row in half, resume; then truncate the CSV behind the intact .progress (whole configurations'
    rows gone) and resume again: every (configuration, micro-batch, phase) exactly once."""
    pytest.importorskip("torch")
    from perfmodel.bench import compute as cb
    from perfmodel.bench.space import load_space

    space, out = tmp_path / "space.yaml", tmp_path / "out.csv"
    space.write_text(SPACE)
    bench = ["bench", "compute", "--space", str(space), "-o", str(out), "-n", str(N_CONFIGS),
             "--iters", "2", "--warmup", "0", "--max-time-s", "1e-6"]
    configs = cb.sample_configs(load_space(space), N_CONFIGS, 0)
    expected = {(c.config_id, "1", p) for c in configs for p in cb.PHASES}
    _kill_when([*CLI, *bench], lambda: _lines(out) >= 1 + 2 * len(cb.PHASES))
    _cut_last_row_in_half(out)
    accepted(run(*bench))
    counts = _counts(out, "model", "micro_batch", "phase")
    assert set(counts) == expected and max(counts.values()) == 1
    progress = Path(f"{out}.progress").read_text()
    assert "time-cap 1" in progress
    # the CSV loses its last two configurations' rows; .progress still lists them as finished
    lost = {c.config_id for c in configs[-2:]}
    kept = [li for li in out.read_text().splitlines(keepends=True)
            if li.split(",", 1)[0] not in lost]
    out.write_text("".join(kept))
    accepted(run(*bench))
    counts = _counts(out, "model", "micro_batch", "phase")
    assert set(counts) == expected and max(counts.values()) == 1


# ---- bench fsdp -------------------------------------------------------------------------------

FSDP_SPACE = """
seq_len: 16
micro_batches: [1, 2]
grad_accum: [1, 2]
shapes:
  - {model: tiny-llama, name: k-llama, num_hidden_layers: 1}
  - {model: tiny-llama, name: k-llama2, num_hidden_layers: 2}
"""


@pytest.mark.torch
def test_bench_fsdp_kill_and_resume(tmp_path: Path) -> None:
    """SIGKILL torchrun and both gloo ranks once rows are written, cut the last row in half,
    resume: every case exactly once, and the workers' tracebacks (if any) never reach stderr."""
    pytest.importorskip("torch")
    from perfmodel.bench.fsdp import load_cases

    space, out = tmp_path / "space.yaml", tmp_path / "fsdp.csv"
    space.write_text(FSDP_SPACE)
    bench = ["bench", "fsdp", "--space", str(space), "--nproc", "2", "-o", str(out), "--iters",
             "2", "--warmup", "0"]
    cases = load_cases(space)
    _kill_when([*CLI, *bench], lambda: _lines(out) >= 3, timeout_s=300)
    _cut_last_row_in_half(out)
    result = run(*bench)
    accepted(result)
    counts = _counts(out, "model", "micro_batch", "grad_accum")
    assert set(counts) == {(c.config_id, str(c.micro_batch), str(c.grad_accum)) for c in cases}
    assert max(counts.values()) == 1


# ---- a scenario sweep ---------------------------------------------------------------------------

def _after(seconds: float) -> Callable[[], bool]:
    start = time.monotonic()
    return lambda: time.monotonic() - start > seconds


def test_scenario_sweep_kill_leaves_the_previous_result_whole(tmp_path: Path) -> None:
    """A SIGKILL during a `--vary` sweep leaves its output CSV as it was (written whole or not at
    all); rerunning gives the same table as an uninterrupted run, no row twice."""
    values = ",".join(str(v) for v in range(1, 21))  # about 13 s: killed at 3 s mid-sweep
    out, reference = tmp_path / "out.csv", tmp_path / "reference.csv"
    args = ["pareto", str(INSTANCES / "paper-case-study.yaml"), "--vary",
            f"clusters.A.wan_gbit_s={values}", "--format", "json"]
    accepted(run(*args, "-o", reference))
    whole = reference.read_bytes()
    out.write_bytes(whole)
    _kill_when([*CLI, *args, "-o", str(out)], _after(3.0))
    assert out.read_bytes() == whole  # untouched, or replaced by an identical whole table
    out.unlink()
    _kill_when([*CLI, *args, "-o", str(out)], _after(3.0))
    assert not out.exists() or out.read_bytes() == whole  # never half a table
    accepted(run(*args, "-o", out))
    assert out.read_bytes() == whole
    rows = out.read_text().splitlines()
    assert len(rows) == len(set(rows))
