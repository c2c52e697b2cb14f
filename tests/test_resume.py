"""Data safety of resumable benchmark CSVs: partial last rows, corrupt files, duplicates, hard
kills.

`CsvLog` is exercised directly on real files, then through `shardmeter bench compute` with a
tiny design space, including a real SIGKILL of a running benchmark process: whatever state the
kill leaves, the resumed run ends with every row exactly once and `fit` accepts the dataset.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hostile import tiny_space

from perfmodel.bench.common import CsvLog
from perfmodel.spec.errors import DatasetError

COLUMNS = ("model", "seq_len", "phase", "time_s", "iters")
KEYS = ("model", "seq_len", "phase")
DATA = Path(__file__).parent / "data" / "perf"


def _row(i: int, phase: str = "forward") -> dict[str, object]:
    return {"model": f"m{i}", "seq_len": 16, "phase": phase, "time_s": 0.001 * (i + 1), "iters": 3}


def _log(path: Path, rows: int = 3) -> CsvLog:
    log = CsvLog(path, COLUMNS, KEYS)
    log.append(_row(i) for i in range(rows))
    return log


def test_rows_round_trip_and_append_never_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    log = _log(path)
    assert log.append([_row(1), _row(3)]) == 1  # m1 is there already
    again = CsvLog(path, COLUMNS, KEYS)
    assert again.append([_row(0), _row(3)]) == 0
    rows = again.rows()
    assert [r["model"] for r in rows] == ["m0", "m1", "m2", "m3"]
    assert rows[0] == {
        "model": "m0", "seq_len": "16", "phase": "forward", "time_s": "0.001", "iters": "3",
    }


def test_truncated_last_line_is_dropped_and_measured_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "d.csv"
    _log(path)
    whole = path.read_bytes()
    path.write_bytes(whole[:-7])  # a kill in the middle of the last row
    log = CsvLog(path, COLUMNS, KEYS)
    assert "partial last line" in caplog.text
    assert [r["model"] for r in log.rows()] == ["m0", "m1"]
    assert log.append([_row(2)]) == 1
    assert path.read_bytes() == whole  # the row is back, whole, once
    lines = path.read_text().splitlines()
    assert all(len(next(csv.reader([line]))) == len(COLUMNS) for line in lines)


def test_partial_header_only(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("model,seq_")
    log = CsvLog(path, COLUMNS, KEYS)
    assert log.rows() == [] and path.read_text() == ""
    log.append([_row(0)])
    assert path.read_text().splitlines()[0] == ",".join(COLUMNS)


@pytest.mark.parametrize(
    ("damage", "line", "needle"),
    [
        (
            lambda text: text.replace("m1,16,forward,0.002,3", "#$%garbage"),
            3,
            "1 fields where the header has 5",
        ),
        (
            lambda text: text.replace("m1,16,forward,0.002,3", "m1,16,forward,abc,3"),
            3,
            "'time_s' = 'abc'",
        ),
        (
            lambda text: text.replace("m1,16,forward,0.002,3", "m1,16,forward,nan,3"),
            3,
            "'time_s' = 'nan'",
        ),
        (
            lambda text: text.replace("m2,16,forward,0.003,3", "m2,16,forward,0.003,3,7,8"),
            4,
            "7 fields",
        ),
        (lambda text: text + "m0,16,forward,0.009,3\n", 5, "duplicate of line 2"),
        (lambda text: text.replace("m1", "m1\0\0\0"), 3, "NUL bytes"),
        (lambda text: text.replace("time_s", "seconds"), 1, "existing header"),
    ],
)
def test_damaged_file_is_refused_with_file_and_line(
    tmp_path: Path, damage, line: int, needle: str
) -> None:
    path = tmp_path / "d.csv"
    _log(path)
    path.write_text(damage(path.read_text()))
    before = path.read_bytes()
    with pytest.raises(DatasetError) as info:
        CsvLog(path, COLUMNS, KEYS)
    assert f"{path}, line {line}:" in str(info.value) and needle in str(info.value)
    assert "To fix:" in str(info.value)
    assert path.read_bytes() == before  # a refused file is left as it was


def test_nul_bytes_in_a_partial_last_line_are_dropped_with_it(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    _log(path)
    with path.open("ab") as fh:
        fh.write(b"m3,16,for\0\0\0")  # zero-filled tail after a crash, no newline
    assert [r["model"] for r in CsvLog(path, COLUMNS, KEYS).rows()] == ["m0", "m1", "m2"]


def test_non_utf8_bytes_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    _log(path)
    path.write_bytes(path.read_bytes().replace(b"m2", b"m\xff"))
    with pytest.raises(DatasetError, match="line 4: is not UTF-8"):
        CsvLog(path, COLUMNS, KEYS)


# ---- fit on damaged datasets -------------------------------------------------------------

def _dataset(tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "compute.csv"
    lines = (DATA / "compute_small.csv").read_text().splitlines()
    return path, lines


def test_fit_takes_a_repeated_row_as_a_repeat(run_cli, tmp_path: Path) -> None:
    """A line written twice is a repeat of one configuration (issue 22: repeats measure noise):
    the fit takes their median, once, and the profile records the repeat."""
    path, lines = _dataset(tmp_path)
    path.write_text("\n".join([*lines, lines[3]]) + "\n")
    out = tmp_path / "p.yaml"
    result = run_cli("fit", "compute", str(path), "-o", str(out), "--hardware", "CPU-x86-2core",
                     "--no-nested-cv")
    assert result.code == 0, result.err
    detail = yaml.safe_load(out.read_text())["provenance_detail"]
    repeats = detail["repeats"]["compute"]
    assert repeats["rows"] == len(lines) and repeats["configurations"] == len(lines) - 1
    assert repeats["repeated_configurations"] == 1 and repeats["by_configuration"][0]["n"] == 2
    assert repeats["by_configuration"][0]["std_s"] == 0.0  # the same line twice
    assert detail["nested_cv_mape_pct"] == {"forward": None, "backward": None,
                                            "optimizer": None}  # --no-nested-cv


def test_fit_rejects_nan_rows(run_cli, tmp_path: Path) -> None:
    path, lines = _dataset(tmp_path)
    header = lines[0].split(",")
    cells = lines[5].split(",")
    cells[header.index("time_s")] = "nan"
    lines[5] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    result = run_cli(
        "fit", "compute", str(path), "-o", str(tmp_path / "p.yaml"), "--hardware", "CPU-x86-2core"
    )
    assert result.code == 2 and "To fix:" in result.err
    assert f"{path}, line 6" in result.err and "time_s" in result.err


# ---- the real benchmark ------------------------------------------------------------------

SPACE = tiny_space("resume", max_micro_batch=2)
N_CONFIGS = 6
BENCH = ["bench", "compute", "-n", str(N_CONFIGS), "--iters", "2", "--warmup", "0"]


def _keys(path: Path) -> Counter[tuple[str, str, str, str]]:
    with path.open(newline="") as fh:
        return Counter(
            (r["model"], r["seq_len"], r["micro_batch"], r["phase"]) for r in csv.DictReader(fh)
        )


def _expected(space: Path) -> set[tuple[str, str, str, str]]:
    """Every row a complete run writes: each configuration x micro-batches 1, 2 x phases (the
    space has no time or memory cap, so no sweep stops early)."""
    from perfmodel.bench import compute as cb
    from perfmodel.bench.space import load_space

    configs = cb.sample_configs(load_space(space), N_CONFIGS, 0)
    return {
        (c.config_id, "16", str(mb), phase) for c in configs for mb in (1, 2) for phase in cb.PHASES
    }


@pytest.mark.slow
@pytest.mark.torch
def test_resume_after_truncation_and_garbage(run_cli, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    space, out = tmp_path / "space.yaml", tmp_path / "out.csv"
    space.write_text(SPACE)
    assert run_cli(*BENCH, "--space", str(space), "-o", str(out), "--limit", "2").code == 0
    first = out.read_bytes()
    out.write_bytes(first[:-5])  # the last row cut short
    assert run_cli(*BENCH, "--space", str(space), "-o", str(out)).code == 0
    keys = _keys(out)
    assert set(keys) == _expected(space) and max(keys.values()) == 1
    out.write_bytes(out.read_bytes() + b"\xde\xad garbage,line\n")
    result = run_cli(*BENCH, "--space", str(space), "-o", str(out))
    assert result.code == 2 and f"{out}, line {sum(keys.values()) + 2}" in result.err
    assert "To fix:" in result.err and "Traceback" not in result.err


@pytest.mark.torch
@pytest.mark.slow
def test_hard_kill_mid_run_loses_and_duplicates_nothing(run_cli, tmp_path: Path) -> None:
    """SIGKILL a real `shardmeter bench compute` once it has written rows, cut its last row in
    half (the state a kill inside a write leaves), resume: every row exactly once."""
    pytest.importorskip("torch")
    space, out = tmp_path / "space.yaml", tmp_path / "out.csv"
    space.write_text(SPACE)
    cmd = [
        sys.executable, "-c", "from planner.cli import main; main()", *BENCH, "--space", str(space),
        "-o", str(out),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if out.is_file() and out.read_bytes().count(b"\n") >= 4:  # header + one micro-batch
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the benchmark finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    killed = out.read_bytes()
    assert killed.count(b"\n") >= 4
    out.write_bytes(killed[: killed.rstrip(b"\n").rfind(b"\n") + 12])  # half of the last row
    result = run_cli(*BENCH, "--space", str(space), "-o", str(out))
    assert result.code == 0, result.err
    keys = _keys(out)
    assert set(keys) == _expected(space) and max(keys.values()) == 1
    from perfmodel.costs.compute import load_compute_dataset

    assert len(load_compute_dataset(str(out))) == len(keys)
