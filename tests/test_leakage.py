"""Leak-free cross-validation (issue 22): for each of the three cross-validations, perturbing the
held-out group's targets must leave that group's out-of-fold predictions exactly where they were.

Each test also checks that the perturbation reaches what it should (the in-sample fit, or the
held-out group's own errors), so a test that could not fail would be seen failing that check.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
from synthetic import synthetic_compute_dataset

from perfmodel.costs.compute import leave_one_model_out
from perfmodel.profiles.calibrate import (
    CalibrationParams,
    calibrate_gpu,
    calibrated_profile,
    predict_tokens_per_s_per_gpu,
)
from perfmodel.profiles.overlap import fit_overlap_slowdown
from perfmodel.profiles.profile import load_profile
from perfmodel.spec.catalog import get_model

ROOT = Path(__file__).resolve().parent.parent
FACTOR = 1.5
"""The held-out group's targets are multiplied by this."""


def _perturbed(frame: pd.DataFrame, group_column: str, group: str, target: str) -> pd.DataFrame:
    out = frame.copy()
    held = out[group_column] == group
    out.loc[held, target] = out.loc[held, target] * FACTOR
    return out


# ---- compute: leave-one-architecture-out, feature selection nested -----------------------------

def test_compute_leave_one_model_out_does_not_see_the_held_out_model() -> None:
    truth = {"forward": {"tok_block_matmul": 1e-12, "tok_attn": 4e-12, "layers": 2e-4,
                         "const": 1e-3},
             "backward": {"tok_block_matmul": 2e-12, "tok_attn": 8e-12, "layers": 4e-4,
                          "const": 2e-3}}
    names = ("tiny-llama", "tiny-gqa", "small-llama", "tiny-phi", "SmolLM-360M")
    frame = synthetic_compute_dataset([get_model(n) for n in names], truth, seq_lens=(64, 512),
                                      micro_batches=(1, 4), noise=0.03, seed=11)
    # repeats of some configurations too: their median is fitted, their split must not leak
    frame = pd.concat([frame, frame.iloc[::3].assign(time_s=frame["time_s"].iloc[::3] * 1.02)],
                      ignore_index=True)
    held = "small-llama"
    rows = (frame["model"] == held).to_numpy()
    before = leave_one_model_out(frame)
    after = leave_one_model_out(_perturbed(frame, "model", held, "time_s"))
    assert not np.isnan(before).any()
    np.testing.assert_array_equal(after[rows], before[rows])
    # the other models' folds trained on the perturbed rows, so they moved
    assert not np.allclose(after[~rows], before[~rows], rtol=1e-6)


# ---- GPU calibration: leave-one-model-size-out, cold-started folds -----------------------------

GPU = "A100-SXM4-80GB"
TRUE = CalibrationParams(matmul_efficiency=0.68, gemm_half_size=2.5e6, attention_efficiency=0.3,
                         recompute_factor=0.6, overlap_slowdown=1.3)


def _published_like_runs() -> pd.DataFrame:
    """Three small MPT-like sizes, each with checkpointed and multi-node runs (so every parameter
    is free), tokens/s from known parameters with 1 % noise."""
    rng = np.random.default_rng(4)
    rows = []
    for i, (hidden, layers, heads) in enumerate([(512, 4, 8), (1024, 4, 16), (2048, 3, 16)]):
        for seq, mb, nodes, ac in [(512, 16, 1, "none"), (4096, 2, 1, "full"),
                                   (2048, 4, 2, "none"), (1024, 8, 4, "full")]:
            rows.append({"model": f"syn-{i}", "hidden_size": hidden, "num_layers": layers,
                         "num_heads": heads, "num_kv_heads": heads,
                         "intermediate_size": 4 * hidden, "vocab_size": 50368, "gpu": GPU,
                         "nodes": nodes, "gpus_per_node": 8, "seq_len": seq, "micro_batch": mb,
                         "accum_steps": 2, "activation_checkpointing": ac, "pure_bf16": False,
                         "interconnect": "1600 Gbps RoCE node-node", "mfu_pct": 50.0,
                         "source_commit": "0" * 40})
    frame = pd.DataFrame(rows)
    truth = predict_tokens_per_s_per_gpu(calibrated_profile(GPU, TRUE), frame)
    return frame.assign(tokens_per_s_per_gpu=truth * np.exp(rng.normal(0.0, 0.01, len(frame))))


def test_calibration_folds_do_not_see_the_held_out_size() -> None:
    runs = _published_like_runs()
    held = "syn-1"
    rows = (runs["model"] == held).to_numpy()
    before = calibrate_gpu(runs, GPU)
    after = calibrate_gpu(_perturbed(runs, "model", held, "tokens_per_s_per_gpu"), GPU)
    np.testing.assert_array_equal(after.runs["cv_pred"].to_numpy()[rows],
                                  before.runs["cv_pred"].to_numpy()[rows])
    assert after.folds[held] == before.folds[held]
    # the all-runs fit saw the perturbed size and moved: a fold warm-started from it would too
    assert after.params != before.params
    assert before.fits["all"]["converged"] and not before.not_converged()


# ---- the FSDP-side fit of a measured profile: model shape held out -----------------------------

def test_overlap_fit_cv_does_not_see_the_held_out_shape(tmp_path: Path) -> None:
    data = tmp_path / "fsdp.csv"
    shutil.copy(ROOT / "catalogs/profiles/data/cpu-fsdp.csv", data)
    frame = pd.read_csv(data, dtype=str, keep_default_na=False)
    held = str(frame["model"].iloc[0])
    profile = load_profile("cpu-x86-2core")
    grids = {"overlap_grid": (1.0, 2.0, 4.0, 8.0), "copy_grid": (0.0, 2.5e-10, 1e-9)}
    before = fit_overlap_slowdown(profile, data, **grids)
    changed = frame.copy()
    mask = changed["model"] == held
    # halved: enough to move the fit on every row (so a pick made on every row would leak)
    changed.loc[mask, "step_time_s"] = (changed.loc[mask, "step_time_s"].astype(float)
                                        * 0.5).map(repr)
    perturbed = tmp_path / "fsdp-perturbed.csv"
    changed.to_csv(perturbed, index=False)
    after = fit_overlap_slowdown(profile, perturbed, **grids)
    rows = np.asarray(before.groups) == held
    np.testing.assert_array_equal(after.cv_predicted_s()[rows], before.cv_predicted_s()[rows])
    # the held-out rows' measured steps did change, so their held-out errors moved, and so did the
    # pair fitted on every row
    assert not np.allclose(after.cv_errors_pct()[rows], before.cv_errors_pct()[rows])
    assert after.best != before.best
