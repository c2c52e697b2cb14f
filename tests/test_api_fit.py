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
