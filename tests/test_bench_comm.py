"""Collective benchmark: payload plan, torchrun command, a real 2-rank gloo sweep with resume."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from perfmodel.spec.errors import UserInputError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from perfmodel.bench import comm  # noqa: E402


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_payload_sizes_are_log_spaced_multiples_of_the_shard_unit() -> None:
    sizes = comm.payload_sizes(1, 150, 12, world_size=2, elem_bytes=4)
    assert len(sizes) == 12 and sizes == sorted(sizes)
    assert sizes[0] == comm.MIB and abs(sizes[-1] - 150 * comm.MIB) <= 8
    assert all(s % 8 == 0 for s in sizes)
    ratios = [b / a for a, b in zip(sizes, sizes[1:], strict=False)]
    assert max(ratios) / min(ratios) < 1.001
    with pytest.raises(UserInputError):
        comm.payload_sizes(2, 1, 3, 2, 4)


def test_torchrun_command_standalone_and_multi_node() -> None:
    cmd = comm.torchrun_command("perfmodel.bench.comm_worker", ["--out", "x.csv"], nproc=2)
    assert cmd[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert cmd[-4:] == ["-m", "perfmodel.bench.comm_worker", "--out", "x.csv"]
    multi = comm.torchrun_command(
        "m", [], nproc=8, torchrun_args="--nnodes 2 --rdzv-endpoint h:29500"
    )
    assert "--standalone" not in multi
    assert multi[3:7] == ["--nnodes", "2", "--rdzv-endpoint", "h:29500"]


@pytest.mark.slow
def test_bench_comm_gloo_two_ranks_runs_and_resumes(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "comm.csv"
    base = ["bench", "comm", "--nproc", "2", "-o", str(out), "--min-mib", "0.25", "--max-mib", "1",
            "--iters", "2", "--warmup", "1"]
    first = run_cli(*base, "--points", "2")
    assert first.code == 0, first.err
    rows = _rows(out)
    assert list(rows[0]) == list(comm.COLUMNS)
    assert len(rows) == 6 and {r["op"] for r in rows} == set(comm.OPS)
    assert {(r["backend"], r["link"], r["world_size"], r["iters"]) for r in rows} == {
        ("gloo", "gloo-loopback", "2", "2")
    }
    assert all(float(r["time_s"]) > 0 for r in rows)
    second = run_cli(*base, "--points", "3")  # adds only the new middle size
    assert second.code == 0, second.err
    rows = _rows(out)
    keys = [(r["op"], r["payload_bytes"]) for r in rows]
    assert len(rows) == 9 and len(set(keys)) == 9
    env = json.loads(Path(f"{out}.env.json").read_text())
    assert env["sessions"][-1]["world_size"] == 2 and env["sessions"][-1]["benchmark"] == "comm"


def test_bench_comm_bad_input_exits_2(run_cli, tmp_path: Path) -> None:
    out = str(tmp_path / "c.csv")
    result = run_cli("bench", "comm", "-o", out, "--link", "warp-drive")
    assert result.code == 2 and "To fix:" in result.err and "warp-drive" in result.err
    result = run_cli("bench", "comm", "-o", out, "--backend", "nccl")
    assert result.code == 2 and "--link" in result.err
    result = run_cli("bench", "comm", "-o", out, "--ops", "all_to_all")
    assert result.code == 2 and "To fix:" in result.err
    assert not Path(out).exists()


def test_send_recv_payloads_are_any_element_multiple_and_need_two_ranks(run_cli,
                                                                        tmp_path: Path) -> None:
    sizes = comm.payload_sizes(0.015625, 1, 4, world_size=1, elem_bytes=4)
    assert sizes[0] == 16384 and all(s % 4 == 0 for s in sizes)
    out = str(tmp_path / "p.csv")
    result = run_cli("bench", "comm", "-o", out, "--ops", "send_recv", "--nproc", "1")
    assert result.code == 2 and "two ranks" in result.err and "To fix:" in result.err
    assert not Path(out).exists()


@pytest.mark.slow
def test_bench_comm_send_recv_on_two_gloo_ranks(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "p2p.csv"
    result = run_cli("bench", "comm", "--nproc", "2", "-o", str(out), "--ops", "send_recv",
                     "--min-mib", "0.0625", "--max-mib", "1", "--points", "3", "--iters", "3",
                     "--warmup", "1")
    assert result.code == 0, result.err
    rows = _rows(out)
    assert [r["op"] for r in rows] == ["send_recv"] * 3
    assert {r["world_size"] for r in rows} == {"2"}
    assert [int(r["payload_bytes"]) for r in rows] == [65536, 262144, 1048576]
    assert all(float(r["time_s"]) > 0 for r in rows)


def test_repeats_are_bounded_and_checked_before_torchrun(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    for bad in ("0", "101"):
        result = run_cli("bench", "comm", "-o", str(out), "--repeats", bad)
        assert result.code == 2 and f"--repeats {bad}" in result.err and "To fix:" in result.err
    assert not out.exists()
    assert comm.dataset_columns(1) == (comm.COLUMNS, comm.KEY_COLUMNS)  # as before: no repeat
    columns, key = comm.dataset_columns(3)
    assert columns[-1] == key[-1] == comm.REPEAT_COLUMN


@pytest.mark.slow
def test_bench_comm_repeats_are_separate_launches_and_fit_as_repeats(run_cli,
                                                                      tmp_path: Path) -> None:
    """`--repeats 2`: two torchrun launches, each writing every configuration once with its
    repeat number; the rows are repeats of one configuration to the fits' key (COMM_KEY), so
    `repeat_spread` (what `fit comm` stores in the profile) sees two per configuration."""
    import pandas as pd

    from perfmodel.costs.comm import COMM_KEY
    from perfmodel.costs.datasets import repeat_spread

    out = tmp_path / "rep.csv"
    result = run_cli("bench", "comm", "--nproc", "2", "-o", str(out), "--ops", "all_reduce",
                     "--min-mib", "0.25", "--max-mib", "1", "--points", "2", "--iters", "2",
                     "--warmup", "1", "--repeats", "2")
    assert result.code == 0, result.err
    rows = _rows(out)
    assert list(rows[0]) == [*comm.COLUMNS, comm.REPEAT_COLUMN]
    assert sorted((r["payload_bytes"], r["repeat"]) for r in rows) == sorted(
        (p, k) for p in {r["payload_bytes"] for r in rows} for k in ("1", "2"))
    sessions = json.loads(Path(f"{out}.env.json").read_text())["sessions"]
    assert [s.get("repeat") for s in sessions] == [1, 2]  # two launches
    spread = repeat_spread(pd.read_csv(out), COMM_KEY)
    assert spread["configurations"] == 2 and spread["repeated_configurations"] == 2
    assert all(c["n"] == 2 and c["max_s"] >= c["min_s"] > 0 for c in spread["by_configuration"])
