"""How often the intervals hold on data that never formed them: per residual group and holdout
source, the share of holdout pairs whose ratio measured / predicted lies inside the group's
interval at a level (default 80 %: [multiplier(0.1), multiplier(0.9)]).

Claim: the figures docs/VALIDATION.md's "intervals" part prints are these, recomputed from
catalogs/uncertainty/residuals.csv; no row is scored against an interval it helped form.
Why: a conformal guarantee needs exchangeability; holdout pairs from another source (another
GPU, published runs no fit reads, fresh architectures) test whether it carries over, so each
source is reported apart. A group with holdout rows is scored on them (split conformal). A group
without any (the memory groups: their only out-of-sample rows are the calibration rows, the
rest is in-sample) is scored by K-fold cross-conformal: the rows split into FOLDS fixed folds
by the sha256 of their case id, and each row is scored against the interval the other folds'
rows form (Vovk 2015, "Cross-conformal predictors"; the estimate of how often the interval
formed from all of them holds for a new exchangeable row). `leave_one_source_out` scores each
source against the others alone: what a source unlike every calibration source would see.
`printed_coverage` scores published GPU runs (docs/VALIDATION.md part (e), no fit reads them)
against the interval each prediction prints, widening included: the band a user reads, not the
group's unwidened one (the rows of residuals.csv carry no query, so they cannot be widened).
Checked by: tests/test_uncertainty.py (a holdout pair inside / outside the band counts as such;
the goal's verdict follows the 70-90 % rule only for >= GOAL_MIN_CASES cases; a cross-conformal
row is never inside the interval of its own fold; a published run is scored against its own
printed band, below / inside / above counted apart).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfmodel.uncertainty.conformal import conformal_quantile
from perfmodel.uncertainty.intervals import calibration_ratios, residual_rows
from perfmodel.uncertainty.track_record import (
    CROSS_CONFORMAL,
    HELD_OUT,
    PUBLISHED,
    TrackEntry,
    entry_from_positions,
)

GOAL_LOW, GOAL_HIGH = 0.70, 0.90
"""Issue 27's goal for the 80 % intervals on holdout data."""
GOAL_MIN_CASES = 10
"""The goal applies to a group with at least this many holdout cases."""
FOLDS = 5
"""Cross-conformal folds for a group without holdout rows."""
SPLIT = "split"
CROSS = f"{FOLDS}-fold cross-conformal"


@dataclass(frozen=True, kw_only=True, slots=True)
class CoverageRow:
    """One group (and holdout source) of the coverage table."""

    group: str
    """Residual group."""
    quantity: str
    """Residual quantity."""
    source: str
    """Holdout source ('all' for the group's every holdout row)."""
    calibration_rows: int
    """Rows that formed the interval."""
    holdout_rows: int
    """Rows scored."""
    covered: float
    """Share of holdout rows inside the interval (NaN: none)."""
    lower: float
    """The interval's lower multiplier."""
    upper: float
    """The interval's upper multiplier (for a cross-conformal row: of the interval every
    calibration row forms, the one shipped; each case was scored against its folds' own)."""
    method: str = SPLIT
    """SPLIT (holdout rows scored on the calibration rows' interval) or CROSS."""

    @property
    def width(self) -> float:
        """The interval's width as a fraction of the point (the same for every case of the
        group, so also its median)."""
        return self.upper - self.lower

    def covered_ci(self, confidence: float = 0.95) -> tuple[float, float]:
        """`binomial_ci` of this row's share (NaN, NaN without rows)."""
        return binomial_ci(self.covered, self.holdout_rows, confidence)

    @property
    def verdict(self) -> str:
        """`goal_verdict` of this row's share."""
        return goal_verdict(self.covered, self.holdout_rows)


def binomial_ci(covered: float, cases: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) `confidence` interval of the true coverage given a share
    `covered` of `cases` (NaN, NaN without cases): how far a small row's share can stray from
    the level by chance alone (10 of 10 inside is consistent with 80 %)."""
    if cases == 0:
        return float("nan"), float("nan")
    from scipy.stats import beta  # lazy: scipy is heavy and only the coverage doc needs it

    k = round(covered * cases)
    alpha = 1.0 - confidence
    low = float(beta.ppf(alpha / 2, k, cases - k + 1)) if k > 0 else 0.0
    high = float(beta.ppf(1 - alpha / 2, k + 1, cases - k)) if k < cases else 1.0
    return low, high


def goal_verdict(covered: float, cases: int) -> str:
    """met / missed against the 70-90 % goal, or why it does not apply (< GOAL_MIN_CASES)."""
    if cases < GOAL_MIN_CASES:
        return f"n/a (< {GOAL_MIN_CASES} cases)"
    return "met" if GOAL_LOW <= covered <= GOAL_HIGH else "missed"


@dataclass(frozen=True, kw_only=True, slots=True)
class PrintedCase:
    """A published run against the interval ShardMeter prints for it: the band of its
    prediction's record (`*_p10`, `*_p90`), widened where the query lies beyond its group's
    residuals, exactly as `shardmeter predict` shows it."""

    group: str
    """The prediction's residual group (`interval_group` of its record)."""
    source: str
    """Where the published figure comes from (its source id)."""
    case: str
    """The run's id."""
    measured: float
    """The published figure (tokens/s per GPU)."""
    lower: float
    """The printed interval's lower end, same unit."""
    upper: float
    """The printed interval's upper end, same unit."""
    point: float
    """The point prediction, same unit."""
    widened: bool
    """Whether the printed interval was widened (the query outside the group's residuals)."""

    def __post_init__(self) -> None:
        values = (self.measured, self.lower, self.upper, self.point)
        if not all(np.isfinite(values)) or not 0 < self.lower <= self.point <= self.upper:
            raise ValueError(f"case {self.case}: need finite 0 < lower <= point <= upper and a "
                             f"finite measured figure, got {values}. To fix: pass the record's "
                             "*_p10 / point / *_p90 of one quantity.")

    @property
    def position(self) -> int:
        """`_position` of the published figure against the printed interval."""
        return _position(self.measured, self.lower, self.upper)

    @property
    def inside(self) -> bool:
        return self.position == 0


@dataclass(frozen=True, kw_only=True, slots=True)
class PrintedCoverageRow:
    """One group (and source) of published runs scored on their printed intervals."""

    group: str
    """Residual group."""
    source: str
    """Source id ('all' for every source of the group)."""
    cases: int
    """Runs scored."""
    covered: float
    """Share of runs whose published figure lies inside the printed interval."""
    widened: int
    """Runs whose printed interval was widened."""
    median_width: float
    """Median printed width (upper - lower) as a fraction of the point."""
    below: int
    """Runs whose published figure lies below the interval (for a throughput: slower than
    its pessimistic end)."""
    above: int
    """Runs whose published figure lies above the interval."""

    def covered_ci(self, confidence: float = 0.95) -> tuple[float, float]:
        return binomial_ci(self.covered, self.cases, confidence)

    @property
    def verdict(self) -> str:
        return goal_verdict(self.covered, self.cases)


def printed_coverage(cases: Sequence[PrintedCase]) -> list[PrintedCoverageRow]:
    """Per group: every case together ('all', when it has several sources), then each source
    apart, in order of first appearance. Unlike `coverage`, each case is scored against its own
    printed interval (its widening included), which is the band a user reads."""
    rows = []
    for group in dict.fromkeys(c.group for c in cases):
        mine = [c for c in cases if c.group == group]
        sources = [c.source for c in mine]
        parts = [(name, [mine[i] for i in index])
                 for name, index in _source_parts(sources, dict.fromkeys(sources))]
        rows += [PrintedCoverageRow(
            group=group, source=source, cases=len(part),
            covered=float(np.mean([c.inside for c in part])),
            widened=sum(c.widened for c in part),
            median_width=float(np.median([(c.upper - c.lower) / c.point for c in part])),
            below=sum(c.position < 0 for c in part),
            above=sum(c.position > 0 for c in part)) for source, part in parts]
    return rows


Pairs = dict[tuple[str, str], list[tuple[str, str, float]]]
"""(group, quantity) -> (source, case, ratio measured / predicted) of some rows."""


def _pairs(path: Path) -> dict[str, Pairs]:
    """`path`'s rows by role (one read of the file, each row checked by `residual_rows`)."""
    out: dict[str, Pairs] = {}
    for row in residual_rows(path):
        out.setdefault(row.role, {}).setdefault((row.group, row.quantity), []).append(
            (row.source, row.case, row.ratio))
    return out


def _fold(case: str) -> int:
    return int(hashlib.sha256(case.encode()).hexdigest(), 16) % FOLDS


def _position(ratio: float, lower: float, upper: float) -> int:
    """-1 below the interval, 0 inside (ends included), +1 above."""
    return -1 if ratio < lower else 1 if ratio > upper else 0


def cross_conformal_positions(pairs: Sequence[tuple[str, str, float]], *,
                              level: float) -> list[int]:
    """Per pair, where its ratio lies against the `level` interval formed from the pairs of the
    other folds (`_fold` of the case id): `_position`."""
    folds = [_fold(case) for _, case, _ in pairs]
    ratios = np.array([r for _, _, r in pairs])
    bounds = {}
    for fold in set(folds):
        others = ratios[[f != fold for f in folds]]
        bounds[fold] = (conformal_quantile(others, (1 - level) / 2),
                        conformal_quantile(others, (1 + level) / 2))
    return [_position(float(r), *bounds[f]) for f, r in zip(folds, ratios, strict=True)]


def cross_conformal_inside(pairs: Sequence[tuple[str, str, float]], *,
                           level: float) -> list[bool]:
    """Per pair, whether its ratio lies inside the `level` interval formed from the pairs of the
    other folds (`cross_conformal_positions` == 0)."""
    return [p == 0 for p in cross_conformal_positions(pairs, level=level)]


def _source_parts(sources: Sequence[str], order: Iterable[str]) -> list[tuple[str, list[int]]]:
    """The rows a coverage table shows for items whose sources are `sources` (one per item), as
    (name, item indices): every item together, named by its one source or 'all' when there are
    several, then, with several, each source apart in `order`."""
    names = list(order)
    everything = list(range(len(sources)))
    if len(names) <= 1:
        return [(names[0] if names else "all", everything)]
    return [("all", everything)] + [(n, [i for i, s in enumerate(sources) if s == n])
                                    for n in names]


def _per_source(group: str, quantity: str, pairs: Sequence[tuple[str, str, float]],
                inside: Sequence[bool], *, calibration_rows: int, lower: float, upper: float,
                method: str) -> list[CoverageRow]:
    sources = [s for s, _, _ in pairs]
    parts = _source_parts(sources, sorted(set(sources)))
    return [CoverageRow(group=group, quantity=quantity, source=source,
                        calibration_rows=calibration_rows, holdout_rows=len(index),
                        covered=float(np.mean([inside[i] for i in index])) if index
                        else float("nan"), lower=lower, upper=upper, method=method)
            for source, index in parts]


@dataclass(frozen=True, slots=True)
class _Scored:
    """One (group, quantity) as the coverage table scores it (`_scored`)."""

    group: str
    quantity: str
    calibration_rows: int
    lower: float
    upper: float
    method: str
    pairs: list[tuple[str, str, float]]
    """The scored pairs: its holdout rows (SPLIT), else its calibration rows (CROSS)."""
    positions: list[int]
    """Each pair's `_position` against its interval."""


def _scored(path: Path, level: float) -> list[_Scored]:
    """Per group with calibration rows: holdout rows against the calibration rows' interval
    (SPLIT), or, for a group without holdout rows, every calibration row by cross-conformal
    folds (CROSS). The one scoring both `coverage` and `track_entries` report."""
    calibration: Mapping[tuple[str, str], np.ndarray] = calibration_ratios(path)
    by_role = _pairs(path)
    holdout, own = by_role.get("holdout", {}), by_role.get("calibration", {})
    out = []
    for (group, quantity), sample in calibration.items():
        lower = conformal_quantile(sample, (1 - level) / 2)
        upper = conformal_quantile(sample, (1 + level) / 2)
        held = holdout.get((group, quantity), [])
        if held:
            method, pairs = SPLIT, held
            positions = [_position(r, lower, upper) for _, _, r in held]
        else:
            method, pairs = CROSS, own[(group, quantity)]
            positions = cross_conformal_positions(pairs, level=level)
        out.append(_Scored(group, quantity, int(sample.size), lower, upper, method, pairs,
                           positions))
    return out


def coverage(path: Path, *, level: float = 0.8) -> list[CoverageRow]:
    """Per group with calibration rows: every scored row together, then each source apart (when
    the group has several) — holdout rows against the calibration rows' interval (SPLIT), or,
    for a group without holdout rows, every calibration row by cross-conformal folds (CROSS)."""
    rows = []
    for g in _scored(path, level):
        rows += _per_source(g.group, g.quantity, g.pairs, [p == 0 for p in g.positions],
                            calibration_rows=g.calibration_rows, lower=g.lower, upper=g.upper,
                            method=g.method)
    return rows


def leave_one_source_out(path: Path, group: str, *, level: float = 0.8) -> list[CoverageRow]:
    """A diagnostic beside the cross-conformal rows: each calibration source of `group` scored
    against the interval the group's OTHER sources form."""
    rows = []
    for (g, quantity), pairs in _pairs(path).get("calibration", {}).items():
        if g != group:
            continue
        for source in sorted({s for s, _, _ in pairs}):
            others = np.array([r for s, _, r in pairs if s != source])
            mine = [r for s, _, r in pairs if s == source]
            if not others.size:
                continue
            lower = conformal_quantile(others, (1 - level) / 2)
            upper = conformal_quantile(others, (1 + level) / 2)
            rows.append(CoverageRow(
                group=group, quantity=quantity, source=source, calibration_rows=int(others.size),
                holdout_rows=len(mine), covered=float(np.mean([lower <= r <= upper for r in mine])),
                lower=lower, upper=upper, method="leave-one-source-out"))
    return rows


def rotating_gpu_coverage(path: Path, *, level: float = 0.8) -> list[CoverageRow]:
    """The prior group's leave-one-GPU-out in turn, reported beside the fixed split: for each
    calibrated GPU, the interval formed from the prior pairs of the OTHER target GPUs (every
    role) and scored on this GPU's pairs (case ids 'from-REFERENCE:TARGET/...'). Pairs of other
    GPUs' runs predicted from the held-out GPU's calibrated profile stay in: no measurement of
    the held-out GPU is a ratio forming the interval, though its runs shaped that profile. A
    diagnostic of the doc only: the shipped multipliers use the fixed split of `residuals.py`."""
    pairs = [(row.case.split(":", 1)[1].split("/", 1)[0], row.ratio)
             for row in residual_rows(path)
             if row.group == "prior" and row.case.startswith("from-")]
    rows = []
    for target in sorted({t for t, _ in pairs}):
        others = np.array([r for t, r in pairs if t != target])
        mine = [r for t, r in pairs if t == target]
        lower = conformal_quantile(others, (1 - level) / 2)
        upper = conformal_quantile(others, (1 + level) / 2)
        rows.append(CoverageRow(
            group="prior", quantity="step_time_s", source=f"held-out GPU {target}",
            calibration_rows=int(others.size), holdout_rows=len(mine),
            covered=float(np.mean([lower <= r <= upper for r in mine])), lower=lower,
            upper=upper))
    return rows


def track_entries(path: Path, printed: Sequence[PrintedCase], *,
                  level: float = 0.8) -> list[TrackEntry]:
    """Each group's track record (`perfmodel.uncertainty.track_record`): its every scored case
    as `coverage` scores it (the 'all' row: SPLIT on holdout rows, else CROSS), then its
    published runs as `printed_coverage` scores them, with the side each miss fell on."""
    entries = [entry_from_positions(group=g.group,
                                    scored=HELD_OUT if g.method == SPLIT else CROSS_CONFORMAL,
                                    quantity=g.quantity, sources=[s for s, _, _ in g.pairs],
                                    positions=g.positions)
               for g in _scored(path, level)]
    for group in dict.fromkeys(c.group for c in printed):
        mine = [c for c in printed if c.group == group]
        entries.append(entry_from_positions(
            group=group, scored=PUBLISHED, quantity="tokens_per_s_per_gpu",
            sources=[c.source for c in mine], positions=[c.position for c in mine]))
    return entries
