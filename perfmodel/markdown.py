"""The one Markdown table writer of the generated docs (VALIDATION, CASE_STUDY, FINDINGS, ENERGY,
PERFORMANCE): a header row, a rule row, one row per record; cells are already formatted."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], *,
                   rule: str = "---") -> str:
    """`| a | b |` / `|---|---|` / `| 1 | 2 |` lines joined by newlines (`rule`: the text of each
    rule cell, e.g. " --- ")."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
