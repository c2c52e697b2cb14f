"""The exact cost-time Pareto frontier by the epsilon-constraint method, and queries on it.

Loop (`epsilon_frontier`): ε = deadline (or ∞); repeat { P = cheapest plan with W <= ε (strict <
after the first point), ties broken by smaller W; stop if none or C(P) > budget; emit P;
ε = W(P) }. Because of the tie-break no emitted point is dominated: the next point has W' < W,
and since P was the cheapest plan with W <= ε, C' > C.

The oracle "cheapest plan with W <= ε, ties → smaller W" is exact for every backend:

* brute force (`planner.baselines.BruteForce`) scans all enumerated plans;
* CP-SAT / MILP (`StaircaseOracle`) never put W·Σprice into a model. A backend step returns
  a plan of minimum Σprice (integer price units) among plans with W <= ε_j that may still cost
  no more than the incumbent γ (necessary-condition cuts, `planner.cpsat.step_data`). The oracle
  walks ε_0 = ε, ε_{j+1} = W(plan_j) (strict), updating γ, until a step is infeasible. Claim: the
  walk ends with the optimum. Let P* be the cheapest plan with W <= ε (ties: smallest W). P* is
  admitted by every step whose ε_j exceeds W* (C* <= γ always, since γ is the cost of a real
  plan with W <= ε). Take the last step j admitting P*: its plan has Σprice_j <= Σprice*, and
  W_j <= W* (otherwise step j+1 would admit P* too), so C_j <= C* — it is optimal and no slower.
  Each step's Σprice is a floor for the next (its feasible set only shrinks), which the backend
  uses to stop early. Every plan found is pooled; a later query starts with the best pooled
  plan within its ε as γ.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import pandas as pd

from perfmodel.errors import InfeasibleError, ShardMeterError, UserInputError
from planner.instance import Instance
from planner.problem import (
    PRICE_UNITS_PER_USD_PER_HOUR,
    RELAXABLE,
    Plan,
    Problem,
    SubResult,
    build_problem,
    evaluate,
    violations,
)

LOG = logging.getLogger(__name__)


class CostOracle(Protocol):
    """Answers "cheapest plan with W <= ε (or < ε), ties broken by smaller W"."""

    proven_exact: bool
    num_solves: int

    def min_cost(self, max_wall_s: float | None, *, strict: bool) -> Plan | None: ...


class Subsolver(Protocol):
    """A backend for one staircase step (planner.cpsat / planner.milp)."""

    name: str

    def min_price(self, max_wall_s: float | None, *, strict: bool, time_limit_s: float | None,
                  price_floor_units: int = 0, cost_cap_usd: float | None = None) -> SubResult: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Frontier:
    """An epsilon-constraint frontier with provenance."""

    points: tuple[Plan, ...]
    """Non-dominated plans, fastest first (W ascending, C descending)."""
    solver: str
    """Backend that produced it."""
    proven_exact: bool
    """True when every solve finished proven optimal (false under a binding time limit)."""
    num_solves: int
    """Backend solves (staircase steps; 0 for brute force and heuristic)."""
    solve_time_s: float
    """Wall-clock seconds spent."""
    price_resolution_usd_per_hour: float = 1.0 / PRICE_UNITS_PER_USD_PER_HOUR
    """Prices are quantised to this step before solving."""
    max_cost_rounding_usd: float = 0.0
    """Largest |cost at quantised prices − cost at table prices| over the points."""
    note: str = ""
    """Why the frontier is not proven exact (empty when it is)."""
    cross_checks: int = 0
    """Infeasible steps after a feasible one that were re-checked by a second method."""


class StaircaseOracle:
    """Exact "cheapest plan with W <= ε" by a cost-capped staircase walk over a backend."""

    def __init__(self, problem: Problem, subsolver: Subsolver, *, time_limit_s: float | None = None,
                 checker: Checker | None = None) -> None:
        self.problem = problem
        self.subsolver = subsolver
        self.pool: list[Plan] = []
        self.stop_at = None if time_limit_s is None else time.monotonic() + time_limit_s
        self.proven_exact = True
        self.num_solves = 0
        self.checker = checker
        self.cross_checks = 0
        self.note = ""

    def min_cost(self, max_wall_s: float | None, *, strict: bool) -> Plan | None:
        """Cheapest plan with W <= max_wall_s (W < if strict); ties → smaller W."""
        best: Plan | None = None
        for plan in self.pool:
            best = _better(plan, best, max_wall_s, strict)
        eps, eps_strict, floor = max_wall_s, strict, 0
        while True:
            result = self._solve(eps, eps_strict, floor, None if best is None else best.cost_usd)
            if result is None:
                return best
            plan = self._check(result, eps, eps_strict)
            self.pool.append(plan)
            best = _better(plan, best, max_wall_s, strict)
            eps, eps_strict = plan.wall_time_s, True
            floor = result.price_units if result.status == "optimal" else 0

    def _solve(self, eps: float | None, strict: bool, floor: int,
               cap: float | None) -> SubResult | None:
        remaining = None if self.stop_at is None else self.stop_at - time.monotonic()
        if remaining is not None and remaining <= 0:
            self.proven_exact = False
            return None
        result = self.subsolver.min_price(eps, strict=strict, time_limit_s=remaining,
                                          price_floor_units=floor, cost_cap_usd=cap)
        self.num_solves += 1
        if result.status == "infeasible" and self.pool:
            result = self._cross_check(result, eps, strict, cap)
        if result.status == "unknown":
            self._unproven("a solver step ended without an answer (time limit or solver error)")
        if result.status in ("infeasible", "unknown"):
            return None
        if result.status != "optimal":
            self._unproven("a solver step ended unproven (time limit)")
        return result

    def _unproven(self, why: str) -> None:
        self.proven_exact = False
        self.note = self.note or why

    def _cross_check(self, result: SubResult, eps: float | None, strict: bool,
                     cap: float | None) -> SubResult:
        """An infeasible step after a feasible one is re-checked before it may end the walk."""
        if self.checker is None:
            self._unproven(f"{self.subsolver.name} reported a step infeasible and no second "
                           "method checked it")
            return result
        self.cross_checks += 1
        witness = self.checker(eps, strict, cap)
        if witness is None:
            return result
        LOG.warning("%s reported a feasible step infeasible (W %s %s); "
                    "continuing with the plan the cross-check found",
                    self.subsolver.name, "<" if strict else "<=", eps)
        self._unproven(f"{self.subsolver.name} reported a feasible step infeasible "
                       "(cross-check found a plan)")
        return SubResult(status="feasible", choices=witness.choices,
                         price_units=witness.price_units)

    def _check(self, result: SubResult, eps: float | None, strict: bool) -> Plan:
        plan = evaluate(self.problem, result.choices)
        broken = violations(self.problem, result.choices)
        if eps is not None and not (plan.wall_time_s < eps if strict else plan.wall_time_s <= eps):
            broken.append(f"wall time {plan.wall_time_s} beyond {eps}")
        if broken or plan.price_units != result.price_units:
            raise RuntimeError(f"{self.subsolver.name} returned a wrong plan: "
                               f"{broken or 'price mismatch'}")
        return plan


def _better(plan: Plan, best: Plan | None, max_wall_s: float | None, strict: bool) -> Plan | None:
    if max_wall_s is not None and not (plan.wall_time_s < max_wall_s if strict
                                       else plan.wall_time_s <= max_wall_s):
        return best
    if best is None or (plan.cost_usd, plan.wall_time_s) < (best.cost_usd, best.wall_time_s):
        return plan
    return best


def epsilon_frontier(problem: Problem, oracle: CostOracle, *,
                     first_only: bool = False) -> list[Plan]:
    """The epsilon-constraint loop of the module docstring, within budget and deadline."""
    eps, strict = problem.deadline_s, False
    points: list[Plan] = []
    while True:
        plan = oracle.min_cost(eps, strict=strict)
        if plan is None or (problem.budget_usd is not None and plan.cost_usd > problem.budget_usd):
            break
        points.append(plan)
        if first_only:
            break
        eps, strict = plan.wall_time_s, True
    return sorted(points, key=lambda p: p.wall_time_s)


# ---- queries ------------------------------------------------------------------------------


def fastest(points: list[Plan] | tuple[Plan, ...]) -> Plan:
    """Smallest W (the frontier breaks ties by cost)."""
    return min(points, key=lambda p: (p.wall_time_s, p.cost_usd))


def cheapest(points: list[Plan] | tuple[Plan, ...]) -> Plan:
    """Smallest C (ties: smaller W)."""
    return min(points, key=lambda p: (p.cost_usd, p.wall_time_s))


def fastest_within_budget(points: list[Plan] | tuple[Plan, ...], budget_usd: float) -> Plan | None:
    """Fastest plan with C <= budget."""
    ok = [p for p in points if p.cost_usd <= budget_usd]
    return fastest(ok) if ok else None


def cheapest_within_deadline(points: list[Plan] | tuple[Plan, ...],
                             deadline_s: float) -> Plan | None:
    """Cheapest plan with W <= deadline."""
    ok = [p for p in points if p.wall_time_s <= deadline_s]
    return cheapest(ok) if ok else None


def cheapest_at_throughput(points: list[Plan] | tuple[Plan, ...],
                           fraction: float) -> tuple[Plan, float]:
    """Cheapest plan with tokens/s >= fraction × best, and its saving in % vs the fastest plan."""
    best = fastest(points)
    ok = [p for p in points if p.tokens_per_s >= fraction * best.tokens_per_s]
    chosen = cheapest(ok)
    saving = 100.0 * (best.cost_usd - chosen.cost_usd) / best.cost_usd if best.cost_usd > 0 else 0.0
    return chosen, saving


# ---- solving an instance ---------------------------------------------------------------------

SOLVERS = ("auto", "dp", "cpsat", "milp", "brute", "heuristic")
"""auto: the exact DP where the problem's structure allows it (`planner.dp`), else CP-SAT."""
MILP_BACKENDS = ("highs", "cbc")
DEFAULT_TIME_LIMIT_S = 300.0
"""Total solve time of a frontier when none is given; a frontier cut short says it is not exact."""

Checker = Callable[[float | None, bool, float | None], Plan | None]
"""(ε, strict, cost cap) -> a plan with W <= ε (< if strict) and C <= cap, or None if none
exists."""


def default_threads() -> int:
    """Solver threads when none are given: the machine's CPUs (at most 8)."""
    return max(1, min(8, os.cpu_count() or 1))


def resolve_solver(problem: Problem, solver: str) -> str:
    """`auto` becomes dp or cpsat; `dp` on a problem the DP cannot take is a user error."""
    from planner.dp import dp_unsupported

    reason = dp_unsupported(problem)
    if solver == "auto":
        return "dp" if reason is None else "cpsat"
    if solver == "dp" and reason is not None:
        raise UserInputError(f"--solver dp cannot solve {problem.name!r}: {reason}",
                             hint="use --solver auto or cpsat.")
    return solver


def dp_checker(problem: Problem) -> Checker | None:
    """A cross-check from the DP's frontier (None where the DP does not apply); built on first
    use."""
    from planner.dp import dp_frontier, dp_unsupported

    if dp_unsupported(problem) is not None:
        return None
    cache: list[tuple[Plan, ...]] = []

    def check(eps: float | None, strict: bool, cap: float | None) -> Plan | None:
        if not cache:
            cache.append(dp_frontier(dataclasses.replace(problem, budget_usd=None)).points)
        fits = [p for p in cache[0]
                if (eps is None or (p.wall_time_s < eps if strict else p.wall_time_s <= eps))
                and (cap is None or p.cost_usd <= cap)]
        # the cheapest such point is what a correct step would lead the walk to
        return min(fits, key=lambda p: (p.cost_usd, p.wall_time_s)) if fits else None

    return check


def subsolver_checker(problem: Problem, sub: Subsolver) -> Checker:
    """A cross-check by a second backend: any plan of its step is a witness."""
    def check(eps: float | None, strict: bool, cap: float | None) -> Plan | None:
        result = sub.min_price(eps, strict=strict, time_limit_s=DEFAULT_TIME_LIMIT_S,
                               cost_cap_usd=cap)
        if result.status not in ("optimal", "feasible"):
            return None
        plan = evaluate(problem, result.choices)
        return plan if cap is None or plan.cost_usd <= cap else None

    return check


def _milp(problem: Problem, threads: int, backend: str) -> Subsolver:
    from planner.milp import MilpSubsolver, highs_available

    if backend == "highs" and not highs_available():
        LOG.warning("HiGHS (highspy) is not installed: using CBC for the MILP backend")
        backend = "cbc"
    return MilpSubsolver(problem, threads=threads, backend=backend)


def make_oracle(problem: Problem, solver: str, *, threads: int = 1,
                time_limit_s: float | None = None, milp_backend: str = "highs") -> CostOracle:
    """The exact oracle of a backend name (heuristic has none), with its cross-check."""
    if solver in ("cpsat", "milp"):
        from planner.cpsat import CpSatSubsolver

        if solver == "cpsat":
            sub: Subsolver = CpSatSubsolver(problem, threads=threads)
            second: Callable[[], Subsolver] = (  # noqa: E731
                lambda: _milp(problem, threads, milp_backend))
        else:
            sub = _milp(problem, threads, milp_backend)
            second = lambda: CpSatSubsolver(problem, threads=threads)  # noqa: E731
        checker = dp_checker(problem) or subsolver_checker(problem, second())
        return StaircaseOracle(problem, sub, time_limit_s=time_limit_s, checker=checker)
    if solver == "brute":
        from planner.baselines import BruteForce

        return BruteForce(problem, reduce=True)
    raise ValueError(f"no exact oracle for solver {solver!r}")


def compute_frontier(problem: Problem, *, solver: str = "auto", threads: int | None = None,
                     time_limit_s: float | None = None, milp_backend: str = "highs",
                     first_only: bool = False) -> Frontier:
    """The frontier of a problem (within its budget/deadline) with the chosen backend.

    `time_limit_s` defaults to DEFAULT_TIME_LIMIT_S, `threads` to `default_threads()`."""
    start = time.perf_counter()
    threads = default_threads() if threads is None else threads
    limit = DEFAULT_TIME_LIMIT_S if time_limit_s is None else time_limit_s
    solver = resolve_solver(problem, solver)
    if solver == "heuristic":
        from planner.baselines import heuristic_plans
        from planner.problem import nondominated

        plans, _ = heuristic_plans(problem)
        points = nondominated(plans)
        if first_only and points:
            points = [cheapest(points)]
        return _frontier(points, solver, False, 0, start, note="heuristic (not an exact method)")
    if solver == "dp":
        from planner.dp import dp_frontier

        result = dp_frontier(problem, time_limit_s=limit)
        points = list(result.points)
        if first_only and points:
            points = [cheapest(points)]
        return _frontier(points, solver, result.proven_exact, 0, start,
                         note="" if result.proven_exact
                         else f"the DP sweep hit the {limit:g} s time limit")
    oracle = make_oracle(problem, solver, threads=threads, time_limit_s=limit,
                         milp_backend=milp_backend)
    points = epsilon_frontier(problem, oracle, first_only=first_only)
    note = getattr(oracle, "note", "")
    return _frontier(points, solver, oracle.proven_exact, oracle.num_solves, start,
                     note=note if not oracle.proven_exact else "",
                     cross_checks=getattr(oracle, "cross_checks", 0))


def _frontier(points: list[Plan], solver: str, exact: bool, solves: int, start: float, *,
              note: str = "", cross_checks: int = 0) -> Frontier:
    return Frontier(points=tuple(points), solver=solver, proven_exact=exact, num_solves=solves,
                    solve_time_s=time.perf_counter() - start,
                    max_cost_rounding_usd=max((p.cost_rounding_bound_usd for p in points),
                                              default=0.0),
                    note=note or ("" if exact else "not proven exact"), cross_checks=cross_checks)


# ---- infeasibility -------------------------------------------------------------------------

_LIMIT_HINTS = {
    "max_islands": "raise limits.max_islands",
    "num_nodes": "give the clusters more nodes (clusters[*].num_nodes)",
    "max_gpus": "raise or drop limits.max_gpus",
}


def solve_instance(instance: Instance, table: pd.DataFrame, *, solver: str = "auto",
                   threads: int | None = None, time_limit_s: float | None = None,
                   milp_backend: str = "highs", budget_usd: float | None = None,
                   deadline_hours: float | None = None,
                   first_only: bool = False) -> tuple[Problem, Frontier]:
    """Build the problem and its frontier; raise `InfeasibleError` naming the binding limit."""
    problem = build_problem(instance, table, budget_usd=budget_usd, deadline_hours=deadline_hours)
    frontier = compute_frontier(problem, solver=solver, threads=threads, time_limit_s=time_limit_s,
                                milp_backend=milp_backend, first_only=first_only)
    if frontier.points:
        return problem, frontier
    exact_solver = "cpsat" if solver in ("heuristic", "dp", "auto") else solver
    raise explain_infeasible(instance, table, problem, solver=exact_solver, threads=threads,
                             heuristic=solver == "heuristic", exact=frontier.proven_exact)


def explain_infeasible(instance: Instance, table: pd.DataFrame, problem: Problem, *,
                       solver: str = "cpsat", threads: int | None = None, heuristic: bool = False,
                       exact: bool = True) -> ShardMeterError:
    """Name what binds by re-solving with limits relaxed one at a time."""
    from planner.cpsat import any_plan as batch_feasible

    batch = problem.global_batch_seqs
    if table.empty:
        return InfeasibleError("the island table has no rows: the model fits no island option",
                               binding="no_island_option",
                               hint="use GPUs with more memory, more GPUs per island, "
                                    "or activation checkpointing.")
    free = dataclasses.replace(problem, budget_usd=None, deadline_s=None)
    if batch_feasible(free) is not True:
        relaxed = {name: build_problem(instance, table, relax={name}) for name in RELAXABLE}
        if not problem.pairs and not any(p.pairs for p in relaxed.values()):
            return InfeasibleError(
                "no island option is usable: every option's smallest step m·n·g exceeds B="
                f"{batch} or its gpus_per_node is not allowed", binding="no_island_option",
                hint="raise training.global_batch_seqs or allow the table's gpus_per_node values.")
        if batch_feasible(build_problem(instance, table, relax=RELAXABLE)) is not True:
            steps = sorted({p.seqs_per_accum_step for p in problem.pairs})
            return InfeasibleError(
                f"B={batch} sequences cannot be split exactly as Σ k·m·n·g over the island options "
                f"(island granularities m·n·g: {steps})", binding="global_batch",
                hint="choose a global batch that is a sum of these granularities, "
                     "or add options/micro-batches.")
        single = [name for name, relaxed_problem in relaxed.items()
                  if batch_feasible(relaxed_problem)]
        binding = single[0] if single else "+".join(RELAXABLE)
        return InfeasibleError(
            f"no plan reaches B={batch} within the limits (max_islands={instance.max_islands}, "
            f"max_gpus={instance.limits.max_gpus}, nodes per cluster "
            f"{ {c.name: c.num_nodes for c in instance.clusters} }); relaxing "
            f"{' or '.join(single) if single else 'all of them together'} makes it feasible",
            binding=binding,
            hint="; or ".join(_LIMIT_HINTS[n] for n in (single or RELAXABLE)) + ".")
    if not exact:
        return ShardMeterError("no plan was found within the time limit",
                               hint="raise --time-limit-s.")
    if problem.deadline_s is not None:
        fast = compute_frontier(free, solver=solver, threads=threads).points
        if fast and fastest(fast).wall_time_s > problem.deadline_s:
            best = fastest(fast)
            return InfeasibleError(
                f"deadline {problem.deadline_s / 3600:.6g} h is below the fastest plan "
                f"({best.wall_time_s / 3600:.6g} h = {best.wall_time_s:.6g} s)",
                binding="deadline_hours",
                hint=f"allow at least {best.wall_time_s / 3600:.6g} hours.")
    if problem.budget_usd is not None:
        timed = dataclasses.replace(problem, budget_usd=None)
        cheap = compute_frontier(timed, solver=solver, threads=threads, first_only=True).points
        if cheap and cheap[0].cost_usd > problem.budget_usd:
            return InfeasibleError(
                f"budget {problem.budget_usd:.6g} USD is below the cheapest plan "
                f"({cheap[0].cost_usd:.6g} USD"
                + (" within the deadline" if problem.deadline_s else "") + ")",
                binding="budget_usd", hint=f"allow at least {cheap[0].cost_usd:.6g} USD.")
    if heuristic:
        return InfeasibleError("the heuristic found no plan although exact solvers do",
                               binding="heuristic", hint="use --solver cpsat.")
    return ShardMeterError("no plan found and no single limit explains it",
                           hint="report this instance.")
