"""The exact cost-time Pareto frontier by the epsilon-constraint method, and queries on it.

Loop (`epsilon_frontier`): ε = deadline (or ∞); repeat { P = cheapest plan with W <= ε (strict <
after the first point), ties broken by smaller W; stop if none or C(P) > budget; emit P;
ε = W(P) }. Because of the tie-break no emitted point is dominated: the next point has W' < W,
and since P was the cheapest plan with W <= ε, C' > C.

Every exact backend answers that oracle question ("cheapest plan with W <= ε, ties → smaller
W"): why each one is exact is `planner.solvers.oracle` (CP-SAT and MILP through the staircase
walk) and `planner.solvers.baselines` (brute force); the DP (`planner.solvers.dp`) and the
heuristic return whole frontiers. `compute_frontier` dispatches by solver name through
`planner.solvers.registry`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd

from perfmodel import progress
from perfmodel.spec.errors import InfeasibleError, ShardMeterError
from planner.model.evaluate import RELAXABLE, build_problem
from planner.model.instance import Instance
from planner.model.problem import PRICE_UNITS_PER_USD_PER_HOUR, Plan, Problem, SolveProvenance
from planner.solvers.cpsat import any_plan as batch_feasible
from planner.solvers.dp import plan_lower_bounds
from planner.solvers.oracle import CostOracle
from planner.solvers.registry import (
    DEFAULT_TIME_LIMIT_S,
    SolverSettings,
    default_threads,
    resolve_solver,
)

LOG = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class Frontier(SolveProvenance):
    """An epsilon-constraint (or DP, or heuristic) frontier with its provenance."""

    points: tuple[Plan, ...]
    """Non-dominated plans, fastest first (W ascending, C descending)."""
    price_resolution_usd_per_hour: float = 1.0 / PRICE_UNITS_PER_USD_PER_HOUR
    """Prices are quantised to this step before solving."""
    max_cost_rounding_usd: float = 0.0
    """Largest |cost at quantised prices − cost at table prices| over the points."""


def epsilon_frontier(problem: Problem, oracle: CostOracle, *,
                     first_only: bool = False) -> list[Plan]:
    """The epsilon-constraint loop of the module docstring, within budget and deadline."""
    eps, strict = problem.deadline_s, False
    points: list[Plan] = []
    # the number of points is unknown until the loop ends: the bar counts the points found
    with progress.task("frontier points (exact solves)") as found:
        while True:
            plan = oracle.min_cost(eps, strict=strict)
            if plan is None or (problem.budget_usd is not None
                                and plan.cost_usd > problem.budget_usd):
                break
            points.append(plan)
            found(1)
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

def compute_frontier(problem: Problem, *, solver: str = "auto", threads: int | None = None,
                     time_limit_s: float | None = None, milp_backend: str = "highs",
                     first_only: bool = False) -> Frontier:
    """The frontier of a problem (within its budget/deadline) with the chosen backend
    (`planner.solvers.registry`).

    `time_limit_s` defaults to DEFAULT_TIME_LIMIT_S, `threads` to `default_threads()`."""
    start = time.perf_counter()
    backend = resolve_solver(problem, solver)
    settings = SolverSettings(threads=default_threads() if threads is None else threads,
                              time_limit_s=(DEFAULT_TIME_LIMIT_S if time_limit_s is None
                                            else time_limit_s),
                              milp_backend=milp_backend)
    if backend.frontier is not None:
        whole = backend.frontier(problem, settings)
        points = list(whole.points)
        if first_only and points:
            points = [cheapest(points)]
        return _frontier(points, backend.name, whole.proven_exact, 0, start, note=whole.note)
    oracle = backend.make_oracle(problem, settings)
    points = epsilon_frontier(problem, oracle, first_only=first_only)
    note = getattr(oracle, "note", "")
    return _frontier(points, backend.name, oracle.proven_exact, oracle.num_solves, start,
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
                   deadline_hours: float | None = None, first_only: bool = False,
                   failures: bool = False) -> tuple[Problem, Frontier]:
    """Build the problem and its frontier; raise `InfeasibleError` naming the binding limit.
    `failures` turns the failure model on (`Instance.with_failures`): the frontier is then of
    expected wall time vs expected cost (`planner.model.risk`)."""
    if failures:
        instance = instance.with_failures()
    problem = build_problem(instance, table, budget_usd=budget_usd, deadline_hours=deadline_hours)
    if below_bounds(problem):
        # a cap below what any plan can reach: no search can find a plan, so explain at once
        # (the explanation solves without the caps: about one feasible query's work)
        exact, heuristic = True, False
    else:
        frontier = compute_frontier(problem, solver=solver, threads=threads,
                                    time_limit_s=time_limit_s, milp_backend=milp_backend,
                                    first_only=first_only)
        if frontier.points:
            return problem, frontier
        exact, heuristic = frontier.proven_exact, solver == "heuristic"
    # `auto` is exact (the DP where it applies, else CP-SAT; the DP under failures): explaining
    # with CP-SAT where the DP applies took ten times the query (issue 29)
    exact_solver = "auto" if solver in ("heuristic", "dp", "auto") else solver
    raise explain_infeasible(instance, table, problem, solver=exact_solver, threads=threads,
                             heuristic=heuristic, exact=exact)


def below_bounds(problem: Problem) -> bool:
    """True when the deadline or budget is below `plan_lower_bounds` (no plan can meet it)."""
    wall_s, cost = plan_lower_bounds(problem)
    return ((problem.deadline_s is not None and problem.deadline_s < wall_s)
            or (problem.budget_usd is not None and problem.budget_usd < cost))


def explain_infeasible(instance: Instance, table: pd.DataFrame, problem: Problem, *,
                       solver: str = "cpsat", threads: int | None = None, heuristic: bool = False,
                       exact: bool = True) -> ShardMeterError:
    """Name what binds by re-solving with limits relaxed one at a time."""

    batch = problem.global_batch_seqs
    if table.empty:
        return no_option_error(problem, empty_table=True)
    if not problem.options and not any(build_problem(instance, table, relax={name}).options
                                       for name in RELAXABLE):
        return no_option_error(problem, empty_table=False)
    free = dataclasses.replace(problem, budget_usd=None, deadline_s=None)
    # the uncapped frontier answers two questions below at once: a plan in it proves the batch
    # can be split (no separate CP-SAT feasibility solve); its fastest plan is the deadline's fix,
    # and with a budget alone its cheapest plan (first_only: one solve) is the budget's
    fast = (compute_frontier(free, solver=solver, threads=threads,
                             first_only=problem.deadline_s is None).points
            if exact and (problem.deadline_s is not None or problem.budget_usd is not None)
            else ())
    if not fast and batch_feasible(free) is not True:
        relaxed = {name: build_problem(instance, table, relax={name}) for name in RELAXABLE}
        if not problem.pairs and not any(p.pairs for p in relaxed.values()):
            return no_option_error(problem, empty_table=False)
        if batch_feasible(build_problem(instance, table, relax=RELAXABLE)) is not True:
            steps = sorted({p.min_accum_steps * p.seqs_per_accum_step for p in problem.pairs})
            plain = not any(p.variant for p in problem.pairs)
            return InfeasibleError(
                f"B={batch} sequences cannot be split exactly as "
                + (f"Σ k·m·n·g over the island options (island granularities m·n·g: {steps})"
                   if plain else "Σ k·m·dp over the island options (island granularities at "
                                 f"their smallest k, k·m·dp: {steps})"),
                binding="global_batch",
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
    if problem.deadline_s is not None and fast and fastest(fast).wall_time_s > problem.deadline_s:
        best = fastest(fast)
        return InfeasibleError(
            f"deadline {problem.deadline_s / 3600:.6g} h is below the fastest plan "
            f"({best.wall_time_s / 3600:.6g} h = {best.wall_time_s:.6g} s)",
            binding="deadline_hours",
            hint=f"allow at least {best.wall_time_s / 3600:.6g} hours.")
    if problem.budget_usd is not None:
        # without a deadline the capped problem less its budget is `free`: its cheapest plan
        # was found above
        timed = dataclasses.replace(problem, budget_usd=None)
        cheap = (fast if problem.deadline_s is None else
                 compute_frontier(timed, solver=solver, threads=threads, first_only=True).points)
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


MAX_NAMED_EXCLUSIONS = 8
"""Exclusions an InfeasibleError names before counting the rest."""


def no_option_error(problem: Problem, *, empty_table: bool) -> InfeasibleError:
    """Exit 1 when no island option of the instance is usable: every cluster and option named
    with its reason (`Problem.excluded`), the hint the distinct fixes."""
    # every option record, and the whole-cluster records of clusters without one (a cluster's
    # summary line adds nothing to its options' lines)
    listed = {e.cluster for e in problem.excluded
              if e.nodes is not None or e.gpus_per_node is not None}
    named = [e for e in problem.excluded if e.nodes is not None or e.gpus_per_node is not None
             or e.cluster not in listed]
    lines = [f"{e.where}: {e.reason}" for e in named[:MAX_NAMED_EXCLUSIONS]]
    if len(named) > MAX_NAMED_EXCLUSIONS:
        lines.append(f"... and {len(named) - MAX_NAMED_EXCLUSIONS} more "
                     "(`shardmeter islands INSTANCE` lists them)")
    fixes = list(dict.fromkeys(e.fix.rstrip(".") for e in named))
    head = ("the island table has no rows: the model fits no island option" if empty_table
            else "no island option is usable")
    return InfeasibleError(
        head + (":\n  " + "\n  ".join(lines) if lines else ""),
        binding="no_island_option",
        hint=("; or ".join(fixes[:3]) + "." if fixes
              else "use GPUs with more memory, more GPUs per island, or activation "
                   "checkpointing."))


def answer(problem: Problem, found: Frontier, objective: str,
           fraction: float | None) -> tuple[Plan, dict[str, Any]]:
    """The `plan` query on a time-vs-cost frontier: (chosen plan, what was asked and the
    saving)."""

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
