"""`shardmeter catalog` and `shardmeter memory` through the CLI: outputs and bad input (exit 2)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from perfmodel.costs.memory import max_micro_batch, memory_breakdown
from perfmodel.spec.catalog import get_gpu, get_model, load_price_lists
from perfmodel.spec.formulas import GIB

CONFIGS = Path(__file__).parent / "data" / "configs"
MEMORY_ARGS = [
    "--gpu", "H100-SXM5-80GB", "--nodes", "2", "--gpus-per-node", "8", "--seq-len", "2048",
]


def _assert_user_error(result, *needles: str) -> None:
    assert result.code == 2, (result.out, result.err)
    assert "Traceback" not in result.err
    assert "To fix:" in result.err
    for needle in needles:
        assert needle in result.err, (needle, result.err)


# ---- catalog ---------------------------------------------------------------------------------

def test_catalog_models_json(run_cli) -> None:
    result = run_cli("catalog", "models", "--format", "json")
    assert result.code == 0
    records = {r["name"]: r for r in json.loads(result.out)}
    assert records["Llama-3-8B"]["params"] == get_model("Llama-3-8B").total_params
    assert isinstance(records["Llama-3-8B"]["params"], int)
    assert records["Gemma-2B"]["head_dim"] == 256
    assert records["Gemma-2B"]["num_kv_heads"] == 1


def test_catalog_gpus_json(run_cli) -> None:
    result = run_cli("catalog", "gpus", "--format", "json")
    assert result.code == 0
    h200 = next(r for r in json.loads(result.out) if r["name"] == "H200-SXM-141GB")
    gpu = get_gpu("H200-SXM-141GB")
    assert h200["usable_memory_gib"] == pytest.approx(gpu.usable_memory_bytes / GIB)
    assert h200["bf16_tflops"] == pytest.approx(gpu.bf16_flops_per_s / 1e12)
    assert h200["intra_node_link"] == gpu.intra_node_link


def test_catalog_links_csv(run_cli) -> None:
    result = run_cli("catalog", "links", "--format", "csv")
    assert result.code == 0
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(result.out))}
    assert float(rows["nvlink4"]["latency_us"]) > 0 and rows["nvlink4"]["source"]


def test_catalog_prices_all_and_filtered(run_cli) -> None:
    lists = load_price_lists()
    everything = json.loads(run_cli("catalog", "prices", "--format", "json").out)
    assert len(everything) == sum(len(v) for v in lists.values())
    name = sorted(lists)[0]
    result = run_cli("catalog", "prices", "--list", name.upper(), "--format", "json")
    assert result.code == 0
    rows = json.loads(result.out)
    assert {r["list"] for r in rows} == {name} and len(rows) == len(lists[name])
    assert {"provider", "gpu", "tier", "usd_per_gpu_hour", "as_of"} <= set(rows[0])


CATALOGS = Path(__file__).resolve().parent.parent / "catalogs"
CATALOG_NAMES = {"models": ("models.csv", "name"), "gpus": ("gpus.csv", "gpu_type"),
                 "links": ("links.csv", "name")}
"""Catalog CSV and its key column: the table must show every row's key (read here with csv,
not through perfmodel.spec.catalog, so a row the loader drops is caught)."""


@pytest.mark.parametrize("what", ["models", "gpus", "links", "prices"])
def test_catalog_table_format(run_cli, what: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the compact price view groups offers by GPU and tier; --wide lists every row, folding
    # cells to the terminal's width: a wide one keeps each name on one line (pytest-xdist's
    # workers set COLUMNS=80)
    monkeypatch.setenv("COLUMNS", "1000")
    result = run_cli("catalog", what, *(["--wide"] if what == "prices" else []))
    assert result.code == 0, result.err
    if what == "prices":
        rows = [r for offers in load_price_lists().values() for r in offers]
        expected = {r.provider for r in rows}
        assert len(rows) > 1
    else:
        filename, key = CATALOG_NAMES[what]
        with (CATALOGS / filename).open(newline="") as fh:
            expected = {r[key] for r in csv.DictReader(fh)}
    missing = sorted(name for name in expected if name not in result.out)
    assert expected and not missing, (what, missing)


def test_unknown_price_list(run_cli) -> None:
    _assert_user_error(run_cli("catalog", "prices", "--list", "lambda-2026"),
                       "lambda-2026", "did you mean")


# ---- memory ----------------------------------------------------------------------------------

def test_memory_json_matches_library(run_cli) -> None:
    result = run_cli("memory", "llama-3-8b", *MEMORY_ARGS, "--micro-batch", "2", "--ac",
                     "selective", "--format", "json")
    assert result.code == 0, result.err
    payload = json.loads(result.out)
    spec, gpu = get_model("Llama-3-8B"), get_gpu("H100-SXM5-80GB")
    expected = memory_breakdown(spec, num_gpus=16, seq_len=2048, micro_batch=2, ac="selective")
    assert payload["peak_gib"] == pytest.approx(expected.peak_bytes / GIB)
    assert payload["max_micro_batch"] == max_micro_batch(
        spec, gpu_memory_bytes=gpu.usable_memory_bytes, num_gpus=16, seq_len=2048, ac="selective")
    assert payload["fits"] == (expected.peak_bytes <= gpu.usable_memory_bytes)
    assert payload["breakdown_gib"]["activations"] == pytest.approx(
        expected.activations_bytes / GIB
    )
    assert sum(payload["breakdown_gib"].values()) == pytest.approx(payload["peak_gib"])
    echoed = {k: payload[k] for k in ("model", "gpu", "nodes", "gpus_per_node", "num_gpus",
                                      "seq_len", "micro_batch", "ac")}
    assert echoed == {"model": "Llama-3-8B", "gpu": "H100-SXM5-80GB", "nodes": 2,
                      "gpus_per_node": 8, "num_gpus": 16, "seq_len": 2048, "micro_batch": 2,
                      "ac": "op-sac"}  # --ac selective is read as op-sac


def test_memory_not_fitting_is_reported(run_cli) -> None:
    result = run_cli("memory", "Llama-3.1-70B", "--gpu", "RTX-4090", "--gpus-per-node", "1",
                     "--seq-len", "4096", "--format", "json", "--allow-oom")
    payload = json.loads(result.out)
    assert result.code == 0 and payload["fits"] is False and payload["max_micro_batch"] == 0


def test_memory_from_config_path(run_cli) -> None:
    path = CONFIGS / "mistral_7b.json"
    by_path = json.loads(run_cli("memory", str(path), *MEMORY_ARGS, "--format", "json").out)
    by_name = json.loads(run_cli("memory", "Mistral-7B-v0.1", *MEMORY_ARGS, "--format", "json").out)
    assert by_path["model"] == "mistral_7b"
    assert by_path["peak_gib"] == pytest.approx(by_name["peak_gib"])


def test_memory_table(run_cli) -> None:
    result = run_cli("memory", "tiny-llama", *MEMORY_ARGS)
    assert result.code == 0
    assert "activations" in result.out and "peak" in result.out
    assert "largest micro-batch that fits" in result.out


def test_memory_csv(run_cli) -> None:
    result = run_cli("memory", "tiny-llama", *MEMORY_ARGS, "--ac", "full", "--format", "csv")
    assert result.code == 0
    (row,) = list(csv.DictReader(io.StringIO(result.out)))
    assert row["ac"] == "full" and int(row["max_micro_batch"]) > 0
    assert float(row["temporaries_gib"]) > 0   # the recomputed block (issue 9's breakdown)


# ---- bad input -------------------------------------------------------------------------------

def test_unknown_model(run_cli) -> None:
    _assert_user_error(run_cli("memory", "llama-3-8", *MEMORY_ARGS), "llama-3-8", "did you mean",
                       "Llama-3-8B")


def test_unknown_gpu(run_cli) -> None:
    _assert_user_error(run_cli("memory", "tiny-llama", "--gpu", "H100", "--seq-len", "128"),
                       "'H100'", "did you mean")


@pytest.mark.parametrize(("filename", "needles"), [
    ("bad_json.json", ["bad_json.json", "not valid JSON"]),
    ("missing_field.json", ["missing_field.json", "'hidden_size'", "missing"]),
    ("negative_value.json", ["negative_value.json", "'num_hidden_layers'", "-32"]),
    ("wrong_type.json", ["wrong_type.json", "'hidden_size'", "'4096'"]),
    ("zero_kv_heads.json", ["zero_kv_heads.json", "'num_key_value_heads'", "got 0"]),
])
def test_malformed_config(run_cli, filename: str, needles: list[str]) -> None:
    _assert_user_error(run_cli("memory", str(CONFIGS / filename), *MEMORY_ARGS), *needles)


@pytest.mark.parametrize(("option", "value"), [
    ("--seq-len", "0"), ("--micro-batch", "-1"), ("--nodes", "0"), ("--gpus-per-node", "-2"),
])
def test_non_positive_sizes(run_cli, option: str, value: str) -> None:
    args = {"--gpu": "H100-SXM5-80GB", "--nodes": "1", "--gpus-per-node": "8", "--seq-len": "128"}
    args[option] = value
    flat = [x for kv in args.items() for x in kv]
    _assert_user_error(run_cli("memory", "tiny-llama", *flat), f"{option} {value}")


def test_gpus_per_node_larger_than_a_node(run_cli) -> None:
    _assert_user_error(run_cli("memory", "tiny-llama", "--gpu", "A100-SXM4-80GB",
                               "--gpus-per-node", "16", "--seq-len", "128"),
                       "--gpus-per-node 16", "at most 8")


def test_unknown_ac_mode_is_usage_error(run_cli) -> None:
    result = run_cli("memory", "tiny-llama", *MEMORY_ARGS, "--ac", "partial")
    assert result.code == 2 and "Traceback" not in result.err and "partial" in result.err


def _break_row(path: Path, key: str, value: str, field: str) -> int:
    """Blank `field` in the row whose `key` is `value`; return its line number."""
    lines = path.read_text().splitlines(keepends=True)
    header = next(csv.reader([lines[0]]))
    for line_no, line in enumerate(lines[1:], start=2):
        row = next(csv.reader([line]))
        if row[header.index(key)] == value:
            row[header.index(field)] = ""
            out = io.StringIO()
            csv.writer(out, lineterminator="\n").writerow(row)
            lines[line_no - 1] = out.getvalue()
            path.write_text("".join(lines))
            return line_no
    raise AssertionError(f"no row {key}={value} in {path}")


@pytest.mark.parametrize(("filename", "key", "value", "field", "argv"), [
    ("models.csv", "name", "Llama-3-8B", "num_attention_heads", ["catalog", "models"]),
    ("models.csv", "name", "tiny-phi", "vocab_size", ["memory", "tiny-llama", *MEMORY_ARGS]),
    ("gpus.csv", "gpu_type", "L40S", "max_gpus_per_node", ["catalog", "gpus"]),
    ("links.csv", "name", "eth-100g", "busbw_gb_s", ["catalog", "links"]),
])
def test_catalog_row_missing_field(run_cli, tmp_catalogs: Path, filename: str, key: str,
                                   value: str, field: str, argv: list[str]) -> None:
    path = tmp_catalogs / filename
    line = _break_row(path, key, value, field)
    _assert_user_error(run_cli(*argv), str(path), f"line {line}", repr(field))


def test_price_row_missing_field(run_cli, tmp_catalogs: Path) -> None:
    path = next((tmp_catalogs / "prices").glob("lambda-*.csv"))
    line = _break_row(path, "gpu_type", "B200", "usd_per_gpu_hour")
    _assert_user_error(run_cli("catalog", "prices"), str(path), f"line {line}", "usd_per_gpu_hour")
