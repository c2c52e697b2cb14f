"""Calibration on published runs: data loading, parameter recovery, profiles, default order."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.costs.datasets import mape_pct
from perfmodel.profiles.calibrate import (
    LLM_FOUNDRY_CSV,
    CalibrationParams,
    calibrated_profile,
    fit_params,
    load_published_runs,
    params_of,
    predict_tokens_per_s_per_gpu,
    scaled_params,
    scaled_prior_profile,
)
from perfmodel.profiles.profile import (
    default_profile,
    load_profile,
    profile_from_dict,
    save_profile,
)
from perfmodel.spec.catalog import get_gpu
from perfmodel.spec.errors import DatasetError, ProfileError

ROOT = Path(__file__).resolve().parent.parent
GPU = "A100-SXM4-80GB"
TRUE = CalibrationParams(matmul_efficiency=0.68, gemm_half_size=2.5e6, attention_efficiency=0.3,
                         recompute_factor=0.6, overlap_slowdown=1.3)


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synthetic_runs(seed: int = 0) -> pd.DataFrame:
    """Published-style rows (small MPT-like models so the test is quick): widths, sequence
    lengths, micro-batches, node counts and checkpointing modes varied like the real tables."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, (hidden, layers, heads) in enumerate([(512, 4, 8), (768, 6, 12), (1024, 4, 16),
                                                 (1536, 4, 12), (2048, 3, 16)]):
        for seq, mb, nodes, ac in [
            (512, 32, 1, "none"), (2048, 8, 1, "none"), (8192, 1, 1, "full"), (2048, 4, 4, "full"),
            (1024, 2, 2, "none"), (4096, 2, 8, "none"),
        ]:
            rows.append({"model": f"syn-{i}", "hidden_size": hidden, "num_layers": layers,
                         "num_heads": heads, "num_kv_heads": heads, "intermediate_size": 4 * hidden,
                         "vocab_size": 50368, "gpu": GPU, "nodes": nodes, "gpus_per_node": 8,
                         "seq_len": seq, "micro_batch": mb, "accum_steps": int(rng.integers(1, 4)),
                         "activation_checkpointing": ac, "pure_bf16": False,
                         "interconnect": "1600 Gbps RoCE node-node", "mfu_pct": 50.0,
                         "source_commit": "0" * 40})
    frame = pd.DataFrame(rows)
    truth = predict_tokens_per_s_per_gpu(calibrated_profile(GPU, TRUE), frame)
    return frame.assign(tokens_per_s_per_gpu=truth * np.exp(rng.normal(0.0, 0.005, len(frame))))


def test_calibration_recovers_known_coefficients() -> None:
    runs = synthetic_runs()
    fitted = fit_params(runs, GPU, max_nfev=80)
    for name, want in TRUE.as_dict().items():
        got = getattr(fitted, name)
        tol = 0.25 if name == "gemm_half_size" else 0.05
        assert got == pytest.approx(want, rel=tol), (name, got, want)
    pred = predict_tokens_per_s_per_gpu(calibrated_profile(GPU, fitted), runs)
    assert mape_pct(runs["tokens_per_s_per_gpu"].to_numpy(), pred) < 1.5


def test_contention_and_recompute_change_the_simulated_step() -> None:
    runs = synthetic_runs()
    base = predict_tokens_per_s_per_gpu(calibrated_profile(GPU, TRUE), runs)
    slower = CalibrationParams(**{**TRUE.as_dict(), "overlap_slowdown": 1.5})
    multi = (runs["nodes"] > 1).to_numpy()
    assert np.all(predict_tokens_per_s_per_gpu(calibrated_profile(GPU, slower), runs)[multi]
                  < base[multi])
    cheap = CalibrationParams(**{**TRUE.as_dict(), "recompute_factor": 0.1})
    full = (runs["activation_checkpointing"] == "full").to_numpy()
    faster = predict_tokens_per_s_per_gpu(calibrated_profile(GPU, cheap), runs)
    assert np.all(faster[full] > base[full]) and np.allclose(faster[~full], base[~full])


def test_gemm_efficiency_saturates_with_size() -> None:
    profile = calibrated_profile(GPU, TRUE)
    runs = synthetic_runs().iloc[[0, 1]]
    model_row = runs.iloc[0].to_dict()
    from perfmodel.profiles.calibrate import run_model

    model = run_model(model_row)
    peak = get_gpu(GPU).bf16_flops_per_s
    small, large = (
        profile.compute_time_s("forward", model, 128, m, unit="block") for m in (1, 512)
    )
    flops = 2 * model.block_matmul_params * 128
    assert flops * 512 / large / peak > flops / small / peak  # bigger GEMMs run closer to e_max


def test_shipped_published_runs_cover_the_three_tables() -> None:
    runs = load_published_runs()
    assert len(runs) == 191
    assert set(runs["gpu"]) == {"A100-SXM4-80GB", "A100-SXM4-40GB", "H100-SXM5-80GB"}
    assert runs["source_commit"].str.fullmatch(r"[0-9a-f]{40}").all()
    assert runs["pure_bf16"].sum() == 78 + 2  # A100 40GB table and the A100 80GB 70B rows
    assert _script("import_published_runs").main(["--check"]) == 0


def test_bad_published_row_names_line_and_field(tmp_path: Path) -> None:
    frame = pd.read_csv(LLM_FOUNDRY_CSV)
    frame.loc[3, "tokens_per_s_per_gpu"] = -5
    bad = tmp_path / "runs.csv"
    frame.to_csv(bad, index=False)
    with pytest.raises(DatasetError) as info:
        load_published_runs(bad)
    assert "line 5" in str(info.value) and "tokens_per_s_per_gpu" in str(info.value)


def test_calibrated_profile_round_trips_with_contention(tmp_path: Path) -> None:
    profile = calibrated_profile(GPU, TRUE, detail={"params": TRUE.as_dict()})
    path = tmp_path / "p.yaml"
    save_profile(profile, path)
    loaded = load_profile(str(path))
    assert loaded.provenance == "calibrated" and loaded.overlap_slowdown == TRUE.overlap_slowdown
    assert loaded.recompute_factor == TRUE.recompute_factor and params_of(loaded) == TRUE
    doc = profile.to_dict()
    with pytest.raises(ProfileError, match="overlap_slowdown"):
        profile_from_dict({**doc, "overlap_slowdown": 0.5})


def test_scaled_prior_keeps_efficiencies_and_scales_gemm_size() -> None:
    b200, h100 = get_gpu("B200"), get_gpu("H100-SXM5-80GB")
    scaled = scaled_params(b200, h100, TRUE)
    assert scaled.matmul_efficiency == TRUE.matmul_efficiency
    assert scaled.gemm_half_size == pytest.approx(TRUE.gemm_half_size * 2250 / 989.4)
    reference = calibrated_profile("H100-SXM5-80GB", TRUE, detail={"params": TRUE.as_dict()})
    prior = scaled_prior_profile("B200", reference)
    assert prior.provenance == "prior" and "not calibrated" in prior.provenance_detail["method"]


def test_default_profile_prefers_calibrated_over_prior() -> None:
    for gpu in ("A100-SXM4-80GB", "A100-SXM4-40GB", "H100-SXM5-80GB"):
        assert default_profile(gpu).provenance == "calibrated"
    assert default_profile("H200-SXM-141GB").provenance == "prior"
    assert default_profile("CPU-x86-2core").provenance == "measured"


def test_shipped_calibration_meets_the_accuracy_goal() -> None:
    table = pd.read_csv(ROOT / "catalogs" / "published" / "calibration-cv.csv")
    for (gpu, ac), rows in table.groupby(["gpu", "activation_checkpointing"]):
        cv = mape_pct(rows["tokens_per_s_per_gpu"].to_numpy(), rows["cv_pred"].to_numpy())
        prior = mape_pct(rows["tokens_per_s_per_gpu"].to_numpy(), rows["prior_pred"].to_numpy())
        assert cv <= 10.0, (gpu, ac, cv)
        assert cv < prior, (gpu, ac, cv, prior)


def test_overlap_fit_on_measured_fsdp_steps() -> None:
    from perfmodel.profiles.overlap import fit_overlap_slowdown

    profile = load_profile("cpu-x86-2core")
    data = ROOT / "catalogs/profiles/data/cpu-fsdp.csv"
    result = fit_overlap_slowdown(profile, data, overlap_grid=(1.0, 1.5, 2.5),
                                  copy_grid=(0.0, 1e-9))
    rows = len(result.groups)
    assert result.errors_pct.shape == (6, rows) and len(set(result.groups)) >= 2
    errors = result.errors_pct.reshape(3, 2, rows)
    # more contention or dearer copies -> longer simulated steps, row by row
    assert np.all(np.diff(errors, axis=0) >= 0) and np.all(np.diff(errors, axis=1) > 0)
    assert result.best in result.grid
    assert result.mape_pct(result.best) == min(result.mape_pct(g) for g in result.grid)
    # holding a shape out can only do worse than fitting on every row
    assert result.cv_mape_pct() >= result.mape_pct(result.best) - 1e-9


def test_predict_names_profile_and_provenance_per_link(run_cli) -> None:
    import json

    result = run_cli("predict", "Llama-3-8B", "--gpu", "H100-SXM5-80GB", "--nodes", "2",
                     "--seq-len", "4096", "--micro-batch", "2", "--accum", "1", "--format", "json")
    assert result.code == 0, result.err
    out = json.loads(result.out)
    assert out["profile"] == "H100-SXM5-80GB-calibrated" and out["provenance"] == "calibrated"
    assert out["compute_provenance"] == "calibrated (H100-SXM5-80GB-calibrated)"
    assert out["link_provenance"] == [{"link": "nvlink4", "provenance": "prior"},
                                      {"link": "ib-ndr400", "provenance": "prior"}]


def test_fsdp_copy_cost_is_added_to_each_collective(tmp_path: Path) -> None:
    from dataclasses import replace

    from perfmodel.sim.fsdp import unit_durations
    from perfmodel.spec.catalog import get_model
    from perfmodel.spec.hardware import IslandSpec

    base = load_profile("cpu-x86-2core")
    copying = replace(base, fsdp_copy_s_per_byte=1e-9)
    path = tmp_path / "copy.yaml"
    save_profile(copying, path)
    loaded = load_profile(str(path))
    assert loaded.fsdp_copy_s_per_byte == 1e-9
    with pytest.raises(ProfileError, match="fsdp_copy_s_per_byte"):
        profile_from_dict({**copying.to_dict(), "fsdp_copy_s_per_byte": -1.0})
    model = get_model("small-llama")
    island = IslandSpec(gpu=get_gpu(base.hardware), num_nodes=1, gpus_per_node=2,
                        intra_link="gloo-loopback", inter_link="gloo-loopback")
    kwargs = {"seq_len": 128, "micro_batch": 1}
    before = unit_durations(model, replace(base, fsdp_copy_s_per_byte=0.0), island, **kwargs)
    after = unit_durations(model, loaded, island, **kwargs)
    block_payload = model.fsdp_units(128)[0].params * 4  # the recipe's fp32 reduce dtype
    # one unsharded and one sharded copy (2 ranks) of the payload per collective
    assert after.block_reduce_scatter_s - before.block_reduce_scatter_s == pytest.approx(
        1e-9 * block_payload * 1.5)
    assert after.block_forward_s == before.block_forward_s
