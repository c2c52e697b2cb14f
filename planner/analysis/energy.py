"""Energy and CO2 of a plan, and the exact time-vs-energy (or time-vs-CO2) frontier (issue 14).

The code lives in two modules, each with its formulation, and is re-exported here (the public
import path of callers, the CLI and the tests):

- `planner.model.energy`: the energy and CO2 of one plan (power data per table row and cluster,
  the per-island coefficients a_i, b_i, `plan_energy`);
- `planner.solvers.energy_dp`: the exact (W, energy|CO2) frontier, its exactness argument and its
DP.

This module solves an instance on that frontier (`solve_energy`; caps on energy/CO2 and a
deadline filter the frontier exactly, a cost budget is refused), the brute-force reference, and
the least CO2 within a cost cap by Lagrangian duality (`min_co2_within_cost`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfmodel.spec.errors import InfeasibleError, UserInputError
from planner.analysis.pareto import Frontier, solve_instance
from planner.model.energy import (
    FIELD,
    METRICS,
    require_metric,
)
from planner.model.evaluate import build_problem
from planner.solvers.baselines import BruteForce
from planner.solvers.energy_dp import (
    energy_frontier,
    nondominated_by,
)

if TYPE_CHECKING:
    from planner.model.problem import Plan, Problem


CAP_FLAGS = {"co2": ("max_co2_kg", "--max-co2-kg", "kg CO2e"),
             "energy": ("max_energy_kwh", "--max-energy-kwh", "kWh")}
"""Per metric: the InfeasibleError binding name, the CLI flag and the unit."""


def metric_of(objective: str | None, max_co2_kg: float | None,
              max_energy_kwh: float | None) -> str | None:
    """The energy metric a query needs (None: a plain time-cost query); exit 2 on mixed ones."""
    if max_co2_kg is not None and max_energy_kwh is not None:
        raise UserInputError("--max-co2-kg and --max-energy-kwh together are a third objective",
                             hint="cap one of them (they differ only by the grid intensities).")
    capped = "co2" if max_co2_kg is not None else "energy" if max_energy_kwh is not None else None
    asked = objective if objective in METRICS else None
    if asked and capped and asked != capped:
        raise UserInputError(f"objective {asked} with a {capped} cap mixes two energy metrics",
                             hint=f"use --objective {capped} or cap {asked}.")
    if objective == "cost" and capped:
        raise UserInputError(f"--objective cost with a {capped} cap is a three-objective query",
                             hint=f"use --objective time or {capped} "
                                  f"(exact on the time-vs-{capped} frontier), "
                                  "or pareto --objectives time," + capped + ".")
    return asked or capped


def solve_energy(instance: Any, table: Any, metric: str, *, max_value: float | None = None,
                 solver: str = "auto", time_limit_s: float | None = None,
                 budget_usd: float | None = None, deadline_hours: float | None = None,
                 **_: Any) -> tuple[Problem, Any]:
    """The problem and its exact time-vs-`metric` frontier (a `planner.analysis.pareto.Frontier`);
    InfeasibleError naming the cap when only the cap binds."""


    if solver not in ("auto", "dp", "brute"):
        raise UserInputError(f"--solver {solver} does not model energy or CO2",
                             hint="use --solver dp or auto (exact) or brute (small instances).")
    if getattr(instance, "failures_on", False) or _.get("failures"):
        raise UserInputError("energy and CO2 frontiers do not model failures yet",
                             hint="drop --failures (or the instance's failures: section) for "
                                  "--objectives time,energy|co2; time-vs-cost plans report the "
                                  "energy of their expected run.")
    start = time.perf_counter()
    problem = build_problem(instance, table, budget_usd=budget_usd, deadline_hours=deadline_hours)
    require_metric(problem, metric)
    if solver == "brute":
        points, exact = brute_energy_frontier(problem, metric, max_value=max_value), True
    else:
        found = energy_frontier(problem, metric, max_value=max_value, time_limit_s=time_limit_s)
        points, exact = list(found.points), found.proven_exact
    frontier = Frontier(points=tuple(points),
                        solver=f"{'dp' if solver == 'auto' else solver}-{metric}",
                        proven_exact=exact, num_solves=0, solve_time_s=time.perf_counter() - start,
                        max_cost_rounding_usd=max((p.cost_rounding_bound_usd for p in points),
                                                  default=0.0),
                        note="" if exact else "the energy DP sweep hit the time limit")
    if points:
        return problem, frontier
    if max_value is not None:
        free = solve_energy(instance, table, metric, solver=solver, time_limit_s=time_limit_s,
                            budget_usd=budget_usd, deadline_hours=deadline_hours)[1].points
        if free:
            binding, flag, unit = CAP_FLAGS[metric]
            least = min(getattr(p, FIELD[metric]) for p in free)
            raise InfeasibleError(f"{flag} {max_value:.6g} {unit} is below the lowest-{metric} "
                                  f"plan ({least:.6g} {unit}"
                                  + (" within the deadline"
                                     if deadline_hours or instance.limits.deadline_hours else "")
                                  + ")",
                                  binding=binding, hint=f"allow at least {least:.6g} {unit}.")
    solve_instance(instance, table, solver="auto", budget_usd=budget_usd,
                   deadline_hours=deadline_hours)
    raise InfeasibleError("no plan found", binding="unknown", hint="report this instance.")


def brute_energy_frontier(problem: Problem, metric: str, *,
                          max_value: float | None = None) -> list[Plan]:
    """The reference: every plan enumerated (no reductions), non-dominated in (W, metric)."""

    field = FIELD[metric]
    plans = [p for p in BruteForce(problem, reduce=False).plans()
             if (problem.deadline_s is None or p.wall_time_s <= problem.deadline_s)
             and (problem.budget_usd is None or p.cost_usd <= problem.budget_usd)
             and (max_value is None or getattr(p, field) <= max_value)]
    return nondominated_by(plans, field)


@dataclass(frozen=True, kw_only=True, slots=True)
class CappedCo2:
    """Bounds on the least CO2 of any plan costing at most `max_cost_usd` (Lagrangian duality)."""

    max_cost_usd: float
    """The cost cap."""
    best: Plan
    """The lowest-CO2 plan found within the cap (its CO2 is the upper bound)."""
    lower_bound_kg: float
    """No plan within the cap emits less (max over the weights tried of the dual function)."""
    solves: int
    """Weighted sweeps run."""


def min_co2_within_cost(problem: Problem, max_cost_usd: float, *, cheapest_plan: Plan,
                        within: Sequence[Plan] = (), max_solves: int = 8) -> CappedCo2:
    """Least CO2 subject to cost <= cap, bracketed: for a weight λ (kg per USD) the exact minimum
    of CO2 + λ·cost over all plans, P_λ, bounds every plan within the cap from below by
    CO2(P_λ) + λ·(cost(P_λ) − cap) (weak duality). The weights walk the lower convex hull of
    (cost, CO2) between the lowest-CO2 plan (above the cap) and `cheapest_plan` (within it): λ is
    the slope between the two hull points around the cap, until P_λ adds no hull point (then the
    bound is the best one duality gives). The upper bound is the lowest-CO2 plan found within
    the cap, among the P_λ and `within` (e.g. frontier points)."""
    def solve(weight: float) -> Plan:
        points = energy_frontier(problem, "co2", usd_weight=weight).points
        return min(points, key=lambda p: (_kg(p) + weight * p.cost_usd, p.cost_usd))

    feasible = [p for p in (*within, cheapest_plan) if p.cost_usd <= max_cost_usd]
    if cheapest_plan.cost_usd > max_cost_usd:
        raise ValueError("the cheapest plan breaks the cost cap")
    lo, solves = solve(0.0), 1
    lower = _kg(lo)
    high = cheapest_plan
    if lo.cost_usd <= max_cost_usd:
        feasible.append(lo)
    else:
        while solves < max_solves and lo.cost_usd > high.cost_usd:
            weight = (_kg(high) - _kg(lo)) / (lo.cost_usd - high.cost_usd)
            plan, solves = solve(weight), solves + 1
            line = _kg(lo) + weight * lo.cost_usd
            lower = max(lower,
                        min(line, _kg(plan) + weight * plan.cost_usd) - weight * max_cost_usd)
            if _kg(plan) + weight * plan.cost_usd >= line * (1 - 1e-12):
                break  # no plan below the hull edge: the dual bound is reached
            if plan.cost_usd <= max_cost_usd:
                feasible.append(plan)
                high = plan
            else:
                lo = plan
    best = min(feasible, key=lambda p: (_kg(p), p.cost_usd))
    return CappedCo2(max_cost_usd=max_cost_usd, best=best,
                     lower_bound_kg=max(min(lower, _kg(best)), 0.0), solves=solves)


def _kg(plan: Plan) -> float:
    """CO2 of a plan on a CO2 frontier (known there: every cluster has a grid region)."""
    if plan.co2_kg is None:
        raise ValueError("a plan on the CO2 frontier has no CO2: a cluster lacks a grid region")
    return plan.co2_kg
