"""`shardmeter fit calibrate --runs`: a calibrated profile from a team's own runs
(perfmodel.api.user_runs), checked on published H100 runs written in the user format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.costs.datasets import mape_pct
from perfmodel.profiles.calibrate import load_published_runs, predict_tokens_per_s_per_gpu
from perfmodel.profiles.profile import load_profile

GPU = "H100-SXM5-80GB"
SIZES = ("MPT-760M", "MPT-1B", "MPT-3B")
USER_COLUMNS = ["model", "gpu", "nodes", "gpus_per_node", "seq_len", "micro_batch", "grad_accum",
                "activation_checkpointing", "tp", "pp", "tokens_per_s_per_gpu", "step_time_s"]


def _published() -> pd.DataFrame:
    """Four H100 runs of each of three MPT sizes (llm-foundry's table)."""
    runs = load_published_runs()
    rows = runs[(runs["gpu"] == GPU) & runs["model"].isin(SIZES)]
    return rows.groupby("model").head(4).reset_index(drop=True)


def _user_csv(published: pd.DataFrame, path: Path) -> Path:
    """The runs as a team would log them: every other row gives its step time instead of
    tokens/s/GPU (step = micro_batch x grad_accum x seq_len tokens per GPU)."""
    rows = []
    for i, r in published.iterrows():
        tokens = int(r["micro_batch"]) * int(r["accum_steps"]) * int(r["seq_len"])
        measured = float(r["tokens_per_s_per_gpu"])
        rows.append({"model": r["model"], "gpu": r["gpu"], "nodes": r["nodes"],
                     "gpus_per_node": r["gpus_per_node"], "seq_len": r["seq_len"],
                     "micro_batch": r["micro_batch"], "grad_accum": r["accum_steps"],
                     "activation_checkpointing": r["activation_checkpointing"], "tp": 1, "pp": "",
                     "tokens_per_s_per_gpu": measured if int(str(i)) % 2 == 0 else "",
                     "step_time_s": "" if int(str(i)) % 2 == 0 else repr(tokens / measured)})
    pd.DataFrame(rows, columns=USER_COLUMNS).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("calibrate")
    published = _published()
    runs = _user_csv(published, folder / "my-runs.csv")
    output = folder / "h100-mine.yaml"
    from click.testing import CliRunner

    from planner.cli import cli

    result = CliRunner().invoke(cli, ["fit", "calibrate", "--runs", str(runs), "--gpu", GPU,
                                      "-o", str(output), "--format", "json"])
    return {"published": published, "runs": runs, "output": output, "result": result}


def test_refit_reproduces_the_runs_within_its_cv_error(calibrated: dict[str, object]) -> None:
    result = calibrated["result"]
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    payload = json.loads(result.stdout)  # type: ignore[attr-defined]
    published = calibrated["published"]
    assert isinstance(published, pd.DataFrame)
    assert payload["rows"] == len(published) == 12
    # the step-time rows were converted to the published tokens/s/GPU
    np.testing.assert_allclose([r["measured_tokens_per_s_per_gpu"] for r in payload["runs"]],
                               published["tokens_per_s_per_gpu"].to_numpy(dtype=float), rtol=1e-9)
    profile = load_profile(str(calibrated["output"]))
    assert profile.provenance == "calibrated"
    assert profile.provenance_detail["source"] == f"user runs: {calibrated['runs']} (12 rows)"
    predicted = predict_tokens_per_s_per_gpu(profile, published)
    error = mape_pct(published["tokens_per_s_per_gpu"].to_numpy(dtype=float), predicted)
    cv = payload["cv_mape_pct"]
    assert 0 < error <= cv, (error, cv)
    assert cv < payload["prior_mape_pct"]  # calibrating beats the datasheet prior
    assert "CV MAPE" in result.stderr  # type: ignore[attr-defined]


@pytest.mark.parametrize(("column", "value", "problem"), [
    ("nodes", "two", "not a whole number"),
    ("tp", "2", "only FSDP runs"),
    ("tokens_per_s_per_gpu", "nan", "not a finite number > 0"),
    ("gpu", "H1000", "not a catalog GPU"),
    ("activation_checkpointing", "sometimes", ""),
    ("model", "no-such-model", "not a model"),
])
def test_malformed_runs_exit_2_naming_line_and_field(column: str, value: str, problem: str,
                                                      tmp_path: Path, run_cli) -> None:
    path = _user_csv(_published(), tmp_path / "runs.csv")
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.loc[2, column] = value  # line 4 of the file
    if column == "tokens_per_s_per_gpu":
        frame.loc[2, "step_time_s"] = ""
    frame.to_csv(path, index=False)
    code, _, err = run_cli("fit", "calibrate", "--runs", str(path), "--gpu", GPU, "-o",
                           str(tmp_path / "p.yaml"))
    assert code == 2, err
    assert "line 4" in err and column in err and problem in err and "To fix:" in err
    assert not (tmp_path / "p.yaml").exists()


def test_one_model_or_no_row_of_the_gpu_exits_2(tmp_path: Path, run_cli) -> None:
    published = _published()
    path = _user_csv(published[published["model"] == "MPT-1B"], tmp_path / "one.csv")
    code, _, err = run_cli("fit", "calibrate", "--runs", str(path), "--gpu", GPU, "-o",
                           str(tmp_path / "p.yaml"))
    assert code == 2 and "one model" in err and "To fix:" in err
    code, _, err = run_cli("fit", "calibrate", "--runs", str(path), "--gpu", "A100-SXM4-80GB",
                           "-o", str(tmp_path / "p.yaml"))
    assert code == 2 and "no run of GPU A100-SXM4-80GB" in err
