"""Issue 29 item 4: documented, versioned JSON outputs.

Real outputs of `predict`, `memory` and `layout` (run in process through `planner.cli.main`) are
validated against the shipped JSON Schemas (planner/schemas/, `shardmeter schema NAME`) with
`jsonschema`; a version-1 predict record (a key named after a link) is refused by the schema, so
the schema can fail; the wheel's package list covers every package, so the schemas ship."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest

from planner.schemas import SCHEMA_NAMES, load_schema

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(p.name.removesuffix(".schema.json")
                 for p in (ROOT / "planner" / "schemas").glob("*.schema.json"))
SMALL = ["Llama-3.2-1B", "--gpu", "A100-SXM4-80GB", "--seq-len", "1024"]
OUTPUTS = {
    "predict-fsdp": ("predict", ["predict", *SMALL, "--nodes", "2"]),
    "predict-diloco": ("predict", ["predict", *SMALL, "--strategy", "diloco", "--islands", "2"]),
    "predict-streaming": ("predict", ["predict", *SMALL, "--strategy", "streaming-diloco",
                                      "--islands", "2"]),
    "predict-pp-failures": ("predict", ["predict", *SMALL, "--pp", "2", "--accum", "4",
                                        "--failures", "--train-tokens", "1e9"]),
    "memory": ("memory", ["memory", *SMALL]),
    "memory-pp": ("memory", ["memory", *SMALL, "--pp", "2", "--accum", "4"]),
    "layout": ("layout", ["layout", *SMALL, "--global-batch", "16", "--top", "3"]),
    "layout-explain": ("layout", ["layout", *SMALL, "--global-batch", "16", "--explain",
                                  "tp=2,dp_shard=4,ac=none"]),
}


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = load_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_schema_is_valid_draft_2020_12(name: str) -> None:
    schema = load_schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("case", sorted(OUTPUTS))
def test_real_outputs_match_their_schema(run_cli, case: str) -> None:
    name, args = OUTPUTS[case]
    result = run_cli(*args, "--format", "json")
    assert result.code == 0, result.err
    record = json.loads(result.out)
    errors = [e.message for e in _validator(name).iter_errors(record)]
    assert errors == []


def test_link_provenance_is_a_list_and_v1_keys_are_refused(run_cli) -> None:
    result = run_cli("predict", *SMALL, "--nodes", "2", "--format", "json")
    record = json.loads(result.out)
    assert record["schema_version"] == 3
    assert [item["link"] for item in record["link_provenance"]] == ["nvlink3", "ib-hdr200"]
    assert not [k for k in record if k.startswith("link_") and k != "link_provenance"]
    old = {**record, "link_nvlink3_provenance": "prior"}
    assert list(_validator("predict").iter_errors(old)) != []
    assert list(_validator("predict").iter_errors({**record, "schema_version": 1})) != []


def test_schema_command_prints_the_shipped_file(run_cli) -> None:
    for name in SHIPPED:
        result = run_cli("schema", name)
        assert result.code == 0, result.err
        assert json.loads(result.out) == load_schema(name)


def test_schema_command_refuses_a_wrong_name_with_did_you_mean(run_cli) -> None:
    result = run_cli("schema", "predcit")
    assert result.code == 2
    assert "did you mean 'predict'" in result.err and "To fix:" in result.err


def test_schema_names_cover_the_shipped_files() -> None:
    assert set(SHIPPED) <= set(SCHEMA_NAMES)
    assert {"predict", "memory", "layout"} <= set(SHIPPED)


def test_the_wheel_lists_every_package_and_ships_the_schemas() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    tree = {".".join(p.parent.relative_to(ROOT).parts)
            for package in ("perfmodel", "planner") for p in (ROOT / package).rglob("__init__.py")}
    assert tree <= set(config["packages"])
    assert config["package-data"]["planner.schemas"] == ["*.schema.json"]
