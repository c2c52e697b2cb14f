"""Repeated measurements of one configuration (issue 22): `fit comm` and `fit compute` fit their
median, each configuration once, and the profile keeps the spread per configuration."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from synthetic import synthetic_compute_dataset

from perfmodel.api.fit import ComputeFitRequest, fit_compute
from perfmodel.costs.comm import COMM_KEY, LinkCoefficients, fit_comm, synthetic_comm_dataset
from perfmodel.costs.datasets import configurations
from perfmodel.spec.catalog import get_model

LINKS = {("all_gather", "loopback"): LinkCoefficients(latency_s=50e-6, bandwidth_bytes_per_s=4e9),
         ("all_reduce", "loopback"): LinkCoefficients(latency_s=60e-6, bandwidth_bytes_per_s=3e9)}
REPEATS = 3


def _three_repeats() -> pd.DataFrame:
    """Every configuration measured three times, each repeat with its own seeded noise."""
    return pd.concat([synthetic_comm_dataset(LINKS, backend="gloo", noise=0.05, seed=seed)
                      for seed in range(REPEATS)], ignore_index=True)


def test_fit_comm_on_three_repeats_per_configuration_records_the_spread(
        run_cli, tmp_path: Path) -> None:
    frame = _three_repeats()
    data = tmp_path / "comm.csv"
    frame.to_csv(data, index=False)
    out = tmp_path / "lab.yaml"
    result = run_cli("fit", "comm", str(data), "-o", str(out), "--hardware", "xeon-local",
                     "--format", "json")
    assert result.code == 0, result.err
    doc = yaml.safe_load(out.read_text())
    configs = len(frame) // REPEATS
    spread = doc["provenance_detail"]["repeats"]["comm"]
    assert spread["rows"] == len(frame) and spread["configurations"] == configs
    assert spread["repeated_configurations"] == configs and spread["statistic"] == "median"
    assert len(spread["by_configuration"]) == configs
    for entry in spread["by_configuration"]:
        times = frame[(frame["op"] == entry["op"]) & (frame["world_size"] == entry["world_size"])
                      & (frame["payload_bytes"] == entry["payload_bytes"])]["time_s"]
        assert entry["n"] == REPEATS and len(times) == REPEATS
        assert entry["median_s"] == pytest.approx(float(np.median(times)), rel=1e-12)
        assert entry["min_s"] < entry["median_s"] < entry["max_s"]
        assert entry["std_s"] == pytest.approx(float(times.std(ddof=1)), rel=1e-12)
    assert spread["median_rel_std_pct"] > 0
    record = next(d for d in doc["provenance_detail"]["datasets"] if d["kind"] == "comm")
    assert record["rows"] == len(frame) and record["configurations"] == configs
    printed = {(r["op"], r["link"]): r for r in json.loads(result.out)}
    assert all(r["rows"] == REPEATS * r["configurations"] for r in printed.values())

    # the fit is the fit of the medians, one row per configuration
    medians = frame.groupby(list(COMM_KEY[:-1]), sort=False, as_index=False)["time_s"].median()
    median_data = tmp_path / "medians.csv"
    medians.to_csv(median_data, index=False)
    assert run_cli("fit", "comm", str(median_data), "-o", str(tmp_path / "m.yaml"),
                   "--hardware", "xeon-local").code == 0
    again = {(c["op"], c["link"]): c for c in yaml.safe_load((tmp_path / "m.yaml").read_text())
             ["comm"]}
    for c in doc["comm"]:
        twin = again[(c["op"], c["link"])]
        assert c["latency_s"] == pytest.approx(twin["latency_s"], rel=1e-12)
        assert c["bandwidth_bytes_per_s"] == pytest.approx(twin["bandwidth_bytes_per_s"],
                                                           rel=1e-12)
        assert c["cv_mape_pct"] == pytest.approx(twin["cv_mape_pct"], rel=1e-12)
    # and close to the coefficients the data came from
    for (op, link), truth in LINKS.items():
        fitted = next(c for c in doc["comm"] if (c["op"], c["link"]) == (op, link))
        assert fitted["bandwidth_bytes_per_s"] == pytest.approx(truth.bandwidth_bytes_per_s,
                                                                rel=0.1)


def test_comm_cv_keeps_a_configurations_repeats_on_one_side() -> None:
    """Perturbing every repeat of one configuration leaves its out-of-fold prediction alone (the
    k-fold splits configurations, not rows)."""
    frame = _three_repeats()
    target = (frame["op"] == "all_gather") & (frame["world_size"] == 4) & (
        frame["payload_bytes"] == 2**24)
    _, before = fit_comm(frame)
    _, after = fit_comm(frame.assign(time_s=np.where(target, frame["time_s"] * 2.0,
                                                     frame["time_s"])))
    np.testing.assert_array_equal(after[target.to_numpy()], before[target.to_numpy()])
    assert len(set(before[target.to_numpy()])) == 1  # one prediction per configuration
    assert not np.allclose(after[~target.to_numpy()], before[~target.to_numpy()], rtol=1e-9)


def test_data_without_repeats_is_fitted_unchanged() -> None:
    """No repeats: the very same frame goes to the fit (shipped profiles keep their numbers)."""
    frame = synthetic_comm_dataset(LINKS, backend="gloo", noise=0.02, seed=0)
    configs, ids = configurations(frame, COMM_KEY)
    assert configs is frame and list(ids) == list(range(len(frame)))


def test_fit_compute_on_repeats_fits_their_median(tmp_path: Path) -> None:
    truth = {"forward": {"tok_block_matmul": 1e-12, "tok_attn": 4e-12, "layers": 2e-4,
                         "const": 1e-3}}
    models = [get_model(n) for n in ("tiny-llama", "tiny-gqa", "small-llama", "tiny-phi")]
    runs = [synthetic_compute_dataset(models, truth, seq_lens=(64, 512), micro_batches=(1, 4),
                                      noise=0.03, seed=seed) for seed in range(REPEATS)]
    repeated, medians = tmp_path / "repeated.csv", tmp_path / "medians.csv"
    pd.concat(runs, ignore_index=True).to_csv(repeated, index=False)
    median = runs[0].assign(time_s=np.median([r["time_s"] for r in runs], axis=0))
    median.to_csv(medians, index=False)
    fits = {name: fit_compute(ComputeFitRequest(data_path=str(path),
                                                output_path=str(tmp_path / f"{name}.yaml"),
                                                hardware="A100-SXM4-80GB"))
            for name, path in (("repeated", repeated), ("medians", medians))}
    a, b = (fits[n].profile.compute["forward"] for n in ("repeated", "medians"))
    assert dict(a.coefficients) == pytest.approx(dict(b.coefficients), rel=1e-12)
    assert a.selection_cv_mape_pct == pytest.approx(b.selection_cv_mape_pct, rel=1e-12)
    assert a.nested_cv_mape_pct == pytest.approx(b.nested_cv_mape_pct, rel=1e-12)
    spread = fits["repeated"].profile.provenance_detail["repeats"]["compute"]
    assert spread["repeated_configurations"] == len(median) and spread["rows"] == 3 * len(median)
    assert fits["medians"].profile.provenance_detail["repeats"]["compute"][
        "repeated_configurations"] == 0
