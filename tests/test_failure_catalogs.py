"""The sourced facts of the failure model and the full bill (catalogs/reliability/), `predict
--failures`, and the SkyPilot price importer (issue 28)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from perfmodel.api.prices import PRICE_COLUMNS, ImportPricesRequest, import_prices
from perfmodel.costs.reliability import FailureSpec, checkpointed_job
from perfmodel.spec.catalog import PriceRow, get_model
from perfmodel.spec.errors import CatalogError, UserInputError
from perfmodel.spec.paths import catalog_dir
from perfmodel.spec.reliability_catalog import (
    async_stall_fraction,
    billing,
    checkpoint_write_gbit_s_per_node,
    egress_price,
    failures_per_gpu_hour,
    offer_billing,
    preemptions_per_node_hour,
    restart_s,
    spot_capacity_wait_s,
)

SAMPLE = Path(__file__).parent / "data" / "skypilot" / "aws" / "vms.csv"
RELIABILITY = catalog_dir() / "reliability"


@pytest.mark.parametrize("name", ["failure_rates.csv", "preemption_rates.csv", "defaults.csv",
                                  "egress.csv", "billing.csv"])
def test_every_row_keeps_its_date_and_source(name: str) -> None:
    frame = pd.read_csv(RELIABILITY / name, keep_default_na=False)
    assert not frame.empty
    assert (frame["source"].str.len() > 10).all() and (frame["as_of"].astype(str) != "").all()


def test_rates_are_derived_from_the_published_counts() -> None:
    h100 = failures_per_gpu_hour("H100-SXM5-80GB")
    assert h100.value == 419 / (54 * 24 * 16384) and "Llama 3" in h100.source
    assert failures_per_gpu_hour("A100-SXM4-80GB").value == 1 / (7.9 * 1024)
    assert failures_per_gpu_hour("B200").value == h100.value  # the stated default
    assert "[assumption]" in pd.read_csv(RELIABILITY / "failure_rates.csv").iloc[-1]["scope"]
    assert preemptions_per_node_hour("AWS p5.48xlarge", "H100-SXM5-80GB").value == \
        pytest.approx(0.15 / 720)
    assert preemptions_per_node_hour("GCP a3", "H200-SXM-141GB").value == \
        pytest.approx(0.15 / 720)  # no published rate: the default band
    assert checkpoint_write_gbit_s_per_node().value == pytest.approx(2e12 * 8 / 1e9 / 2048)
    assert async_stall_fraction().value == pytest.approx(6.3 / 148.8)
    assert restart_s().value == 300 and spot_capacity_wait_s().value == 3600


def test_egress_is_tiered_per_month_and_billing_rounds() -> None:
    aws = egress_price("AWS p5en.48xlarge")
    assert aws is not None
    assert aws.usd(5e12) == pytest.approx(5000 * 0.09)
    assert aws.usd(20e12) == pytest.approx(10_000 * 0.09 + 10_000 * 0.085)
    assert egress_price("RunPod") is not None and egress_price("RunPod").usd(1e15) == 0.0
    assert egress_price("Vast.ai") is None  # none published: the planner counts 0 and says so
    runpod = billing("RunPod")
    assert runpod is not None and runpod.billed_s(10.2) == 11.0


def test_a_price_list_can_carry_billing_and_a_committed_use_term(tmp_catalogs: Path) -> None:
    """A committed-use offer is an offer of its own whose minimum billed time is its term."""
    path = tmp_catalogs / "prices" / "example-2026-11-20.csv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*PRICE_COLUMNS, "billing_increment_s", "minimum_billed_s"])
        writer.writerow(["Example 3-month plan", "Example 3-month plan", "H100-SXM5-80GB", "H100",
                         8, "on-demand", 2.0, "2026-11-20", "test row", 3600, 90 * 86400])
    found = offer_billing("Example 3-month plan", "H100-SXM5-80GB", "on-demand", None)
    assert found is not None and found.minimum_s == 90 * 86400
    assert found.billed_s(3601.0) == 90 * 86400
    assert found.billed_s(100 * 86400 + 1) == 100 * 86400 + 3600
    assert offer_billing("Lambda", "H100-SXM5-80GB", "on-demand", None) is None


def test_predict_with_failures_adds_the_expected_figures(run_cli) -> None:
    base = ["predict", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128",
            "--format", "json"]
    plain = json.loads(run_cli(*base).out)
    assert "goodput" not in plain  # without --failures the record is today's
    result = run_cli(*base, "--failures", "--failures-per-gpu-hour", "0.01",
                     "--train-tokens", "1e9", "--usd-per-gpu-hour", "2")
    assert result.code == 0, result.err
    record = json.loads(result.out)
    assert {k: record[k] for k in plain} == plain  # step figures never include failures
    assert 0 < record["goodput"] < 1
    assert record["expected_wall_time_s"] == pytest.approx(record["wall_time_s"]
                                                           / record["goodput"])
    assert record["expected_cost_usd"] > record["cost_usd"]
    assert record["checkpoint_interval_steps"] == round(record["checkpoint_interval_steps"])
    assert record["failures_per_gpu_hour"] == 0.01 and record["failure_sources"]
    assert record["checkpoint_mode"] == "sync"
    asynchronous = json.loads(run_cli(*base, "--failures", "--failures-per-gpu-hour", "0.01",
                                      "--checkpoint-mode", "async").out)
    assert asynchronous["checkpoint_stall_s"] < record["checkpoint_stall_s"]
    refused = run_cli(*base, "--restart-s", "60")
    assert refused.code == 2 and "--failures" in refused.err
    bad = run_cli(*base, "--failures", "--restart-s", "-1")
    assert bad.code == 2 and "To fix:" in bad.err


def test_llama3_405b_on_16k_h100_keeps_more_than_90_percent_effective_training_time() -> None:
    """The done-when check, on the failure model `predict --failures` runs: 16,384 H100 at the
    published interruption rate with the sourced checkpoint and restart defaults (no tuning) keep
    more than 90 % effective training time at Daly's interval (docs/RELIABILITY.md section 1);
    with whole steps of a minute (checkpoints on step boundaries) too."""
    params = get_model("Llama-3.1-405B").total_params
    for step in (None, 60.0):
        job = checkpointed_job(spec=FailureSpec(), gpu="H100-SXM5-80GB", num_gpus=16384,
                               num_nodes=2048, params=params, master_dtype="fp32", mode="sync",
                               step_time_s=step)
        assert 0.90 < job.goodput < 1.0
        assert job.interruptions_per_hour == pytest.approx(419 / (54 * 24))


def test_skypilot_import_writes_a_dated_price_list(tmp_path: Path) -> None:
    out = tmp_path / "aws.csv"
    result = import_prices(ImportPricesRequest(vms_csv=SAMPLE, region="us-east-1",
                                               as_of="2026-11-20", output_path=out))
    frame = pd.read_csv(out)
    assert list(frame.columns) == list(PRICE_COLUMNS)
    for row in frame.astype(str).to_dict(orient="records"):
        PriceRow.model_validate(row)
    by = {(r["provider"], r["tier"]): r for r in result.rows}
    assert by[("AWS p4d.24xlarge", "on-demand")]["usd_per_gpu_hour"] == pytest.approx(32.7726 / 8)
    assert by[("AWS p4d.24xlarge", "spot")]["usd_per_gpu_hour"] == pytest.approx(6.7915 / 8)
    assert by[("AWS p4de.24xlarge", "spot")]["usd_per_gpu_hour"] == \
        pytest.approx((7.8074 + 5.8394) / 2 / 8)  # the zone without a spot price is left out
    assert by[("AWS p4de.24xlarge", "on-demand")]["gpu_type"] == "A100-SXM4-80GB"
    assert all(r["as_of"] == "2026-11-20" and "sha256" in r["source"] for r in result.rows)
    assert not any("p5" in r["provider"] for r in result.rows)  # another region


def test_skypilot_import_errors_and_gpu_map(tmp_path: Path, run_cli) -> None:
    with pytest.raises(UserInputError, match="--region"):
        import_prices(ImportPricesRequest(vms_csv=SAMPLE, output_path=tmp_path / "x.csv"))
    with pytest.raises(UserInputError, match="did you mean"):
        import_prices(ImportPricesRequest(vms_csv=SAMPLE, region="us-east-9",
                                          output_path=tmp_path / "x.csv"))
    with pytest.raises(CatalogError):
        import_prices(ImportPricesRequest(vms_csv=SAMPLE, region="us-east-2",
                                          output_path=tmp_path / "x.csv"))  # only a V100
    mapped = import_prices(ImportPricesRequest(vms_csv=SAMPLE, region="ap-northeast-1",
                                               gpu_map=(("H100", "H100-PCIe"),),
                                               output_path=tmp_path / "y.csv"))
    assert {r["gpu_type"] for r in mapped.rows} == {"H100-PCIe"}
    bad = tmp_path / "bad.csv"
    bad.write_text("InstanceType,Price\nx,1\n")
    result = run_cli("catalog", "import-prices", str(bad), "--region", "r")
    assert result.code == 2 and "SkyPilot" in result.err and "To fix:" in result.err
    ok = run_cli("catalog", "import-prices", str(SAMPLE), "--region", "us-east-1", "--as-of",
                 "2026-11-20", "-o", str(tmp_path / "z.csv"), "--format", "json")
    assert ok.code == 0, ok.err
    assert len(json.loads(ok.out)) == 4 and not math.isnan(
        pd.read_csv(tmp_path / "z.csv")["usd_per_gpu_hour"].sum())


def test_failure_limits_are_the_readme_table_and_refuse_outside(run_cli) -> None:
    from perfmodel.spec.failure_model import FAILURE_LIMITS

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    for key, (low, high, _) in FAILURE_LIMITS.items():
        line = next(li for li in readme.splitlines() if li.startswith(f"| `{key}` |"))
        assert [float(c) for c in line.split("|")[2:4]] == [low, high], key
    base = ["predict", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--failures"]
    for flag, value in (("--failures-per-gpu-hour", "2"), ("--restart-s", "1e9"),
                        ("--train-tokens", "1e20")):
        result = run_cli(*base, flag, value)
        assert result.code == 2 and "To fix:" in result.err, (flag, result.err)
