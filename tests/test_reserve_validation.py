"""The allocator reserve comparison (issue 22, item 3's GPU half; scripts/gpu_bench.sh).

Claims: `compare_reserve` sets the memory model's reserve for each FSDP2 step (512 MiB + 5 % of
the predicted tracked peak, `MemoryConfig`, with the row's own recipe) beside the measured one
(max_memory_reserved - max_memory_allocated, plus the device bytes outside the allocator); a
missing or malformed sidecar is a DatasetError naming the file; `scripts/reserve_check.py` skips
cleanly (exit 0, a message) when there are no CUDA statistics, as on this CPU machine.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from perfmodel.costs.features import spec_from_row
from perfmodel.costs.memory import DEFAULT_CONFIG, memory_breakdown
from perfmodel.profiles import fsdp_compare
from perfmodel.profiles.reserve_validation import (
    ALLOCATOR_COLUMNS,
    allocator_path,
    compare_reserve,
)
from perfmodel.spec.errors import DatasetError
from perfmodel.spec.recipe import DEFAULT_RECIPE
from scripts import reserve_check

MIB = 2**20
ROW = {
    "model": "t", "family": "llama", "hidden_size": 256, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "intermediate_size": 704, "vocab_size": 4096, "tie_word_embeddings": "false", "seq_len": 512,
    "micro_batch": 2, "grad_accum": 1, "world_size": 2, "backend": "nccl", "link": "nvlink4",
    "device": "cuda", "dtype": "bfloat16", "threads": 1, "step_time_s": 0.05,
    "step_time_iqr_s": 0.001, "iters": 5, "peak_memory_bytes": 300 * MIB,
    "memory_source": "cuda.max_memory_allocated",
    "recipe": fsdp_compare.recipe_cell(DEFAULT_RECIPE),
}


def _write(path: Path, columns: tuple[str, ...] | list[str], rows: list[dict[str, object]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "gpu-fsdp.csv"
    _write(path, fsdp_compare.COLUMNS, [ROW, ROW | {"micro_batch": 4}])
    return path


def _stats(micro_batch: int, **values: float) -> dict[str, object]:
    key = {k: ROW[k] if k != "micro_batch" else micro_batch for k in fsdp_compare.KEY_COLUMNS}
    return key | {"max_allocated_bytes": 300 * MIB, "max_reserved_bytes": 330 * MIB,
                  "outside_allocator_bytes": 600 * MIB, "context_bytes": 500 * MIB} | values


def test_reserve_is_compared_with_the_memory_model(data: Path) -> None:
    _write(allocator_path(data), ALLOCATOR_COLUMNS, [_stats(2)])  # only m = 2 measured
    (record,) = compare_reserve(data)
    spec = spec_from_row(fsdp_compare.read_fsdp_dataset(data).iloc[0])
    model = memory_breakdown(spec, num_gpus=2, seq_len=512, micro_batch=2,
                             recipe=DEFAULT_RECIPE, config=DEFAULT_CONFIG)
    assert record["ac"] == DEFAULT_RECIPE.ac and record["micro_batch"] == 2
    assert record["measured_fragmentation_mib"] == pytest.approx(30.0)
    assert record["measured_fragmentation_fraction"] == pytest.approx(0.1)
    assert record["measured_reserve_mib"] == pytest.approx(630.0)
    assert record["predicted_reserve_mib"] * MIB == model.reserve_bytes
    assert model.reserve_bytes == DEFAULT_CONFIG.reserve_bytes + int(
        DEFAULT_CONFIG.reserve_fraction * model.tracked_bytes)
    assert record["predicted_tracked_mib"] * MIB == model.tracked_bytes
    assert record["reserve_error_pct"] == pytest.approx(
        100 * (model.reserve_bytes / (630 * MIB) - 1))
    assert (record["assumed_fixed_reserve_mib"], record["assumed_fragmentation_fraction"]) == (
        512.0, 0.05)


def test_bad_sidecars_are_dataset_errors(data: Path) -> None:
    with pytest.raises(DatasetError, match="allocator statistics of a CUDA run"):
        compare_reserve(data)
    _write(allocator_path(data), [*ALLOCATOR_COLUMNS[:-1]], [
        {k: v for k, v in _stats(2).items() if k != "context_bytes"}])
    with pytest.raises(DatasetError, match="context_bytes"):
        compare_reserve(data)
    _write(allocator_path(data), ALLOCATOR_COLUMNS, [_stats(2, max_reserved_bytes=-1)])
    with pytest.raises(DatasetError, match="line 2.*max_reserved_bytes"):
        compare_reserve(data)


def test_reserve_check_skips_cleanly_without_cuda_statistics(
        data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert reserve_check.main([str(data)]) == 0
    assert "reserve check skipped" in capsys.readouterr().out


def test_reserve_check_prints_and_writes_the_comparison(
        data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(allocator_path(data), ALLOCATOR_COLUMNS, [_stats(2), _stats(4)])
    out = tmp_path / "gpu-reserve.csv"
    assert reserve_check.main([str(data), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2 steps: measured fragmentation median 10.00 %" in text
    assert "outside the allocator median 600 MiB (assumed 512 MiB)" in text
    with out.open(newline="") as fh:
        assert len(list(csv.DictReader(fh))) == 2
