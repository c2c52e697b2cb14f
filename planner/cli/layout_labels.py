"""Parallel layouts in a few characters, for the compact tables of `layout` and `islands`
(`short_layout`), and the legend of the tokens they show (`layout_legend`). A module of its own
so `islands` labels its rows without importing the layout ranking (`perfmodel.api.layout`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

_IMPLIED_SCHEDULE = {1: "1f1b", 2: "interleaved-1f1b"}
"""The schedule a pipeline token leaves unsaid: 1F1B without virtual stages (v = 1, index 1),
interleaved 1F1B with them (index 2 for v > 1); any other is written out."""


def short_layout(layout: dict[str, Any]) -> str:
    """A layout in a few characters for the compact table (`layout_legend` explains the tokens):
    degrees > 1 only (dp = dp_shard, left out under pure replication; rep = dp_replicate), the
    pipeline's virtual stages with its schedule only where it is not the implied one, +sp under
    tensor parallelism. Short, so the ranking fits 80 columns instead of turning into records."""
    parts = [f"tp{layout['tp']}"] if layout["tp"] > 1 else []
    if layout["pp"] > 1:
        v = layout["virtual_stages"]
        implied = _IMPLIED_SCHEDULE[min(v, 2)]
        parts.append(f"pp{layout['pp']}" + (f"v{v}" if v > 1 else "")
                     + ("" if layout["pp_schedule"] == implied else f" {layout['pp_schedule']}"))
    if layout["cp"] > 1:
        parts.append(f"cp{layout['cp']}")
    if layout["dp_replicate"] > 1:
        parts.append(f"rep{layout['dp_replicate']}")
    if layout["dp_shard"] > 1 or layout["dp_replicate"] == 1:
        parts.append(f"dp{layout['dp_shard']}")
    if layout.get("ep", 1) > 1:
        parts.append(f"ep{layout['ep']}")
    if layout["tp"] > 1 and layout["sequence_parallel"]:
        parts.append("+sp")
    return " ".join(parts)


_LEGEND: tuple[tuple[Callable[[dict[str, Any]], bool], str], ...] = (
    (lambda lay: lay["pp"] > 1,
     "ppN N pipeline ranks (1F1B), ppNvV V virtual stages per rank (interleaved 1F1B)"),
    (lambda lay: lay["dp_replicate"] > 1, "repN N data-parallel replicas (HSDP; DDP without dp)"),
    (lambda lay: lay["tp"] > 1 and lay["sequence_parallel"], "+sp sequence parallel"))
"""The compact table's tokens that need a word, and when they appear."""


def layout_legend(layouts: Sequence[dict[str, Any]]) -> str | None:
    """What the tokens of the shown layouts mean (only those that appear)."""
    words = [text for shown, text in _LEGEND if any(shown(lay) for lay in layouts)]
    return "; ".join(words) if words else None
