"""OR-Tools CP-SAT backend: the cheapest plan with wall time W <= ε (one staircase step).

`planner.analysis.pareto` calls `CpSatSubsolver.min_price(ε, strict)` repeatedly, tightening ε
below the
W of each plan found (the (W, Σprice) staircase); the cost frontier is read off that staircase.
`step_data` is shared with the MILP backend (`planner.solvers.milp`); both skip the options
`planner.model.problem.dominated_options` proves redundant.

Formulation
-----------
Sets:
    I          menu items i = (option o(i), s_i sequences per GPU) — the fastest (m, k) with
               k·m = s_i (`planner.model.evaluate` explains why only these matter) — of options
               that are not dominated (see `dominated_options`) and fit ε at all
    C          clusters with such items; I_c the items of cluster c
    M          island counts 1..max_islands
    L          ladder levels 0..|L|-1 of the step-time cut-offs τ̄_l (level 0 the most permissive)
Data (from `step_data`; every number below comes from exact comparisons of the evaluator's floats):
    B          global batch (sequences per inner step)
    b_i        s_i·n·g, sequences per inner step of an island of item i
    N_c, n_o, g_o, G   nodes of cluster c, nodes / GPUs per node of option o, GPU cap (optional)
    π_o        island price per hour in integer units (`MONEY_SCALE_PER_USD_PER_HOUR`)
    u_i        most islands of item i: min(max_islands, N_c // n_o, G // (n_o g_o), B // b_i)
    L_i        last ladder level whose cut-off admits item i (t_i <= τ̄_l for l <= L_i)
    λ(M,a,b)   ladder level of σ(M, {a, b}) (a < b: the pair's slowest WAN uplink and largest
               latency; a = b: cluster a alone, over its fabric), "none" if W > ε for every τ
Variables:
    x_i ∈ {0..u_i}    islands of item i
    μ_M ∈ {0,1}       the plan has exactly M islands
    z_c ∈ {0,1}       cluster c is used
    v_l ∈ {0,1}       the ladder is at level >= l (l >= 1)
Objective:
    minimise Σ_i π_o(i)·x_i                       (Σ island price per hour; integer, exact)
Constraints:
    (1) Σ_i x_i = Σ_M M·μ_M,  Σ_M μ_M = 1         exactly one island count
    (2) Σ_i b_i·x_i = B                           the global batch, exactly
    (3) Σ_{i∈I_c} n_o(i)·x_i <= N_c   ∀c          nodes per cluster
    (4) Σ_i n_o(i)·g_o(i)·x_i <= G                GPU cap (if set)
    (5) v_{L_i+1} => x_i = 0          ∀i          item too slow beyond its level
    (6) ¬z_c => x_i = 0 (i ∈ I_c),  z_c => Σ_{i∈I_c} x_i >= 1   cluster use
    (7) v_l => v_{l-1}                            ladder
    (8) μ_M ∧ z_a ∧ z_b => v_{λ(M,a,b)} (a < b),  μ_M ∧ z_a ∧ ¬z_(c≠a) => v_{λ(M,a,a)}
        (clauses forbidding the combination when λ is "none")
    (9) Σ_i π_o(i)·x_i >= F                       a known floor F (optional)
    (10) x_i >= 1 => Σprice <= Π_i,  μ_M => Σprice <= Π_M   cost-cap cuts (optional, `step_data`)

Why this is exact. W = D/(B·S)·(τ + σ/H) and σ of M islands on clusters U is σ(M, a, a) when
U = {a}, else max_{a<b∈U} σ(M, a, b) (the WAN σ falls with the uplink, grows with the latency, so
the worst pair holds the slowest uplink and the largest latency). Each distinct σ has a
cut-off τ̄(σ) = the largest menu step time with W(τ̄, σ) <= ε; equal cut-offs share a ladder
level. (8) lifts the ladder to at least the level of the plan's own σ and (5) then admits exactly
the islands with t <= τ̄(σ): the feasible set is exactly the (menu) plans with W <= ε. Nothing
bilinear is formed: W·Σprice never appears in the model; `planner.analysis.pareto` sweeps ε down the
staircase, and a (W, C)-optimal plan P* is always matched by the step whose ε is the last one P*
satisfies (that step returns W <= W(P*) and Σprice <= Σprice(P*), hence C <= C(P*)). Time enters
the model only through these comparisons, so it is not rounded; money is quantised once
(`planner.model.evaluate`), at most 0.5 price unit per island.
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from planner.model.evaluate import cost_usd, group_sync_s, wall_time_s
from planner.model.problem import (
    PRICE_UNITS_PER_USD_PER_HOUR,
    SECONDS_PER_HOUR,
    IslandChoice,
    Problem,
    SubResult,
    dominated_options,
)

LOG = logging.getLogger(__name__)

MONEY_SCALE_PER_USD_PER_HOUR = PRICE_UNITS_PER_USD_PER_HOUR
"""Integer price units per USD/h in the objective (quantisation <= 0.5 unit per island).

Time has no scale constant on purpose: it enters only through exact comparisons (L_i, λ), so it
is never rounded."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepData:
    """Constants of one step "cheapest plan with W <= ε" (see the module docstring)."""

    level_cut_s: tuple[float, ...]
    """τ̄ of each ladder level, descending (level 0 is the most permissive)."""
    sigma_level: dict[tuple[int, int, int], int | None]
    """(M, a, b) -> ladder level λ of σ(M, uplink of a, latency of b); None if nothing fits."""
    item_level: dict[int, int]
    """Menu item -> L_i, the last ladder level admitting it (items admitted at no level omitted)."""
    item_cap: dict[int, int]
    """Menu item -> u_i."""
    clusters: tuple[int, ...]
    """Clusters with admitted items."""
    price_floor_units: int = 0
    """Known lower bound on the optimum Σprice (0: none)."""
    item_price_cap: dict[int, int] | None = None
    """With a cost cap γ: item -> largest Σprice a plan using it may have and still cost <= γ."""
    islands_price_cap: dict[int, int] | None = None
    """With a cost cap γ: M -> largest Σprice a plan of M islands may have and still cost <= γ."""
    price_ub_units: int = 0
    """An upper bound on Σprice of any plan (for big-M rows)."""


def option_cap(problem: Problem, option_index: int) -> int:
    """Most islands of one option a plan can hold (island count, cluster nodes, GPU cap)."""
    option = problem.options[option_index]
    cap = min(problem.max_islands, problem.clusters[option.cluster_index].num_nodes // option.nodes)
    if problem.max_gpus is not None:
        cap = min(cap, problem.max_gpus // option.num_gpus)
    return max(cap, 0)


def price_cap_units(wall_s: float, cost_cap_usd: float) -> int:
    """Largest integer Σprice with cost_usd(wall_s, Σprice) <= cost_cap_usd (exact float check)."""
    guess = int(cost_cap_usd * SECONDS_PER_HOUR * PRICE_UNITS_PER_USD_PER_HOUR / wall_s)
    while cost_usd(wall_s, guess + 1) <= cost_cap_usd:
        guess += 1
    while guess >= 0 and cost_usd(wall_s, guess) > cost_cap_usd:
        guess -= 1
    return guess


def step_data(problem: Problem, max_wall_s: float | None, *, strict: bool,
              skip_options: frozenset[int] = frozenset(), price_floor_units: int = 0,
              cost_cap_usd: float | None = None) -> StepData | None:
    """Ladder, item levels and caps for "W <= max_wall_s" (W < when strict); None if nothing fits.

    With `cost_cap_usd` = γ the step only needs plans with C <= γ. A plan using item i has
    W >= W(t_i, σ = 0), so its Σprice is at most Π_i, the largest integer π with
    C(W(t_i, 0), π) <= γ; a plan of M islands has W >= W(t_min, σ_min(M)) (t_min: the fastest
    admitted item, σ_min(M): the smallest σ over cluster pairs), so Σprice <= Π_M likewise. These
    are necessary conditions (cuts), so no plan with C <= γ is lost; items whose cap is below
    `price_floor_units` (or their own price) are dropped outright. (Per item and M caps cut more
    steps but made each CP-SAT solve slower overall on the benchmark instances.)
    """
    levels = problem.levels_s
    clusters = sorted({problem.options[i.option_index].cluster_index for i in problem.menu})
    if not clusters or problem.max_islands < 1:
        return None
    sigma = {}
    for m in range(1, problem.max_islands + 1):
        for a in clusters:
            for b in clusters:
                if a <= b:  # (m, a, a): one cluster alone (its fabric); a < b: the pair's WAN
                    sigma[(m, a, b)] = group_sync_s(problem, m, (a, b))
    cut = {}
    search = bisect.bisect_left if strict else bisect.bisect_right
    for value in set(sigma.values()):
        if max_wall_s is None or math.isinf(max_wall_s):
            cut[value] = len(levels) - 1
        else:
            cut[value] = search(range(len(levels)), max_wall_s,
                                key=_level_wall(problem, levels, value)) - 1
    ladder = sorted({i for i in cut.values() if i >= 0}, reverse=True)
    if not ladder:
        return None
    position = {index: level for level, index in enumerate(ladder)}
    ascending_cuts = levels[ladder[::-1]]
    caps = {o: option_cap(problem, o) for o in range(len(problem.options)) if o not in skip_options}
    item_level, item_cap, item_price_cap = {}, {}, {}
    for i, item in enumerate(problem.menu):
        cap = min(caps.get(item.option_index, 0), problem.global_batch_seqs // item.seqs)
        admitted = len(ladder) - int(np.searchsorted(ascending_cuts, item.step_time_s, side="left"))
        if cap > 0 and admitted > 0 and cost_cap_usd is not None:
            item_price_cap[i] = price_cap_units(wall_time_s(problem, item.step_time_s, 0.0),
                                                cost_cap_usd)
            if item_price_cap[i] < max(price_floor_units,
                                       problem.options[item.option_index].price_units):
                cap = 0
        if cap > 0 and admitted > 0:
            item_level[i] = admitted - 1
            item_cap[i] = cap
    used = tuple(c for c in clusters
                 if any(problem.options[problem.menu[i].option_index].cluster_index == c
                        for i in item_level))
    islands_price_cap = None
    if cost_cap_usd is not None and item_level:
        fastest = min(problem.menu[i].step_time_s for i in item_level)
        islands_price_cap = {
            m: price_cap_units(wall_time_s(problem, fastest,
                                           min(v for (mm, _, _), v in sigma.items() if mm == m)),
                               cost_cap_usd)
            for m in range(1, problem.max_islands + 1)}
    return StepData(level_cut_s=tuple(float(c) for c in levels[ladder]),
                    sigma_level={key: position.get(cut[v]) for key, v in sigma.items()},
                    item_level=item_level, item_cap=item_cap, clusters=used or tuple(clusters),
                    price_floor_units=price_floor_units,
                    item_price_cap={i: c for i, c in item_price_cap.items()
                                    if i in item_level} or None,
                    islands_price_cap=islands_price_cap,
                    price_ub_units=(problem.max_islands
                                    * max(o.price_units for o in problem.options)))


def _level_wall(problem: Problem, levels: np.ndarray, sigma_s: float) -> Callable[[int], float]:
    """W at step-time level r with sync time `sigma_s` (the bisection key over the levels)."""
    def wall(r: int) -> float:
        return wall_time_s(problem, float(levels[r]), sigma_s)

    return wall


def choices_of(problem: Problem, counts: dict[int, int]) -> tuple[IslandChoice, ...]:
    """Island choices of per-item island counts."""
    out: list[IslandChoice] = []
    for i, count in sorted(counts.items()):
        item = problem.menu[i]
        out.extend(IslandChoice(pair_index=item.pair_index, accum_steps=item.accum_steps)
                   for _ in range(count))
    return tuple(out)


def build_step_model(problem: Problem,
                     data: StepData) -> tuple[cp_model.CpModel, dict[int, cp_model.IntVar]]:
    """The CP-SAT model of the module docstring; returns (model, x)."""
    model = cp_model.CpModel()
    options, menu = problem.options, problem.menu
    levels = len(data.level_cut_s)
    v = {lvl: model.new_bool_var(f"v{lvl}") for lvl in range(1, levels)}
    z = {c: model.new_bool_var(f"z{c}") for c in data.clusters}
    mu = {m: model.new_bool_var(f"mu{m}") for m in range(1, problem.max_islands + 1)}
    x = {i: model.new_int_var(0, cap, f"x{i}") for i, cap in data.item_cap.items()}
    model.add_exactly_one(mu.values())  # (1)
    model.add(sum(x.values()) == sum(m * b for m, b in mu.items()))  # (1)
    model.add(sum(menu[i].seqs * var for i, var in x.items()) == problem.global_batch_seqs)  # (2)
    for c in data.clusters:
        members = [i for i in x if options[menu[i].option_index].cluster_index == c]
        model.add(sum(options[menu[i].option_index].nodes * x[i] for i in members)
                  <= problem.clusters[c].num_nodes)  # (3)
        for i in members:  # (6)
            model.add(x[i] == 0).only_enforce_if(~z[c])
        model.add(sum(x[i] for i in members) >= 1).only_enforce_if(z[c])
    if problem.max_gpus is not None:  # (4)
        model.add(sum(options[menu[i].option_index].num_gpus * var for i, var in x.items())
                  <= problem.max_gpus)
    for i, last in data.item_level.items():  # (5)
        if last + 1 < levels:
            model.add(x[i] == 0).only_enforce_if(v[last + 1])
    for lvl in range(2, levels):  # (7)
        model.add_implication(v[lvl], v[lvl - 1])
    for (m, a, b), sync_level in data.sigma_level.items():  # (8)
        if a not in z or b not in z:
            continue
        # a pair of used clusters syncs over the WAN; one cluster alone (all others unused) over
        # its fabric
        clause = [~mu[m], ~z[a]] + ([~z[b]] if b != a else [z[c] for c in z if c != a])
        if sync_level is None:
            model.add_bool_or(clause)
        elif sync_level >= 1:
            model.add_bool_or([*clause, v[sync_level]])
    price = model.new_int_var(0, data.price_ub_units, "price")
    model.add(price == _price_expr(problem, x))
    if data.price_floor_units > 0:  # (9)
        model.add(price >= data.price_floor_units)
    for i, cap in (data.item_price_cap or {}).items():  # (10)
        if cap < data.price_ub_units:
            used = model.new_bool_var(f"b{i}")
            model.add(x[i] == 0).only_enforce_if(~used)
            model.add(price <= cap).only_enforce_if(used)
    for m, cap in (data.islands_price_cap or {}).items():  # (10)
        if cap < data.price_ub_units:
            model.add(price <= cap).only_enforce_if(mu[m])
    model.minimize(price)
    return model, x


def _price_expr(problem: Problem, x: dict[int, cp_model.IntVar]) -> cp_model.LinearExprT:
    expr: cp_model.LinearExprT = sum(
        problem.options[problem.menu[i].option_index].price_units * var for i, var in x.items())
    return expr


PROBING_LEVEL = 0
"""CP-SAT `cp_model_probing_level`: probing costs more than it saves on these knapsack-like steps
(about 4x faster staircase steps on the 80-option, 10-island case than the default 2)."""


class CpSatSubsolver:
    """Cheapest plan with W <= ε, by OR-Tools CP-SAT."""

    name = "cpsat"

    def __init__(self, problem: Problem, *, threads: int = 1) -> None:
        self.problem = problem
        self.threads = max(1, threads)
        self.skip = dominated_options(problem)
        self._hint: dict[int, int] = {}

    def min_price(self, max_wall_s: float | None, *, strict: bool, time_limit_s: float | None,
                  price_floor_units: int = 0, cost_cap_usd: float | None = None) -> SubResult:
        """Solve one step; the solver status is checked explicitly (never asserted).

        `price_floor_units`: a known lower bound on the optimum (lets the solver stop once met);
        `cost_cap_usd`: only plans with C <= this are wanted (adds the cuts of `step_data`).
        """
        data = step_data(self.problem, max_wall_s, strict=strict, skip_options=self.skip,
                         price_floor_units=price_floor_units, cost_cap_usd=cost_cap_usd)
        if data is None or not data.item_level:
            return SubResult(status="infeasible")
        model, x = build_step_model(self.problem, data)
        for i, var in x.items():
            model.add_hint(var, self._hint.get(i, 0))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = self.threads
        solver.parameters.cp_model_probing_level = PROBING_LEVEL
        if time_limit_s is not None:
            solver.parameters.max_time_in_seconds = max(time_limit_s, 1e-3)
        status = solver.solve(model)
        if status == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT model invalid: {model.validate()}")
        if status == cp_model.INFEASIBLE:
            return SubResult(status="infeasible")
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return SubResult(status="unknown")
        counts = {i: int(solver.value(var)) for i, var in x.items()}
        self._hint = counts
        return SubResult(status="optimal" if status == cp_model.OPTIMAL else "feasible",
                         choices=choices_of(self.problem, counts),
                         price_units=int(round(solver.objective_value)))


def any_plan(problem: Problem, time_limit_s: float | None = 10.0) -> bool | None:
    """Is there any feasible plan (no time or cost limit)? None when undecided in time."""
    data = step_data(problem, None, strict=False)
    if data is None or not data.item_level:
        return False
    model, _ = build_step_model(problem, data)
    model.clear_objective()  # type: ignore[no-untyped-call]  # untyped in OR-Tools
    solver = cp_model.CpSolver()
    if time_limit_s is not None:
        solver.parameters.max_time_in_seconds = time_limit_s
    status = solver.solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return True
    if status == cp_model.INFEASIBLE:
        return False
    return None
