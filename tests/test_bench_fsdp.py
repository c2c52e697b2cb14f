"""FSDP2 end-to-end benchmark: case plan and a real 2-rank gloo run with resume."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel.spec.errors import ConfigError, UserInputError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from perfmodel.bench import fsdp  # noqa: E402
from perfmodel.profiles import fsdp_compare  # noqa: E402
from perfmodel.spec.catalog import get_model  # noqa: E402
from perfmodel.spec.layout import ParallelLayout  # noqa: E402
from perfmodel.spec.paths import catalog_dir  # noqa: E402
from perfmodel.spec.recipe import DEFAULT_RECIPE, PAPER_RECIPE  # noqa: E402

TINY = """
seq_len: 16
micro_batches: [1]
grad_accum: [1, 2]
shapes:
  - {model: tiny-llama, name: t-llama, num_hidden_layers: 1}
  - name: t-phi
    family: phi
    hidden_size: 32
    num_hidden_layers: 1
    num_attention_heads: 2
    num_key_value_heads: 2
    intermediate_size: 64
    vocab_size: 128
    micro_batches: [2]
    grad_accum: [1]
"""


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_load_cases_expands_shapes(tmp_path: Path) -> None:
    space = tmp_path / "f.yaml"
    space.write_text(TINY)
    cases = fsdp.load_cases(space)
    assert [(c.config_id, c.micro_batch, c.grad_accum) for c in cases] == [
        ("t-llama", 1, 1), ("t-llama", 1, 2), ("t-phi", 2, 1)]
    assert (
        cases[0].spec.num_layers == 1
        and cases[0].spec.hidden_size == get_model("tiny-llama").hidden_size
    )
    assert cases[2].spec.gated_mlp is False and cases[2].spec.norm == "layer"
    assert fsdp.FsdpCase.from_json(cases[2].to_json()) == cases[2]
    shipped = fsdp.load_cases(catalog_dir() / "spaces" / "fsdp-cpu.yaml")
    assert len(shipped) >= 8 and len({c.config_id for c in shipped}) >= 3


def test_load_cases_errors(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="not found"):
        fsdp.load_cases(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("shapes:\n  - {name: x, family: llama, hidden_size: 32}\n")
    with pytest.raises(ConfigError, match="incomplete"):
        fsdp.load_cases(bad)


@pytest.mark.slow
def test_bench_fsdp_gloo_two_ranks_runs_and_resumes(run_cli, tmp_path: Path) -> None:
    space = tmp_path / "f.yaml"
    space.write_text(TINY)
    out = tmp_path / "fsdp.csv"
    args = ["bench", "fsdp", "--space", str(space), "--nproc", "2", "-o", str(out), "--iters", "2",
            "--warmup", "1"]
    first = run_cli(*args)
    assert first.code == 0, first.err
    rows = _rows(out)
    assert list(rows[0]) == list(fsdp_compare.COLUMNS) and len(rows) == 3
    # the CUDA allocator statistics (reserve_validation) are written on CUDA only
    assert not Path(f"{out}.allocator.csv").exists()
    for r in rows:
        assert r["world_size"] == "2" and r["backend"] == "gloo" and r["link"] == "gloo-loopback"
        assert float(r["step_time_s"]) > 0
        case = next(c for c in fsdp.load_cases(space) if c.config_id == r["model"])
        # at least the persistent fp32 state of one rank: parameter shard + two Adam moments
        assert int(r["peak_memory_bytes"]) >= 3 * 4 * case.spec.total_params // 2
        assert r["memory_source"] == "profiler-live+persistent"
        # the worker trained the default recipe and says so (bench fsdp-compare predicts that one)
        assert fsdp_compare.row_recipe(r, "fsdp.csv") == DEFAULT_RECIPE
    # an interrupted run: drop the last row, rerun, exactly that case comes back
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:-1]) + "\n")
    second = run_cli(*args)
    assert second.code == 0, second.err
    again = _rows(out)
    assert len(again) == 3 and [r["model"] for r in again][:2] == [r["model"] for r in rows][:2]
    keys = [(r["model"], r["micro_batch"], r["grad_accum"]) for r in again]
    assert len(set(keys)) == 3


def test_fsdp_compare_against_the_simulator(run_cli, tmp_path: Path) -> None:
    from perfmodel.profiles.profile import make_prior_profile, save_profile

    profile = tmp_path / "cpu-prior.yaml"
    save_profile(make_prior_profile("CPU-x86-2core"), profile)
    data = tmp_path / "fsdp.csv"
    row = {
        "model": "t", "family": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 176, "vocab_size": 512, "tie_word_embeddings": "false", "seq_len": 32,
        "micro_batch": 1, "grad_accum": 2, "world_size": 2, "backend": "gloo",
        "link": "gloo-loopback", "device": "cpu", "dtype": "float32", "threads": 1,
        "step_time_s": 0.05, "step_time_iqr_s": 0.001, "iters": 3, "peak_memory_bytes": 4_000_000,
        "memory_source": "profiler+persistent",
    }
    with data.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fsdp_compare.COLUMNS)
        writer.writeheader()
        writer.writerow(row)
    rows = fsdp_compare.compare_fsdp(data, str(profile))
    assert len(rows) == 1 and rows[0]["predicted_step_s"] > 0 and rows[0]["predicted_peak_mib"] > 0
    expected = 100 * (rows[0]["predicted_step_s"] - 0.05) / 0.05
    assert rows[0]["step_error_pct"] == pytest.approx(expected)
    result = run_cli("bench", "fsdp-compare", str(data), "--profile", str(profile))
    assert result.code == 0 and "step MAPE" in result.out
    # rows without a recipe column trained without MixedPrecisionPolicy, no-sync accumulation
    assert rows[0]["recipe"] == "legacy-fp32" and rows[0]["accum_mode"] == "no_sync"
    # like with like: a row that trained the paper recipe is predicted with the paper recipe
    paper = tmp_path / "paper.csv"
    with paper.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fsdp_compare.COLUMNS)
        writer.writeheader()
        writer.writerow({**row, "recipe": json.dumps(fsdp_compare.recipe_mapping(PAPER_RECIPE))})
    (paper_row,) = fsdp_compare.compare_fsdp(paper, str(profile))
    assert paper_row["recipe"] == "paper"
    assert paper_row["predicted_comm_s"] != rows[0]["predicted_comm_s"]  # bf16 params, fp32 grads
    # a row that trained a parallel layout is predicted with it: TP = 2 halves each rank's
    # matmuls and adds inline collectives
    tp = tmp_path / "tp.csv"
    tp_recipe = replace(DEFAULT_RECIPE, parallel=ParallelLayout(dp_shard=1, tp=2))
    with tp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fsdp_compare.COLUMNS)
        writer.writeheader()
        writer.writerow({**row, "recipe": fsdp_compare.recipe_cell(tp_recipe)})
    (tp_row,) = fsdp_compare.compare_fsdp(tp, str(profile))
    assert tp_row["layout"] == "tp 2, sequence parallel" and rows[0]["layout"] == "dp_shard 2"
    assert tp_row["predicted_compute_s"] < rows[0]["predicted_compute_s"]
    bad = tmp_path / "bad.csv"
    bad.write_text("model,step_time_s\nx,1\n")
    result = run_cli("bench", "fsdp-compare", str(bad), "--profile", str(profile))
    assert result.code == 2 and "To fix:" in result.err


def test_fsdp_compare_takes_measured_peaks_from_a_real_memory_dataset(tmp_path: Path) -> None:
    """`--memory`: the measured peak of each row is the real-tensor allocator peak of the same
    configuration; the prediction carries the row's accumulation (k = 2 here)."""
    root = Path(__file__).resolve().parent.parent / "catalogs" / "profiles"
    data, mem = root / "data" / "cpu-fsdp.csv", root / "data" / "cpu-fsdp-memory.csv"
    profile = str(root / "cpu-x86-2core.yaml")
    rows = fsdp_compare.compare_fsdp(data, profile, memory_data=mem)
    real = {(r["model"], r["micro_batch"], r["accum_steps"]): int(r["allocator_peak_bytes"])
            for r in _rows(mem)}
    assert len(rows) == len(_rows(data)) == len(real)
    for r in rows:
        measured = real[(r["model"], str(r["micro_batch"]), str(r["grad_accum"]))]
        assert r["measured_peak_mib"] == pytest.approx(measured / 2**20)
    k2 = next(r for r in rows if r["grad_accum"] == 2)
    k1 = next(r for r in rows if r["grad_accum"] == 1 and r["model"] == k2["model"]
              and r["micro_batch"] == k2["micro_batch"])
    assert k2["predicted_peak_mib"] > k1["predicted_peak_mib"]  # no-sync keeps unsharded grads
    # a memory dataset missing a configuration is named, with the command that fills it
    partial = tmp_path / "partial.csv"
    lines = mem.read_text().splitlines()
    partial.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(UserInputError, match="no row for"):
        fsdp_compare.compare_fsdp(data, profile, memory_data=partial)


TP_SPACE = """
seq_len: 16
micro_batches: [1]
grad_accum: [1, 2]
shapes:
  - {name: t-llama, family: llama, hidden_size: 64, num_hidden_layers: 2,
     num_attention_heads: 4, num_key_value_heads: 2, intermediate_size: 128, vocab_size: 256}
"""


@pytest.mark.parametrize(("flags", "message"), [
    (["--tp", "3"], "cannot be split"),
    (["--tp", "2", "--dp-replicate", "2", "--nproc", "4"], "plain DDP"),
    (["--tp", "0"], "ParallelLayout.tp is 0"),
])
def test_bench_fsdp_refuses_layouts_it_cannot_train(run_cli, tmp_path: Path, flags: list[str],
                                                    message: str) -> None:
    """Checked before any rank starts: exit 2 naming the rule, with a fix."""
    space = tmp_path / "f.yaml"
    space.write_text(TP_SPACE)
    args = ["bench", "fsdp", "--space", str(space), "-o", str(tmp_path / "o.csv"), *flags]
    if "--nproc" not in flags:
        args += ["--nproc", "2"]
    result = run_cli(*args)
    assert result.code == 2 and message in result.err and "To fix:" in result.err
    assert not (tmp_path / "o.csv").exists()


def test_bench_fsdp_refuses_tied_embeddings_under_tp(tmp_path: Path) -> None:
    cases = fsdp.load_cases(catalog_dir() / "spaces" / "fsdp-cpu.yaml")
    tied = [c for c in cases if c.spec.tie_word_embeddings]
    with pytest.raises(UserInputError, match="tied embeddings"):
        fsdp.check_layout(tied, ParallelLayout(tp=2), world_size=2)
    uneven = fsdp.load_cases(catalog_dir() / "spaces" / "fsdp-cpu-layouts.yaml")
    fsdp.check_layout(uneven, ParallelLayout(tp=2), world_size=4)  # the shipped plan trains
    with pytest.raises(UserInputError, match="sequence"):
        fsdp.check_layout([replace(uneven[0], seq_len=127)], ParallelLayout(tp=2), world_size=2)


@pytest.mark.slow
def test_bench_fsdp_tensor_parallel_runs_and_is_predicted(run_cli, tmp_path: Path) -> None:
    """`bench fsdp --tp 2` on 2 gloo ranks: rows name the layout resolved on the ranks (pure TP:
    dp_shard 1), resume, and fsdp-compare predicts them with that layout."""
    space = tmp_path / "f.yaml"
    space.write_text(TP_SPACE)
    out = tmp_path / "tp.csv"
    args = ["bench", "fsdp", "--space", str(space), "--nproc", "2", "--tp", "2", "-o", str(out),
            "--iters", "2", "--warmup", "1", "--param-dtype", "fp32", "--reduce-dtype", "fp32",
            "--ac", "none"]
    first = run_cli(*args)
    assert first.code == 0, first.err
    rows = _rows(out)
    assert len(rows) == 2
    for r in rows:
        recipe = fsdp_compare.row_recipe(r, "tp.csv")
        assert recipe.parallel == ParallelLayout(dp_shard=1, tp=2)
        assert float(r["step_time_s"]) > 0
    assert run_cli(*args).code == 0 and len(_rows(out)) == 2  # resumed: nothing measured again
    from perfmodel.profiles.profile import make_prior_profile, save_profile

    profile = tmp_path / "cpu-prior.yaml"
    save_profile(make_prior_profile("CPU-x86-2core"), profile)
    predicted = fsdp_compare.compare_fsdp(out, str(profile))
    assert [p["layout"] for p in predicted] == ["tp 2, sequence parallel"] * 2
    assert all(p["predicted_step_s"] > 0 for p in predicted)
