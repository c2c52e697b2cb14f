"""JSON Schemas (draft 2020-12) of the JSON outputs, shipped as package data.

Claim: `NAME.schema.json` describes what `shardmeter NAME --format json` prints, and a key that
changes meaning or goes raises that output's `schema_version` (recorded in CHANGELOG.md).
Why: scripts that read ShardMeter's JSON need a contract that does not move with the hardware
(link provenance is a list, not keys named after links) and says when it does move.
Checked by: tests/test_schemas.py validates real outputs of predict, memory and layout (and plan
and pareto where their schemas are shipped) against these files with `jsonschema`, and shows
that a version-1 predict record (keys named after links) is refused.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from perfmodel.spec.errors import UserInputError, did_you_mean

SCHEMA_NAMES = ("predict", "memory", "layout", "plan", "pareto", "study")
"""Outputs with a JSON Schema: `shardmeter schema NAME`."""


def schema_text(name: str) -> str:
    """The JSON Schema of output `name`, as shipped (a wrong name: did-you-mean, exit 2)."""
    if name not in SCHEMA_NAMES:
        raise UserInputError(f"schema {name!r}: no such output schema",
                             hint=f"pass one of: {', '.join(SCHEMA_NAMES)} "
                                  f"({did_you_mean(name, SCHEMA_NAMES)}).")
    resource = resources.files(__name__).joinpath(f"{name}.schema.json")
    if not resource.is_file():
        raise UserInputError(f"schema {name!r}: this installation ships no {name}.schema.json",
                             hint="reinstall ShardMeter (the schemas are package data of "
                                  "planner.schemas), or use one of the shipped schemas.")
    return resource.read_text(encoding="utf-8")


def load_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of output `name` as a mapping."""
    data: dict[str, Any] = json.loads(schema_text(name))
    return data
