#!/usr/bin/env python
"""ShardMeter's FP8 prior against published FP8 training throughputs (issue 26, validation only:
nothing is fitted to these rows; the FP8 efficiency ratio comes from a linear-layer microbenchmark
in catalogs/precision.csv, never from an end-to-end run).

`catalogs/published/validation-fp8.csv` names rows of `catalogs/published/layout-runs.csv` (the
published figure and configuration, typed next to their source by `scripts.build_layout_runs`)
and adds what those rows do not carry: the float8 recipe (`compute_dtype`), whether FSDP
all-gathered in float8, the bf16 run of the same source and configuration (when published), the
source URL and a quote of the fetched text. Each row is planned exactly as
`scripts.validate_layouts` plans its bf16 runs (same rules for unstated settings) and predicted
through `perfmodel.api.predict` with the recipe's compute_dtype, fp8_all_gather and, where the
row ran torch.compile, `compile` — so every FP8 prediction carries the compile prior too, and so
do the bf16 partners. Printed per source: the MAPE of tokens/s/GPU over the FP8 rows (goal <= 15 %)
and, where a bf16 partner exists, the error of the predicted FP8 speedup over bf16 (which isolates
the FP8 model from the base model's error).

    .venv/bin/python -m scripts.validate_fp8            # markdown to stdout
    .venv/bin/python -m scripts.validate_fp8 --csv out.csv
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from perfmodel.formatting import markdown_table
from perfmodel.spec.errors import DatasetError, UserInputError
from perfmodel.spec.paths import catalog_dir
from scripts.validate_layouts import (
    GOAL_MAPE_PCT,
    RowPlan,
    RowResult,
    evaluate,
    fmt_pct,
    load_runs,
    mape_pct,
    plan_row,
)

FP8_CSV = catalog_dir() / "published" / "validation-fp8.csv"
"""The FP8 rows (recipe fields and sources); figures and configurations in layout-runs.csv."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Fp8Row:
    """One row of validation-fp8.csv."""

    run_id: str
    bf16_run_id: str
    compute_dtype: str
    fp8_all_gather: bool
    source_url: str


def load_fp8_rows(path: str | Path = FP8_CSV) -> list[Fp8Row]:
    """The rows of validation-fp8.csv (DatasetError naming the file and line)."""
    out = []
    with open(path, encoding="utf-8", newline="") as handle:
        for line, raw in enumerate(csv.DictReader(handle), start=2):
            if raw.get("fp8_all_gather") not in ("true", "false") or not raw.get("source_url") \
                    or not raw.get("run_id") or not raw.get("quote"):
                raise DatasetError(f"{path}, line {line}: needs run_id, fp8_all_gather "
                                   "true|false, source_url and quote",
                                   hint="fix the row (see the header for the columns).")
            out.append(Fp8Row(run_id=raw["run_id"], bf16_run_id=raw["bf16_run_id"],
                              compute_dtype=raw["compute_dtype"],
                              fp8_all_gather=raw["fp8_all_gather"] == "true",
                              source_url=raw["source_url"]))
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class Fp8Result:
    """An FP8 row's prediction and, when published, its bf16 partner's."""

    row: Fp8Row
    fp8: RowResult
    bf16: RowResult | None
    reasons: tuple[str, ...] = ()

    @property
    def speedup_error_pct(self) -> float | None:
        """Predicted FP8/bf16 speedup against the published one, percent (+ = predicted more)."""
        if self.bf16 is None:
            return None
        p_fp8, p_bf16 = self.fp8.predicted_tokens_per_s_per_gpu, \
            self.bf16.predicted_tokens_per_s_per_gpu
        if p_fp8 is None or p_bf16 is None:
            return None
        published = (self.fp8.plan.published_tokens_per_s_per_gpu
                     / self.bf16.plan.published_tokens_per_s_per_gpu)
        return 100.0 * ((p_fp8 / p_bf16) / published - 1.0)


def _plan(run: dict[str, str], *, compute_dtype: str, fp8_all_gather: bool) -> RowPlan:
    """`validate_layouts.plan_row` of the row as a bf16 run, then the float8 recipe fields and
    torch.compile as the row publishes it."""
    plan = plan_row({**run, "precision": "bf16"})
    if not plan.predicted:
        return plan
    recipe = plan.recipe.with_overrides(compute_dtype=compute_dtype,
                                        fp8_all_gather=fp8_all_gather,
                                        compile=run["torch_compile"] == "yes")
    return replace(plan, recipe=recipe)


def evaluate_fp8(rows: Sequence[Fp8Row], inputs: Path) -> list[Fp8Result]:
    runs = {r["run_id"]: r for r in load_runs()}
    out = []
    for row in rows:
        if row.run_id not in runs:
            raise DatasetError(f"{FP8_CSV}: run_id {row.run_id!r} is not in layout-runs.csv",
                               hint="name a row of catalogs/published/layout-runs.csv.")
        plan = _plan(runs[row.run_id], compute_dtype=row.compute_dtype,
                     fp8_all_gather=row.fp8_all_gather)
        try:
            fp8 = evaluate(plan, inputs)
        except UserInputError as err:  # e.g. a layout the memory model or a GPU refuses
            out.append(Fp8Result(row=row, fp8=RowResult(plan=plan), bf16=None,
                                 reasons=(err.message,)))
            continue
        bf16 = None
        if row.bf16_run_id:
            partner = runs[row.bf16_run_id]
            bf16 = evaluate(_plan(partner, compute_dtype="bf16", fp8_all_gather=False), inputs)
        out.append(Fp8Result(row=row, fp8=fp8, bf16=bf16, reasons=plan.reasons))
    return out


def markdown(results: Sequence[Fp8Result]) -> str:
    sources = list(dict.fromkeys(r.fp8.plan.source_id for r in results))
    summary = []
    for source in sources:
        mine = [r for r in results if r.fp8.plan.source_id == source]
        errors = [e for r in mine if (e := r.fp8.error_pct) is not None]
        speed = [e for r in mine if (e := r.speedup_error_pct) is not None]
        mape = mape_pct(errors)
        summary.append([source, str(len(mine)), str(len(errors)), fmt_pct(mape),
                        "–" if mape is None else ("met" if mape <= GOAL_MAPE_PCT else "missed"),
                        str(len(speed)), fmt_pct(mape_pct(speed))])
    everything = [e for r in results if (e := r.fp8.error_pct) is not None]
    parts = ["## Published FP8 runs: ShardMeter's FP8 prior against the published tokens/s/GPU",
             f"MAPE over the {len(everything)} predicted FP8 rows: "
             f"{fmt_pct(mape_pct(everything))} % "
             f"(goal <= {GOAL_MAPE_PCT:.0f} % per source). FP8 figures are priors "
             "(catalogs/precision.csv); nothing here was fitted.",
             markdown_table(["source", "rows", "predicted", "MAPE %", f"goal <= "
                             f"{GOAL_MAPE_PCT:.0f} %", "bf16 pairs", "speedup MAPE %"],
                            summary),
             markdown_table(
                 ["run", "dtype", "fp8 AG", "published tok/s/GPU", "predicted", "error %",
                  "published speedup", "predicted speedup", "not predicted because"],
                 [[r.row.run_id, r.row.compute_dtype, str(r.row.fp8_all_gather),
                   f"{r.fp8.plan.published_tokens_per_s_per_gpu:.1f}"
                   if r.fp8.plan.published_tokens_per_s_per_gpu else "–",
                   fmt_pct(r.fp8.predicted_tokens_per_s_per_gpu), fmt_pct(r.fp8.error_pct),
                   _speedup(r, published=True), _speedup(r, published=False),
                   "; ".join(r.reasons)] for r in results])]
    return "\n\n".join(parts) + "\n"


def _speedup(r: Fp8Result, *, published: bool) -> str:
    if r.bf16 is None:
        return "–"
    if published:
        ratio = (r.fp8.plan.published_tokens_per_s_per_gpu
                 / r.bf16.plan.published_tokens_per_s_per_gpu)
        return f"{ratio:.3f}"
    a, b = r.fp8.predicted_tokens_per_s_per_gpu, r.bf16.predicted_tokens_per_s_per_gpu
    return "–" if a is None or b is None else f"{a / b:.3f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--csv", help="also write the per-row results to this CSV")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = evaluate_fp8(load_fp8_rows(), Path(tmp))
    sys.stdout.write(markdown(results))
    if args.csv:
        with open(args.csv, "w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["run_id", "source_id", "compute_dtype", "fp8_all_gather",
                             "published_tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu",
                             "error_pct", "speedup_error_pct", "not_predicted_because"])
            for r in results:
                writer.writerow([r.row.run_id, r.fp8.plan.source_id, r.row.compute_dtype,
                                 r.row.fp8_all_gather, r.fp8.plan.published_tokens_per_s_per_gpu,
                                 r.fp8.predicted_tokens_per_s_per_gpu, r.fp8.error_pct,
                                 r.speedup_error_pct, "; ".join(r.reasons)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
