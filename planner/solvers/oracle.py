"""Exact oracles for the epsilon-constraint loop: the cheapest plan with W <= ε.

The oracle "cheapest plan with W <= ε, ties → smaller W" is exact for every backend:

* brute force (`planner.solvers.baselines.BruteForce`) scans all enumerated plans;
* CP-SAT / MILP (`StaircaseOracle`) never put W·Σprice into a model. A backend step returns
  a plan of minimum Σprice (integer price units) among plans with W <= ε_j that may still cost
  no more than the incumbent γ (necessary-condition cuts, `planner.solvers.cpsat.step_data`). The
  oracle
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
import time
from collections.abc import Callable
from typing import Protocol

from planner.model.evaluate import evaluate, violations
from planner.model.problem import Plan, Problem, SubResult
from planner.solvers.dp import dp_frontier, dp_unsupported

LOG = logging.getLogger(__name__)

CHECK_TIME_LIMIT_S = 300.0
"""Time limit of one cross-check step by a second backend."""

Checker = Callable[[float | None, bool, float | None], Plan | None]
"""(ε, strict, cost cap) -> a plan with W <= ε (< if strict) and C <= cap, or None if none
exists."""


class CostOracle(Protocol):
    """Answers "cheapest plan with W <= ε (or < ε), ties broken by smaller W"."""

    proven_exact: bool
    num_solves: int

    def min_cost(self, max_wall_s: float | None, *, strict: bool) -> Plan | None: ...


class Subsolver(Protocol):
    """A backend for one staircase step (planner.solvers.cpsat / planner.solvers.milp)."""

    name: str

    def min_price(self, max_wall_s: float | None, *, strict: bool, time_limit_s: float | None,
                  price_floor_units: int = 0, cost_cap_usd: float | None = None) -> SubResult: ...


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


def dp_checker(problem: Problem) -> Checker | None:
    """A cross-check from the DP's frontier (None where the DP does not apply); built on first
    use."""
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
        result = sub.min_price(eps, strict=strict, time_limit_s=CHECK_TIME_LIMIT_S,
                               cost_cap_usd=cap)
        if result.status not in ("optimal", "feasible"):
            return None
        plan = evaluate(problem, result.choices)
        return plan if cap is None or plan.cost_usd <= cap else None

    return check
