"""Typed public planner API: the island table, the exact frontier, and one plan of an instance.

Each function takes a frozen request (`IslandsRequest`, `FrontierRequest`, `QueryRequest`,
`SolveRequest`), loads and solves the instance(s) with the planner (`planner.analysis.pareto`,
`planner.analysis.energy`, `planner.analysis.scenarios`), writes the files the request names
(island table, frontier
CSV, plots) and returns a frozen result whose records are the ordered mappings the CLI prints;
`shardmeter islands|pareto|plan` only parse options, call one function here and format.

- `solve`: one instance on one frontier (time vs cost, energy or CO2): problem and frontier.
- `islands`: the validated island table of an instance (written to a file when asked).
- `frontier`: `pareto`: one frontier, or with several files / `--vary` a `ScenarioStudy`.
- `query`: `plan`: fastest, cheapest, least energy/CO2, or cheapest near the best throughput.

Several instance files or what-if variations (`vary`) give a `ScenarioStudy`
(`planner.studies`): every plan scored under every scenario with its regret.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfmodel.spec.errors import UserInputError
from planner.analysis import report
from planner.analysis.energy import metric_of, solve_energy
from planner.analysis.pareto import answer, fastest, solve_instance
from planner.model.energy import FIELD
from planner.model.instance import load_instance
from planner.model.island_table import load_island_table, table_exclusions
from planner.model.uncertainty import ErrorModel, PlanBands, plan_bands, quantile_table
from planner.requests import (
    FRONTIER_OBJECTIVES,
    OBJECTIVES,
    FrontierRequest,
    IslandsRequest,
    Notify,
    QueryRequest,
    SolveOptions,
    SolveRequest,
    quiet,
)
from planner.solvers.baselines import sample_plans
from planner.solvers.registry import DEFAULT_TIME_LIMIT_S, MILP_BACKENDS, SOLVERS
from planner.studies import frontier_study, query_study

if TYPE_CHECKING:
    import pandas as pd

    from planner.analysis.pareto import Frontier
    from planner.model.instance import Instance
    from planner.model.problem import Plan, Problem
    from planner.studies import ScenarioStudy

__all__ = [
    "DEFAULT_TIME_LIMIT_S",
    "FRONTIER_OBJECTIVES",
    "MILP_BACKENDS",
    "OBJECTIVES",
    "SOLVERS",
    "FrontierRequest",
    "FrontierResult",
    "IslandsRequest",
    "IslandsResult",
    "Notify",
    "PlanAnswer",
    "QueryRequest",
    "SolveOptions",
    "SolveRequest",
    "Solved",
    "frontier",
    "islands",
    "query",
    "solve",
]

PLOT_SAMPLE_PLANS = 5000
"""Random plans drawn behind the frontier in the figure-7 style plot."""

# ---- results ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Solved:
    """A solved instance: its planning problem and frontier."""

    instance: Instance
    """The validated instance."""
    problem: Problem
    """Its planning problem (island options, limits, σ)."""
    frontier: Frontier
    """Its frontier (time vs `metric`), fastest first."""
    metric: str
    """The second objective: cost, energy or co2."""
    bands: PlanBands
    """The p10/p90 band of every plan of the frontier, under the error model of --quantile
    (`planner.model.uncertainty.plan_bands`; none, with the reason, where it does not apply)."""

    @property
    def name(self) -> str:
        """The instance name."""
        return self.problem.name


@dataclass(frozen=True, kw_only=True, slots=True)
class IslandsResult:
    """The validated island table of an instance."""

    table: pd.DataFrame = field(repr=False)
    """One row per island option, layout, checkpointing mode and micro-batch
    (planner.model.island_table columns)."""
    written: Path | None
    """Where it was written (None: nowhere)."""
    excluded: tuple[dict[str, Any], ...] = ()
    """Clusters and island options of the instance without a row, with reason and fix
    (`planner.model.island_table.table_exclusions`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FrontierResult:
    """The frontier of one instance, as records the CLI prints."""

    solved: Solved
    """Problem and frontier."""
    records: list[dict[str, Any]] = field(repr=False)
    """One ordered mapping per frontier point (planner.analysis.report.frontier_records)."""
    meta: dict[str, Any]
    """How it was solved (planner.analysis.report.frontier_meta)."""

    @property
    def title(self) -> str:
        """The heading of its table."""
        if self.solved.metric != "cost":
            return f"time-vs-{self.solved.metric} frontier: {self.solved.name}"
        frontier = self.solved.frontier
        exact = "" if frontier.proven_exact else f" — NOT proven exact: {frontier.note}"
        return f"Pareto frontier: {self.solved.name}{exact}"


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanAnswer:
    """The plan a query picked, as the record the CLI prints."""

    solved: Solved
    """Problem and the frontier the plan was picked from."""
    plan: Plan
    """The chosen plan."""
    record: dict[str, Any] = field(repr=False)
    """What was asked, the plan (islands included) and how it was solved, in output order."""


# ---- functions -------------------------------------------------------------------------------


def _load(instance_path: Path) -> tuple[Instance, pd.DataFrame]:

    instance = load_instance(instance_path)
    return instance, load_island_table(instance)


def solve(request: SolveRequest) -> Solved:
    """Load and solve one instance; `InfeasibleError` (exit 1) names the binding limit."""

    instance, table = _load(request.instance_path)
    point_table = table
    quantile = request.options.quantile
    if quantile is not None:
        if request.metric != "cost":
            raise UserInputError(f"--quantile with a {request.metric} objective or cap: the "
                                 f"quantile plans are checked for time and cost only",
                                 hint=f"drop --quantile, or drop the {request.metric} objective "
                                      "and cap.")
        model = _error_model(request.options)
        table = quantile_table(table, model, quantile,
                               str(instance.islands_table_path or "island table"))
    options = request.options.kwargs()
    if request.metric == "cost":
        problem, found = solve_instance(instance, table, first_only=request.first_only, **options)
    else:
        problem, found = solve_energy(instance, table, request.metric, max_value=request.cap,
                                      **options)
    bands = plan_bands(instance, point_table, problem, model=request.options.error_model,
                       level=request.options.interval_level)
    return Solved(instance=instance, problem=problem, frontier=found, metric=request.metric,
                  bands=bands)


def _error_model(options: SolveOptions) -> ErrorModel:
    """The options' error model, else the residuals file's."""
    return options.error_model or ErrorModel.from_residuals()


def quantile_fields(options: SolveOptions) -> dict[str, Any]:
    """What a quantile answer states: the level and the error model (nothing for a point one)."""
    if options.quantile is None:
        return {}
    return {"quantile": options.quantile,
            "error_model": _error_model(options).describe(options.quantile)}


def _no_quantile_study(options: SolveOptions, scenarios: bool) -> None:
    """Scenario studies score plans (regret, the robust choice) on point estimates: a quantile
    there is refused. An interval level is not: each scenario's plans carry their band
    (`planner.analysis.scenarios`, "Bands"), with `*_lo`/`*_hi` at that level."""
    if scenarios and options.quantile is not None:
        raise UserInputError("--quantile with several instances or --vary: scenario studies "
                             "score plans on point estimates (each scenario's plans carry their "
                             "p10/p90 band)",
                             hint="run one instance without --vary, or drop --quantile.")


def _no_executor_single(options: SolveOptions) -> None:
    """An executor runs the several solves of a scenario study; one solve refuses it (every flag
    acts or is refused)."""
    if options.executor is not None:
        raise UserInputError("--executor with one instance and no --vary or --scenario: the "
                             "executor runs the solves of a scenario study, and this is one solve",
                             hint="drop --executor (use --threads for the solver), or add "
                                  "instances, --vary or --scenario.")


def islands(request: IslandsRequest, *, notify: Notify = quiet) -> IslandsResult:
    """The validated (or built) island table of an instance, written where the request says, and
    what it leaves out (each cluster or option without a row, with reason and fix)."""
    instance, table = _load(request.instance_path)
    excluded = tuple(e.record() for e in table_exclusions(instance, table))
    output = request.output_path
    if output is not None and output.suffix.lower() == ".json":
        report.write_text_atomic(output, table.to_json(orient="records", indent=2) + "\n")
        notify(f"wrote {len(table)} rows (JSON) to {output}")
    elif output is not None:
        report.write_text_atomic(output, table.to_csv(index=False))
        notify(f"wrote {len(table)} rows to {output}")
    return IslandsResult(table=table, written=output, excluded=excluded)


def _energy_metric(objective: str, max_co2_kg: float | None,
                   max_energy_kwh: float | None) -> str | None:

    return metric_of(objective, max_co2_kg, max_energy_kwh)


def _single(paths: tuple[Path, ...], vary: tuple[str, ...]) -> Path:
    """Energy and CO2 queries solve one instance without what-ifs."""
    if len(paths) > 1 or vary:
        raise UserInputError("energy and CO2 queries take one instance without --vary or "
                             "--scenario",
                             hint="run one instance at a time.")
    return paths[0]


def frontier(request: FrontierRequest, *,
             notify: Notify = quiet) -> FrontierResult | ScenarioStudy:
    """The exact frontier of `pareto` (several files or `vary`: a `ScenarioStudy`), with the
    CSV and plots the request names written."""

    second = request.objectives.split(",")[1]
    metric = _energy_metric(second if second != "cost" else "time", request.max_co2_kg,
                            request.max_energy_kwh)
    if second == "cost" and metric is not None:
        raise UserInputError(f"a {metric} cap on the time-vs-cost frontier is a third objective",
                             hint=f"use --objectives time,{metric} (the cap filters that frontier "
                                  "exactly).")
    _no_quantile_study(request.options, request.scenarios)
    if metric is None and request.scenarios:

        return frontier_study(request, notify=notify)
    _no_executor_single(request.options)
    if request.plot_path is not None and metric is not None:  # every flag acts or is refused
        raise UserInputError(f"--plot draws time-vs-cost frontiers only, not time-vs-{metric}",
                             hint="drop --plot, or use --objectives time,cost.")
    path = request.instance_paths[0] if metric is None else _single(request.instance_paths,
                                                                    request.vary + request.scenario)
    solved = solve(SolveRequest(instance_path=path, metric=metric or "cost",
                                max_co2_kg=request.max_co2_kg,
                                max_energy_kwh=request.max_energy_kwh,
                                options=request.options))
    records = report.frontier_records(solved.frontier, solved.problem, min_gain=request.min_gain,
                                      metric=solved.metric, bands=solved.bands)
    stated = quantile_fields(request.options)
    records = [{**record, **stated} for record in records]
    if request.csv_path is not None:
        report.write_csv(records, request.csv_path)
    if request.plot_path is not None:
        _plots(solved, request.plot_path, notify)
    meta = {**stated, **report.frontier_meta(solved.frontier),
            **report.failure_assumptions(solved.problem)}
    if request.html_path is not None:
        _html(request.html_path, solved, records, meta, None, notify)
    return FrontierResult(solved=solved, records=records, meta=meta)


def _html(path: Path, solved: Solved, records: list[dict[str, Any]], meta: dict[str, Any],
          chosen: dict[str, Any] | None, notify: Notify) -> None:
    """Write the self-contained HTML report (`planner.analysis.html_report`)."""
    # lazy: the report module (and matplotlib's tick locators) load only for --html
    from planner.analysis import html_report

    html_report.write_frontier_page(path, records, meta, instance=solved.instance,
                                    problem=solved.problem, metric=solved.metric, chosen=chosen)
    notify(f"wrote {path}")


def _plots(solved: Solved, plot: Path, notify: Notify) -> None:

    problem, points = solved.problem, solved.frontier.points
    cloud, sampled = sample_plans(problem, PLOT_SAMPLE_PLANS)
    report.plot_frontier(cloud, points, plot, sampled=sampled,
                         title=f"{problem.name}: cost vs wall-clock time")
    second = report.throughput_plot_path(plot)
    report.plot_top_throughput(points, second,
                               title=f"{problem.name}: highest-throughput frontier plans",
                               problem=problem)
    notify(f"wrote {plot} and {second}")


def query(request: QueryRequest, *, notify: Notify = quiet) -> PlanAnswer | ScenarioStudy:
    """The one plan of `plan` (several files or `vary`: each scenario's answer, scored under all,
    as a `ScenarioStudy`); with `html_path`, the HTML report of the plan on its whole frontier
    (`notify` says where it went)."""

    metric = _energy_metric(request.objective, request.max_co2_kg, request.max_energy_kwh)
    _no_quantile_study(request.options, request.scenarios)
    if metric is None and request.scenarios:

        return query_study(request)
    _no_executor_single(request.options)
    if metric is not None:
        solved = solve(SolveRequest(instance_path=_single(request.instance_paths,
                                                    request.vary + request.scenario),
                                    metric=metric, max_co2_kg=request.max_co2_kg,
                                    max_energy_kwh=request.max_energy_kwh, options=request.options))
        chosen, extra = energy_answer(solved, request.objective, has_cap=metric_cap(request),
                                      fraction=request.min_throughput_fraction)
    else:
        first_only = request.objective == "cost" and request.min_throughput_fraction is None \
            and request.html_path is None  # the report draws the whole frontier
        solved = solve(SolveRequest(instance_path=request.instance_paths[0], first_only=first_only,
                                    options=request.options))
        chosen, extra = answer(solved.problem, solved.frontier, request.objective,
                               request.min_throughput_fraction)
    if request.options.quantile is not None:
        extra["query"] = f"{extra['query']} (Q{request.options.quantile:g} time and cost)"
    record = {**extra, **quantile_fields(request.options),
              **report.plan_record(chosen, solved.problem, solved.bands),
              **report.frontier_meta(solved.frontier),
              **report.failure_assumptions(solved.problem),
              "excluded": report.exclusion_records(solved.problem)}
    if request.html_path is not None:
        stated = quantile_fields(request.options)
        points = [{**r, **stated} for r in report.frontier_records(
            solved.frontier, solved.problem, metric=solved.metric, bands=solved.bands)]
        _html(request.html_path, solved, points,
              {**stated, **report.frontier_meta(solved.frontier),
               **report.failure_assumptions(solved.problem)}, record, notify)
    return PlanAnswer(solved=solved, plan=chosen, record=record)


def metric_cap(request: QueryRequest) -> bool:
    """Does the query cap energy or CO2?"""
    return (request.max_co2_kg or request.max_energy_kwh) is not None


def energy_answer(solved: Solved, objective: str, *, has_cap: bool,
                  fraction: float | None = None) -> tuple[Plan, dict[str, Any]]:
    """The query on a time-vs-energy/CO2 frontier: (chosen plan, what was asked).

    With `fraction` (objective co2 or energy): the least-metric plan whose tokens/s is at least
    `fraction` of the fastest plan's. Exact: a throughput floor is a wall-time ceiling, and the
    time-vs-metric frontier holds the least-metric plan of every wall-time ceiling
    (tests/test_hostile_planner.py checks it against every frontier point)."""

    metric, points = solved.metric, solved.frontier.points
    field_name = FIELD[metric]
    if fraction is not None:
        if objective != metric:
            raise UserInputError(
                f"--min-throughput-fraction with --objective {objective} and a {metric} cap asks "
                "for the cheapest plan on a time-vs-" + metric + " frontier: a third objective",
                hint=f"use --objective {metric} --min-throughput-fraction {fraction} (least "
                     f"{metric} near the best throughput), or drop the {metric} cap.")
        best = fastest(points)
        floor = fraction * best.tokens_per_s
        admitted = [p for p in points if p.tokens_per_s >= floor]
        chosen = min(admitted, key=lambda p: (getattr(p, field_name), p.wall_time_s))
        saved = getattr(best, field_name) - getattr(chosen, field_name)
        total = getattr(best, field_name)
        return chosen, {"query": f"least {metric} with tokens/s >= {fraction} x best"
                        + (f" within the {metric} cap" if has_cap else ""),
                        f"saving_pct_vs_fastest_{metric}": 100.0 * saved / total if total else 0.0,
                        "fastest_tokens_per_s": best.tokens_per_s}
    if objective == "time":
        return fastest(points), {"query": f"fastest within the {metric} cap"}
    chosen = min(points, key=lambda p: (getattr(p, field_name), p.wall_time_s))
    return chosen, {"query": f"least {metric}" + (f" within the {metric} cap" if has_cap else "")}


