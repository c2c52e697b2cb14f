"""MILP backend through PuLP: HiGHS (highspy, the default) or CBC (bundled with PuLP, the fallback).

The same step as `planner.solvers.cpsat` — the cheapest plan with wall time W <= ε — as a
mixed-integer
linear program; `planner.analysis.pareto` sweeps ε to trace the staircase and the frontier.

Formulation (sets and data as in planner.solvers.cpsat; indicator constraints become big-M rows)
-------------------------------------------------------------------------------------------
Variables:
    x_i ∈ Z ∩ [0, u_i],   μ_M, z_c, v_l ∈ {0, 1}
Objective:
    minimise Σ_i π_o(i)·x_i                                 (integer price units)
Constraints:
    (1) Σ_i x_i = Σ_M M·μ_M,   Σ_M μ_M = 1
    (2) Σ_i b_i·x_i = B
    (3) Σ_{i∈I_c} n_o(i)·x_i <= N_c                      ∀c
    (4) Σ_i n_o(i)·g_o(i)·x_i <= G                       (if set)
    (5) x_i <= u_i·(1 − v_{L_i+1})                        ∀i with L_i below the last level
    (6) x_i <= u_i·z_c (i ∈ I_c),   z_c <= Σ_{i∈I_c} x_i
    (7) v_l <= v_{l-1}
    (8) v_{λ(M,a,b)} >= μ_M + z_a + z_b − 2   (a < b; μ_M + z_a − Σ_{c≠a} z_c − 1 when a = b);
        the right-hand side forced <= 0 when λ(M,a,b) is "none"
    (9) Σprice >= F                                     known floor (optional)
    (10) x_i <= u_i·β_i,  Σprice <= Π_i + (Π̄ − Π_i)(1 − β_i),  Σprice <= Π_M + (Π̄ − Π_M)(1 − μ_M)
         cost-cap cuts (optional; Π̄ an upper bound on Σprice; β_i ∈ {0,1})

Exactness: the same argument as planner.solvers.cpsat (the feasible set is exactly the menu plans
with W <= ε); price rows are divided by the gcd of the prices (`price_step_units`, exact), the
objective coefficients are integers and the solver runs with zero relative gap and an absolute
gap below one unit, so "optimal" is the integer optimum. Values are rounded to
the nearest integer when read back (solver integrality tolerance).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import warnings

import pulp

from perfmodel.spec.errors import ShardMeterError
from planner.model.problem import Problem, SubResult, dominated_options
from planner.solvers.cpsat import StepData, choices_of, step_data

LOG = logging.getLogger(__name__)

ABS_GAP_PRICE_UNITS = 0.5
"""Absolute optimality gap: below one integer price unit, so optimal is the integer optimum."""


_BANNER_SILENCED: list[bool] = []


def _silence_highs_banner() -> None:
    """HiGHS prints a copyright banner to the C-level stdout when the process creates its first
    solver object, before any option can switch output off; it would corrupt `--format json`.
    Create that first object once with file descriptor 1 pointed at /dev/null."""
    if _BANNER_SILENCED:
        return
    _BANNER_SILENCED.append(True)
    try:
        # lazy: optional solver, probed when the MILP backend is asked for
        import highspy
    except ImportError:
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()  # type: ignore[no-untyped-call]  # untyped in highspy
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def highs_available() -> bool:
    """Is PuLP's HiGHS interface (highspy) usable here?"""
    solver_cls = getattr(pulp, "HiGHS", None)
    if solver_cls is None or not solver_cls(msg=False).available():
        return False
    _silence_highs_banner()
    return True


def _make_solver(backend: str, threads: int, time_limit_s: float | None) -> pulp.LpSolver:
    if backend == "highs":
        solver_cls = getattr(pulp, "HiGHS", None)
        if solver_cls is None or not highs_available():
            raise ShardMeterError("the HiGHS MILP backend is not available in this environment",
                                  hint="use --milp-backend cbc (bundled with PuLP) or "
                                       "install highspy.")
        # no `threads`: HiGHS sizes one scheduler per process on first use and fails every later
        # solve that asks for a different count (seen as "not solved" after a 2-thread solve)
        return solver_cls(msg=False, timeLimit=time_limit_s, gapRel=0.0, gapAbs=ABS_GAP_PRICE_UNITS)
    if backend != "cbc":
        raise ShardMeterError(f"unknown MILP backend {backend!r}", hint="use cbc or highs.")
    with warnings.catch_warnings():  # PuLP 3 flags its bundled CBC as deprecated; it is what ships
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, threads=threads, gapRel=0.0,
                                 gapAbs=ABS_GAP_PRICE_UNITS)


def price_step_units(problem: Problem, data: StepData) -> int:
    """Greatest common divisor of the admitted options' prices (in price units).

    Every Σprice is a multiple of it, so dividing all price rows by it is exact (a floor F becomes
    ceil(F/g), a cap Π becomes floor(Π/g)); it keeps CBC's big-M rows small — with raw units (up
    to ~1e8) CBC's preprocessing wrongly reported feasible steps infeasible on test instances.
    """
    prices = {problem.options[problem.menu[i].option_index].price_units for i in data.item_cap}
    return max(1, math.gcd(*prices)) if prices else 1


def build_step_milp(problem: Problem,
                    data: StepData) -> tuple[pulp.LpProblem, dict[int, pulp.LpVariable]]:
    """The MILP of the module docstring; returns (problem, x)."""
    options, menu = problem.options, problem.menu
    lp = pulp.LpProblem("step", pulp.LpMinimize)
    levels = len(data.level_cut_s)
    v = {lvl: lp.add_variable(f"v{lvl}", 0, 1, cat=pulp.LpBinary) for lvl in range(1, levels)}
    z = {c: lp.add_variable(f"z{c}", 0, 1, cat=pulp.LpBinary) for c in data.clusters}
    mu = {m: lp.add_variable(f"mu{m}", 0, 1, cat=pulp.LpBinary)
          for m in range(1, problem.max_islands + 1)}
    x = {i: lp.add_variable(f"x{i}", 0, cap, cat=pulp.LpInteger)
         for i, cap in data.item_cap.items()}
    unit = price_step_units(problem, data)
    price = pulp.lpSum(options[menu[i].option_index].price_units // unit * var
                       for i, var in x.items())
    lp += price
    if data.price_floor_units > 0:
        lp += price >= -(-data.price_floor_units // unit), "c9"
    top = -(-data.price_ub_units // unit)
    for i, cap_units in (data.item_price_cap or {}).items():
        cap = cap_units // unit
        if cap < top:
            used = lp.add_variable(f"b{i}", 0, 1, cat=pulp.LpBinary)
            lp += x[i] <= data.item_cap[i] * used, f"c10x_{i}"
            lp += price <= cap + (top - cap) * (1 - used), f"c10_{i}"
    for m, cap_units in (data.islands_price_cap or {}).items():
        cap = cap_units // unit
        if cap < top:
            lp += price <= cap + (top - cap) * (1 - mu[m]), f"c10m_{m}"
    lp += pulp.lpSum(mu.values()) == 1, "c1a"
    lp += pulp.lpSum(x.values()) == pulp.lpSum(m * b for m, b in mu.items()), "c1b"
    lp += pulp.lpSum(menu[i].seqs * var for i, var in x.items()) == problem.global_batch_seqs, "c2"
    for c in data.clusters:
        members = [i for i in x if options[menu[i].option_index].cluster_index == c]
        lp += pulp.lpSum(options[menu[i].option_index].nodes * x[i] for i in members) \
            <= problem.clusters[c].num_nodes, f"c3_{c}"
        for i in members:
            lp += x[i] <= data.item_cap[i] * z[c], f"c6_{i}"
        lp += z[c] <= pulp.lpSum(x[i] for i in members), f"c6z_{c}"
    if problem.max_gpus is not None:
        lp += pulp.lpSum(options[menu[i].option_index].num_gpus * var for i, var in x.items()) \
            <= problem.max_gpus, "c4"
    for i, last in data.item_level.items():
        if last + 1 < levels:
            lp += x[i] <= data.item_cap[i] * (1 - v[last + 1]), f"c5_{i}"
    for lvl in range(2, levels):
        lp += v[lvl] <= v[lvl - 1], f"c7_{lvl}"
    for (m, a, b), sync_level in data.sigma_level.items():
        if a not in z or b not in z:
            continue
        # pair a < b: both used; a alone: used and every other cluster unused
        others = pulp.lpSum(z[c] for c in z if c != a) if b == a else 0
        used = mu[m] + z[a] + (z[b] if b != a else 0) - others
        count = 3 if b != a else 2
        if sync_level is None:
            lp += used <= count - 1, f"c8_{m}_{a}_{b}"
        elif sync_level >= 1:
            lp += v[sync_level] >= used - (count - 1), f"c8_{m}_{a}_{b}"
    return lp, x


class MilpSubsolver:
    """Cheapest plan with W <= ε, as a PuLP MILP."""

    name = "milp"

    def __init__(self, problem: Problem, *, threads: int = 1, backend: str = "highs") -> None:
        self.problem = problem
        self.threads = max(1, threads)
        self.backend = backend
        self.skip = dominated_options(problem)
        _make_solver(backend, self.threads, None)  # fail early if unavailable

    def min_price(self, max_wall_s: float | None, *, strict: bool, time_limit_s: float | None,
                  price_floor_units: int = 0, cost_cap_usd: float | None = None) -> SubResult:
        """Solve one step (arguments as `CpSatSubsolver.min_price`); statuses are checked
        explicitly."""
        data = step_data(self.problem, max_wall_s, strict=strict, skip_options=self.skip,
                         price_floor_units=price_floor_units, cost_cap_usd=cost_cap_usd)
        if data is None or not data.item_level:
            return SubResult(status="infeasible")
        lp, x = build_step_milp(self.problem, data)
        limit = None if time_limit_s is None else max(1, int(round(time_limit_s)))
        lp.solve(_make_solver(self.backend, self.threads, limit))
        return _read(self.problem, lp, x)


def _read(problem: Problem, lp: pulp.LpProblem, x: dict[int, pulp.LpVariable]) -> SubResult:
    sol = lp.sol_status
    if sol == pulp.LpSolutionInfeasible or lp.status == pulp.LpStatusInfeasible:
        return SubResult(status="infeasible")
    if sol not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        if lp.status == pulp.LpStatusUnbounded:
            raise RuntimeError("MILP unbounded: the model is wrong (all variables are bounded)")
        return SubResult(status="unknown")
    counts = {i: int(round(var.value() or 0)) for i, var in x.items()}
    price = sum(problem.options[problem.menu[i].option_index].price_units * c
                for i, c in counts.items())
    status = "optimal" if sol == pulp.LpSolutionOptimal else "feasible"
    return SubResult(status=status, choices=choices_of(problem, counts), price_units=price)
