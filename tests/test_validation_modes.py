"""docs/VALIDATION.md's checkpointing-mode figures (issue 22, done-when), each recomputed here
from the data its generator reads:

* part (b): the median signed tokens/s/GPU error per GPU and mode of the cached calibration CV
  (`none` and `full`, goal +-5 %), and every `CheckpointPolicy` mode on published runs (`attn`,
  which no published FSDP-only run uses, reported as such);
* part (a): the checkpointing policies on FSDP2 CPU steps (`validation_heldout.ac_section`),
  "not measured yet" without its dataset, and its per-mode summary equal to `compare_fsdp`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.profiles.calibrate import VALIDATION_CSV, load_published_runs
from perfmodel.profiles.fsdp_compare import compare_fsdp
from scripts import validation_gpu as vg
from scripts import validation_heldout as vh

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cv() -> pd.DataFrame:
    return pd.read_csv(vg.CV_CSV)


def test_median_signed_error_per_mode_is_the_cv_median(cv: pd.DataFrame) -> None:
    text = vg._median_signed(cv)
    assert set(cv["activation_checkpointing"]) == {"none", "full"}
    for (gpu, ac), g in cv.groupby(["gpu", "activation_checkpointing"]):
        medians = [np.median(100 * (g[c] / g["tokens_per_s_per_gpu"] - 1))
                   for c in ("prior_pred", "fit_pred", "cv_pred")]
        ok = abs(medians[1]) <= 5 and abs(medians[2]) <= 5
        row = (f"| {gpu} | {ac} | {len(g)} | " + " | ".join(f"{m:.2f}" for m in medians)
               + f" | {'yes' if ok else 'no'} |")
        assert row in text, row


def test_every_checkpointing_mode_is_reported_on_published_runs(cv: pd.DataFrame) -> None:
    runs = vg._validation_runs()
    text = vg._published_modes(runs, cv)
    published = load_published_runs(VALIDATION_CSV)
    op_sac = runs[runs["activation_checkpointing"] == "op-sac"]
    assert len(op_sac) == int((published["activation_checkpointing"] == "op-sac").sum()) > 0
    errors = 100 * (op_sac["calibrated"] / op_sac["tokens_per_s_per_gpu"] - 1)
    assert (f"| op-sac | validation (never fitted) | {len(op_sac)} | A100-SXM4-80GB | "
            f"{np.mean(np.abs(errors)):.2f} | {np.median(errors):.2f} |") in text
    layers = published["activation_checkpointing"].str.startswith("layer:")
    assert f"| layer:N (layer:2) | validation (never fitted) | {int(layers.sum())} |" in text
    assert "| attn | - | 0 |" in text and "no published FSDP-only run found" in text
    for mode in ("none", "full"):
        n = int((cv["activation_checkpointing"] == mode).sum())
        assert f"| {mode} | calibration (CV) | {n} |" in text


def test_ac_section_before_measurement() -> None:
    text = vh.ac_section(data_path=ROOT / "catalogs/profiles/data/absent.csv")
    assert "Not measured yet" in text and "STEPS=fsdp-ac" in text


def test_ac_section_summarises_compare_fsdp() -> None:
    """On the shipped FSDP2 steps (all `none`), the section's summary is compare_fsdp's."""
    data = ROOT / vh.FITTING[2]  # cpu-fsdp.csv
    records = compare_fsdp(data, str(ROOT / vh.PROFILE))
    errors = np.array([r["step_error_pct"] for r in records])
    text = vh.ac_section(data_path=data)
    assert (f"| none | {len(records)} | {np.mean(np.abs(errors)):.2f} | "
            f"{np.median(errors):.2f} |") in text


@pytest.mark.parametrize("section,step", [(vh.layouts_section, "STEPS=layouts"),
                                          (vh.pipeline_section, "STEPS=pipeline")])
def test_end_to_end_sections_before_measurement(section: Callable[..., str],
                                                 step: str) -> None:
    text = section(data_path=ROOT / "catalogs/profiles/data/absent.csv")
    assert "Not measured yet" in text and step in text
    absent = vh.layouts_section(fresh_path=ROOT / "catalogs/profiles/data/absent.csv")
    assert "STEPS=layouts-fresh2" in absent


def test_layouts_section_judges_two_rank_rows_only() -> None:
    """On the shipped FSDP2 steps (2 ranks), every row is in the table, and the goal line is
    compare_fsdp's errors: n, MAPE, how many within 15 % and the verdict that follows."""
    data = ROOT / vh.FITTING[2]
    records = compare_fsdp(data, str(ROOT / vh.PROFILE))
    errors = np.array([r["step_error_pct"] for r in records if r["world_size"] == 2])
    absent = ROOT / "catalogs/profiles/data/absent.csv"
    text = vh.layouts_section(data_path=absent, fresh_path=data, seen_fresh_path=absent)
    within = int(np.sum(np.abs(errors) <= vh.GOAL_PCT))
    verdict = "met" if within == len(errors) else "missed"
    assert (f"TP = 2 on 2 ranks, second fresh holdout (judged): {len(errors)} rows, MAPE "
            f"{np.mean(np.abs(errors)):.1f} %") in text
    assert f"{within} of {len(errors)} within 15 % (goal: every row): {verdict}." in text
    assert text.count("\n| ") - 1 == len(records)  # header excluded, separator has no space
    # the seen set: reported without a verdict
    seen = vh.layouts_section(data_path=data, fresh_path=absent, seen_fresh_path=absent)
    assert "first set, seen while diagnosing (reported)" in seen and "(goal:" not in seen


def _rows(*errors: float) -> list[dict[str, float]]:
    return [{"step_error_pct": e} for e in errors]


def test_goal_line_verdict() -> None:
    assert vh._goal_line(_rows(3.0, -14.9), "x").endswith("2 of 2 within 15 % (goal: every row): "
                                                          "met.")
    assert vh._goal_line(_rows(3.0, 15.1), "x").endswith("1 of 2 within 15 % (goal: every row): "
                                                         "missed.")
    assert vh._goal_line(_rows(30.0), "x", judged=False).endswith("0 of 1 within 15 %.")
