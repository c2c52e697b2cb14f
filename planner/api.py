"""Typed public planner API: the island table, the exact frontier, and one plan of an instance.

Each function takes a frozen request (`IslandsRequest`, `FrontierRequest`, `QueryRequest`,
`SolveRequest`), loads and solves the instance(s) with the planner (`planner.pareto`,
`planner.energy`, `planner.scenarios`), writes the files the request names (island table, frontier
CSV, plots) and returns a frozen result whose records are the ordered mappings the CLI prints;
`shardmeter islands|pareto|plan` only parse options, call one function here and format.

- `solve`: one instance on one frontier (time vs cost, energy or CO2): problem and frontier.
- `islands`: the validated island table of an instance (written to a file when asked).
- `frontier`: `pareto`: one frontier, or with several files / `--vary` a `ScenarioStudy`.
- `query`: `plan`: fastest, cheapest, least energy/CO2, or cheapest near the best throughput.

Several instance files or what-if variations (`vary`) give a `ScenarioStudy`
(`planner.api_scenarios`): every plan scored under every scenario with its regret.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfmodel.errors import UserInputError
from planner.pareto import DEFAULT_TIME_LIMIT_S, MILP_BACKENDS, SOLVERS

if TYPE_CHECKING:
    import pandas as pd

    from planner.api_scenarios import ScenarioStudy
    from planner.instance import Instance
    from planner.pareto import Frontier
    from planner.problem import Plan, Problem

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

OBJECTIVES = ("time", "cost", "co2", "energy")
"""What `query` optimises (`plan --objective`)."""
FRONTIER_OBJECTIVES = ("time,cost", "time,co2", "time,energy")
"""The two objectives `frontier` traces (`pareto --objectives`)."""
METRICS = ("cost", "energy", "co2")
"""The second objective of a solved frontier (the first is always wall time)."""
PLOT_SAMPLE_PLANS = 5000
"""Random plans drawn behind the frontier in the figure-7 style plot."""

Notify = Callable[[str], None]
"""Receives one line per file written (the CLI prints it on stderr)."""


def _quiet(_: str) -> None:
    """The default `Notify`: say nothing."""


def _positive(name: str, value: float | None, hint: str) -> None:
    """None, or a finite number > 0 (booleans are not numbers)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value <= 0:
        raise UserInputError(f"{name} = {value!r}: must be a finite number > 0", hint=hint)


def _caps(request: FrontierRequest | QueryRequest | SolveRequest) -> None:
    """The run's CO2 and energy caps: None or a finite number > 0."""
    _positive("max_energy_kwh", request.max_energy_kwh, "give the cap in kWh, or None.")
    _positive("max_co2_kg", request.max_co2_kg, "give the cap in kg CO2e, or None.")


def _is_study(instance_paths: tuple[Path, ...], vary: tuple[str, ...]) -> bool:
    """Several files or what-ifs: a scenario study."""
    return len(instance_paths) > 1 or bool(vary)


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UserInputError(f"{name} = {value!r}: not one of {', '.join(choices)}",
                             hint=f"set {name} to one of: {', '.join(choices)}.")


def _paths(name: str, paths: tuple[Path, ...]) -> None:
    if not paths or not all(isinstance(p, str | Path) for p in paths):
        raise UserInputError(f"{name} = {paths!r}: give at least one instance file",
                             hint=f"set {name} to a tuple of YAML paths (see instances/).")


# ---- requests --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class SolveOptions:
    """How the frontier is solved, and the caps that override the instance's `limits`."""

    solver: str = "auto"
    """auto (the exact DP where it applies, else CP-SAT), dp, cpsat, milp, brute (exact) or
    heuristic (the paper's proportional split)."""
    threads: int | None = None
    """Solver threads (CP-SAT workers, MILP threads); None: the CPU count."""
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S
    """Total solve time in seconds; a frontier cut short says so (proven_exact false)."""
    milp_backend: str = "highs"
    """MILP solver behind PuLP when solver is milp (highs, or cbc as the fallback)."""
    budget_usd: float | None = None
    """Cost cap of the run in USD (overrides limits.budget_usd)."""
    deadline_hours: float | None = None
    """Wall-time cap of the run in hours (overrides limits.deadline_hours)."""

    def __post_init__(self) -> None:
        _choice("solver", self.solver, SOLVERS)
        _choice("milp_backend", self.milp_backend, MILP_BACKENDS)
        if self.threads is not None and (isinstance(self.threads, bool)
                                         or not isinstance(self.threads, int) or self.threads < 1):
            raise UserInputError(f"threads = {self.threads!r}: must be an integer >= 1",
                                 hint="set threads to 1 or more, or None for the CPU count.")
        _positive("time_limit_s", self.time_limit_s, "give the solve time in seconds, e.g. 300.")
        _positive("budget_usd", self.budget_usd, "give the budget in USD, or None for no cap.")
        _positive("deadline_hours", self.deadline_hours,
                  "give the deadline in hours, or None for no cap.")

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `planner.pareto.solve_instance` (and `solve_energy`)."""
        return {"solver": self.solver, "threads": self.threads, "time_limit_s": self.time_limit_s,
                "milp_backend": self.milp_backend, "budget_usd": self.budget_usd,
                "deadline_hours": self.deadline_hours}


@dataclass(frozen=True, kw_only=True, slots=True)
class SolveRequest:
    """One instance on one frontier: wall time against cost, energy or CO2."""

    instance_path: Path
    """Instance YAML file."""
    metric: str = "cost"
    """The second objective: cost, energy or co2 (energy/CO2: the exact energy DP)."""
    max_energy_kwh: float | None = None
    """Energy cap of the run in kWh (metric energy only)."""
    max_co2_kg: float | None = None
    """CO2 cap of the run in kg CO2e (metric co2 only)."""
    first_only: bool = False
    """Stop after the first (cheapest) frontier point (metric cost only)."""
    options: SolveOptions = field(default_factory=SolveOptions)
    """Solver, limits and caps."""

    def __post_init__(self) -> None:
        _paths("instance_path", (self.instance_path,))
        _choice("metric", self.metric, METRICS)
        _caps(self)
        for name, metric in (("max_energy_kwh", "energy"), ("max_co2_kg", "co2")):
            if getattr(self, name) is not None and self.metric != metric:
                raise UserInputError(f"{name} caps the {metric} frontier, not the "
                                     f"{self.metric} one",
                                     hint=f"set metric={metric!r} or drop {name}.")

    @property
    def cap(self) -> float | None:
        """The cap on the metric (kWh or kg CO2e), if any."""
        return self.max_energy_kwh if self.metric == "energy" else self.max_co2_kg


@dataclass(frozen=True, kw_only=True, slots=True)
class IslandsRequest:
    """The island table of one instance."""

    instance_path: Path
    """Instance YAML file."""
    output_path: Path | None = None
    """Write the table here: JSON if the name ends in .json, else CSV (None: write nothing)."""

    def __post_init__(self) -> None:
        _paths("instance_path", (self.instance_path,))


@dataclass(frozen=True, kw_only=True, slots=True)
class FrontierRequest:
    """The exact frontier of one instance, or of several files and what-if scenarios."""

    instance_paths: tuple[Path, ...]
    """Instance YAML files (several: a scenario study)."""
    vary: tuple[str, ...] = ()
    """What-ifs `PATH=V1,V2,...` into the instance (all combinations; a scenario study)."""
    objectives: str = "time,cost"
    """The two objectives: time,cost, time,co2 or time,energy."""
    max_co2_kg: float | None = None
    """CO2 cap of the run in kg CO2e (time,co2 frontier only)."""
    max_energy_kwh: float | None = None
    """Energy cap of the run in kWh (time,energy frontier only)."""
    csv_path: Path | None = None
    """Write the frontier CSV (scenarios: the cross table) here."""
    plot_path: Path | None = None
    """Write a figure-7 style PNG here and a figure-8 style one next to it (scenarios: their
    frontiers side by side); time-vs-cost frontiers only."""
    options: SolveOptions = field(default_factory=SolveOptions)
    """Solver, limits and caps."""

    def __post_init__(self) -> None:
        _paths("instance_paths", self.instance_paths)
        _choice("objectives", self.objectives, FRONTIER_OBJECTIVES)
        _caps(self)

    @property
    def scenarios(self) -> bool:
        """Several files or what-ifs: a scenario study."""
        return _is_study(self.instance_paths, self.vary)


@dataclass(frozen=True, kw_only=True, slots=True)
class QueryRequest:
    """One plan of one instance (or one per scenario of several files and what-ifs)."""

    instance_paths: tuple[Path, ...]
    """Instance YAML files (several: a scenario study)."""
    vary: tuple[str, ...] = ()
    """What-ifs `PATH=V1,V2,...` into the instance (all combinations; a scenario study)."""
    objective: str = "time"
    """time: fastest (ties: cheaper); cost: cheapest (ties: faster); co2/energy: least CO2/energy
    (ties: faster)."""
    min_throughput_fraction: float | None = None
    """Instead: the cheapest plan with tokens/s >= this fraction (0, 1] of the best."""
    max_co2_kg: float | None = None
    """CO2 cap of the run in kg CO2e."""
    max_energy_kwh: float | None = None
    """Energy cap of the run in kWh."""
    options: SolveOptions = field(default_factory=SolveOptions)
    """Solver, limits and caps."""

    def __post_init__(self) -> None:
        _paths("instance_paths", self.instance_paths)
        _choice("objective", self.objective, OBJECTIVES)
        fraction = self.min_throughput_fraction
        if fraction is not None:
            _positive("min_throughput_fraction", fraction, "give a fraction in (0, 1], e.g. 0.99.")
            if fraction > 1:
                raise UserInputError(f"min_throughput_fraction = {fraction!r}: above 1",
                                     hint="give a fraction in (0, 1], e.g. 0.99.")
        _caps(self)

    @property
    def scenarios(self) -> bool:
        """Several files or what-ifs: a scenario study."""
        return _is_study(self.instance_paths, self.vary)


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

    @property
    def name(self) -> str:
        """The instance name."""
        return self.problem.name


@dataclass(frozen=True, kw_only=True, slots=True)
class IslandsResult:
    """The validated island table of an instance."""

    table: pd.DataFrame = field(repr=False)
    """One row per island option and micro-batch (planner.island_table columns)."""
    written: Path | None
    """Where it was written (None: nowhere)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FrontierResult:
    """The frontier of one instance, as records the CLI prints."""

    solved: Solved
    """Problem and frontier."""
    records: list[dict[str, Any]] = field(repr=False)
    """One ordered mapping per frontier point (planner.report.frontier_records)."""
    meta: dict[str, Any]
    """How it was solved (planner.report.frontier_meta)."""

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
    from planner.instance import load_instance, load_island_table

    instance = load_instance(instance_path)
    return instance, load_island_table(instance)


def solve(request: SolveRequest) -> Solved:
    """Load and solve one instance; `InfeasibleError` (exit 1) names the binding limit."""
    from planner.energy import solve_energy
    from planner.pareto import solve_instance

    instance, table = _load(request.instance_path)
    options = request.options.kwargs()
    if request.metric == "cost":
        problem, found = solve_instance(instance, table, first_only=request.first_only, **options)
    else:
        problem, found = solve_energy(instance, table, request.metric, max_value=request.cap,
                                      **options)
    return Solved(instance=instance, problem=problem, frontier=found, metric=request.metric)


def islands(request: IslandsRequest, *, notify: Notify = _quiet) -> IslandsResult:
    """The validated (or built) island table of an instance, written where the request says."""
    _, table = _load(request.instance_path)
    output = request.output_path
    if output is not None and output.suffix.lower() == ".json":
        output.write_text(table.to_json(orient="records", indent=2) + "\n")
        notify(f"wrote {len(table)} rows (JSON) to {output}")
    elif output is not None:
        table.to_csv(output, index=False)
        notify(f"wrote {len(table)} rows to {output}")
    return IslandsResult(table=table, written=output)


def _energy_metric(objective: str, max_co2_kg: float | None,
                   max_energy_kwh: float | None) -> str | None:
    from planner.energy import metric_of

    return metric_of(objective, max_co2_kg, max_energy_kwh)


def _single(paths: tuple[Path, ...], vary: tuple[str, ...]) -> Path:
    """Energy and CO2 queries solve one instance without what-ifs."""
    if len(paths) > 1 or vary:
        raise UserInputError("energy and CO2 queries take one instance without --vary",
                             hint="run one instance at a time.")
    return paths[0]


def frontier(request: FrontierRequest, *,
             notify: Notify = _quiet) -> FrontierResult | ScenarioStudy:
    """The exact frontier of `pareto` (several files or `vary`: a `ScenarioStudy`), with the
    CSV and plots the request names written."""
    from planner import report

    second = request.objectives.split(",")[1]
    metric = _energy_metric(second if second != "cost" else "time", request.max_co2_kg,
                            request.max_energy_kwh)
    if second == "cost" and metric is not None:
        raise UserInputError(f"a {metric} cap on the time-vs-cost frontier is a third objective",
                             hint=f"use --objectives time,{metric} (the cap filters that frontier "
                                  "exactly).")
    if metric is None and request.scenarios:
        from planner.api_scenarios import frontier_study

        return frontier_study(request, notify=notify)
    path = request.instance_paths[0] if metric is None else _single(request.instance_paths,
                                                                    request.vary)
    solved = solve(SolveRequest(instance_path=path, metric=metric or "cost",
                                max_co2_kg=request.max_co2_kg,
                                max_energy_kwh=request.max_energy_kwh,
                                options=request.options))
    records = report.frontier_records(solved.frontier, solved.problem)
    if metric is not None:
        for record in records:  # cost is not monotone along a time-vs-energy frontier
            record.pop("usd_per_hour_saved", None)
    if request.csv_path is not None:
        report.write_csv(records, request.csv_path)
    if request.plot_path is not None and metric is not None:
        notify("note: --plot draws time-vs-cost frontiers only; no plot written")
    elif request.plot_path is not None:
        _plots(solved, request.plot_path, notify)
    return FrontierResult(solved=solved, records=records,
                          meta=report.frontier_meta(solved.frontier))


def _plots(solved: Solved, plot: Path, notify: Notify) -> None:
    from planner import report
    from planner.baselines import sample_plans

    problem, points = solved.problem, solved.frontier.points
    cloud, sampled = sample_plans(problem, PLOT_SAMPLE_PLANS)
    report.plot_frontier(cloud, points, plot, sampled=sampled,
                         title=f"{problem.name}: cost vs wall-clock time")
    second = report.throughput_plot_path(plot)
    report.plot_top_throughput(points, second,
                               title=f"{problem.name}: highest-throughput frontier plans",
                               problem=problem)
    notify(f"wrote {plot} and {second}")


def query(request: QueryRequest) -> PlanAnswer | ScenarioStudy:
    """The one plan of `plan` (several files or `vary`: each scenario's answer, scored under all,
    as a `ScenarioStudy`)."""
    from planner import report

    metric = _energy_metric(request.objective, request.max_co2_kg, request.max_energy_kwh)
    if metric is None and request.scenarios:
        from planner.api_scenarios import query_study

        return query_study(request)
    if metric is not None:
        solved = solve(SolveRequest(instance_path=_single(request.instance_paths, request.vary),
                                    metric=metric, max_co2_kg=request.max_co2_kg,
                                    max_energy_kwh=request.max_energy_kwh, options=request.options))
        chosen, extra = energy_answer(solved, request.objective, has_cap=metric_cap(request))
    else:
        first_only = request.objective == "cost" and request.min_throughput_fraction is None
        solved = solve(SolveRequest(instance_path=request.instance_paths[0], first_only=first_only,
                                    options=request.options))
        chosen, extra = answer(solved.problem, solved.frontier, request.objective,
                               request.min_throughput_fraction)
    record = {**extra, **report.plan_record(chosen, solved.problem),
              **report.frontier_meta(solved.frontier)}
    return PlanAnswer(solved=solved, plan=chosen, record=record)


def metric_cap(request: QueryRequest) -> bool:
    """Does the query cap energy or CO2?"""
    return (request.max_co2_kg or request.max_energy_kwh) is not None


def energy_answer(solved: Solved, objective: str, *, has_cap: bool) -> tuple[Plan, dict[str, Any]]:
    """The query on a time-vs-energy/CO2 frontier: (chosen plan, what was asked)."""
    from planner.energy import FIELD
    from planner.pareto import fastest

    metric, points = solved.metric, solved.frontier.points
    if objective == "time":
        return fastest(points), {"query": f"fastest within the {metric} cap"}
    field_name = FIELD[metric]
    chosen = min(points, key=lambda p: (getattr(p, field_name), p.wall_time_s))
    return chosen, {"query": f"least {metric}" + (f" within the {metric} cap" if has_cap else "")}


def answer(problem: Problem, found: Frontier, objective: str,
           fraction: float | None) -> tuple[Plan, dict[str, Any]]:
    """The `plan` query on a time-vs-cost frontier: (chosen plan, what was asked and the
    saving)."""
    from planner.pareto import cheapest, cheapest_at_throughput, fastest

    if fraction is not None:
        chosen, saving = cheapest_at_throughput(found.points, fraction)
        best = fastest(found.points)
        return chosen, {"query": f"cheapest with tokens/s >= {fraction} x best",
                        "saving_pct_vs_fastest": saving, "fastest_cost_usd": best.cost_usd,
                        "fastest_tokens_per_s": best.tokens_per_s}
    if objective == "time":
        return fastest(found.points), {
            "query": "fastest" + (" within budget" if problem.budget_usd is not None else "")}
    return cheapest(found.points), {
        "query": "cheapest" + (" within deadline" if problem.deadline_s is not None else "")}
