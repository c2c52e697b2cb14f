"""The exact frontier of expected wall time vs expected cost under failures (issue 28).

With the failure model on (`planner.model.risk`) a plan P of class κ = (M islands, cluster set U),
inner step τ and Σprice Π has

    E[W] = w(κ, τ)·F(P),   E[C] >= E[W]·Π/3600 + egress(κ, failure-free volume),
    w(κ, τ) = D/(B·S)·(τ + σ_κ/H),   F(P) >= 1,

where F is Daly's factor φ of its one island (M = 1: the island's GPU count and tier fix its
interruption rate, so the total GPU count of an FSDP plan is carried by the item itself) or
B/Σ a_i·b_i for islands (M >= 2: every island's own rate, restart and batch share). F depends on
which islands carry how much batch, not on Π alone, so the DP's "least Π per class and level"
(`planner.solvers.dp`) no longer decides the frontier; it still bounds it.

Claim: `expected_frontier` returns exactly the non-dominated (E[W], E[C]) points over all plans.

Why. Sweep the levels τ̄ (menu step times) upward with the DP's knapsack tables, which at level τ̄
give p(κ, τ̄) = least Π of a class-κ plan with every t <= τ̄, and, for every subset of clusters
and every (islands, sequences) rest, the least Π of completing a plan (`DpTables.tables`). Keep
the staircase E of non-dominated points of plans evaluated so far (real plans: their exact
expected values from `planner.model.evaluate`), seeded with the failure-free DP frontier's plans.
Every plan Q has a level τ̄ = τ_Q and class κ_Q, and at that pair

    E[W_Q] >= w,   E[C_Q] >= w·Π_Q/3600 + egress_lb(κ)    (F >= 1, billing >= wall time).

So if some e in E has W_e <= w and C_e <= w·Π_Q/3600 + egress_lb, Q is dominated (or equals e):
at the pair, only plans with Π <= Π_max = 3600·(min{C_e : W_e <= w} − egress_lb)/w can matter
(no bound when no point of E is that fast), and a pair with p(κ, τ̄) > Π_max is skipped whole. The
rest are enumerated exactly (`_Search`): per cluster of U, per option, an island count k and the
total s of sequences per GPU its k islands carry — the only things F, Π, σ and the node use
depend on (islands of one option are interchangeable: their loss is linear in their batch) —
pruned by Π + least completing price > Π_max (the tables), nodes and batch. For each admissible
(option, k, s) a split of s into k menu items admitted at τ̄ is built and the plan evaluated
exactly; its τ is at most τ̄, and F only grows with τ (through σ-free quantities: φ with the
step, participation with the outer period), so it is as good as any split of the same totals at
this pair — and a split with a smaller τ is enumerated at its own, lower level. Hence every plan
is matched by an evaluated plan no worse in both expected values, and the staircase of the
evaluated plans is the exact frontier. The sweep stops once a point of E has W_e <= D/(B·S)·τ̄'
and C_e <= LB(τ̄') for the next level τ̄' (the DP's price bound, valid for expected costs too),
or the deadline/budget rule it out. Floating-point sums of losses in different orders are the
only inexactness (relative 1e-12).

If the enumeration exceeds `MAX_SEARCH_NODES` or the time limit, the frontier so far is
returned with `proven_exact` false and a note. The brute-force comparison is
tests/test_expected_planner.py.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.model.evaluate import evaluate, group_sync_s, nondominated, wall_time_s
from planner.model.problem import (
    PRICE_UNITS_PER_USD_PER_HOUR,
    SECONDS_PER_HOUR,
    IslandChoice,
    Plan,
    Problem,
)
from planner.model.risk import egress_usd
from planner.solvers.dp import (
    INF,
    DpItem,
    DpTables,
    _classes,
    _lower_bounds,
    dp_frontier,
    dp_items,
)

LOG = logging.getLogger(__name__)

MAX_SEARCH_NODES = 3_000_000
"""Enumeration steps over all pairs before the search gives up proving exactness."""
SLACK = 1e-9
"""Relative slack on price bounds: the enumeration errs towards more plans, never fewer."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ExpectedResult:
    """The expected-value frontier and how it was searched."""

    points: tuple[Plan, ...]
    """Non-dominated plans by (E[W], E[C]) within budget and deadline, fastest first."""
    proven_exact: bool
    """False when the node cap or the time limit stopped the search."""
    note: str = ""
    """Why not exact (empty when exact)."""
    pairs_searched: int = 0
    """(class, level) pairs whose plans were enumerated."""
    plans_evaluated: int = 0
    """Plans evaluated exactly."""


class _Staircase:
    """Non-dominated (W, C) points with their plans, W ascending and C descending."""

    def __init__(self) -> None:
        self.walls: list[float] = []
        self.plans: list[Plan] = []

    def add(self, plan: Plan) -> None:
        i = bisect.bisect_right(self.walls, plan.wall_time_s)
        if i > 0 and self.plans[i - 1].cost_usd <= plan.cost_usd:
            return  # dominated (or equal) by a point at least as fast
        j = i
        while j < len(self.plans) and self.plans[j].cost_usd >= plan.cost_usd:
            j += 1
        self.walls[i:j] = [plan.wall_time_s]
        self.plans[i:j] = [plan]

    def min_cost_within(self, wall_s: float) -> float:
        """Least C of a point with W <= wall_s (inf: none)."""
        i = bisect.bisect_right(self.walls, wall_s)
        return self.plans[i - 1].cost_usd if i > 0 else math.inf


@dataclass(frozen=True, kw_only=True, slots=True)
class _OptionChoice:
    """The items of one option admitted at the current level."""

    option_index: int
    cluster: int
    """Position of its cluster in the tables."""
    nodes: int
    gpus: int
    price_units: int
    items: dict[int, DpItem]
    """b (the island's sequences per inner step, k·m·dp) -> the admitted item of that b."""


class _Search:
    """Exhaustive enumeration of one (class, level) pair within a price bound (module docstring)."""

    def __init__(self, problem: Problem, tables: DpTables, by_cluster: list[list[_OptionChoice]],
                 members: tuple[int, ...], islands: int, price_cap: float,
                 budget: list[int], memo: dict[tuple[tuple[int, ...], int, int], int]) -> None:
        self.problem = problem
        self.tables = tables
        self.by_cluster = by_cluster
        self.members = members
        self.islands = islands
        self.cap = price_cap
        self.budget = budget  # [nodes left before the global cap]; mutated
        self.batch = problem.global_batch_seqs
        self.found: list[list[tuple[_OptionChoice, int, int]]] = []
        self.exhausted = False
        self.sums: dict[tuple[int, int], set[int]] = {}
        self.memo = memo  # shared by the searches of one level

    def _sums(self, option: _OptionChoice, k: int) -> set[int]:
        key = (option.option_index, k)
        if key not in self.sums:
            if k == 0:
                self.sums[key] = {0}
            else:
                prev = self._sums(option, k - 1)
                self.sums[key] = {a + s for a in prev for s in option.items}
        return self.sums[key]

    def _conv(self, members: tuple[int, ...], m: int, b: int) -> int:
        """Least price of m islands and b sequences on `members` (each used): the DP's class
        table, which for the set of every cluster keeps only the b = B column up to date — the
        other entries are convolved here on demand (memoised)."""
        if len(members) < len(self.tables.clusters) or b == self.batch:
            return int(self.tables.conv(members)[m, b])
        key = (members, m, b)
        if key not in self.memo:
            first, rest = self.tables.g[members[0]], self.tables.conv(members[1:])
            best = int(INF)
            for m1 in range(1, m):
                sums = first[m1, : b + 1] + rest[m - m1, b - np.arange(b + 1)]
                best = min(best, int(sums.min()))
            self.memo[key] = min(best, int(INF))
        return self.memo[key]

    def _rest_bound(self, position: int, used_here: int, m_left: int, b_left: int) -> int:
        """Least price to complete `m_left` islands and `b_left` sequences with the rest of the
        current cluster (from option `position` on) and the clusters after it (a lower bound:
        the tables hold every option of the cluster and ignore nodes already used)."""
        if m_left < 0 or b_left < 0:
            return int(INF)
        rest = self.members[position + 1:]
        here = (self.members[position],) + rest
        best = self._conv(here, m_left, b_left) if m_left > 0 else int(INF)
        if used_here > 0:
            if rest:
                if m_left > 0:
                    best = min(best, self._conv(rest, m_left, b_left))
            elif m_left == 0 and b_left == 0:
                best = 0
        return best

    def run(self) -> None:
        self._cluster(0, 0, 0, 0, [])

    def _cluster(self, position: int, m: int, b: int, price: int,
                 chosen: list[tuple[_OptionChoice, int, int]]) -> None:
        if position == len(self.members):
            if m == self.islands and b == self.batch:
                self.found.append(list(chosen))
            return
        options = self.by_cluster[self.members[position]]
        self._option(position, options, 0, m, b, price, 0, 0, chosen)

    def _option(self, position: int, options: list[_OptionChoice], index: int, m: int, b: int,
                price: int, used_here: int, nodes_here: int,
                chosen: list[tuple[_OptionChoice, int, int]]) -> None:
        self.budget[0] -= 1
        if self.budget[0] < 0:
            self.exhausted = True
            return
        if price + self._rest_bound(position, used_here, self.islands - m,
                                    self.batch - b) > self.cap:
            return
        if index == len(options):
            if used_here > 0:
                self._cluster(position + 1, m, b, price, chosen)
            return
        option = options[index]
        limit = self.problem.clusters[self.problem.options[option.option_index]
                                      .cluster_index].num_nodes
        # k = 0 first, then more islands of this option
        self._option(position, options, index + 1, m, b, price, used_here, nodes_here, chosen)
        for k in range(1, self.islands - m + 1):
            if self.exhausted or nodes_here + k * option.nodes > limit \
                    or price + k * option.price_units > self.cap:
                break
            for s in sorted(self._sums(option, k)):
                seqs = s  # items are keyed by b = k·m·dp, the island's sequences
                if b + seqs > self.batch:
                    break
                chosen.append((option, k, s))
                self._option(position, options, index + 1, m + k, b + seqs,
                             price + k * option.price_units, used_here + k,
                             nodes_here + k * option.nodes, chosen)
                chosen.pop()
                if self.exhausted:
                    return


def _split(option: _OptionChoice, k: int, total: int) -> list[DpItem]:
    """k admitted items of the option whose s sum to `total`, as balanced as possible (the
    smallest largest step time found greedily from the even split, then any split)."""
    values = sorted(option.items)
    even = [total // k + (1 if i < total % k else 0) for i in range(k)]
    if all(v in option.items for v in even):
        return [option.items[v] for v in even]
    # any split: dynamic programme over islands
    reach: list[dict[int, int]] = [{0: 0}]
    for _ in range(k):
        nxt: dict[int, int] = {}
        for acc in reach[-1]:
            for v in values:
                if acc + v <= total and acc + v not in nxt:
                    nxt[acc + v] = v
        reach.append(nxt)
    out, acc = [], total
    for step in range(k, 0, -1):
        v = reach[step][acc]
        out.append(option.items[v])
        acc -= v
    return out


def _choices(problem: Problem,
             leaf: Sequence[tuple[_OptionChoice, int, int]]) -> list[IslandChoice]:
    out = []
    for option, k, total in leaf:
        for item in _split(option, k, total):
            menu = problem.menu[item.menu_index]
            out.append(IslandChoice(pair_index=menu.pair_index, accum_steps=menu.accum_steps))
    return out


def expected_frontier(problem: Problem, *, time_limit_s: float | None = None,
                      max_nodes: int = MAX_SEARCH_NODES) -> ExpectedResult:
    """The exact (E[W], E[C]) frontier of a problem with the failure model on (module
    docstring)."""
    if problem.risk is None:
        raise ValueError("expected_frontier needs a problem with the failure model on")
    stop_at = None if time_limit_s is None else time.monotonic() + time_limit_s
    stairs = _Staircase()
    free = dataclasses.replace(problem, risk=None, budget_usd=None, deadline_s=None)
    seen: set[tuple[tuple[int, int], ...]] = set()
    evaluated = 0
    for plan in dp_frontier(free, time_limit_s=time_limit_s).points:
        seen.add(tuple((c.pair_index, c.accum_steps) for c in plan.choices))
        stairs.add(evaluate(problem, plan.choices))
        evaluated += 1
    clusters = sorted({o.cluster_index for o in problem.options})
    items = dp_items(problem, clusters)
    tables = DpTables(problem, clusters)
    exact, note = True, ""
    if not items or problem.max_islands < 1:
        return ExpectedResult(points=(), proven_exact=True)
    levels = np.unique(np.array([i.step_time_s for i in items]))
    bounds = _lower_bounds(problem, items, levels)
    classes = _classes(len(clusters))
    sigma = {(members, m): group_sync_s(problem, m, [clusters[k] for k in members])
             for members in classes for m in range(1, problem.max_islands + 1)}
    steps = problem.inner_steps_total
    budget = [max_nodes]
    pairs = 0
    by_cluster: list[dict[int, _OptionChoice]] = [{} for _ in clusters]
    position = 0
    for index, level in enumerate(levels.tolist()):
        changed = set()
        while position < len(items) and items[position].step_time_s <= level:
            item = items[position]
            changed.add(item.cluster)
            tables.add(item)
            option_index = problem.menu[item.menu_index].option_index
            option = problem.options[option_index]
            entry = by_cluster[item.cluster].get(option_index)
            if entry is None:
                entry = _OptionChoice(option_index=option_index, cluster=item.cluster,
                                      nodes=option.nodes, gpus=option.num_gpus,
                                      price_units=option.price_units, items={})
                by_cluster[item.cluster][option_index] = entry
            entry.items.setdefault(problem.menu[item.menu_index].seqs, item)
            position += 1
        for k in sorted(changed):
            tables.refresh(k)
        ordered = [sorted(d.values(), key=lambda o: (o.price_units, o.option_index))
                   for d in by_cluster]
        memo: dict[tuple[tuple[int, ...], int, int], int] = {}
        for members, m in itertools.product(classes, range(1, problem.max_islands + 1)):
            price = int(tables.class_prices(members)[m])
            if price >= INF:
                continue
            wall = wall_time_s(problem, level, sigma[(members, m)])
            if problem.deadline_s is not None and wall > problem.deadline_s:
                continue
            egress = egress_usd(problem, m, [clusters[k] for k in members],
                                steps / problem.inner_steps, wall)
            cap = math.inf
            best = stairs.min_cost_within(wall)
            if problem.budget_usd is not None:
                best = min(best, problem.budget_usd)
            if math.isfinite(best):
                cap = ((best - egress) * SECONDS_PER_HOUR * PRICE_UNITS_PER_USD_PER_HOUR / wall
                       * (1.0 + SLACK))
            if price > cap:
                continue
            pairs += 1
            search = _Search(problem, tables, ordered, members, m, cap, budget, memo)
            search.run()
            for leaf in search.found:
                choices = _choices(problem, leaf)
                key = tuple(sorted((c.pair_index, c.accum_steps) for c in choices))
                if key in seen:
                    continue
                seen.add(key)
                stairs.add(evaluate(problem, choices))
                evaluated += 1
            if search.exhausted:
                exact, note = False, (f"the enumeration passed {max_nodes:,} steps; the "
                                      "frontier so far is returned")
                break
            if stop_at is not None and time.monotonic() > stop_at:
                exact, note = False, "the search hit its time limit"
                break
        if not exact or index + 1 == len(levels):
            break
        nxt = float(levels[index + 1])
        floor_w = steps * nxt
        if stairs.min_cost_within(floor_w) <= bounds[index + 1]:
            break  # every later plan is dominated by a point found already
        if problem.deadline_s is not None and floor_w > problem.deadline_s:
            break
        if problem.budget_usd is not None and bounds[index + 1] > problem.budget_usd:
            break
    points = [p for p in nondominated(stairs.plans)
              if (problem.deadline_s is None or p.wall_time_s <= problem.deadline_s)
              and (problem.budget_usd is None or p.cost_usd <= problem.budget_usd)]
    LOG.info("expected dp: %d pairs searched, %d plans evaluated, %d points", pairs, evaluated,
             len(points))
    return ExpectedResult(points=tuple(points), proven_exact=exact, note=note,
                          pairs_searched=pairs, plans_evaluated=evaluated)
