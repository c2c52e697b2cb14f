"""Part (d) of docs/VALIDATION.md (imported by python -m scripts.make_validation): how often the
80 % prediction intervals hold on held-out data, per residual group and holdout source, from
catalogs/uncertainty/residuals.csv (python -m scripts.make_residuals), and on the published GPU
runs of part (e) against the interval each prediction prints; every figure is computed here by
`perfmodel.uncertainty.coverage`, none typed.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from perfmodel.bench.environment import environment_sessions
from perfmodel.costs.comm import COMM_KEY, load_comm_dataset
from perfmodel.costs.datasets import repeat_spread
from perfmodel.formatting import markdown_table
from perfmodel.uncertainty.coverage import (
    CROSS,
    GOAL_HIGH,
    GOAL_LOW,
    GOAL_MIN_CASES,
    coverage,
    leave_one_source_out,
    printed_coverage,
    rotating_gpu_coverage,
    track_entries,
)
from perfmodel.uncertainty.residuals import HELD_OUT_GPU, NAMED_MODELS
from perfmodel.uncertainty.track_record import TRACK_RECORD_JSON, track_record_text
from scripts.validation_published import published_results

ROOT = Path(__file__).resolve().parent.parent
RESIDUALS = ROOT / "catalogs" / "uncertainty" / "residuals.csv"
REPEATS = ROOT / "catalogs" / "profiles" / "data" / "cpu-comm-repeats.csv"
"""gloo collectives measured in R separate torchrun launches (`shardmeter bench comm --repeats`;
the command is in its .env.json): the one dataset that measures one configuration twice."""
FITTED_COMM = ROOT / "catalogs" / "profiles" / "data" / "cpu-comm.csv"
"""The collectives the shipped CPU profile is fitted on (their machine is compared above)."""
LEVEL = 0.8
TRACK_RECORD = ROOT / "catalogs" / TRACK_RECORD_JSON
"""Written beside this part: each group's record on the cases this part scores, which every
printed band states (`perfmodel.uncertainty.track_record`)."""


def _pct(x: float, digits: int = 1) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.{digits}f}"


def _band(lower: float, upper: float) -> str:
    # four decimals: the memory groups' bands are permille wide
    return f"{lower:.4f}-{upper:.4f}"


def repeats_text(path: Path = REPEATS) -> str:
    """What separate launches of one configuration show, beside the within-run spread."""
    if not path.is_file():
        return f"(`{path.relative_to(ROOT)}` not measured: no launch-to-launch spread.)"
    frame = load_comm_dataset(str(path))
    spread = repeat_spread(frame, COMM_KEY)
    within = (pd.to_numeric(frame["time_iqr_s"]) / frame["time_s"] * 100.0).median()
    launches = int(frame["repeat"].nunique())
    return (
        "Run-to-run noise (issue 27 item 6): no calibration dataset measures a configuration "
        f"twice, so the bands hold model error and one measurement's noise. "
        f"`{path.relative_to(ROOT)}` measures {spread['configurations']} gloo collective "
        f"configurations in {launches} separate torchrun launches on this machine (2 ranks, "
        "loopback; `shardmeter bench comm --repeats`): the relative standard deviation of a "
        f"configuration's median time across launches is {spread['median_rel_std_pct']:.1f} % "
        f"(median over configurations; largest {spread['max_rel_std_pct']:.1f} %), against a "
        f"within-run IQR of {within:.1f} % of the median (median over rows). These rows are "
        f"not residuals (no model predicted them; {_machine_versus(path, FITTED_COMM)}): they "
        "say how much of a collectives band one launch's noise can take.")


def _machine(path: Path) -> tuple[set[str], set[str]]:
    """The CPU models and malloc libraries a dataset's `.env.json` sidecar records."""
    sessions = environment_sessions(path)
    return ({str(s.get("cpu_model", "?")) for s in sessions},
            {str(s.get("malloc_library", "glibc")) for s in sessions})


def _machine_versus(path: Path, fitted: Path) -> str:
    """How the repeats' machine compares with the fitted collectives' one, as the sidecars say."""
    (cpus, mallocs), (fit_cpus, fit_mallocs) = _machine(path), _machine(fitted)
    if not cpus or not fit_cpus:
        return "the machine is not recorded for both datasets"
    if cpus != fit_cpus:
        return (f"measured on {', '.join(sorted(cpus))}, the shipped CPU profile's collectives "
                f"on {', '.join(sorted(fit_cpus))}")
    if mallocs != fit_mallocs:
        return (f"the same CPU model as the shipped profile's collectives "
                f"({', '.join(sorted(cpus))}) but malloc {', '.join(sorted(mallocs))} where "
                f"those used {', '.join(sorted(fit_mallocs))}")
    return "the same CPU model and malloc as the shipped profile's collectives"


def track_record() -> str:
    """catalogs/uncertainty/track-record.json: the 'all' rows of the two coverage tables below,
    with the side each miss fell on."""
    entries = track_entries(RESIDUALS, published_results().printed_cases(), level=LEVEL)
    return track_record_text(entries, level=LEVEL)


def part_intervals() -> str:
    """(d) Coverage of the 80 % intervals on held-out data."""
    rows = coverage(RESIDUALS, level=LEVEL)
    body = [[r.group, r.source, r.method, r.calibration_rows, r.holdout_rows, _pct(r.covered),
             "-".join(_pct(x, 0) for x in r.covered_ci()), _band(r.lower, r.upper),
             _pct(r.width, 2), r.verdict] for r in rows]
    crossed = sorted({r.group for r in rows if r.method == CROSS})
    loso = [[r.group, r.source, r.calibration_rows, r.holdout_rows, _pct(r.covered),
             _band(r.lower, r.upper)] for g in crossed
            for r in leave_one_source_out(RESIDUALS, g, level=LEVEL)]
    rotating = rotating_gpu_coverage(RESIDUALS, level=LEVEL)
    rotated = [[r.source, r.calibration_rows, r.holdout_rows, _pct(r.covered),
                _band(r.lower, r.upper), _pct(r.width)] for r in rotating]
    published = printed_coverage(published_results().printed_cases())
    printed = [[r.group, r.source, r.cases, _pct(r.covered),
                "-".join(_pct(x, 0) for x in r.covered_ci()), r.below, r.above, r.widened,
                _pct(r.median_width, 2), r.verdict] for r in published]
    scored = [(f"{r.group}/{r.source}", r.verdict) for r in rows
              if r.holdout_rows >= GOAL_MIN_CASES]
    scored += [(f"{r.group}/published {r.source}", r.verdict) for r in published
               if r.cases >= GOAL_MIN_CASES]
    met = [name for name, verdict in scored if verdict == "met"]
    return "\n\n".join([
        "## (d) Prediction intervals: coverage on held-out data",
        "Every prediction carries an 80 % interval (`*_p10`, `*_p90`): the point times the "
        "split-conformal 10th and 90th percentiles of measured / predicted over its residual "
        "group's calibration rows (`perfmodel.uncertainty`). The rows below score those "
        "intervals on holdout rows that formed none of them, each holdout source apart: "
        f"measured = the named models {', '.join(NAMED_MODELS)} (the calibration rows are the "
        "Sobol shapes; all leave-one-architecture-out); calibrated = published torchtitan runs "
        "no fit reads; prior = leave-one-GPU-out, the held-out GPU being "
        f"{HELD_OUT_GPU} (priors scaled from the other calibrated GPUs) plus the torchtitan "
        "runs; collectives = a fixed quarter of the gloo configurations. The memory groups "
        "(memory: dense models; memory-moe: mixture-of-experts models) have no holdout rows: "
        "the tracker grids the memory model was designed against are in-sample (it matches "
        "most of their rows to the byte, so their ratios would make a band of width 0; they "
        "form no interval), and the out-of-sample rows — the *-heldout.csv files and the "
        "real-allocator runs — are their calibration rows, scored by "
        f"{CROSS} (`perfmodel.uncertainty.coverage`: each row against the interval the other "
        "folds form; the shipped band is the one all of them form). Written by "
        "`python -m scripts.make_residuals` into `catalogs/uncertainty/residuals.csv`.",
        markdown_table(["group", "scored source", "scored by", "calibration rows",
                        "scored rows", "inside 80 % interval %", "95 % CI of that %",
                        "multipliers p10-p90", "median width % of point", "goal 70-90 %"],
                       body),
        f"Goal: {_pct(GOAL_LOW, 0)}-{_pct(GOAL_HIGH, 0)} % of holdout cases inside the 80 % "
        f"interval for a row with at least {GOAL_MIN_CASES} cases: met for {len(met)} of "
        f"{len(scored)} such rows of this table and the next ({', '.join(met) or 'none'}"
        "). The goal is judged on the measured share; the 95 % CI column is its exact "
        "(Clopper-Pearson) binomial interval, how far a row of few cases can stray from the "
        "level by chance alone. The width is relative (the interval scales with the point), "
        "so every case of a "
        "group has the same relative width, which is also its median. Intervals widen beyond "
        "what a group's calibration rows cover (`catalogs/uncertainty/ranges.json`; the rule is "
        "in `perfmodel/uncertainty/intervals.py`); the holdout rows here are scored against the "
        "unwidened band (residuals.csv does not carry where each case lies).",
        "Published GPU runs against the interval ShardMeter prints for each (part (e)'s "
        "predicted layout, FP8 and MoE rows; no fit reads them): the published tokens/s/GPU "
        "scored against that prediction's `tokens_per_s_per_gpu_p10`-`_p90`, widened where "
        "the query lies beyond its group's residuals (layout kind, model size, GPU count, "
        "sequence length), as `shardmeter predict` prints it "
        "(`perfmodel.uncertainty.coverage.printed_coverage`). Below = the published run was "
        "slower than the interval's low end; above = faster than its high end.",
        markdown_table(["group", "published source", "runs scored", "inside 80 % interval %",
                        "95 % CI of that %", "below", "above", "widened",
                        "median width % of point", "goal 70-90 %"], printed),
        "The cross-conformal groups' sources need not be exchangeable (other ground truths, "
        "layouts and shapes), so folds that mix them can be kinder than a "
        "source unlike every other: below, each source scored against the interval its "
        "group's other sources form alone (`perfmodel.uncertainty.coverage."
        "leave_one_source_out`, a diagnostic, not the goal's figure).",
        markdown_table(["group", "left-out source", "rows forming the interval",
                        "rows scored", "inside 80 % interval %", "multipliers p10-p90"],
                       loso) if loso else "(no cross-conformal group)",
        "The prior group's leave-one-GPU-out in turn (a diagnostic beside the fixed split "
        "above, which holds out the H100 only): each calibrated GPU's prior pairs scored on the "
        "80 % interval formed from the other two GPUs' prior pairs (including those predicted "
        "from the held-out GPU's calibrated profile) "
        "(`perfmodel.uncertainty.coverage.rotating_gpu_coverage`).",
        markdown_table(["held-out GPU", "pairs forming the interval", "pairs scored",
                        "inside 80 % interval %", "multipliers p10-p90",
                        "width % of point"], rotated),
        repeats_text(),
        "Each group's scored cases together (the 'all' rows of the first two tables, with the "
        f"side each miss fell on) are written to `{TRACK_RECORD.relative_to(ROOT)}`; every "
        "printed band states its groups' record from it (`perfmodel.uncertainty.track_record`), "
        "a report that no band is formed from.",
    ])
