"""How results are written out, shared by the CLI and the generated docs: one Markdown table
writer (VALIDATION, CASE_STUDY, FINDINGS, ENERGY, PERFORMANCE), one conversion to JSON values
(what `--format json` prints and what the doc generators read back) and the one way a record
gains keys next to others (an interval's bounds right after its figure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], *,
                   rule: str = "---") -> str:
    """`| a | b |` / `|---|---|` / `| 1 | 2 |` lines joined by newlines (`rule`: the text of each
    rule cell, e.g. " --- "); cells are already formatted."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def json_ready(value: Any) -> Any:
    """`value` as JSON values: mappings with string keys, lists, numpy scalars as Python numbers,
    NaN and infinities as None (JSON has no such numbers)."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def insert_after(record: Mapping[str, Any], extra: Mapping[str, Mapping[str, Any]]
                 ) -> dict[str, Any]:
    """`record` with `extra[key]`'s items right after each `key` (a band next to its figure)."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        out[key] = value
        out.update(extra.get(key, {}))
    return out
