"""`perfmodel.api.fit.loao_by_phase`: the nested leave-one-architecture-out CV run one phase per
worker process equals the single in-process call, element for element (the claim in its
docstring), on rows of the shipped CPU compute dataset."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.api import fit as api_fit
from perfmodel.costs.compute import leave_one_model_out, load_compute_dataset
from perfmodel.spec.paths import catalog_dir

DATA = catalog_dir() / "profiles" / "data" / "cpu-compute.csv"


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rows = load_compute_dataset(str(DATA))
    models = list(dict.fromkeys(rows["model"]))[:5]
    return rows[rows["model"].isin(models)].reset_index(drop=True)


@pytest.mark.parametrize("min_models", [10**6, 1], ids=["in-process", "worker-processes"])
def test_per_phase_equals_single_call(frame: pd.DataFrame, min_models: int,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_fit, "PARALLEL_MIN_MODELS", min_models)
    settings = {"selection": "forward"}
    expected = leave_one_model_out(frame, **settings)
    got = api_fit.loao_by_phase(frame, settings)
    assert np.isfinite(expected).sum() > 0
    np.testing.assert_array_equal(got, expected)  # NaN where the single call has NaN

