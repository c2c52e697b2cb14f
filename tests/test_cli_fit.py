"""`shardmeter fit` and `shardmeter validate` end to end, and malformed datasets (exit 2)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from synthetic import synthetic_compute_dataset

from perfmodel.costs.comm import LinkCoefficients, synthetic_comm_dataset
from perfmodel.spec.catalog import get_model

DATA = Path(__file__).resolve().parent / "data" / "perf"
NAMES = ("tiny-llama", "tiny-gqa", "small-llama", "tiny-phi", "SmolLM-360M", "Llama-3.2-1B",
         "Phi-1.5")
COMPUTE = {
    "forward": {"tok_block_matmul": 1.0e-12, "tok_attn": 4.0e-12, "layers": 2e-4, "const": 1e-3},
    "backward": {"tok_block_matmul": 2.0e-12, "tok_attn": 8.0e-12, "layers": 4e-4, "const": 2e-3},
}


def run(run_cli, *args: object) -> tuple[int, str, str]:
    """Run `shardmeter ARGS` in-process (conftest's run_cli): exit code, stdout, stderr."""
    result = run_cli(*(str(a) for a in args))
    return result.code, result.out, result.err


@pytest.fixture
def synthetic(tmp_path: Path) -> tuple[Path, Path]:
    models = [get_model(n) for n in NAMES]
    compute = tmp_path / "compute.csv"
    synthetic_compute_dataset(models, COMPUTE, seq_lens=(128, 1024), micro_batches=(1, 4),
                              noise=0.01, seed=3).to_csv(compute, index=False)
    comm = tmp_path / "comm.csv"
    link = LinkCoefficients(latency_s=6e-6, bandwidth_bytes_per_s=2.3e11)
    synthetic_comm_dataset({("all_gather", "nvlink3"): link, ("all_reduce", "nvlink3"): link},
                           noise=0.01, seed=3).to_csv(comm, index=False)
    return compute, comm


def test_fit_then_validate_end_to_end(run_cli, tmp_path: Path,
                                      synthetic: tuple[Path, Path]) -> None:
    compute, comm = synthetic
    out = tmp_path / "a100-lab.yaml"
    code, stdout, stderr = run(run_cli, "fit", "compute", compute, "-o", out,
                               "--hardware", "A100-SXM4-80GB", "--format", "json")
    assert code == 0, stderr
    rows = {r["phase"]: r for r in json.loads(stdout)}
    assert set(rows) == {"forward", "backward"}
    assert set(rows["forward"]["features"].split()) == set(COMPUTE["forward"])
    code, stdout, stderr = run(run_cli, "fit", "comm", comm, "-o", out, "--format", "json")
    assert code == 0, stderr

    doc = yaml.safe_load(out.read_text())
    assert doc["provenance"] == "measured" and doc["hardware"] == "A100-SXM4-80GB"
    for name, value in COMPUTE["forward"].items():
        assert doc["compute"]["forward"]["coefficients_s"][name] == pytest.approx(value, rel=0.1)
    assert doc["compute"]["optimizer"]["provenance"] == "prior"  # from the A100 prior base
    fitted = {(c["op"], c["link"]): c for c in doc["comm"]}
    assert fitted[("all_gather", "nvlink3")]["provenance"] == "measured"
    assert fitted[("all_gather", "nvlink3")]["bandwidth_bytes_per_s"] == pytest.approx(
        2.3e11, rel=0.05
    )
    assert fitted[("reduce_scatter", "nvlink3")]["provenance"] == "prior"
    detail = doc["provenance_detail"]
    assert [d["kind"] for d in detail["datasets"]] == ["compute", "comm"]
    assert all(len(d["sha256"]) == 64 for d in detail["datasets"])
    # the collectives' k-fold CV; the phases' selection score and nested CV under their own names
    assert set(detail["cv_mape_pct"]) == {"all_gather/nvlink3", "all_reduce/nvlink3"}
    assert set(detail["selection_cv_mape_pct"]) == set(detail["nested_cv_mape_pct"]) == {
        "forward", "backward"}
    for phase in ("forward", "backward"):
        entry = doc["compute"][phase]
        assert entry["selection_cv_mape_pct"] == detail["selection_cv_mape_pct"][phase]
        assert entry["nested_cv_mape_pct"] == pytest.approx(detail["nested_cv_mape_pct"][phase])
        assert 0 < entry["nested_cv_mape_pct"] < 5 and "cv_mape_pct" not in entry
    assert detail["commands"][0].startswith("shardmeter fit compute") and detail["fit_date"]

    code, stdout, stderr = run(
        run_cli, "validate", out, compute, "--comm", comm, "--format", "json"
    )
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["provenance"]["provenance"] == "measured"
    assert report["compute"]["mode"].startswith("leave-one-architecture-out")
    table = {r["model"]: r for r in report["compute"]["rows"]}
    assert set(table) == {*NAMES, "all"}
    assert table["all"]["forward_mape_pct"] < 5 and table["all"]["step_mape_pct"] < 5
    assert table["all"]["optimizer_mape_pct"] is None  # no optimizer rows in the data
    assert report["comm"]["mode"].startswith("5-fold")
    assert all(r["mape_pct"] < 5 for r in report["comm"]["rows"])

    code, stdout, _ = run(run_cli, "validate", out, compute)
    assert code == 0 and "leave-one-architecture-out" in stdout and "measured" in stdout


def test_validate_prior_reports_plain_prediction_error(run_cli) -> None:
    code, stdout, stderr = run(run_cli, "validate", "A100-SXM4-80GB-prior",
                               DATA / "compute_small.csv", "--format", "csv")
    assert code == 0, stderr
    frame = pd.read_csv(io.StringIO(stdout))
    assert set(frame["provenance"]) == {"prior"} and set(frame["table"]) == {"compute"}
    assert all(m.startswith("prediction error") for m in frame["mode"])
    assert list(frame["model"]) == ["tiny-llama", "tiny-gqa", "small-llama", "tiny-phi", "all"]
    assert frame["forward_mape_pct"].notna().all()


def test_validate_comm_decides_in_sample_by_row_overlap(run_cli, tmp_path: Path) -> None:
    """In-sample or not is decided by the rows, not the file: a copy, a re-measurement of the
    fitted configurations or a superset is scored against the fitting data's k-fold; rows of
    configurations the fit never saw are plain prediction error."""
    frame = pd.read_csv(DATA / "comm_small.csv")
    fitted = tmp_path / "comm_fit.csv"
    frame[frame["payload_bytes"] != 4096].to_csv(fitted, index=False)
    out = tmp_path / "cpu.yaml"
    code, _, stderr = run(run_cli, "fit", "comm", fitted, "-o", out, "--hardware", "xeon-local")
    assert code == 0, stderr

    def mode_and_rows(path: Path) -> tuple[str, list[dict]]:
        code, stdout, stderr = run(run_cli, "validate", out, "--comm", path, "--format", "json")
        assert code == 0, stderr
        comm = json.loads(stdout)["comm"]
        return comm["mode"], comm["rows"]

    mode, _ = mode_and_rows(fitted)  # the fitting file itself
    assert mode == "5-fold cross-validation (refit per op and link)"
    new = tmp_path / "comm_new.csv"
    frame[frame["payload_bytes"] == 4096].to_csv(new, index=False)  # configurations never fitted
    mode, _ = mode_and_rows(new)
    assert mode.startswith("prediction error (no row of this dataset is in the profile's fitting")
    remeasured = tmp_path / "comm_again.csv"  # the fitted configurations, measured 10% slower
    again = frame[frame["payload_bytes"] != 4096]
    again.assign(time_s=again["time_s"] * 1.1).to_csv(remeasured, index=False)
    mode, rows = mode_and_rows(remeasured)
    assert mode.startswith("5-fold cross-validation on fitting dataset") and "12 of 12 rows" in mode
    overall = [r for r in rows if r["link"] == "all"]
    assert len(overall) == 3 and all(5 < r["mape_pct"] < 15 for r in overall)
    mode, _ = mode_and_rows(DATA / "comm_small.csv")  # a superset: 12 rows fitted, 6 new
    assert "12 of 18 rows in it" in mode and "prediction error for the 6 others" in mode
    # without the fitting file at its recorded path the overlap is unknown, and said so
    fitted.unlink()
    mode, _ = mode_and_rows(DATA / "comm_small.csv")
    assert mode.startswith("prediction error (its fitting dataset") and "unknown" in mode


def test_validate_comm_knows_every_fitting_dataset(run_cli, tmp_path: Path) -> None:
    """A comm part fitted on two files (collectives, then send_recv, as the shipped profile is)
    keeps both as fitting data: each is scored by its k-fold, not as prediction error, and a copy
    of the first file's rows is still in sample after the second fit."""
    frame = pd.read_csv(DATA / "comm_small.csv")
    first, second = tmp_path / "gather.csv", tmp_path / "others.csv"
    frame[frame["op"] == "all_gather"].to_csv(first, index=False)
    frame[frame["op"] != "all_gather"].to_csv(second, index=False)
    out = tmp_path / "cpu.yaml"
    for path in (first, second):
        code, _, stderr = run(run_cli, "fit", "comm", path, "-o", out, "--hardware", "xeon-local")
        assert code == 0, stderr

    def mode(path: Path) -> str:
        code, stdout, stderr = run(run_cli, "validate", out, "--comm", path, "--format", "json")
        assert code == 0, stderr
        return str(json.loads(stdout)["comm"]["mode"])

    assert mode(first) == mode(second) == "5-fold cross-validation (refit per op and link)"
    copy = tmp_path / "copy.csv"
    frame[frame["op"] == "all_gather"].to_csv(copy, index=False)
    copy.write_text(copy.read_text() + "\n")  # other bytes, same rows
    assert mode(copy).startswith("5-fold cross-validation on fitting datasets")


def test_fit_unknown_hardware_without_base(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "cpu.yaml"
    code, _, stderr = run(run_cli, "fit", "comm", DATA / "comm_small.csv", "-o", out,
                          "--hardware", "xeon-local")
    assert code == 0, stderr
    doc = yaml.safe_load(out.read_text())
    assert doc["backend"] == "gloo" and doc["hardware"] == "xeon-local" and doc["compute"] == {}
    code, _, stderr = run(
        run_cli, "fit", "comm", DATA / "comm_small.csv", "-o", tmp_path / "x.yaml"
    )
    assert code == 2 and "--hardware" in stderr


def _variant(tmp_path: Path, name: str, source: str, edit) -> Path:
    frame = pd.read_csv(DATA / source, dtype=str, keep_default_na=False)
    frame = edit(frame)
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def _set(col: str, row: int, value: str):
    def edit(frame: pd.DataFrame) -> pd.DataFrame:
        frame.loc[row, col] = value
        return frame
    return edit


@pytest.mark.parametrize(
    ("source", "edit", "expected"),
    [
        ("compute_small.csv", lambda f: f.drop(columns=["time_s"]), ["missing column(s) time_s"]),
        (
            "compute_small.csv",
            _set("time_s", 1, "-0.25"),
            ["line 3", "'time_s'", "'-0.25'", "positive"],
        ),
        ("compute_small.csv", _set("time_s", 4, "0"), ["line 6", "'time_s'", "'0'"]),
        ("compute_small.csv", _set("phase", 2, "sideways"), ["line 4", "'phase'", "'sideways'"]),
        ("compute_small.csv", _set("hidden_size", 0, "abc"), ["line 2", "'hidden_size'", "'abc'"]),
        (
            "compute_small.csv",
            _set("micro_batch", 5, "1.5"),
            ["line 7", "'micro_batch'", "integer"],
        ),
        (
            "compute_small.csv",
            _set("num_key_value_heads", 0, "3"),
            ["line 2", "num_key_value_heads"],
        ),
        ("compute_small.csv", _set("tie_word_embeddings", 1, "maybe"), ["line 3", "'maybe'"]),
        ("compute_small.csv", _set("unit", 0, "layer"), ["line 2", "'unit'", "'layer'"]),
        ("comm_small.csv", _set("op", 3, "broadcast"), ["line 5", "'op'", "'broadcast'"]),
        ("comm_small.csv", _set("backend", 0, "nccl"), ["several backends", "--backend"]),
        (
            "comm_small.csv",
            _set("payload_bytes", 2, "many"),
            ["line 4", "'payload_bytes'", "'many'"],
        ),
    ],
)
def test_malformed_datasets_exit_2(run_cli, tmp_path: Path, source: str,
                                   edit, expected: list[str]) -> None:
    path = _variant(tmp_path, "bad.csv", source, edit)
    kind = "compute" if source.startswith("compute") else "comm"
    code, _, stderr = run(run_cli, "fit", kind, path, "-o", tmp_path / "p.yaml",
                          "--hardware", "A100-SXM4-80GB")
    assert code == 2
    assert str(path) in stderr and "To fix:" in stderr and "Traceback" not in stderr
    for text in expected:
        assert text in stderr
    assert not (tmp_path / "p.yaml").exists()


def test_missing_inputs_exit_2(run_cli, tmp_path: Path) -> None:
    code, _, stderr = run(run_cli, "validate", "A100-SXM4-80GB-prior", tmp_path / "none.csv")
    assert code == 2 and "not found" in stderr
    code, _, stderr = run(run_cli, "validate", "A100-SXM4-80GB-prior")
    assert code == 2 and "nothing to validate" in stderr
    code, _, stderr = run(run_cli, "validate", "no-such-profile", DATA / "compute_small.csv")
    assert code == 2 and "unknown profile" in stderr
