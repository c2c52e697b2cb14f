"""The fit/validate API (`perfmodel.api.fit`) on its own: what the CLI writes is what it returns,
and bad requests are refused before any file is read."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from synthetic import synthetic_compute_dataset

from perfmodel.api.fit import (
    CommFitRequest,
    ComputeFitRequest,
    ValidationRequest,
    fit_compute,
    validate_profile,
)
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import UserInputError

TRUTH = {"forward": {"tok_block_matmul": 1.0e-12, "tok_attn": 4.0e-12, "layers": 2e-4,
                     "const": 1e-3}}
NAMES = ("tiny-llama", "tiny-gqa", "small-llama", "tiny-phi", "SmolLM-360M", "Llama-3.2-1B")


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"selection": "nope"}, "selection"),
    ({"tolerance": math.nan}, "tolerance"),
    ({"tolerance": -0.1}, "tolerance"),
    ({"backend": "carrier-pigeon"}, "backend"),
])
def test_bad_compute_fit_requests_are_refused(kwargs: dict, needle: str) -> None:
    with pytest.raises(UserInputError, match=needle) as err:
        ComputeFitRequest(data_path="x.csv", output_path="y.yaml", **kwargs)
    assert err.value.hint


def test_bad_comm_fit_request_and_empty_validation_are_refused() -> None:
    with pytest.raises(UserInputError, match="backend"):
        CommFitRequest(data_path="x.csv", output_path="y.yaml", backend="carrier-pigeon")
    with pytest.raises(UserInputError):
        validate_profile(ValidationRequest(profile_name="cpu-x86-2core"))


def test_fit_compute_recovers_known_coefficients_and_writes_them(tmp_path: Path) -> None:
    data = tmp_path / "compute.csv"
    synthetic_compute_dataset([get_model(n) for n in NAMES], TRUTH, seq_lens=(128, 1024),
                              micro_batches=(1, 4), noise=0.01, seed=5).to_csv(data, index=False)
    out = tmp_path / "lab.yaml"
    result = fit_compute(ComputeFitRequest(data_path=str(data), output_path=str(out),
                                           hardware="A100-SXM4-80GB"))
    assert result.fitted == ("forward",)
    written = yaml.safe_load(out.read_text())
    assert written["provenance"] == "measured"
    coefs = written["compute"]["forward"]["coefficients_s"]
    for name, value in TRUTH["forward"].items():
        assert coefs[name] == pytest.approx(value, rel=0.1), name
    assert dict(result.profile.compute["forward"].coefficients) == pytest.approx(coefs)


def test_validate_decides_in_sample_by_row_overlap(tmp_path: Path) -> None:
    """A subset of the fitting data is in sample (issue 22: not decided by the file's hash): its
    models are scored by refits without them, exactly as on the whole fitting file, while rows
    of a model the profile never saw are plain prediction error."""
    import pandas as pd

    full = synthetic_compute_dataset([get_model(n) for n in NAMES], TRUTH, seq_lens=(128, 1024),
                                     micro_batches=(1, 4), noise=0.01, seed=5)
    fitted = full[full["model"] != "Llama-3.2-1B"]
    data = tmp_path / "compute.csv"
    fitted.to_csv(data, index=False)
    out = tmp_path / "lab.yaml"
    fit_compute(ComputeFitRequest(data_path=str(data), output_path=str(out),
                                  hardware="A100-SXM4-80GB"))

    def report(frame: pd.DataFrame, name: str) -> tuple[str, dict[str, dict]]:
        path = tmp_path / name
        frame.to_csv(path, index=False)
        part = validate_profile(ValidationRequest(profile_name=str(out),
                                                  compute_data_path=str(path))).parts["compute"]
        return part.mode, {r["model"]: r for r in part.table.to_dict("records")}

    whole_mode, whole = report(fitted, "same.csv")
    assert whole_mode == "leave-one-architecture-out (refit without each model's rows)"
    subset = fitted[fitted["model"].isin(["tiny-llama", "SmolLM-360M"])]
    mode, rows = report(subset, "subset.csv")
    assert mode.startswith("leave-one-architecture-out against fitting dataset")
    assert f"{len(subset)} of {len(subset)} rows are in it" in mode
    for model in ("tiny-llama", "SmolLM-360M"):  # the same refits as on the whole file
        assert rows[model]["forward_mape_pct"] == pytest.approx(
            whole[model]["forward_mape_pct"], rel=1e-12)
    unseen = full[full["model"] == "Llama-3.2-1B"]
    mode, _ = report(unseen, "unseen.csv")
    assert mode == ("prediction error (no row of this dataset is in the profile's fitting "
                    "data)")
    mode, rows = report(pd.concat([subset, unseen]), "mixed.csv")
    assert f"{len(subset)} of {len(subset) + len(unseen)} rows are in it" in mode
    assert f"the other {len(unseen)} by the profile" in mode
    assert set(rows) == {"tiny-llama", "SmolLM-360M", "Llama-3.2-1B", "all"}
