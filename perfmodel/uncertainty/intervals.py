"""Prediction intervals and fit probabilities of one prediction, from the shipped residuals.

Claim: the p-quantile of a predicted time is point × multiplier(group, "step_time_s", p), where
multiplier is the split-conformal quantile (`perfmodel.uncertainty.conformal`) of the ratios
measured / predicted of the group's calibration rows in catalogs/uncertainty/residuals.csv (never
its holdout or in-sample rows); throughputs and MFU are time's reciprocals (their p10 is point /
the p90 multiplier), costs and wall times scale with time; a peak's quantiles use the memory
group of its model (`memory_group`: memory, or memory-moe for a mixture-of-experts model).
P(fits) is the conformal P(r <= usable / predicted peak), and the largest micro-batch that fits
with probability p is the one whose predicted peak stays within usable / multiplier(memory
group, ..., p).
Why: the ratio is the error that scales with the figure (`conformal`); the group is what
predicted it (the profile's provenance for times, the memory model for peaks), as the residuals
show the groups' errors differ by an order of magnitude.
Widening rule (a stated policy, not a fit — no data measures the error where there is none):
each dimension in which the query lies outside what the group's calibration rows cover
(catalogs/uncertainty/ranges.json: GPU count, sequence length, parameters, layout kind fsdp / tp
/ pp) and an outer strategy (DiLoCo) that no residual covers spreads the ratios away from their
median in log space by 1 + WIDEN_PER_DIMENSION each (`conformal.widen`); the output names every
such dimension in `interval_widened`.
Run-to-run noise (issue 27 item 6) is not a separate term, and why: a calibration ratio's
`measured` is one benchmark measurement (the median of one run's timed iterations; the datasets
keep their spread in `time_iqr_s`), so the noise of one such measurement is already inside the
ratios — a new measurement taken the same way is exchangeable with them and the band covers model
error and that noise together; adding the recorded within-run spread on top would count it twice.
What the band cannot contain is variation no calibration measurement shows: between separate
launches, sessions or machines of one configuration. No shipped dataset measures a configuration
twice (`perfmodel.costs.datasets.repeat_spread` finds no repeated configuration in cpu-compute.csv
or cpu-comm.csv; a published run is one figure). `bench comm --repeats R` now writes them (R
fresh torchrun launches, a `repeat` key column); `bench compute` and `bench fsdp` cannot yet
(`perfmodel.bench.common.CsvLog` keys their rows by configuration and skips a key already
measured). With R repeats per configuration the fits take their median and the profile keeps
their relative spread s (`provenance_detail.repeats`); one
future run then differs from a calibration median by the extra log-variance s² − v_R (v_R the
variance of a median of R: s² for R = 1, so nothing to add, → π·s²/(2R) for large R), the
component to add to the ratios then.
Checked by: tests/test_uncertainty.py (multipliers from the calibration rows only, monotone in
the quantile; a query beyond the ranges widens and says why; p_fits < 1 just under the limit and
≈ 1 far under it; --interval and --fit-probability through the CLI).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.formatting import insert_after
from perfmodel.spec.errors import DatasetError, UserInputError
from perfmodel.spec.inputs import read_text
from perfmodel.spec.paths import catalog_dir
from perfmodel.uncertainty.conformal import (
    FloatArray,
    check_quantile,
    conformal_quantile,
    probability_at_most,
    widen,
)

RESIDUALS_CSV = "uncertainty/residuals.csv"
"""In the catalog folder; written by python -m scripts.make_residuals."""
_REGENERATE = "regenerate it: python -m scripts.make_residuals."
RANGES_JSON = "uncertainty/ranges.json"
"""In the catalog folder: what each group's calibration rows cover (the same generator)."""
DEFAULT_LEVEL = 0.8
"""The band every prediction carries: p10 and p90."""
WIDEN_PER_DIMENSION = 0.5
"""Log-spread added per extrapolated dimension (see the module docstring)."""
TIME_KEYS = ("step_time_s", "inner_step_time_s", "amortised_step_s", "outer_step_s", "total_s",
             "wall_time_s", "expected_wall_time_s", "cost_usd", "expected_cost_usd")
"""Record keys that scale with the step time."""
RATE_KEYS = ("tokens_per_s", "tokens_per_s_per_gpu", "expected_tokens_per_s", "mfu")
"""Record keys that scale with the reciprocal of the step time."""
MEMORY_KEYS = ("peak_gib",)
"""Record keys that scale with the memory model's error."""
TIME_QUANTITY = {"measured": "step_time_s", "calibrated": "step_time_s", "prior": "step_time_s",
                 "collectives": "collective_time_s"}


def _calibration() -> dict[tuple[str, str], FloatArray]:
    """(group, quantity) -> the calibration rows' ratios measured / predicted."""
    return calibration_ratios(catalog_dir() / RESIDUALS_CSV)


@dataclass(frozen=True, slots=True)
class ResidualRow:
    """One row of a residuals file, its ratio checked (`residual_rows`)."""

    role: str
    group: str
    quantity: str
    source: str
    case: str
    ratio: float
    """measured / predicted: two positive finite numbers."""


def residual_rows(path: Path) -> list[ResidualRow]:
    """Every row of the residuals file `path`, each checked: DatasetError naming the file, the
    line and what is wrong (with the command that regenerates it), never a traceback."""
    if not path.is_file():
        raise DatasetError(f"{path}: the residuals are missing",
                           hint="run `python -m scripts.make_residuals`.")
    text = read_text(path, what="residuals file", error=DatasetError, hint=_REGENERATE)
    rows = []
    for line, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        try:
            measured, predicted = float(row["measured"]), float(row["predicted"])
            role, group, quantity, source, case = (
                str(row[k]) for k in ("role", "group", "quantity", "source", "case"))
        except (KeyError, TypeError, ValueError) as err:
            raise DatasetError(f"{path} line {line}: not a residual row ({type(err).__name__}: "
                               f"{err})", hint=_REGENERATE) from None
        if not (math.isfinite(measured) and math.isfinite(predicted)
                and measured > 0 and predicted > 0):
            raise DatasetError(f"{path} line {line}: measured {row['measured']!r} / predicted "
                               f"{row['predicted']!r} is not a ratio of two positive finite "
                               "numbers", hint=_REGENERATE)
        rows.append(ResidualRow(role=role, group=group, quantity=quantity, source=source,
                                case=case, ratio=measured / predicted))
    return rows


@lru_cache(maxsize=4)
def calibration_ratios(path: Path) -> dict[tuple[str, str], FloatArray]:
    """(group, quantity) -> the ratios measured / predicted of `path`'s calibration rows (its
    holdout rows are never used)."""
    found: dict[tuple[str, str], list[float]] = {}
    for row in residual_rows(path):
        if row.role == "calibration":
            found.setdefault((row.group, row.quantity), []).append(row.ratio)
    return {k: np.sort(np.array(v, dtype=float)) for k, v in found.items()}


def _ranges() -> dict[str, Any]:
    return _read_ranges(catalog_dir() / RANGES_JSON)


@lru_cache(maxsize=4)
def _read_ranges(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise DatasetError(f"{path}: the residual ranges are missing",
                           hint="run `python -m scripts.make_residuals`.")
    text = read_text(path, what="residual ranges", error=DatasetError, hint=_REGENERATE)
    try:
        data = json.loads(text)
    except ValueError as err:
        raise DatasetError(f"{path}: not JSON ({err})", hint=_REGENERATE) from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: not a mapping of residual groups", hint=_REGENERATE)
    return data


def ratios(group: str, quantity: str) -> FloatArray:
    """The calibration ratios measured / predicted of `group`'s `quantity` (sorted)."""
    table = _calibration()
    if (group, quantity) not in table:
        known = ", ".join(f"{g}/{q}" for g, q in sorted(table))
        raise UserInputError(f"residual group {group!r} quantity {quantity!r}: no calibration "
                             "rows", hint=f"use one of {known}.")
    return table[(group, quantity)].copy()


def multiplier(group: str, quantity: str, quantile: float) -> float:
    """The split-conformal `quantile` of `group`'s ratios: the p90 step time is the point
    times multiplier(group, "step_time_s", 0.9)."""
    return conformal_quantile(ratios(group, quantity), quantile)


@dataclass(frozen=True, kw_only=True, slots=True)
class Query:
    """Where a prediction lies, to compare with what the residuals cover."""

    num_gpus: int
    """GPUs of one island."""
    seq_len: int
    """Sequence length in tokens."""
    params: int
    """Model parameters."""
    layout: str
    """fsdp, tp or pp (pp wins over tp)."""
    strategy: str = "fsdp"
    """fsdp, diloco or streaming-diloco."""

    def __post_init__(self) -> None:
        if self.layout not in ("fsdp", "tp", "pp"):
            raise UserInputError(f"layout kind {self.layout!r}",
                                 hint="use fsdp, tp or pp.")


def layout_kind(tp: int, pp: int) -> str:
    """The layout kind a (tp, pp) layout is compared by."""
    return "pp" if pp > 1 else "tp" if tp > 1 else "fsdp"


def extrapolation(group: str, query: Query) -> list[str]:
    """Why `query` lies outside what `group`'s calibration rows cover (empty: inside)."""
    covered = _ranges().get(group, {})
    reasons = []
    for name, value, label in (("num_gpus", query.num_gpus, "GPUs"),
                               ("seq_len", query.seq_len, "sequence length"),
                               ("params", query.params, "parameters")):
        span = covered.get(name)
        if span and not span[0] <= value <= span[1]:
            reasons.append(f"{label} {value:,} outside the {group} residuals' "
                           f"{span[0]:,}-{span[1]:,}")
    layouts = covered.get("layouts")
    if layouts and query.layout not in layouts:
        reasons.append(f"layout {query.layout} not in the {group} residuals "
                       f"({', '.join(layouts)})")
    if query.strategy != "fsdp":
        reasons.append(f"strategy {query.strategy}: no residual measures an outer step")
    return reasons


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorModel:
    """The multiplicative error of one figure: the (possibly widened) calibration ratios."""

    group: str
    """Residual group."""
    quantity: str
    """Residual quantity."""
    sample: FloatArray
    """Sorted ratios measured / predicted (widened where the query extrapolates)."""
    widened: tuple[str, ...]
    """Why the ratios were widened (empty: not)."""

    def quantile(self, q: float) -> float:
        """The conformal q-quantile of the ratio."""
        return conformal_quantile(self.sample, q)

    def p_at_most(self, threshold: float) -> float:
        """P(ratio <= threshold)."""
        return probability_at_most(self.sample, threshold)


def memory_group(num_experts: int) -> str:
    """The residual group of a peak-memory prediction: mixture-of-experts models (`num_experts`
    routed experts > 0) have their own (`perfmodel.uncertainty.residuals`: their routing and
    capacity terms err by percents, the dense terms by permille)."""
    return "memory-moe" if num_experts > 0 else "memory"


def error_model(group: str, quantity: str, query: Query | None = None) -> ErrorModel:
    """`group`'s error model for `query` (widened by the module's rule where it extrapolates)."""
    sample = ratios(group, quantity)
    reasons = tuple(extrapolation(group, query)) if query is not None else ()
    if reasons:
        sample = widen(sample, 1.0 + WIDEN_PER_DIMENSION * len(reasons))
    return ErrorModel(group=group, quantity=quantity, sample=sample, widened=reasons)


def check_level(level: float, *, field: str = "--interval") -> float:
    """A two-sided interval level strictly between 0 and 1."""
    return check_quantile(level, field=field)


def _bounds(value: float, model: ErrorModel, low_q: float, high_q: float, *, reciprocal: bool
            ) -> tuple[float, float]:
    low, high = model.quantile(low_q), model.quantile(high_q)
    if reciprocal:
        return (value / high if high > 0 else 0.0,
                value / low if low > 0 else math.inf)
    return value * low, value * high


def annotate(record: Mapping[str, Any], *, time: ErrorModel | None, memory: ErrorModel | None,
             level: float | None = None) -> dict[str, Any]:
    """`record` with `*_p10`, `*_p50` and `*_p90` after every point figure it has (and
    `*_lo`/`*_hi` at `level`), then the groups and widening reasons. The p50 is the point times
    the median ratio: it differs from the point where the group's errors lean one way."""
    kinds: list[tuple[tuple[str, ...], ErrorModel | None, bool]] = [
        (TIME_KEYS, time, False), (RATE_KEYS, time, True), (MEMORY_KEYS, memory, False)]
    extra: dict[str, dict[str, Any]] = {}
    for keys, model, reciprocal in kinds:
        if model is None:
            continue
        for key in keys:
            value = record.get(key)
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            p10, p90 = _bounds(float(value), model, 0.1, 0.9, reciprocal=reciprocal)
            p50 = _bounds(float(value), model, 0.5, 0.5, reciprocal=reciprocal)[0]
            added = {f"{key}_p10": p10, f"{key}_p50": p50, f"{key}_p90": p90}
            if level is not None:
                lo, hi = _bounds(float(value), model, (1 - level) / 2, (1 + level) / 2,
                                 reciprocal=reciprocal)
                added.update({f"{key}_lo": lo, f"{key}_hi": hi})
            extra[key] = added
    out = insert_after(record, extra)
    if time is not None:
        out["interval_group"] = time.group
        out["interval_widened"] = list(time.widened)
    if memory is not None:
        prefix = "" if time is None else "memory_"
        out[f"{prefix}interval_group"] = memory.group
        out[f"{prefix}interval_widened"] = list(memory.widened)
    if level is not None:
        out["interval_level"] = level
    return out


def p_fits(memory: ErrorModel, *, peak_bytes: float, usable_bytes: float) -> float:
    """P(the true peak <= usable): the conformal P(ratio <= usable / predicted peak)."""
    if peak_bytes <= 0:
        return 1.0
    return memory.p_at_most(usable_bytes / peak_bytes)


def memory_budget_bytes(memory: ErrorModel, *, usable_bytes: float, probability: float) -> float:
    """The predicted peak below which a configuration fits with `probability`: usable / the
    ratio's `probability`-quantile (0 when the residuals cannot certify it)."""
    q = memory.quantile(check_quantile(probability, field="--fit-probability"))
    return usable_bytes / q if math.isfinite(q) and q > 0 else 0.0


def largest_fitting(fits_within: Callable[[float], int], memory: ErrorModel, *,
                    usable_bytes: float, probability: float) -> int:
    """The largest micro-batch that fits with `probability`, `fits_within(budget_bytes)` being
    the model's largest micro-batch within a predicted-peak budget."""
    budget = memory_budget_bytes(memory, usable_bytes=usable_bytes, probability=probability)
    return fits_within(budget) if budget > 0 else 0
