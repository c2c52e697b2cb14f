#!/usr/bin/env python
"""ShardMeter against the Streaming DiLoCo paper's bandwidth-for-utilisation table, cell by cell.

For every cell of `catalogs/published/streaming-diloco-bandwidth.csv` (Douillard et al. 2025,
arXiv:2501.18512v1, appendix Table 4; settings and their sources in catalogs/published/README.md)
the figure `shardmeter streaming --bandwidth-for-utilisation --step-time-s` gives for the cell's
scenario, the ratio, and the MAPE per model size (the table's three blocks), per method and
overall. A consulted reference: nothing in the model is fitted to it. Takes seconds.

    .venv/bin/python -m scripts.streaming_published            # markdown to stdout
    .venv/bin/python -m scripts.streaming_published --dtype-as bf16=fp32   # a sensitivity

docs/FINDINGS.md §5 pastes the same lines (scripts/make_findings.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence

from perfmodel.api.streaming import (
    CellComparison,
    PublishedComparison,
    published_bandwidth_comparison,
)
from perfmodel.diloco.published import METHODS
from perfmodel.formatting import markdown_table
from perfmodel.numbers import format_number

GOAL_MAPE_PCT = 30.0
"""Issue 22's goal over every cell the tool can express."""
ISSUE_METHODS = METHODS[1:]
"""The four DiLoCo rows the issue names (DiLoCo, streaming, overlapped, FP4); Data-Parallel is
expressible too (H = 1) and reported apart."""


def _pct(value: float) -> str:
    return f"{value:.0%}"


def format_gbit(value: float | None) -> str:
    """A bandwidth in Gbit/s to three significant digits (the project's number formatter), or
    'unreachable' where no bandwidth reaches the target."""
    return "unreachable" if value is None else format_number(value, digits=3)


def grid_step(result: PublishedComparison) -> float:
    """The ratio between neighbouring published values of 10 Gbit/s and more (printed to 0.1, so
    at least three digits): the bandwidth grid the table reports points of."""
    values = sorted({c.cell.published_gbit_s for c in result.cells
                     if c.cell.published_gbit_s >= 10})
    return statistics.median(b / a for a, b in zip(values, values[1:], strict=False)
                             if b / a < 1.5)


def sixteen_bit_evidence(result: PublishedComparison) -> tuple[float, float, float]:
    """Median, least and largest ratio of the published 'overlapped' to 'overlapped FP4' cells
    (16-bit against 4-bit exchanges gives 4, 32-bit 8)."""
    by_key = {(c.cell.model_size, c.cell.target_utilisation, c.cell.method): c.cell.published_gbit_s
              for c in result.cells}
    ratios = [v / by_key[(s, t, "streaming-overlap-fp4")]
              for (s, t, m), v in by_key.items() if m == "streaming-overlap"]
    return statistics.median(ratios), min(ratios), max(ratios)


def _rows(result: PublishedComparison) -> dict[tuple[str, str], list[CellComparison]]:
    rows: dict[tuple[str, str], list[CellComparison]] = {}
    for c in result.cells:
        rows.setdefault((c.cell.catalog_model, c.cell.method), []).append(c)
    return rows


def comparison_lines(result: PublishedComparison) -> list[str]:
    """Markdown: the cell table (published / ShardMeter / ratio), then the MAPE table."""
    rows = _rows(result)
    targets = [c.cell.target_utilisation for c in next(iter(rows.values()))]
    body = []
    for (model, _), cells in rows.items():
        first = cells[0]
        body.append([
            f"{first.cell.model_size} ({model})", first.cell.method_published,
            f"{first.cell.sync_every}", f"{first.cell.fragments}", f"{first.cell.delay_steps}",
            first.dtype,
            *(f"{c.cell.published_gbit_s:g} / {format_gbit(c.gbit_s)} / "
              + ("-" if c.ratio is None else f"{c.ratio:.2f}") for c in cells),
            f"{statistics.fmean(c.ape_pct for c in cells if c.ape_pct is not None):.1f}",
        ])
    lines = markdown_table(["model", "method", "H", "F", "τ", "dtype", *map(_pct, targets),
                            "MAPE %"], body, rule=" --- ").split("\n")
    summary = [[f"model {size} (Table 4 block)", f"{result.count(keep)}",
                f"{result.mape_pct(keep):.1f}"]
               for size in dict.fromkeys(c.cell.model_size for c in result.cells)
               for keep in [lambda c, s=size: c.cell.model_size == s]]
    labels = {c.cell.method: c.cell.method_published for c in result.cells}
    summary += [[f"method {labels[m]}", f"{result.count(keep)}", f"{result.mape_pct(keep):.1f}"]
                for m in METHODS for keep in [lambda c, m=m: c.cell.method == m]]

    def issue_scope(c: CellComparison) -> bool:
        return c.cell.method in ISSUE_METHODS

    summary += [
        ["overall, the four DiLoCo methods", f"{result.count(issue_scope)}",
         f"{result.mape_pct(issue_scope):.1f}"],
        ["overall, every expressible cell", f"{result.count()}", f"{result.mape_pct():.1f}"],
    ]
    lines += ["", *markdown_table(["cells", "n", "MAPE %"], summary, rule=" --- ").split("\n")]
    return lines


def verdict(result: PublishedComparison) -> str:
    """One sentence: the goal, met or missed, over every expressible cell and the issue's four
    methods."""
    every, four = result.mape_pct(), result.mape_pct(lambda c: c.cell.method in ISSUE_METHODS)
    step = grid_step(result)
    inside = sum(1 for c in result.cells if c.ratio is not None and 1 / step <= c.ratio <= step)
    sizes = {size: result.mape_pct(lambda c, s=size: c.cell.model_size == s)
             for size in dict.fromkeys(c.cell.model_size for c in result.cells)}
    over = [f"{size} ({mape:.1f} %)" for size, mape in sizes.items() if mape > GOAL_MAPE_PCT]
    return (
        f"MAPE {every:.1f} % over all {result.count()} cells the tool can express and "
        f"{four:.1f} % over the {result.count(lambda c: c.cell.method in ISSUE_METHODS)} cells of "
        f"the four DiLoCo methods: the goal (<= {GOAL_MAPE_PCT:g} %) is "
        f"{'met' if every <= GOAL_MAPE_PCT else 'missed'} overall"
        + (f", not within the model block {', '.join(over)}" if over else " and in every block")
        + f"; {inside} of {result.count()} cells lie within one step of the published bandwidth "
        f"grid (x{step:.3f})."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype-as", action="append", default=[], metavar="FROM=TO",
                        help="compute the cells of dtype FROM in TO instead (a sensitivity)")
    args = parser.parse_args(argv)
    override = dict(item.split("=", 1) for item in args.dtype_as)
    result = published_bandwidth_comparison(dtype_override=override or None)
    sys.stdout.write("\n".join([*comparison_lines(result), "", verdict(result)]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
