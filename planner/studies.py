"""Scenario studies of the typed planner API (`planner.api`): `frontier` and `query` over several
instance files and what-if variations (`vary`).

A study is a summary (one row per instance and scenario), then per instance the cross table
(every plan scored under every scenario, with its regret) and the robust (min-max-regret) choice;
`payload` is the JSON document. The scoring lives in `planner.analysis.scenarios`.

Bands (`planner.analysis.scenarios`, "Bands"): a `pareto` study's scenario frontiers are plan
records with the band fields of `pareto`'s; its summary row gives the band of its two ends
(`fastest_h_p10/_p90`, `cheapest_usd_p10/_p90`, and `_lo`/`_hi` with --interval); a `plan`
study's summary row is its answer, with the band fields of `plan`'s record under the same names
(`wall_time_s_p10`, `cost_usd_p90`, ..., `interval_groups`, `interval_note`). A scenario without
a band states why in `interval_note`. Schema: planner/schemas/study.schema.json.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from planner.analysis import report
from planner.analysis.pareto import answer, cheapest, cheapest_at_throughput, fastest
from planner.analysis.scenarios import (
    parse_linked,
    parse_vary,
    robust,
    scenarios_of,
    score_answers,
    score_frontiers,
    solve_all,
)
from planner.requests import FrontierRequest, Notify, QueryRequest, SolveOptions

if TYPE_CHECKING:
    from planner.analysis.scenarios import ScenarioResult, ScoredPlan
    from planner.executor import Executor
    from planner.model.problem import Plan, Problem
    from planner.model.uncertainty import PlanBands

ISLAND_KEYS = ("cluster", "nodes", "gpus_per_node", "micro_batch", "accum_steps", "tier")
"""The fields of one island of a scored plan, in JSON (then the row's layout and checkpointing
columns, where the table has them)."""
BAND_FIGURES = ("wall_time_s", "cost_usd", "tokens_per_s", "energy_kwh", "co2_kg")
"""The banded figures of a plan record, in its order."""
SUMMARY_FRACTION = 0.99
"""The summary reports the saving of the cheapest plan at this fraction of the best tokens/s."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScenarioSection:
    """The scenarios of one instance file: every plan under every scenario."""

    instance: str
    """File name of the instance."""
    scenarios: tuple[str, ...]
    """Scenario names; scenario j is `s<j>` in the cross table."""
    cross_table: pd.DataFrame = field(repr=False)
    """One row per plan; per scenario s<j>: time (h), cost (USD), regret (%)."""
    robust: ScoredPlan | None
    """The plan of least maximum regret (None: no plan anywhere)."""

    @property
    def robust_max_regret_pct(self) -> float | None:
        """Maximum regret of the robust plan in percent (None: infinite)."""
        return None if self.robust is None else _pct(self.robust.max_regret)


@dataclass(frozen=True, kw_only=True, slots=True)
class ScenarioStudy:
    """What `frontier` or `query` give for several files or what-ifs."""

    summary: list[dict[str, Any]]
    """One row per (instance, scenario)."""
    sections: tuple[ScenarioSection, ...]
    """Per instance file, in the order given."""
    payload: dict[str, Any] = field(repr=False)
    """The JSON document (summary, and per instance its scenarios and scored plans)."""

    @property
    def unproven(self) -> list[str]:
        """`instance [scenario]` of every summary row whose solve is not proven exact."""
        return [f"{r['instance']} [{r['scenario']}]" for r in self.summary
                if r.get("proven_exact") is False]


def _finite(value: float) -> float | None:
    return None if math.isinf(value) else value


def _pct(value: float) -> float | None:
    return None if math.isinf(value) else 100.0 * value


def _results(paths: Sequence[Path], vary: Sequence[str], linked: Sequence[str],
             solve: dict[str, Any], executor: str | Executor | None) -> list[ScenarioResult]:

    scenarios = scenarios_of([parse_vary(v) for v in vary], [parse_linked(t) for t in linked])
    return solve_all([str(p) for p in paths], scenarios, solve, executor=executor)


def _by_instance(results: Sequence[ScenarioResult]) -> dict[str, list[ScenarioResult]]:
    out: dict[str, list[ScenarioResult]] = {}
    for result in results:
        out.setdefault(result.instance_path, []).append(result)
    return out


def summary_rows(results: Sequence[ScenarioResult]) -> list[dict[str, Any]]:
    """One row per (instance, scenario): frontier size, ends, the 99 % saving, exactness."""

    rows = []
    for r in results:
        row: dict[str, Any] = {"instance": Path(r.instance_path).name, "scenario": r.scenario.name}
        if r.frontier is None or not r.points:
            row.update({"points": 0, "note": r.error or "no plan"})
            if r.skipped:
                row["proven_exact"] = False
            rows.append(row)
            continue
        fast, cheap = fastest(r.points), cheapest(r.points)
        _, saving = cheapest_at_throughput(r.points, SUMMARY_FRACTION)
        fast_band, stated = band_fields(r.bands, fast)
        cheap_band, _ = band_fields(r.bands, cheap)
        row.update({"points": len(r.points), "fastest_h": fast.wall_time_s / 3600,
                    **{f"fastest_h{k.removeprefix('wall_time_s')}": v / 3600
                       for k, v in fast_band.items() if k.startswith("wall_time_s_")},
                    "fastest_usd": fast.cost_usd, "cheapest_h": cheap.wall_time_s / 3600,
                    "cheapest_usd": cheap.cost_usd,
                    **{f"cheapest_usd{k.removeprefix('cost_usd')}": v
                       for k, v in cheap_band.items() if k.startswith("cost_usd_")},
                    **{k: v for k, v in stated.items() if k != "interval_groups"},
                    "saving_at_99pct": saving,
                    "solver": r.frontier.solver, "proven_exact": r.frontier.proven_exact,
                    "solve_time_s": r.frontier.solve_time_s,
                    "note": r.frontier.note if not r.frontier.proven_exact else ""})
        rows.append(row)
    return rows


def band_fields(bands: PlanBands | None, plan: Plan) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the band keys of `plan`'s figures, as `plan` names them, in record order; the stated
    `interval_groups`, `interval_note`, `interval_level`) from its scenario's bands (nothing
    without)."""
    if bands is None:
        return {}, {}
    extra, stated = bands.fields(plan)
    return {k: v for figure in BAND_FIGURES for k, v in extra.get(figure, {}).items()}, stated


def cross_frame(scored: Sequence[ScoredPlan], names: Sequence[str],
                robust: ScoredPlan | None) -> pd.DataFrame:
    """One row per plan; per scenario s<j>: time (h), cost (USD), regret (%)."""
    rows = []
    for i, plan in enumerate(scored):
        found = [f"s{names.index(n)}" for n in plan.found_in]
        row: dict[str, Any] = {"plan": i, "label": plan.label, "found_in": " ".join(found)}
        for j in range(len(names)):
            row[f"s{j}_h"] = _finite(plan.wall_time_s[j] / 3600)
            row[f"s{j}_usd"] = _finite(plan.cost_usd[j])
            row[f"s{j}_regret_pct"] = _pct(plan.regret[j])
        row["max_regret_pct"] = _pct(plan.max_regret)
        row["robust"] = plan is robust
        rows.append(row)
    return pd.DataFrame(rows)


def _scored_json(scored: Sequence[ScoredPlan], names: Sequence[str],
                 robust: ScoredPlan | None) -> list[dict[str, Any]]:
    return [{"label": p.label, "found_in": list(p.found_in), "robust": p is robust,
             "max_regret": _finite(p.max_regret),
             "islands": [{**dict(zip(ISLAND_KEYS, i[:6], strict=True)), **dict(i[6])}
                         for i in p.islands],
             "by_scenario": [{"scenario": n, "wall_time_s": _finite(p.wall_time_s[j]),
                              "cost_usd": _finite(p.cost_usd[j]), "regret": _finite(p.regret[j])}
                             for j, n in enumerate(names)]} for p in scored]


def _section(path: str, group: Sequence[ScenarioResult], scored: list[ScoredPlan],
             robust: ScoredPlan | None) -> ScenarioSection:
    names = tuple(r.scenario.name for r in group)
    return ScenarioSection(instance=Path(path).name, scenarios=names,
                           cross_table=cross_frame(scored, names, robust), robust=robust)


def _solve_kwargs(options: SolveOptions, **extra: Any) -> dict[str, Any]:
    """The solve options and the band level each scenario's worker reads its bands at."""
    return {**options.kwargs(), "interval_level": options.interval_level, **extra}


def frontier_study(request: FrontierRequest, *, notify: Notify) -> ScenarioStudy:
    """`frontier` over several files and/or scenarios (plots and the cross-table CSV written)."""

    paths = request.instance_paths
    results = _results(paths, request.vary, request.scenario, _solve_kwargs(request.options),
                       request.options.executor)
    summary = summary_rows(results)
    sections: list[ScenarioSection] = []
    instances: list[dict[str, Any]] = []
    for index, (path, group) in enumerate(_by_instance(results).items()):
        scored = score_frontiers(group)
        best = robust(scored)
        sections.append(_section(path, group, scored, best))
        instances.append({
            "instance": path, "scenarios": [
                {"scenario": r.scenario.name, "error": r.error,
                 "frontier": report.frontier_records(r.frontier, r.problem, bands=r.bands)
                 if r.frontier and r.problem else [],
                 "solve": report.frontier_meta(r.frontier) if r.frontier else {}} for r in group],
            "plans": _scored_json(scored, sections[-1].scenarios, best),
            "robust": best.label if best else None})
        plot = request.plot_path
        if plot is not None:
            target = plot if len(paths) == 1 else plot.with_name(
                f"{plot.stem}_{index}{plot.suffix or '.png'}")
            report.plot_scenarios([(r.scenario.name, r.points) for r in group], target,
                                  title=f"{Path(path).name}: frontier per scenario")
            notify(f"wrote {target}")
    if request.csv_path is not None:
        frames = [s.cross_table.assign(instance=s.instance) for s in sections]
        report.write_text_atomic(request.csv_path,
                                 pd.concat(frames, ignore_index=True).to_csv(index=False))
    return ScenarioStudy(summary=summary, sections=tuple(sections),
                         payload={"summary": summary, "instances": instances})


def query_study(request: QueryRequest) -> ScenarioStudy:
    """`query` over several files and/or scenarios: each scenario's answer, scored under all."""

    objective, fraction = request.objective, request.min_throughput_fraction
    first_only = objective == "cost" and fraction is None
    results = _results(request.instance_paths, request.vary, request.scenario,
                       _solve_kwargs(request.options, first_only=first_only),
                       request.options.executor)
    summary: list[dict[str, Any]] = []
    sections: list[ScenarioSection] = []
    instances: list[dict[str, Any]] = []
    for path, group in _by_instance(results).items():
        answers: list[Plan | None] = []
        admissible: list[Callable[[Plan], bool]] = []
        for r in group:
            row: dict[str, Any] = {"instance": Path(path).name, "scenario": r.scenario.name}
            if r.frontier is None or r.problem is None or not r.points:
                answers.append(None)
                admissible.append(_never)
                summary.append({**row, "note": r.error or "no plan",
                                **({"proven_exact": False} if r.skipped else {})})
                continue
            chosen, extra = answer(r.problem, r.frontier, objective, fraction)
            answers.append(chosen)
            admissible.append(_admissible(r.problem, fastest(r.points) if fraction else None,
                                          fraction))
            band, stated = band_fields(r.bands, chosen)
            summary.append({**row, **extra, "label": report.plan_label(chosen, r.problem),
                            "wall_time_h": chosen.wall_time_s / 3600, "cost_usd": chosen.cost_usd,
                            **band, **stated, "solver": r.frontier.solver,
                            "proven_exact": r.frontier.proven_exact})
        regret_of = "time" if objective == "time" and fraction is None else "cost"
        scored = score_answers(group, answers, regret_of, admissible)
        best = robust(scored)
        sections.append(_section(path, group, scored, best))
        instances.append({"instance": path,
                          "plans": _scored_json(scored, sections[-1].scenarios, best),
                          "robust": best.label if best else None})
    return ScenarioStudy(summary=summary, sections=tuple(sections),
                         payload={"summary": summary, "instances": instances})


def _never(plan: Plan) -> bool:
    """No plan is admissible in a scenario without any plan."""
    return False


def _admissible(problem: Problem, fastest_plan: Plan | None,
                fraction: float | None) -> Callable[[Plan], bool]:
    """Does a rescored plan meet this scenario's budget, deadline and throughput floor?"""
    def ok(plan: Plan) -> bool:
        if problem.budget_usd is not None and plan.cost_usd > problem.budget_usd:
            return False
        if problem.deadline_s is not None and plan.wall_time_s > problem.deadline_s:
            return False
        if fraction is None or fastest_plan is None:
            return True
        return plan.tokens_per_s >= fraction * fastest_plan.tokens_per_s

    return ok
