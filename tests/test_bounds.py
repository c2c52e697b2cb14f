"""Effective parameters (issue 22): fitted values at or within 1 % of a bound are flagged in the
profile, and the CV figures are named for what they are (`selection_cv_mape_pct` vs
`nested_cv_mape_pct`, old files read backward compatibly)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.profiles.bounds import bound_flags, flag_text, near_bound
from perfmodel.profiles.calibrate import (
    PARAM_BOUNDS,
    CalibrationParams,
    GpuCalibration,
    calibrated_profile,
    params_at_bound,
    profile_from_calibration,
    scaled_prior_profile,
)
from perfmodel.profiles.fit import merge_flags
from perfmodel.profiles.overlap import fit_overlap_slowdown
from perfmodel.profiles.profile import load_profile, profile_from_dict

ROOT = Path(__file__).resolve().parent.parent
# the A100 40GB calibration's contention factor before issue 22, printed there as "1.500"
AT_UPPER = CalibrationParams(matmul_efficiency=0.77, gemm_half_size=5.6e6,
                             attention_efficiency=0.31, recompute_factor=0.96,
                             overlap_slowdown=1.4999999578981398)


@pytest.mark.parametrize(("value", "low", "high", "expected"), [
    (1.4999999578981398, 1.0, 1.5, ("upper", 1.5)),
    (1.486, 1.0, 1.5, ("upper", 1.5)),       # within 1 % of 1.5
    (1.48, 1.0, 1.5, None),                  # 1.3 % below it
    (1.0, 1.0, 1.5, ("lower", 1.0)),
    (1.0099, 1.0, 1.5, ("lower", 1.0)),
    (1.2, 1.0, 1.5, None),
    (1.005e3, 1e3, 1e10, ("lower", 1e3)),
    (0.0, 0.0, 4e-9, ("lower", 0.0)),        # a zero bound: 1 % of the range's width
    (3e-11, 0.0, 4e-9, ("lower", 0.0)),
    (2.5e-10, 0.0, 4e-9, None),
    (0.0, 0.0, math.inf, ("lower", 0.0)),    # no upper end: only exactly zero
    (1e-30, 0.0, math.inf, None),
    (math.inf, 0.0, math.inf, None),
])
def test_near_bound(value: float, low: float, high: float, expected: object) -> None:
    assert near_bound(value, low, high) == expected


def test_calibration_parameters_at_their_bounds_are_flagged() -> None:
    flags = params_at_bound(AT_UPPER)
    assert [(f.parameter, f.side, f.bound) for f in flags] == [("overlap_slowdown", "upper", 1.5)]
    assert flag_text(flags[0]) == "at upper bound 1.5"
    inside = CalibrationParams(**{**AT_UPPER.as_dict(), "overlap_slowdown": 1.26})
    assert params_at_bound(inside) == []
    assert set(PARAM_BOUNDS) == set(AT_UPPER.as_dict())  # every parameter has its bounds


def _calibration(params: CalibrationParams) -> GpuCalibration:
    runs = pd.DataFrame({"model": ["a", "b"], "activation_checkpointing": ["none", "full"],
                         "tokens_per_s_per_gpu": [100.0, 200.0], "cv_pred": [110.0, 190.0],
                         "fit_pred": [101.0, 199.0], "prior_pred": [70.0, 150.0],
                         "source_commit": ["0" * 40] * 2})
    fold = CalibrationParams(**{**params.as_dict(), "overlap_slowdown": 1.0})
    return GpuCalibration(gpu="A100-SXM4-40GB", params=params, runs=runs,
                          folds={"a": fold, "b": params},
                          fits={"all": {"nfev": 14, "status": 2, "converged": True},
                                "folds": {"a": {"nfev": 200, "status": 0, "converged": False},
                                          "b": {"nfev": 9, "status": 2, "converged": True}}})


def test_calibrated_profile_and_its_scaled_priors_carry_the_flags(tmp_path: Path) -> None:
    calib = _calibration(AT_UPPER)
    assert calib.not_converged() == ["a"]
    assert calib.folds_at_bound() == {"overlap_slowdown": ["a", "b"]}
    profile = profile_from_calibration(calib, {"kind": "published", "path": "x.csv"})
    detail = profile.provenance_detail
    assert [(f["parameter"], f["bound"]) for f in detail["at_bound"]] == [("overlap_slowdown",
                                                                          1.5)]
    assert "effective" in detail["at_bound"][0]["note"] and "effective" in detail["effective"]
    assert detail["fit_budget"]["cv_start"].startswith("cold")
    assert detail["fits"]["folds"]["a"]["converged"] is False
    assert detail["param_notes"]["recompute_factor"].startswith("Effective")
    assert profile.compute["forward"].nested_cv_mape_pct == pytest.approx(7.5)
    assert profile.compute["forward"].selection_cv_mape_pct is None
    summary = profile.provenance_summary()
    assert set(summary["effective_parameters"]) == {"overlap_slowdown", "recompute_factor"}
    assert summary["at_bound"] == detail["at_bound"]
    prior = scaled_prior_profile("A100-PCIe-80GB", profile)
    inherited = prior.provenance_detail["at_bound"]
    assert [f["parameter"] for f in inherited] == ["overlap_slowdown"]
    assert inherited[0]["fit"] == f"calibration of {profile.name}"
    assert "copied from" in prior.provenance_summary()["effective_parameters"]["overlap_slowdown"]


def test_overlap_fit_on_a_grid_edge_is_flagged() -> None:
    """A grid whose edge is the best point is flagged there; an interior best point is not.
    The short grid is a subset of the wide one holding the wide fit's best point at its upper
    edge, so the flag follows from the grid, whatever the measured steps are."""
    profile = load_profile("cpu-x86-2core")
    data = ROOT / "catalogs/profiles/data/cpu-fsdp.csv"
    wide = fit_overlap_slowdown(profile, data, overlap_grid=(1.0, 1.5, 2.0, 3.0, 4.0, 8.0, 16.0),
                                copy_grid=(0.0, 2.5e-10, 5e-10, 1e-9))
    assert 1.0 < wide.overlap_slowdown < 16.0
    assert "overlap_slowdown" not in {f.parameter for f in wide.at_bound()}
    assert wide.predicted_s is not None and wide.predicted_s.shape == wide.errors_pct.shape
    measured = wide.predicted_s / (1 + wide.errors_pct / 100)
    assert np.allclose(measured, measured[0])  # errors and predictions agree row by row
    short = fit_overlap_slowdown(profile, data, overlap_grid=(1.0, wide.overlap_slowdown),
                                 copy_grid=(wide.fsdp_copy_s_per_byte,))
    assert short.overlap_slowdown == wide.overlap_slowdown
    assert ("overlap_slowdown", "upper", wide.overlap_slowdown) in [
        (f.parameter, f.side, f.bound) for f in short.at_bound()]


def test_a_refit_replaces_only_its_own_flags() -> None:
    old = [{"fit": "compute", "parameter": "backward.tied_grad"},
           {"fit": "overlap", "parameter": "overlap_slowdown"}]
    new = [f.record() for f in bound_flags("overlap", {"fsdp_copy_s_per_byte": 0.0},
                                           {"fsdp_copy_s_per_byte": (0.0, 4e-9)})]
    merged = merge_flags(old, "overlap", new)
    assert [(f["fit"], f["parameter"]) for f in merged] == [
        ("compute", "backward.tied_grad"), ("overlap", "fsdp_copy_s_per_byte")]


def test_legacy_cv_mape_pct_is_read_as_what_it_was() -> None:
    """Files before issue 22 wrote the feature-selection score of a measured phase, and the CV
    of a calibrated one, as `cv_mape_pct`: each is read into the field that names it."""
    measured = load_profile("cpu-x86-2core").to_dict()
    for phase in measured["compute"].values():
        phase["cv_mape_pct"] = 7.25
        phase.pop("selection_cv_mape_pct"), phase.pop("nested_cv_mape_pct")
    back = profile_from_dict(measured).compute["forward"]
    assert (back.selection_cv_mape_pct, back.nested_cv_mape_pct) == (7.25, None)
    calibrated = calibrated_profile("A100-SXM4-80GB", AT_UPPER, nested_cv_mape_pct=4.9).to_dict()
    for phase in calibrated["compute"].values():
        phase["cv_mape_pct"] = phase.pop("nested_cv_mape_pct")
        phase.pop("selection_cv_mape_pct")
    back = profile_from_dict(calibrated).compute["forward"]
    assert (back.selection_cv_mape_pct, back.nested_cv_mape_pct) == (None, 4.9)
