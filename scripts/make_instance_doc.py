"""Generate docs/INSTANCE.md: the reference of the planner's instance YAML.

Usage: .venv/bin/python -m scripts.make_instance_doc [--check]

Claim: every field of the instance pydantic models (`planner.model.instance`: Instance, Training,
Cluster, PriceRef, Alternative, Limits, Failures) is listed with its type, unit, default,
constraint, description and an example. Why: the README pointed at a reference that did not
exist; a reference written by hand drifts from the models. How: types, defaults and constraints
come from the models' fields, descriptions from their attribute docstrings
(`use_attribute_docstrings`), units from the name's unit suffix (the project's naming rule), and
each example is the first value the shipped instances (instances/*.yaml, then the `shardmeter
init` starter) give the field, naming the file. `--check` exits 1 when docs/INSTANCE.md differs.
Checked by: tests/test_instance_doc.py (every model field appears; the doc is current).
"""

from __future__ import annotations

import argparse
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from perfmodel.formatting import markdown_table
from planner.model import instance as model
from planner.model.starter import starter_instance
from scripts._docgen import check_or_write

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "INSTANCE.md"
SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("", model.Instance), ("training", model.Training), ("clusters[]", model.Cluster),
    ("clusters[].price", model.PriceRef), ("clusters[].alternatives[]", model.Alternative),
    ("limits", model.Limits), ("failures", model.Failures))
"""(YAML path, model) of every section, in the order of the document."""
UNITS: tuple[tuple[str, str], ...] = (
    ("_usd_per_gpu_hour", "USD/GPU-hour"), ("_per_gpu_hour", "1/GPU-hour"),
    ("_per_node_hour", "1/node-hour"), ("_gbit_s_per_node", "Gbit/s per node"),
    ("_gbit_s", "Gbit/s"), ("_usd_per_gb", "USD/GB"), ("_usd", "USD"), ("_ms", "ms"),
    ("_s", "s"), ("_hours", "h"), ("_kwh", "kWh"), ("_kg", "kg"), ("_gib", "GiB"),
    ("_seqs", "sequences"), ("_tokens", "tokens"), ("seq_len", "tokens"),
    ("num_nodes", "nodes"), ("_nodes", "nodes"), ("gpus_per_node", "GPUs"),
    ("max_gpus", "GPUs"), ("inner_steps", "steps"), ("parameters", "parameters"),
    ("price_scale", "factor"), ("pue", "factor"))
"""Unit of a field by the end of its name (first match)."""


def unit(name: str) -> str:
    """The unit a field's name states (the naming rule: units in names), or '' when none."""
    for suffix, text in UNITS:
        if name.endswith(suffix):
            return text
    return ""


def type_text(annotation: Any) -> str:
    """A readable type: `int`, `float or null`, `one of a, b`, `list of int`, `mapping`."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        parts = [type_text(a) for a in typing.get_args(annotation) if a is not type(None)]
        nullable = type(None) in typing.get_args(annotation)
        return " or ".join(parts) + (" or null" if nullable else "")
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in typing.get_args(annotation))
    if origin is tuple:
        return "list of " + type_text(typing.get_args(annotation)[0])
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping (below)"
    return getattr(annotation, "__name__", str(annotation))


def constraint_text(field: Any) -> str:
    """Bounds of a field (> 0, >= 1, <= 1000, non-empty)."""
    out = []
    for item in field.metadata:
        for attr, symbol in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(item, attr, None)
            if value is not None:
                out.append(f"{symbol} {value:g}")
        if getattr(item, "min_length", None):
            out.append("non-empty")
    return ", ".join(out)


def default_text(field: Any) -> str:
    """`required`, or the default as YAML writes it (`null`: not set; the description says what
    that means)."""
    if field.is_required():
        return "required"
    value = field.default
    if value is PydanticUndefined:
        return "—"
    if isinstance(value, BaseModel):
        return "(all defaults)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "[]" if not value else str(list(value))
    return str(value)


def _values(node: Any, path: list[str]) -> list[Any]:
    """Every value at `path` (list steps are `name[]`) inside a parsed YAML document."""
    if not path:
        return [node]
    head, rest = path[0], path[1:]
    key, many = (head[:-2], True) if head.endswith("[]") else (head, False)
    if not isinstance(node, dict) or key not in node:
        return []
    child = node[key]
    if many:
        return [v for item in (child or []) for v in _values(item, rest)]
    return _values(child, rest)


def examples() -> list[tuple[str, Any]]:
    """(source name, parsed YAML) of the shipped instances, then the starter instance."""
    out = [(f"instances/{p.name}", yaml.safe_load(p.read_text()))
           for p in sorted((ROOT / "instances").glob("*.yaml"))]
    out.append(("`shardmeter init`", yaml.safe_load(starter_instance("instance.yaml"))))
    return out


def example_text(section: str, name: str, docs: list[tuple[str, Any]]) -> str:
    """The first value a shipped instance gives the field, and where; '—' when none does."""
    path = [p for p in section.split(".") if p] + [name]
    for source, doc in docs:
        for value in _values(doc, path):
            if value is not None and not isinstance(value, dict | list) or isinstance(
                    value, list) and value and not isinstance(value[0], dict):
                shown = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix(
                    "...").strip()
                return f"`{shown}` ({source})"
    return "—"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def build() -> str:
    """The document."""
    docs = examples()
    parts = ["""# Instance files (`shardmeter plan` / `pareto` input)

Generated by `.venv/bin/python -m scripts.make_instance_doc` from the pydantic models in
`planner/model/instance.py` (`--check` verifies this file is current); do not edit by hand.
`shardmeter init PATH` writes a commented starter instance to begin from. An instance names a
model, how it is trained, and the clusters (node pools) the planner may carve islands from; every
problem with a file exits 2 naming the file, the field, the value and a fix.

Units: s seconds, ms milliseconds, Gbit/s 10^9 bits per second, USD US dollars, h hours. `null`
(or leaving a field out) takes the default the description names. Examples are the first value
the shipped instances give a field (instances/*.yaml, then the `shardmeter init` starter).
What-ifs (`--vary PATH=V1,V2`, `--scenario NAME:PATH=V,PATH=V`) address these fields by their
paths: `clusters.NAME.FIELD` (or the cluster's index), `gpu.GPU-TYPE.FIELD` for every cluster of a
GPU type, e.g. `--vary clusters.A.price_scale=0.7,1`.
"""]
    for section, cls in SECTIONS:
        title = f"`{section}`" if section else "top level"
        doc = " ".join((cls.__doc__ or "").split())
        rows = []
        for name, field in cls.model_fields.items():
            rows.append([f"`{name}`", _cell(type_text(field.annotation)),
                         unit(name) or "—", _cell(default_text(field)),
                         constraint_text(field) or "—", _cell(field.description or ""),
                         _cell(example_text(section, name, docs))])
        parts.append(f"## {title}\n\n{doc}\n\n" + markdown_table(
            ["field", "type", "unit", "default", "constraint", "description", "example"], rows))
    return "\n\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/INSTANCE.md is not current")
    args = parser.parse_args()
    raise SystemExit(check_or_write(DOC, build(), check=args.check,
                                    generator="python -m scripts.make_instance_doc"))


if __name__ == "__main__":
    main()
