"""Plans that hold with a probability (issue 27 item 4): the error model and the quantile table.

The error model
---------------
Claim: the Q-quantile wall time and the Q-quantile cost of *every* plan are that plan's wall time
and cost evaluated on the island table whose step times are multiplied, row by row, by the
Q-multiplier of the row's residual group, so `pareto --quantile Q` is the existing exact frontier
of a scaled table and `plan --quantile Q` its exact queries.

The model (stated in every output that uses it, `ErrorModel.describe`): an island's true step time
is its predicted one times r = measured/predicted; r depends only on the island's residual group
(the profile provenance of its row: measured, calibrated, prior), and one uniform U ~ U(0, 1)
drives every group (comonotone: r_g = F_g⁻¹(U), so within a group every island of every plan
shares the same r, and across groups the errors move together). F_g⁻¹ is the split-conformal
quantile function of the group's calibration ratios r_1 <= ... <= r_n (the rows of
catalogs/uncertainty/residuals.csv with role calibration and quantity step_time_s, or explicit
arrays), the one `predict`'s bands read (`perfmodel.uncertainty.conformal`, "One convention for
every output", which proves it nondecreasing): F_g⁻¹(u) = r_(⌈(n+1)u⌉) for u >= 0.5 (+∞ when
⌈(n+1)u⌉ > n, the conformal band's open top) and r_(⌊(n+1)u⌋) for u < 0.5 (0 when ⌊(n+1)u⌋ < 1,
its open bottom), each end rounded outward. So a Q-figure is certified on its outward side:
for Q >= 0.5 the run finishes within the Q-time with probability >= Q (conformal, for one group;
see the limit below for mixed groups); for Q < 0.5 it takes at least the Q-time with probability
>= 1 − Q (an optimistic figure that holds with probability about Q, not at least Q). A level
the group's n ratios cannot certify (F_g⁻¹ = 0 or +∞: Q outside [1/(n+1), n/(n+1)]) is refused.

Why it keeps the frontier exact: a plan's wall time W = D/(B·S)·(max_i r_g(i)·t_i + σ/H) and
cost C = W·Σprice/3600 are nondecreasing in every r_g, and every r_g is nondecreasing in the one
U, so W(U) and C(U) are nondecreasing functions of U: their Q-quantiles are W(Q) and C(Q), both
reached at the same U = Q — the plan's deterministic value on the table scaled by r_g(Q). The
map plan -> (W_Q, C_Q) is therefore the old evaluator on new data, and every backend (DP, CP-SAT,
MILP, brute force) stays exact with no change. Independent errors across groups would not: then
P(W <= x) = Π_g F_g(min over the plan's islands i of group g of x'/t_i) (x' = x·B·S/D − σ/H) is a
product of CDFs over the groups a plan uses, the Q-quantile of a plan depends on which groups it
mixes, and the DP's class (islands, cluster set) would have to carry the set of groups and a
quantile per level. We chose the comonotone model because a group's islands share one profile
(their errors do move together) and it keeps the solvers as they are. Its limit, stated: for a
plan that mixes groups it is the optimistic coupling — P(max_i r_i·t_i <= x) <= min_g F_g(...)
(Fréchet), reached when the errors move together — so under any other dependence across groups
(independence included) such a plan's Q-time is at least the one reported; a plan of one group
is exact under every dependence.

The synchronisation σ is not scaled (the contract of the residual groups scales step times; the
WAN all-reduce has its own group, "collectives", outside this model), and the activity split of
the step (energy columns) is scaled with the step time so the energy figures of a quantile plan
are those of the same U; energy and CO2 objectives are refused with a quantile (not checked).

The band of every plan (issue 27: every JSON output that carries a prediction carries its
interval): the same model, read at other levels. Each plan record of `plan` and `pareto` (JSON
and CSV) gains `wall_time_s_p10/_p90`, `cost_usd_p10/_p90`, `tokens_per_s_p10/_p90`,
`energy_kwh_p10/_p90`, `co2_kg_p10/_p90` and `interval_groups` (cluster -> residual group of the
plan's clusters). A figure nondecreasing in U has its p-quantile at U = p, so its p10/p90 are the
plan evaluated (`planner.model.evaluate.evaluate`, the one evaluator) on the island table scaled
by `quantile_table` at 0.1 / 0.9 — the problem rebuilt from that table has the same pairs in the
same order, as every row of one option scales by one factor (`exactly_dominated` compares rows of
one option only; checked in `plan_bands`). Which figures, and why:
- wall time W(U): nondecreasing (above).
- cost: pay-per-time, C = W·Σprice/3600 for a fixed plan, so C(U) = W(U)·Σprice/3600 and its
  band is the time band times the plan's price rate. A DiLoCo plan with islands of different
  groups is no exception: every island is billed for the whole run W(U), and W(U) already takes
  the max over the islands' scaled step times of the same U (the islands' errors move together),
  so one U gives both time and cost, and C_p90 is the cost of the run that takes W_p90.
- tokens/s = D/W(U): nonincreasing, so its p10 is the value at U = 0.9 and its p90 at U = 0.1 (a
  p-quantile: P(T <= t) >= p and P(T < t) <= p, as `perfmodel.uncertainty.intervals` mirrors it).
- energy and CO2: E = Σ_i a_i·W + steps·b_i (`planner.model.energy`), the activity split of the
  step scaled with its step time, so E(U) is the power model's point applied to the time band;
  nondecreasing in U because b_i >= 0 (`PowerAssumptions` requires idle <= comm <= compute). The
  power model's own error is NOT in the band: no measurement of energy validates it
  (docs/ENERGY.md states assumptions, no residuals; catalogs/uncertainty/residuals.csv has no
  energy group), so the energy band is the time band's share only — `interval_note` says so.
With a --quantile plan the record's point figures are its Q-values (U = Q) and the band is of
the same plan (p10/p90 at U = 0.1/0.9 of the unscaled table): `plan --quantile 0.9` reports
wall_time_s equal to its own wall_time_s_p90. No band (and `interval_note` says why) where the
failure model is on (its figures are expectations over failures, not quantiles of this model,
as --quantile refuses it), where the island table has no provenance column, or where a group has
too few calibration ratios. No widening by extrapolation applies (unlike `predict`'s bands): the
planner's model is the one --quantile plans are solved under. It is said instead: where a plan's
island lies beyond what its group's calibration rows cover (`perfmodel.uncertainty.intervals.
extrapolation` of the island's GPUs, the instance's sequence length and model size, the row's
layout kind and, for a plan of several islands, DiLoCo's outer step), the record's
`interval_extrapolation` names the island and why, and `interval_note` says the band is not
widened there. Hence the relation to `predict`:
a single-island plan (σ = 0) has W = steps·r·t, so its wall_time_s_p10/_p90 are `predict`'s
step_time_s_p10/_p90 of the same configuration times the step count D/(B·S) wherever `predict`
does not widen (same ratios, same F_g⁻¹ at 0.1/0.9); where it widens (the configuration lies
outside what the group's residuals cover, `interval_widened` names why) `predict`'s band is the
wider one, by that stated policy.

Checked by: tests/test_plan_bands.py (Monte Carlo of this model over the case-study plans'
islands: each band end is a p-quantile of the sampled W, C, tokens/s and energy within binomial
sampling error; a --quantile 0.9 plan's p90 is its own figure, a 0.1 one's p10; a single-island
plan's band is `predict`'s step-time band times the step count; JSON validates against the
schemas; a fixed table without provenance gives the note) and tests/test_quantile_plans.py
(Monte Carlo of this model over the chosen plan's islands
agrees with the reported Q-time and Q-cost within binomial sampling error; the quantile frontier
equals the non-dominated set of every brute-force plan's exact Q-quantiles computed from the full
distribution of U; Q = 0.5 with symmetric ratios is the point plan; bad Q and a missing or
malformed residuals file exit 2 with a fix).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.facts import (
    PROVENANCES,
    RESIDUAL_COLUMNS,
    RESIDUAL_GROUPS,
    RESIDUAL_ROLES,
    Query,
    catalog_dir,
    check_quantile,
    conformal_quantile,
    extrapolation,
    layout_kind,
    model_parameters,
    quantile_function,
    read_text,
)
from perfmodel.spec.errors import ConfigError, InstanceError, ShardMeterError, UserInputError
from planner.model.evaluate import build_problem, cost_usd, evaluate, wall_time_s
from planner.model.instance import Instance
from planner.model.problem import Plan, Problem

TIME_QUANTITY = "step_time_s"
"""The quantity whose ratios scale an island's step time."""
SCALED_COLUMNS = ("microstep_s", "step_fixed_s", "compute_fixed_s", "compute_micro_s",
                  "comm_only_fixed_s", "comm_only_micro_s")
"""Island-table columns that are seconds of the step: all scale by the row's multiplier."""
GROUP_COLUMN = "provenance"
"""The island-table column that names a row's residual group."""


def residuals_path() -> Path:
    """Where the residual pairs live (catalogs/uncertainty/residuals.csv)."""
    return catalog_dir() / "uncertainty" / "residuals.csv"


def _shown(path: Path) -> str:
    """A path as outputs show it: relative to the repository when inside it."""
    resolved, root = path.resolve(), catalog_dir().resolve().parent
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(path)


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorModel:
    """Comonotone multiplicative step-time errors per residual group (the module docstring)."""

    ratios: Mapping[str, tuple[float, ...]]
    """Calibration ratios r = measured/predicted of step time, per residual group (a profile
    provenance: measured, calibrated, prior), each a non-empty tuple of finite numbers > 0."""
    source: str = "explicit ratios"
    """Where the ratios come from (a file, or "explicit ratios"), for the outputs."""

    def __post_init__(self) -> None:
        if not self.ratios:
            raise ConfigError("error model: no residual group has ratios",
                              hint="give ratios for at least one of " + ", ".join(PROVENANCES)
                                   + ".")
        for group, values in self.ratios.items():
            if group not in PROVENANCES:
                raise ConfigError(f"error model ({self.source}): group {group!r} is not a time "
                                  "group", hint="use one of " + ", ".join(PROVENANCES) + ".")
            if not isinstance(values, tuple) or not values:
                raise ConfigError(f"error model ({self.source}): group {group!r}: ratios = "
                                  f"{values!r}: need a non-empty tuple",
                                  hint="give at least one measured/predicted ratio.")
            for value in values:
                if isinstance(value, bool) or not isinstance(value, int | float) \
                        or not math.isfinite(value) or value <= 0:
                    raise ConfigError(f"error model ({self.source}): group {group!r}: ratio "
                                      f"{value!r} is not a finite number > 0",
                                      hint="ratios are measured/predicted of positive times.")

    @classmethod
    def from_ratios(cls, ratios: Mapping[str, Sequence[float] | np.ndarray], *,
                    source: str = "explicit ratios") -> ErrorModel:
        """The model of explicit ratio arrays per group."""
        return cls(ratios={g: tuple(float(v) for v in np.asarray(r, dtype=float).ravel())
                           for g, r in ratios.items()}, source=source)

    @classmethod
    def from_residuals(cls, path: Path | None = None) -> ErrorModel:
        """The model of the calibration step-time pairs of the residuals file (default
        catalogs/uncertainty/residuals.csv), every row checked (file, line, column, value)."""
        path = residuals_path() if path is None else path
        fix = ("generate it with `python -m scripts.make_residuals` (issue 27's residual "
               "collection), or plan without --quantile.")
        if not path.is_file():
            raise ConfigError(f"{path}: the residuals file is missing: --quantile needs the "
                              "measured/predicted pairs of each residual group", hint=fix)
        text = read_text(path, what="residuals file", error=ConfigError, hint=fix)
        try:
            frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as err:
            raise ConfigError(f"{path}: cannot read the residuals CSV: {err}", hint=fix) from None
        if tuple(frame.columns) != RESIDUAL_COLUMNS:
            raise ConfigError(f"{path}: columns {list(frame.columns)} are not "
                              f"{list(RESIDUAL_COLUMNS)}",
                              hint="the header must be: " + ",".join(RESIDUAL_COLUMNS) + ".")
        ratios: dict[str, list[float]] = {}
        # plain dicts, not iterrows: a Series per row was most of this function's time
        for index, row in enumerate(frame.to_dict("records")):
            line = index + 2

            def fail(column: str, problem: str, hint: str, *, line: int = line,
                     row: dict[Any, Any] = row) -> ConfigError:
                return ConfigError(f"{path}, line {line}: column {column!r} = "
                                   f"{row[column]!r}: {problem}", hint=hint)

            if row["group"] not in RESIDUAL_GROUPS:
                raise fail("group", "not a residual group", "use one of "
                           + ", ".join(RESIDUAL_GROUPS) + ".")
            if row["role"] not in RESIDUAL_ROLES:
                raise fail("role", "not a role", "use " + ", ".join(RESIDUAL_ROLES[:-1])
                           + " or " + RESIDUAL_ROLES[-1] + ".")
            values = []
            for column in ("predicted", "measured"):
                try:
                    value = float(row[column])
                except ValueError:
                    value = math.nan
                if not math.isfinite(value) or value <= 0:
                    raise fail(column, "not a finite number > 0", "put the positive "
                               f"{column} value of {row['quantity'] or 'the quantity'} there.")
                values.append(value)
            if (row["role"] == "calibration" and row["quantity"] == TIME_QUANTITY
                    and row["group"] in PROVENANCES):
                ratios.setdefault(str(row["group"]), []).append(values[1] / values[0])
        if not ratios:
            raise ConfigError(f"{path}: no calibration row of quantity {TIME_QUANTITY} in the "
                              "groups " + ", ".join(PROVENANCES), hint=fix)
        return cls.from_ratios(ratios, source=_shown(path))

    def multiplier(self, group: str, quantile: float) -> float:
        """F_g⁻¹(Q): the step-time multiplier of `group` at level `quantile`; an error with a fix
        when the group has no ratios or too few for the level (F_g⁻¹ is 0 or +∞: the conformal
        band is open at that end)."""
        quantile = check_quantile(quantile)
        values = self.ratios.get(group)
        if values is None:
            raise ConfigError(f"error model ({self.source}): no calibration ratios for residual "
                              f"group {group!r}",
                              hint=f"add step_time_s calibration pairs of group {group!r} to the "
                                   "residuals, or plan without --quantile.")
        value = conformal_quantile(values, quantile)
        if not 0 < value < math.inf:
            n = len(values)
            low, high = 1 / (n + 1), n / (n + 1)
            move = (f"lower --quantile to {high:.3g} or less" if value == math.inf
                    else f"raise --quantile to {low:.3g} or more")
            raise ConfigError(f"error model ({self.source}): group {group!r} has {n} calibration "
                              f"ratios, too few for the {quantile:.6g} quantile (they certify "
                              f"{low:.3g} to {high:.3g})",
                              hint=f"{move}, or add calibration pairs to that group.")
        return value

    def sample(self, group: str, uniforms: np.ndarray) -> np.ndarray:
        """F_g⁻¹(U) for each U: the multipliers the model draws (Monte Carlo of the model; 0
        and +∞ where U lies beyond what the group's ratios certify)."""
        return quantile_function(self.ratios[group], uniforms)

    def describe(self, quantile: float) -> str:
        """One sentence for the outputs: the model and the multipliers at `quantile`."""
        parts = [f"{g} x{self.multiplier(g, quantile):.4g} (n={len(r)})"
                 for g, r in sorted(self.ratios.items())]
        return ("comonotone multiplicative step-time error per residual group (one shared U; "
                f"split-conformal quantiles of measured/predicted, {self.source}): "
                + ", ".join(parts))


def quantile_table(table: pd.DataFrame, model: ErrorModel, quantile: float,
                   source: str = "island table") -> pd.DataFrame:
    """The island table at the Q-quantile: every seconds column of a row times its group's
    multiplier (the module docstring: the frontier of this table is the exact Q-quantile one)."""
    quantile = check_quantile(quantile)
    if GROUP_COLUMN not in table.columns:
        raise InstanceError(f"{source}: no {GROUP_COLUMN!r} column: --quantile needs each row's "
                            "residual group",
                            hint=f"add a {GROUP_COLUMN} column (one of "
                                 + ", ".join(PROVENANCES) + ") to the island table, or let "
                                 "ShardMeter build the table (drop islands_table:).")
    scaled = table.copy()
    factors = np.array([model.multiplier(str(g), quantile) for g in table[GROUP_COLUMN]])
    for column in (c for c in SCALED_COLUMNS if c in scaled.columns):
        scaled[column] = scaled[column].astype(float) * factors
    scaled.attrs = dict(table.attrs)
    return scaled


def plan_at_quantile(problem: Problem, plan: Plan, groups: Mapping[str, str], model: ErrorModel,
                     quantile: float) -> tuple[float, float]:
    """(Q-quantile wall time s, Q-quantile cost USD) of a plan evaluated on point estimates:
    each island's step time times its group's Q-multiplier (`groups`: cluster -> residual group),
    σ unscaled, through the evaluator's own W and C (exact: W and C are nondecreasing in U)."""
    tau_s = max(island.step_time_s * model.multiplier(groups[island.cluster], quantile)
                for island in plan.islands)
    wall_s = wall_time_s(problem, tau_s, plan.sync_s)
    return wall_s, cost_usd(wall_s, plan.price_units)


def cluster_groups(table: pd.DataFrame) -> dict[str, str]:
    """cluster -> residual group of an island table with a provenance column (one per cluster:
    a cluster has one GPU, hence one profile)."""
    if GROUP_COLUMN not in table.columns:
        raise InstanceError(f"island table: no {GROUP_COLUMN!r} column",
                            hint="let ShardMeter build the table, or add the column.")
    pairs = table.groupby("cluster")[GROUP_COLUMN].unique()
    return {str(c): str(v[0]) for c, v in pairs.items() if len(v) == 1}


# ---- the band of every plan (module docstring, "The band of every plan") ---------------------

BAND_LEVELS = {"p10": 0.1, "p90": 0.9}
"""The band every plan carries: the 80 % interval, as every prediction does (issue 27 item 2)."""
RISING_KEYS = ("wall_time_s", "cost_usd", "energy_kwh", "co2_kg")
"""Plan figures nondecreasing in U: their p-quantile is the plan's value at U = p."""
FALLING_KEYS = ("tokens_per_s",)
"""Plan figures nonincreasing in U (D/W): their p-quantile is the plan's value at U = 1 − p."""
BAND_NOTE = ("80 % band (p10/p90) of the comonotone step-time error model, {source}; energy and "
             "CO2 bands are the time band through the power model's point (the power model's own "
             "error is not included: no energy measurement validates it)")
"""`interval_note` of a plan with a band."""
EXTRAPOLATION_NOTE = ("; NOT widened where the plan's islands lie beyond their group's residuals "
                      "(interval_extrapolation names them): `shardmeter predict` widens its band "
                      "there, so read this one as narrower than the evidence supports")
"""Added to `interval_note` when a plan's island extrapolates (module docstring)."""
EXTRAPOLATION_LABEL = "band not widened beyond its residuals"
"""How the plan table and the HTML report introduce `interval_extrapolation`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanBands:
    """The problems the bands of a solved instance's plans are read from (module docstring)."""

    problems: Mapping[float, Problem]
    """U -> the problem built from the island table scaled at U (empty: no band, `note` says
    why)."""
    groups: Mapping[str, str]
    """cluster -> residual group (the table's provenance column)."""
    level: float | None = None
    """The two-sided level of `*_lo`/`*_hi` (--interval); None: the 80 % band only."""
    note: str
    """What the band covers, or why a plan has none."""
    seq_len: int = 0
    """The instance's sequence length (with `params`: where its islands lie, to compare with
    what each group's residuals cover)."""
    params: int = 0
    """The model's total parameters (0: not known, nothing compared)."""

    def extrapolation(self, plan: Plan) -> str:
        """Each island of `plan` beyond its group's calibration rows and why ('': none; module
        docstring, "The band of every plan")."""
        if not self.params:
            return ""
        strategy = "diloco" if len(plan.islands) > 1 else "fsdp"
        by_reasons: dict[str, list[str]] = {}   # reasons -> the islands they apply to
        for island in plan.islands:
            group = self.groups.get(island.cluster, "")
            variant = dict(island.variant)
            query = Query(num_gpus=island.nodes * island.gpus_per_node, seq_len=self.seq_len,
                          params=self.params, strategy=strategy,
                          layout=layout_kind(int(variant.get("tp", 1)), int(variant.get("pp", 1))))
            reasons = [r for g in group.split("+") if g for r in extrapolation(g, query)]
            if reasons:
                names = by_reasons.setdefault(", ".join(dict.fromkeys(reasons)), [])
                label = f"{island.cluster} {island.nodes}x{island.gpus_per_node}"
                if label not in names:
                    names.append(label)
        return "; ".join(f"{', '.join(names)}: {why}" for why, names in by_reasons.items())

    def suffixes(self) -> dict[str, float]:
        """Key suffix -> U of a rising figure: p10, p90 (and lo, hi at `level`)."""
        levels = dict(BAND_LEVELS)
        if self.level is not None:
            levels.update(lo=(1 - self.level) / 2, hi=(1 + self.level) / 2)
        return levels

    def fields(self, plan: Plan) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
        """(figure key -> its band keys, the record's interval keys) of `plan`: a band where
        `problems` has one, else only `interval_note`."""
        if not self.problems:
            return {}, {"interval_note": self.note}
        suffixes = self.suffixes()
        at = {u: evaluate(problem, plan.choices) for u, problem in self.problems.items()}
        mirrored = {name: 1 - u for name, u in suffixes.items()}
        extra: dict[str, dict[str, Any]] = {}
        for keys, levels in ((RISING_KEYS, suffixes), (FALLING_KEYS, mirrored)):
            for key in keys:
                extra[key] = {f"{key}_{name}": getattr(at[_nearest(at, u)], key)
                              for name, u in levels.items()}
        stated: dict[str, Any] = {
            "interval_groups": {c: self.groups[c] for c in sorted({i.cluster
                                                                   for i in plan.islands})},
            "interval_note": self.note}
        beyond = self.extrapolation(plan)
        if beyond:
            stated["interval_extrapolation"] = beyond
            stated["interval_note"] = self.note + EXTRAPOLATION_NOTE
        if self.level is not None:
            stated["interval_level"] = self.level
        return extra, stated


def _nearest(levels: Mapping[float, Any], u: float) -> float:
    """The key of `levels` equal to u up to rounding (1 − 0.9 is 0.09999999999999998)."""
    return min(levels, key=lambda key: abs(key - u))


def no_bands(note: str) -> PlanBands:
    """Bands of a solve whose plans carry none, and why."""
    return PlanBands(problems={}, groups={}, note=note)


def plan_bands(instance: Instance, table: pd.DataFrame, reference: Problem, *,
               model: ErrorModel | None = None, level: float | None = None) -> PlanBands:
    """The bands of the plans of `reference` (the solved problem of `instance` and its unscaled
    island `table`): one problem per level, rebuilt from the table scaled by `quantile_table`
    (`model`, else the residuals file's). No band, with the reason, under the failure model,
    without a provenance column, or where the model cannot give p10/p90; an explicit `level`
    (--interval) the model cannot give, or on plans without a band, is refused (exit 2)."""
    bands = _plan_bands(instance, table, reference, model, level)
    if level is not None and not bands.problems:
        raise UserInputError(f"--interval {level:g}: {bands.note}",
                             hint="drop --interval (the plans then say why they carry no band).")
    return bands


def _plan_bands(instance: Instance, table: pd.DataFrame, reference: Problem,
                model: ErrorModel | None, level: float | None) -> PlanBands:
    if reference.risk is not None:
        return no_bands("no band: under the failure model the figures are expectations over "
                        "failures, not quantiles of the step-time error model")
    if GROUP_COLUMN not in table.columns:
        return no_bands(f"no band: the island table has no {GROUP_COLUMN!r} column naming each "
                        "row's residual group (add it, one of " + ", ".join(PROVENANCES) + ")")
    levels = sorted(set(PlanBands(problems={}, groups={}, level=level, note="")
                        .suffixes().values()))
    try:
        model = ErrorModel.from_residuals() if model is None else model
        scaled = {u: quantile_table(table, model, u) for u in sorted(BAND_LEVELS.values())}
    except (ConfigError, InstanceError) as err:
        return no_bands(f"no band: {err.message}")
    try:
        scaled.update({u: quantile_table(table, model, u) for u in levels if u not in scaled})
    except ConfigError as err:
        raise UserInputError(f"--interval {level}: {err.message}",
                             hint="give a lower level (e.g. 0.9), or drop --interval.") from None
    key = [_pair_key(p) for p in reference.pairs]
    problems = {}
    for u, frame in scaled.items():
        problem = build_problem(instance, frame)
        if [_pair_key(p) for p in problem.pairs] != key:  # not expected: see the docstring
            return no_bands(f"no band: the island table scaled at U = {u:g} keeps other rows "
                            "than the solved one")
        problems[u] = problem
    named = table.groupby("cluster")[GROUP_COLUMN].unique()
    groups = {str(c): "+".join(sorted(str(g) for g in v)) for c, v in named.items()}
    return PlanBands(problems=problems, groups=groups, level=level,
                     note=BAND_NOTE.format(source=model.source),
                     seq_len=instance.training.seq_len, params=_parameters(instance))


def _parameters(instance: Instance) -> int:
    """The instance model's total parameters (0 when it cannot be read: then no island is
    compared with the residuals' ranges, and nothing is claimed about them)."""
    try:
        return model_parameters(instance.model_ref)
    except ShardMeterError:
        return 0


def _pair_key(pair: Any) -> tuple[Any, ...]:
    """What identifies a problem's pair (its table row) across scalings of the table."""
    return (pair.option_index, pair.micro_batch, pair.variant, pair.seqs_per_accum_step,
            pair.min_accum_steps, pair.max_accum_steps)
