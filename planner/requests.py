"""What the planner API is asked: frozen, validated requests (`planner.api` answers them).

Each request checks its own fields in `__post_init__` and raises `UserInputError` (exit 2) with a
"To fix:" hint, so every caller — the CLI, scripts, library users — gets the same errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfmodel.facts import check_level, check_limit, check_quantile
from perfmodel.spec.errors import UserInputError
from planner.executor import Executor, parse_executor
from planner.model.uncertainty import ErrorModel
from planner.solvers.registry import DEFAULT_TIME_LIMIT_S, MILP_BACKENDS, SOLVERS

OBJECTIVES = ("time", "cost", "co2", "energy")
"""What `query` optimises (`plan --objective`)."""
FRONTIER_OBJECTIVES = ("time,cost", "time,co2", "time,energy")
"""The two objectives `frontier` traces (`pareto --objectives`)."""
METRICS = ("cost", "energy", "co2")
"""The second objective of a solved frontier (the first is always wall time)."""
DEFAULT_MIN_GAIN = 0.001
"""`--min-gain`: a frontier point whose gain over a neighbour is below this fraction of wall time
or cost is marked a near-duplicate (0.1 %: 9 minutes of a 150-hour run)."""

Notify = Callable[[str], None]
"""Receives one line per file written (the CLI prints it on stderr)."""


def quiet(_: str) -> None:
    """The default `Notify`: say nothing."""


def _positive(name: str, value: float | None, hint: str, limit: str | None = None) -> None:
    """None, or a finite number > 0 (booleans are not numbers) within LIMITS[limit]."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value <= 0:
        raise UserInputError(f"{name} = {value!r}: must be a finite number > 0", hint=hint)
    if limit is not None:
        check_limit(limit, value, field=name)


def _caps(request: FrontierRequest | QueryRequest | SolveRequest) -> None:
    """The run's CO2 and energy caps: None or a finite number > 0."""
    _positive("max_energy_kwh", request.max_energy_kwh, "give the cap in kWh, or None.", "kwh")
    _positive("max_co2_kg", request.max_co2_kg, "give the cap in kg CO2e, or None.", "kg_co2")


def _is_study(instance_paths: tuple[Path, ...], vary: tuple[str, ...],
              scenario: tuple[str, ...] = ()) -> bool:
    """Several files, what-ifs or named scenarios: a scenario study."""
    return len(instance_paths) > 1 or bool(vary) or bool(scenario)


def _no_html_study(request: FrontierRequest | QueryRequest) -> None:
    """The HTML report is one instance's: a scenario study (several files, --vary, --scenario)
    is refused rather than reported in part."""
    if request.html_path is not None and request.scenarios:
        raise UserInputError(f"html_path = {str(request.html_path)!r} with several instances, "
                             "--vary or --scenario: the HTML report covers one instance",
                             hint="drop --html, or run one instance without --vary/--scenario.")


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UserInputError(f"{name} = {value!r}: not one of {', '.join(choices)}",
                             hint=f"set {name} to one of: {', '.join(choices)}.")


def _paths(name: str, paths: tuple[Path, ...]) -> None:
    if not paths or not all(isinstance(p, str | Path) for p in paths):
        raise UserInputError(f"{name} = {paths!r}: give at least one instance file",
                             hint=f"set {name} to a tuple of YAML paths (see instances/).")


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
    failures: bool = False
    """Score plans by their expected values under failures, preemptions and the full bill
    (`planner.model.risk`), as an instance's `failures:` section does; caps then apply to
    expected values."""
    quantile: float | None = None
    """Plan on Q-quantiles (0 < Q < 1): wall time, cost and the caps are the Q-quantiles under
    the error model (`planner.model.uncertainty`); None: point estimates."""
    error_model: ErrorModel | None = None
    """The error model of `quantile` (None: `ErrorModel.from_residuals()`, the residuals file)."""
    interval_level: float | None = None
    """Add `*_lo`/`*_hi` bounds and `interval_level` at this two-sided level (0 < L < 1) beside
    the p10/p90 band every plan carries (`planner.model.uncertainty.PlanBands`); None: p10/p90
    only."""
    executor: str | Executor | None = None
    """Where a scenario study's solves run (`planner.executor`): serial, local, local:N or
    dask://HOST:PORT; None: the local process pool. Only a study has several solves: a single
    instance refuses it."""

    def __post_init__(self) -> None:
        _choice("solver", self.solver, SOLVERS)
        parse_executor(self.executor)  # a bad spec fails here, before any file is read
        if self.quantile is not None:
            check_quantile(self.quantile)
            if self.failures:
                raise UserInputError("quantile and failures together: the expected values "
                                     "under failures are not quantiles of the error model",
                                     hint="drop --quantile or drop --failures.")
        elif self.error_model is not None:
            raise UserInputError("error_model without quantile: it acts only on a quantile",
                                 hint="set quantile (e.g. 0.9) or drop error_model.")
        if self.interval_level is not None:
            check_level(self.interval_level, field="--interval")
        if not isinstance(self.failures, bool):
            raise UserInputError(f"failures = {self.failures!r}: not true or false",
                                 hint="set failures to True or False.")
        _choice("milp_backend", self.milp_backend, MILP_BACKENDS)
        if self.threads is not None and (isinstance(self.threads, bool)
                                         or not isinstance(self.threads, int) or self.threads < 1):
            raise UserInputError(f"threads = {self.threads!r}: must be an integer >= 1",
                                 hint="set threads to 1 or more, or None for the CPU count.")
        _positive("time_limit_s", self.time_limit_s, "give the solve time in seconds, e.g. 300.",
                  "seconds")
        _positive("budget_usd", self.budget_usd, "give the budget in USD, or None for no cap.",
                  "usd")
        _positive("deadline_hours", self.deadline_hours,
                  "give the deadline in hours, or None for no cap.", "hours")

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `planner.analysis.pareto.solve_instance` (and
        `solve_energy`)."""
        return {"solver": self.solver, "threads": self.threads, "time_limit_s": self.time_limit_s,
                "milp_backend": self.milp_backend, "budget_usd": self.budget_usd,
                "deadline_hours": self.deadline_hours, "failures": self.failures}


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
    scenario: tuple[str, ...] = ()
    """Linked what-ifs `NAME:PATH=V,PATH=V,...`: each one named scenario setting several paths
    together; with `base` they form one axis, crossed with `vary` (a scenario study)."""
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
    html_path: Path | None = None
    """Write a self-contained HTML report of the frontier here (`planner.analysis.html_report`);
    one instance only (a scenario study is refused)."""
    options: SolveOptions = field(default_factory=SolveOptions)
    """Solver, limits and caps."""
    min_gain: float = DEFAULT_MIN_GAIN
    """Frontier points whose gain over a neighbour is below this fraction of wall time or cost
    are marked near-duplicates (`planner.analysis.report.near_duplicates`); 0 <= min_gain < 1."""

    def __post_init__(self) -> None:
        _paths("instance_paths", self.instance_paths)
        _choice("objectives", self.objectives, FRONTIER_OBJECTIVES)
        _caps(self)
        _no_html_study(self)
        gain = self.min_gain
        if isinstance(gain, bool) or not isinstance(gain, int | float) \
                or not math.isfinite(gain) or not 0 <= gain < 1:
            raise UserInputError(f"--min-gain = {gain!r}: must be a fraction in [0, 1)",
                                 hint="pass e.g. --min-gain 0.001 (0.1 % of wall time or cost); "
                                      "0 marks only exact ties.")

    @property
    def scenarios(self) -> bool:
        """Several files or what-ifs: a scenario study."""
        return _is_study(self.instance_paths, self.vary, self.scenario)


@dataclass(frozen=True, kw_only=True, slots=True)
class QueryRequest:
    """One plan of one instance (or one per scenario of several files and what-ifs)."""

    instance_paths: tuple[Path, ...]
    """Instance YAML files (several: a scenario study)."""
    vary: tuple[str, ...] = ()
    """What-ifs `PATH=V1,V2,...` into the instance (all combinations; a scenario study)."""
    scenario: tuple[str, ...] = ()
    """Linked what-ifs `NAME:PATH=V,PATH=V,...`: each one named scenario setting several paths
    together; with `base` they form one axis, crossed with `vary` (a scenario study)."""
    objective: str = "time"
    """time: fastest (ties: cheaper); cost: cheapest (ties: faster); co2/energy: least CO2/energy
    (ties: faster)."""
    min_throughput_fraction: float | None = None
    """Instead: the cheapest plan with tokens/s >= this fraction (0, 1] of the best."""
    max_co2_kg: float | None = None
    """CO2 cap of the run in kg CO2e."""
    max_energy_kwh: float | None = None
    """Energy cap of the run in kWh."""
    html_path: Path | None = None
    """Write a self-contained HTML report of the plan and its frontier here
    (`planner.analysis.html_report`; the whole frontier is then solved); one instance only."""
    options: SolveOptions = field(default_factory=SolveOptions)
    """Solver, limits and caps."""

    def __post_init__(self) -> None:
        _paths("instance_paths", self.instance_paths)
        _choice("objective", self.objective, OBJECTIVES)
        _no_html_study(self)
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
        return _is_study(self.instance_paths, self.vary, self.scenario)
