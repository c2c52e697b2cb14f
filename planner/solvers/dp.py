"""An exact dynamic program for the cost-time frontier: per-cluster knapsacks and a level sweep.

Every plan has a *class* κ = (M islands, cluster set U) — which fixes σ — and an inner-step time
τ taken from the finite set of menu step times (the *levels*). For a class and a level τ̄ let
p(κ, τ̄) be the smallest Σprice (integer price units) of a plan of class κ whose islands all have
t <= τ̄. Then every frontier point is a candidate (W(τ̄, σ_κ), C(W, p(κ, τ̄))) for some (κ, τ̄), and
every candidate is matched by a real plan with the same price and τ <= τ̄, so

    frontier = non-dominated candidates,  and a candidate that survives has a plan with τ = τ̄

(a plan with τ < τ̄ already gave the same price at its own, lower level, so only *strict* price
decreases along τ̄ are recorded). No time is rounded: W and C are computed by the evaluator's own
functions from the same floats.

p(κ, τ̄) comes from one unbounded knapsack per cluster c over the admitted menu items,
f_c[m, n, b] = least price of m islands using exactly n nodes of c and b sequences, so the node
limit is the array bound; g_c[m, b] = min_n f_c. Clusters combine by min-plus convolution over
(m, b) with at least one island each, read at b = B. The sweep adds items in ascending t; after
each level only the classes that contain a changed cluster are recomputed (convolutions of the
unchanged clusters are cached). It stops once no later level can yield a non-dominated point:
every plan with τ >= τ̄ costs at least LB(τ̄) = D/(B·S)/3600 · B · min_i max(τ̄, t_i)·π_i/b_i
(τ·Σπ >= Σ max(τ̄, t_i)·π_i and Σ b_i = B), and a found point with W <= D/(B·S)·τ̄ and C <= LB(τ̄)
dominates all of them. Plans are rebuilt for the frontier points only, by peeling items off the
knapsack tables (optimal substructure: f[s] = f[s − δ_i] + π_i for an item i of an optimal plan).

Where the structure does not allow it (a GPU cap couples the clusters; too large a state) the
planner uses CP-SAT (`dp_unsupported` says why).

Failures (issue 28). With the failure model on (`Problem.risk`) the objectives are the expected
wall time and cost (`planner.model.risk`), and `--solver dp` runs `planner.solvers.expected` on
these same tables. How the state carries what failures depend on: an item is an island option
(cluster, nodes, GPUs per node, price tier) with its s, so its GPU count and tier — hence its
interruption rate, restarts and checkpoint write — travel with the item. A plan of one island
(FSDP) has exactly that item's GPUs as its total: its expected time K·t·φ(G, t) is a function of
the item alone. A plan of several DiLoCo islands loses Σ_i (1 − a_i)·b_i of its batch, each term
fixed by the island's item and the outer period H·τ + σ, which the level sweep and the class
(M, U) fix. The least-price tables then bound every plan of a (class, level) from below, and the
expected sweep enumerates, exactly, the plans those bounds cannot rule out; the dominance
reductions here (`dp_items`, `dominated_options`) also compare the options' interruption figures.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.model.evaluate import cost_usd, evaluate, group_sync_s, nondominated, wall_time_s
from planner.model.problem import (
    PRICE_UNITS_PER_USD_PER_HOUR,
    SECONDS_PER_HOUR,
    IslandChoice,
    Plan,
    Problem,
    SolveProvenance,
    dominated_options,
)

LOG = logging.getLogger(__name__)

INF = np.int64(2**61)
"""Price of an unreachable state (sums of two stay below the int64 limit)."""
MAX_STATES_PER_CLUSTER = 4_000_000
"""Largest (M+1)·(nodes+1)·(B+1) table of one cluster the DP accepts."""
MAX_CLUSTERS = 6
"""Cluster sets are enumerated (2^clusters classes per island count)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DpItem:
    """A menu item as the knapsack sees it."""

    menu_index: int
    """Index into `Problem.menu`."""
    cluster: int
    """Position of its cluster in `DpTables.clusters`."""
    nodes: int
    """Nodes of one island."""
    seqs: int
    """Sequences per inner step of one island."""
    price_units: int
    """Price of one island (integer units)."""
    step_time_s: float
    """t of the island."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """A (class, level) whose least price dropped: a possible frontier point."""

    wall_time_s: float
    """W(τ̄, σ of the class)."""
    cost_usd: float
    """C(W, price)."""
    level_s: float
    """τ̄."""
    islands: int
    """M."""
    cluster_set: tuple[int, ...]
    """U, as positions in `DpTables.clusters`."""
    price_units: int
    """p(κ, τ̄)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DpResult(SolveProvenance):
    """The DP's frontier with its provenance (`proven_exact` false when the time limit stopped
    the sweep)."""

    points: tuple[Plan, ...]
    """Non-dominated plans within budget and deadline, fastest first."""
    candidates: int
    """Candidates recorded."""


def _node_bound(problem: Problem, cluster_index: int) -> int:
    sizes = [o.nodes for o in problem.options if o.cluster_index == cluster_index]
    return min(problem.clusters[cluster_index].num_nodes,
               problem.max_islands * max(sizes, default=0))


def dp_unsupported(problem: Problem) -> str | None:
    """Why the DP cannot solve `problem` (None: it can)."""
    if problem.max_gpus is not None:
        return "a GPU cap (limits.max_gpus) couples the clusters"
    used = sorted({o.cluster_index for o in problem.options})
    if len(used) > MAX_CLUSTERS:
        return f"more than {MAX_CLUSTERS} clusters"
    for c in used:
        states = ((problem.max_islands + 1) * (_node_bound(problem, c) + 1)
                  * (problem.global_batch_seqs + 1))
        if states > MAX_STATES_PER_CLUSTER:
            return (f"cluster {problem.clusters[c].name}: {states:,} knapsack states > "
                    f"{MAX_STATES_PER_CLUSTER:,}")
    return None


def dp_items(problem: Problem, clusters: Sequence[int]) -> list[DpItem]:
    """Menu items of non-dominated options, less items another item of the same cluster and
    batch share beats on nodes, price and time — and, with the failure model on, on every
    interruption figure (exact: swapping keeps W and C, expected or not, from growing)."""

    skip = dominated_options(problem)
    risk = problem.risk
    position = {c: i for i, c in enumerate(clusters)}
    groups: dict[tuple[int, int], list[DpItem]] = {}
    for index, item in enumerate(problem.menu):
        if item.option_index in skip:
            continue
        option = problem.options[item.option_index]
        entry = DpItem(menu_index=index, cluster=position[option.cluster_index], nodes=option.nodes,
                       seqs=item.seqs, price_units=option.price_units, step_time_s=item.step_time_s)
        groups.setdefault((entry.cluster, entry.seqs), []).append(entry)
    kept: list[DpItem] = []
    for group in groups.values():
        group.sort(key=lambda i: (i.step_time_s, i.price_units, i.nodes, i.menu_index))
        front: list[DpItem] = []
        for entry in group:
            if not any(f.nodes <= entry.nodes and f.price_units <= entry.price_units
                       and (risk is None or risk.options[_option(problem, f)].no_worse_than(
                           risk.options[_option(problem, entry)]))
                       for f in front):
                front.append(entry)
        kept.extend(front)
    return sorted(kept, key=lambda i: (i.step_time_s, i.menu_index))


def _option(problem: Problem, item: DpItem) -> int:
    return problem.menu[item.menu_index].option_index


# ---- knapsack tables -----------------------------------------------------------------------


class DpTables:
    """Per-cluster knapsack tables f_c[m, n, b] and their class combinations."""

    def __init__(self, problem: Problem, clusters: Sequence[int]) -> None:
        self.problem = problem
        self.clusters = tuple(clusters)
        self.max_m = problem.max_islands
        self.batch = problem.global_batch_seqs
        self.f = []
        for c in self.clusters:
            table = np.full((self.max_m + 1, _node_bound(problem, c) + 1, self.batch + 1), INF,
                            dtype=np.int64)
            table[0, 0, 0] = 0
            self.f.append(table)
        self.g = [self._reduce(k) for k in range(len(self.clusters))]
        self.tables: dict[tuple[int, ...], np.ndarray] = {
            members: np.full((self.max_m + 1, self.batch + 1), INF, dtype=np.int64)
            for members in _classes(len(self.clusters))}
        for k in range(len(self.clusters)):
            self.tables[(k,)] = self.g[k]
        # per cluster position k: (class, class less k, islands of the latter) of every class
        # with k and another cluster that can have a finite entry (at most max_m clusters)
        self._updates: list[list[tuple[tuple[int, ...], tuple[int, ...], int]]] = [
            [(members, tuple(c for c in members if c != k), len(members) - 1)
             for members in self.tables if k in members and 1 < len(members) <= self.max_m]
            for k in range(len(self.clusters))]

    def add(self, item: DpItem) -> None:
        """Admit any number of islands of `item` (bounded by the table: islands, nodes, batch)."""
        f = self.f[item.cluster]
        most = min(self.max_m, (f.shape[1] - 1) // item.nodes, self.batch // item.seqs)
        chunk = 1
        while most > 0:  # binary splitting: chunks 1, 2, 4, ... reach every count 0..most
            q = min(chunk, most)
            dm, dn, db = q, q * item.nodes, q * item.seqs
            shifted = (f[: f.shape[0] - dm, : f.shape[1] - dn, : f.shape[2] - db]
                       + q * item.price_units)
            np.minimum(f[dm:, dn:, db:], shifted, out=f[dm:, dn:, db:])
            most -= q
            chunk *= 2

    def _reduce(self, k: int) -> np.ndarray:
        g = self.f[k].min(axis=1)
        g[0, :] = INF  # a cluster of a class has at least one island
        result: np.ndarray = g
        return result

    def refresh(self, k: int) -> bool:
        """Recompute g of cluster position k and every class table containing it; True if changed.

        g only falls, and min-plus convolution distributes over min, so a class table G_V with
        k in V is updated exactly by convolving just the changed entries of g_k with G_{V∖k}.

        Only the rows that can be finite are convolved. Claim: the same tables. Why: every
        member of a class has at least one island (g[0, :] = INF), so G_W[M, :] = INF for
        M < |W|; a changed entry (m1, b1) meets the rows M >= |V| - 1 of G_{V∖k} only when
        m1 + |V| - 1 <= max_m, and any other pair adds g + INF >= INF, which changes no entry
        (<= INF). So the rows of G_{V∖k} below |V| - 1 are skipped, the changed entries with
        too many islands are dropped, and a class with more clusters than max_m islands (all
        INF) is never convolved. Checked by: tests/test_dp.py and tests/test_planner_layouts.py
        (the DP equals brute force), benchmarks/compare_layout_tables.py (frontiers SAME)."""
        g = self._reduce(k)
        rows, cols = np.nonzero(g < self.g[k])
        if rows.size == 0:
            return False
        self.g[k] = g
        everyone = tuple(range(len(self.clusters)))
        for members, others, fewest in self._updates[k]:
            reach = rows <= self.max_m - fewest
            if not reach.any():
                continue
            table, rest = self.tables[members], self.tables[others]
            if members == everyone:  # never a `rest`: only its b = B column is read
                self._update_column(table[fewest:], rest[fewest:], g, rows[reach], cols[reach])
                continue
            _convolve_changes(table[fewest:], rest[fewest:], g, rows[reach], cols[reach])
            np.minimum(table, INF, out=table)
        self.tables[(k,)] = g
        return True

    def _update_column(self, table: np.ndarray, rest: np.ndarray, g: np.ndarray, rows: np.ndarray,
                       cols: np.ndarray) -> None:
        """table[M, B] = min(table[M, B], min over changed (m1, b1) of
        g[m1, b1] + rest[M − m1, B − b1])."""
        column = table[:, self.batch]
        for m1 in np.unique(rows).tolist():
            b1 = cols[rows == m1]
            sums = g[m1, b1][None, :] + rest[: table.shape[0] - m1, self.batch - b1]
            np.minimum(column[m1:], sums.min(axis=1), out=column[m1:])
        np.minimum(column, INF, out=column)

    def class_prices(self, members: tuple[int, ...]) -> np.ndarray:
        """p[M] of the cluster set `members` at b = B."""
        return self.tables[members][:, self.batch]

    def conv(self, members: tuple[int, ...]) -> np.ndarray:
        """G_V: min-plus convolution of g over `members` (each with >= 1 island)."""
        return self.tables[members]


# ---- the sweep -------------------------------------------------------------------------------


CHUNK = 128
"""Changed entries of one row convolved at once (bounds the temporary: rows x CHUNK x batch)."""
FEW = 24
"""Up to this many changed entries, one at a time (the windows cost more than they save)."""


def _convolve_changes(table: np.ndarray, rest: np.ndarray, g: np.ndarray, rows: np.ndarray,
                      cols: np.ndarray) -> None:
    """table[m1 + M, b1 + b] = min(table[m1 + M, b1 + b], g[m1, b1] + rest[M, b]) for every
    changed entry (m1, b1), in place.

    Claim: the table `DpTables.refresh` computed one changed entry at a time. Why: the same
    integer sums and minima (int64, exact, so their order does not matter), taken for the
    changed entries of one row m1 together: each entry's shifted copy of `rest` is a window of
    `rest` padded on the left with INF, and an INF-padded place adds INF + g >= INF, which no
    table entry (<= INF) exceeds, so it changes nothing. Python loops once per row and chunk
    instead of once per entry (the 70B multicloud instance's solve was most of it).
    Checked by: tests/test_layout_speed.py (equal to the entry-by-entry update), tests/test_dp.py
    and tests/test_planner_layouts.py (the DP equals brute force)."""
    width = table.shape[1]
    if rows.size <= FEW:
        for m1, b1 in zip(rows.tolist(), cols.tolist(), strict=True):
            view = table[m1:, b1:]
            np.minimum(view, g[m1, b1] + rest[: table.shape[0] - m1, : width - b1], out=view)
        return
    for m1 in np.unique(rows).tolist():
        height = table.shape[0] - m1
        padded = np.full((height, 2 * width), INF, dtype=np.int64)
        padded[:, width:] = rest[:height]
        windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=1)
        changed = cols[rows == m1]
        view = table[m1:]
        for at in range(0, changed.size, CHUNK):
            b1 = changed[at:at + CHUNK]
            sums = windows[:, width - b1, :] + g[m1, b1][None, :, None]
            np.minimum(view, sums.min(axis=1), out=view)


def _lower_bounds(problem: Problem, items: Sequence[DpItem], levels: np.ndarray) -> np.ndarray:
    """LB(τ̄) of the module docstring, in USD, for every level (a bound on plans with τ >= τ̄)."""
    return _cost_bounds(problem, np.array([i.step_time_s for i in items]),
                        np.array([i.price_units / i.seqs for i in items]), levels)


def plan_lower_bounds(problem: Problem) -> tuple[float, float]:
    """(wall seconds, USD) below which no plan of `problem` goes, from its menu alone.

    Claim: every plan has W >= D/(B·S)·min_i t_i and C >= LB(0) of the module docstring, the
    minima over all menu items. Why: W = D/(B·S)·(τ + σ/H) with σ >= 0 and τ the largest step
    time of the plan's islands, each a menu item's (`build_menu` keeps the fastest row per
    (option, b), so no island is faster than its menu item); C is LB(τ̄) at τ̄ = 0, which bounds
    every plan. Only failure-free figures: with the failure model on (`Problem.risk`) the
    expected figures are not bounded here and (0, 0) is returned. Cost: one pass over the menu,
    so a deadline or budget below these is refused before any search (issue 29: infeasible
    queries no slower than feasible ones).
    Checked by: tests/test_startup.py (never above the exact frontier's fastest time and least
    cost on the shipped instances; an impossible deadline is refused without a search).
    """
    if problem.risk is not None or not problem.menu:
        return 0.0, 0.0
    t = np.array([m.step_time_s for m in problem.menu])
    e = np.array([problem.options[m.option_index].price_units / m.seqs for m in problem.menu])
    wall = problem.inner_steps_total * float(t.min()) * (1.0 - 1e-9)  # margin as _cost_bounds
    return wall, float(_cost_bounds(problem, t, e, np.zeros(1))[0])


def _cost_bounds(problem: Problem, t: np.ndarray, e: np.ndarray,
                 levels: np.ndarray) -> np.ndarray:
    """LB(τ̄) for items of step times `t` and price units per sequence `e`."""
    order = np.argsort(t, kind="stable")
    t, e = t[order], e[order]
    prefix = np.minimum.accumulate(e)  # min e over items with t_i <= level
    suffix = np.minimum.accumulate((t * e)[::-1])[::-1]  # min t·e over items with t_i > level
    count = np.searchsorted(t, levels, side="right")
    below = np.where(count > 0, levels * prefix[np.maximum(count - 1, 0)], np.inf)
    above = np.where(count < len(t), suffix[np.minimum(count, len(t) - 1)], np.inf)
    scale = (problem.inner_steps_total * problem.global_batch_seqs
             / (SECONDS_PER_HOUR * PRICE_UNITS_PER_USD_PER_HOUR))
    return scale * np.minimum(below, above) * (1.0 - 1e-9)  # margin: a bound, never a false stop


def _classes(size: int) -> list[tuple[int, ...]]:
    return [combo for r in range(1, size + 1) for combo in itertools.combinations(range(size), r)]


def sweep(
    problem: Problem, *, time_limit_s: float | None = None,
) -> tuple[list[Candidate], DpTables, list[DpItem], bool, int, int]:
    """Level sweep of the module docstring: (candidates, tables, items, finished, swept, levels)."""
    clusters = sorted({o.cluster_index for o in problem.options})
    items = dp_items(problem, clusters)
    tables = DpTables(problem, clusters)
    if not items or problem.max_islands < 1:
        return [], tables, items, True, 0, 0
    levels = np.unique(np.array([i.step_time_s for i in items]))
    bounds = _lower_bounds(problem, items, levels)
    # a class of more clusters than islands has no plan (its prices stay INF): never read
    classes = [c for c in _classes(len(clusters)) if len(c) <= problem.max_islands]
    sigma = {(members, m): group_sync_s(problem, m, [clusters[k] for k in members])
             for members in classes for m in range(1, problem.max_islands + 1)}
    best = {members: np.full(problem.max_islands + 1, INF, dtype=np.int64) for members in classes}
    candidates: list[Candidate] = []
    pending: list[tuple[float, float]] = []  # (W, C) of candidates not yet below the W threshold
    cheapest_below = np.inf
    stop_at = None if time_limit_s is None else time.monotonic() + time_limit_s
    position, finished = 0, True
    for index, level in enumerate(levels.tolist()):
        changed = set()
        while position < len(items) and items[position].step_time_s <= level:
            tables.add(items[position])
            changed.add(items[position].cluster)
            position += 1
        changed = {k for k in sorted(changed) if tables.refresh(k)}
        for members in classes:
            if not changed.intersection(members):
                continue
            prices = tables.class_prices(members)
            for m in np.flatnonzero(prices < best[members]).tolist():
                if m == 0 or prices[m] >= INF:
                    continue
                wall = wall_time_s(problem, level, sigma[(members, m)])
                cand = Candidate(wall_time_s=wall, cost_usd=cost_usd(wall, int(prices[m])),
                                 level_s=level, islands=m, cluster_set=members,
                                 price_units=int(prices[m]))
                candidates.append(cand)
                heapq.heappush(pending, (cand.wall_time_s, cand.cost_usd))
            best[members] = np.minimum(best[members], prices)
        if index + 1 == len(levels):
            break
        nxt = float(levels[index + 1])
        floor_w = problem.inner_steps_total * nxt
        while pending and pending[0][0] <= floor_w:
            cheapest_below = min(cheapest_below, heapq.heappop(pending)[1])
        if cheapest_below <= bounds[index + 1]:
            break  # every later plan is dominated by a point found already
        if problem.deadline_s is not None and floor_w > problem.deadline_s:
            break
        if problem.budget_usd is not None and bounds[index + 1] > problem.budget_usd:
            break
        if stop_at is not None and time.monotonic() > stop_at:
            finished = False
            break
    return candidates, tables, items, finished, index + 1, len(levels)


def _frontier_candidates(problem: Problem, candidates: Sequence[Candidate]) -> list[Candidate]:
    """Non-dominated candidates within deadline and budget (ties: the first found), W ascending."""
    ok = [c for c in candidates
          if problem.deadline_s is None or c.wall_time_s <= problem.deadline_s]
    ok.sort(key=lambda c: (c.wall_time_s, c.cost_usd))
    front: list[Candidate] = []
    for cand in ok:
        if not front or cand.cost_usd < front[-1].cost_usd:
            if front and cand.wall_time_s == front[-1].wall_time_s:
                continue
            front.append(cand)
    return [c for c in front if problem.budget_usd is None or c.cost_usd <= problem.budget_usd]


def dp_frontier(problem: Problem, *, time_limit_s: float | None = None) -> DpResult:
    """The exact frontier of `problem` within its budget and deadline (see module docstring)."""
    reason = dp_unsupported(problem)
    if reason is not None:
        raise ValueError(f"the DP cannot solve this problem: {reason}")
    candidates, _, items, finished, swept, total = sweep(problem, time_limit_s=time_limit_s)
    front = _frontier_candidates(problem, candidates)
    plans = rebuild(problem, items, front)
    LOG.info("dp: %d of %d levels, %d candidates, %d points", swept, total, len(candidates),
             len(plans))
    return DpResult(solver="dp", points=tuple(nondominated(plans)), proven_exact=finished,
                    levels_swept=swept, levels_total=total, candidates=len(candidates),
                    note="" if finished else "the DP sweep hit its time limit")


# ---- rebuilding plans ----------------------------------------------------------------------


def rebuild(problem: Problem, items: Sequence[DpItem], front: Sequence[Candidate]) -> list[Plan]:
    """Plans of the frontier candidates: one more sweep, peeling each at its own level."""
    clusters = sorted({o.cluster_index for o in problem.options})
    tables = DpTables(problem, clusters)
    plans, position = [], 0
    for cand in sorted(front, key=lambda c: c.level_s):
        while position < len(items) and items[position].step_time_s <= cand.level_s:
            tables.add(items[position])
            position += 1
        for k in range(len(clusters)):
            tables.refresh(k)
        admitted = items[:position]
        picks = _split(tables, cand)
        choices: list[IslandChoice] = []
        for k, (m, b) in picks.items():
            choices.extend(_peel(problem, tables.f[k], admitted, k, m, b))
        plan = evaluate(problem, choices)
        if plan.price_units != cand.price_units or plan.wall_time_s != cand.wall_time_s:
            raise RuntimeError(f"dp: rebuilt plan ({plan.wall_time_s}, {plan.price_units}) differs "
                               f"from its candidate ({cand.wall_time_s}, {cand.price_units})")
        plans.append(plan)
    return plans


def _split(tables: DpTables, cand: Candidate) -> dict[int, tuple[int, int]]:
    """(islands, sequences) per cluster of the candidate's class, summing to its price."""
    members = list(cand.cluster_set)
    m_left, b_left, price = cand.islands, tables.batch, cand.price_units
    out: dict[int, tuple[int, int]] = {}
    while len(members) > 1:
        last = members.pop()
        rest, g = tables.conv(tuple(members)), tables.g[last]
        found = None
        for m in range(1, m_left):
            sums = rest[m_left - m, b_left - np.arange(b_left + 1)] + g[m, : b_left + 1]
            hits = np.flatnonzero(sums == price)
            if hits.size:
                found = (m, int(hits[0]))
                break
        if found is None:
            raise RuntimeError("dp: no split of the candidate's price over its clusters")
        out[last] = found
        m_left, b_left, price = m_left - found[0], b_left - found[1], price - int(g[found])
    if tables.g[members[0]][m_left, b_left] != price:
        raise RuntimeError("dp: the candidate's price is not reached by its first cluster")
    out[members[0]] = (m_left, b_left)
    return out


def _peel(problem: Problem, f: np.ndarray, items: Sequence[DpItem], k: int, m: int,
          b: int) -> list[IslandChoice]:
    """Items of one cluster's optimal multiset for (m islands, b sequences)."""
    n = int(np.argmin(f[m, :, b]))
    value = int(f[m, n, b])
    own = [i for i in items if i.cluster == k]
    out: list[IslandChoice] = []
    while m > 0:
        for item in own:
            mm, nn, bb = m - 1, n - item.nodes, b - item.seqs
            if nn >= 0 and bb >= 0 and f[mm, nn, bb] == value - item.price_units:
                menu = problem.menu[item.menu_index]
                out.append(IslandChoice(pair_index=menu.pair_index, accum_steps=menu.accum_steps))
                m, n, b, value = mm, nn, bb, value - item.price_units
                break
        else:
            raise RuntimeError("dp: knapsack table cannot be peeled")
    if n != 0 or b != 0 or value != 0:
        raise RuntimeError("dp: peeling did not reach the empty state")
    return out
