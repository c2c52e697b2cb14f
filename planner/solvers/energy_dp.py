"""The exact time-vs-energy (or time-vs-CO2) frontier: a knapsack DP over step times (issue 14).

The energy and CO2 of one plan are `planner.model.energy` (its docstring derives E = Σ_i
(a_i·W + steps·b_i)); `planner.analysis.energy` solves an instance with this DP and re-exports it.

Exactness of the frontier
-------------------------
For a class κ (M islands, cluster set U: fixes σ) and a level τ̄ (a step time) the period
L = τ̄ + σ_κ/H is fixed, and E = steps·Σ_i (L·a_i + b_i) is additive over islands, with
a_i = PUE·n·g·(P_idle + h)·w_c (w_c = 1 for energy, I_c for CO2) depending on the cluster and GPU
count only, and b_i = PUE·n·g·((P_comp − P_idle)·c_i + (P_comm − P_idle)·x_i)·w_c. So per cluster
a knapsack F_c[m, n, G, b] = least Σ b_i over m islands of n nodes and G GPUs carrying b
sequences is independent of L; min_{n,G} (F_c + L·α_c·G) (a_i = α_c·G_i) gives the cluster's
table at this L, and min-plus convolution over the clusters of U, read at (M, B), gives the least
E of the class at τ̄. As in `planner.solvers.dp` a candidate whose class did not change at τ̄ is
dominated
by its own plan at a lower level, so only classes with a changed cluster are evaluated, and the
sweep stops once a found point with W <= steps·τ̄' has E <= LB(τ̄') = steps·B·min_i
(max(τ̄', t_i)·a_i + b_i)/b_i_seqs (every plan with τ >= τ̄' has each L >= max(τ̄', t_i)).
Items are every admissible (pair, k) — every table row (layout, checkpointing mode, micro-batch)
at every k its schedule admits (`planner.model.problem.IslandPair.accum_steps_range`) — not the
time menu (a slower (row, k) may use less energy), less those another item of the same option
and batch share beats on both t and b.
Caps on energy/CO2 and a deadline filter the frontier exactly (the fastest plan within a cap is
a frontier point). A cost budget is a third objective the DP does not trace: refused (exit 2).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from perfmodel.spec.errors import UserInputError
from perfmodel.spec.formulas import J_PER_KWH
from planner.model.energy import FIELD, METRICS, island_coefficients, require_metric
from planner.model.evaluate import evaluate, group_sync_s, wall_time_s
from planner.model.problem import (
    PRICE_UNITS_PER_USD_PER_HOUR,
    SECONDS_PER_HOUR,
    IslandChoice,
    SolveProvenance,
)
from planner.solvers.dp import _node_bound, dp_unsupported

if TYPE_CHECKING:
    from planner.model.problem import IslandChoice, Plan, Problem

# The CLI prints logger names (-v): keep the name these messages had before the split.
LOG = logging.getLogger("planner.analysis.energy")


@dataclass(frozen=True, kw_only=True, slots=True)
class EnergyItem:
    """One (pair, k) island as the energy knapsack sees it."""

    pair_index: int
    """Index into `Problem.pairs`."""
    accum_steps: int
    """k."""
    cluster: int
    """Position of its cluster among the used clusters."""
    nodes: int
    """Nodes of the island."""
    gpus: int
    """GPUs of the island."""
    seqs: int
    """Sequences per inner step."""
    step_time_s: float
    """t."""
    a: float
    """Waiting power (× intensity for co2): the per-second part."""
    b: float
    """Per-step extra above waiting."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EnergyFrontier(SolveProvenance):
    """Non-dominated (W, metric) plans, fastest first, with provenance (`proven_exact` false
    when the time limit stopped the sweep)."""

    points: tuple[Plan, ...]
    """Plans within the deadline and the cap."""
    metric: str
    """energy | co2."""


def energy_unsupported(problem: Problem) -> str | None:
    """Why the energy DP cannot solve `problem` (None: it can)."""

    reason = dp_unsupported(problem)
    if reason is not None:
        return reason
    if problem.budget_usd is not None:
        return "a cost budget on a time-vs-energy frontier is a third objective"
    return None


def energy_items(problem: Problem, metric: str, clusters: Sequence[int],
                 usd_weight: float = 0.0) -> list[EnergyItem]:
    """Every admissible (pair, k), less items another of the same option and batch share beats on
    t and b, and less the dearer price tiers of one node layout (`Cluster.alternatives`: same
    energy, higher cost); `usd_weight` λ adds λ·price per second to a (cost = W·Σ price)."""

    position = {c: i for i, c in enumerate(clusters)}
    cheapest_tier: dict[tuple[int, int, int], int] = {}
    for o, option in enumerate(problem.options):  # tiers of one node layout: same energy
        key = (option.cluster_index, option.nodes, option.gpus_per_node)
        if key not in cheapest_tier or \
                option.price_units < problem.options[cheapest_tier[key]].price_units:
            cheapest_tier[key] = o
    groups: dict[tuple[int, int], list[EnergyItem]] = {}
    for pi, pair in enumerate(problem.pairs):
        option = problem.options[pair.option_index]
        if cheapest_tier[(option.cluster_index, option.nodes,
                          option.gpus_per_node)] != pair.option_index:
            continue  # a dearer price tier of the same islands (issue 28's alternatives)
        for k in pair.accum_steps_range():
            seqs = k * pair.seqs_per_accum_step
            if seqs > problem.global_batch_seqs:
                break
            a, b = island_coefficients(problem, pi, k, metric)
            a += usd_weight * option.price_units / (PRICE_UNITS_PER_USD_PER_HOUR * SECONDS_PER_HOUR)
            item = EnergyItem(pair_index=pi, accum_steps=k, cluster=position[option.cluster_index],
                              nodes=option.nodes, gpus=option.num_gpus, seqs=seqs,
                              step_time_s=pair.step_time_s(k), a=a, b=b)
            groups.setdefault((pair.option_index, seqs), []).append(item)
    kept: list[EnergyItem] = []
    for group in groups.values():
        group.sort(key=lambda i: (i.step_time_s, i.b, i.pair_index, i.accum_steps))
        best_b = math.inf
        for item in group:  # a Pareto scan in (t, b): keep an item only if it lowers b
            if item.b < best_b:
                kept.append(item)
                best_b = item.b
    return sorted(kept, key=lambda i: (i.step_time_s, i.pair_index, i.accum_steps))


def _alpha(items: Sequence[EnergyItem], count: int) -> list[float]:
    """a_i / G_i per cluster (one GPU type and PUE per cluster make it a constant)."""
    out = [0.0] * count
    for item in items:
        value = item.a / item.gpus
        if out[item.cluster] and not math.isclose(out[item.cluster], value, rel_tol=1e-9):
            raise ValueError("rows of one cluster differ in TDP (or, with a cost weight, "
                             "in price per GPU)")
        out[item.cluster] = value
    return out


class EnergyTables:
    """Per-cluster tables F_c[m, n, G, b] = least Σ b over such multisets (float, inf: none)."""

    def __init__(self, problem: Problem, clusters: Sequence[int],
                 items: Sequence[EnergyItem]) -> None:

        self.batch = problem.global_batch_seqs
        self.max_m = problem.max_islands
        self.f: list[np.ndarray] = []
        for k, c in enumerate(clusters):
            nodes = _node_bound(problem, c)
            gpus = max((i.gpus * (nodes // i.nodes) for i in items if i.cluster == k), default=0)
            table = np.full((self.max_m + 1, nodes + 1, gpus + 1, self.batch + 1), np.inf)
            table[0, 0, 0, 0] = 0.0
            self.f.append(table)
        self.alpha = _alpha(items, len(clusters))
        self._index = _antidiagonal(self.batch)

    def add(self, item: EnergyItem) -> None:
        """Admit any number of islands of `item` (binary splitting, as
        `planner.solvers.dp.DpTables.add`)."""
        f = self.f[item.cluster]
        most = min(self.max_m, (f.shape[1] - 1) // item.nodes, (f.shape[2] - 1) // item.gpus,
                   self.batch // item.seqs)
        chunk = 1
        while most > 0:
            q = min(chunk, most)
            d = (q, q * item.nodes, q * item.gpus, q * item.seqs)
            src = f[tuple(slice(0, s - x) for s, x in zip(f.shape, d, strict=True))] + q * item.b
            dst = f[tuple(slice(x, None) for x in d)]
            np.minimum(dst, src, out=dst)
            most -= q
            chunk *= 2

    def at_period(self, k: int, period_s: float) -> tuple[np.ndarray, np.ndarray]:
        """h[m, b] = min over (n, G) of F + L·α·G (m = 0 row: inf) and the argmin G."""
        f = self.f[k]
        gpus = np.arange(f.shape[2], dtype=float)
        values = f.min(axis=1) + (period_s * self.alpha[k] * gpus)[None, :, None]
        h = values.min(axis=1)
        h[0, :] = np.inf
        return h, values

    def conv(self, x: np.ndarray, y: np.ndarray, max_m: int) -> np.ndarray:
        """Min-plus convolution over (m, b) of two h tables, m <= max_m."""
        out = np.full((max_m + 1, self.batch + 1), np.inf)
        rows_x = [m for m in range(min(max_m, x.shape[0] - 1) + 1) if np.isfinite(x[m]).any()]
        rows_y = [m for m in range(min(max_m, y.shape[0] - 1) + 1) if np.isfinite(y[m]).any()]
        for m1, m2 in itertools.product(rows_x, rows_y):
            if m1 + m2 <= max_m:
                flat = np.append((x[m1][:, None] + y[m2][None, :]).ravel(), np.inf)
                np.minimum(out[m1 + m2], flat[self._index].min(axis=1), out=out[m1 + m2])
        return out


def _antidiagonal(batch: int) -> np.ndarray:
    """idx[t, j] = flat index of (j, t − j) in a (B+1)² matrix, or the pad entry when j > t."""
    t = np.arange(batch + 1)[:, None]
    j = np.arange(batch + 1)[None, :]
    return np.where(j <= t, j * (batch + 1) + (t - j), (batch + 1) ** 2)


def _class_value(tables: EnergyTables, hs: Sequence[np.ndarray], islands: int) -> float:
    """Least Σ over the clusters of a class (each >= 1 island) at M islands and b = B."""
    if len(hs) == 1:
        return float(hs[0][islands, tables.batch]) if islands < hs[0].shape[0] else math.inf
    acc = hs[0]
    for h in hs[1:-1]:
        acc = tables.conv(acc, h, islands)
    last = hs[-1]
    best = math.inf
    for m in range(1, islands):
        if m < last.shape[0] and islands - m < acc.shape[0]:
            best = min(best, float((acc[islands - m] + last[m][::-1]).min()))
    return best


def energy_lower_bounds(problem: Problem, items: Sequence[EnergyItem],
                        levels: np.ndarray) -> np.ndarray:
    """LB(τ̄) of the module docstring (metric units per run) for every level."""
    t = np.array([i.step_time_s for i in items])
    a = np.array([i.a for i in items])
    b = np.array([i.b for i in items])
    s = np.array([i.seqs for i in items], dtype=float)
    per_seq = (np.maximum(levels[:, None], t[None, :]) * a[None, :] + b[None, :]) / s[None, :]
    result: np.ndarray = (problem.inner_steps_total * problem.global_batch_seqs
                          * per_seq.min(axis=1) * (1.0 - 1e-9))
    return result


@dataclass(frozen=True, kw_only=True, slots=True)
class _Candidate:
    wall_time_s: float
    value: float
    level_s: float
    period_s: float
    cluster_set: tuple[int, ...]
    islands: int


def energy_frontier(problem: Problem, metric: str, *, max_value: float | None = None,
                    time_limit_s: float | None = None, usd_weight: float = 0.0) -> EnergyFrontier:
    """The exact (W, metric) frontier within the deadline and `max_value` (kWh or kg).

    `usd_weight` λ > 0 traces (W, metric + λ·cost) instead (a Lagrangian of a cost cap; needs
    prices proportional to GPUs within each cluster, else ValueError); no cap then."""


    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    require_metric(problem, metric)
    reason = energy_unsupported(problem)
    if reason is not None:
        raise UserInputError(f"the energy planner cannot solve {problem.name!r}: {reason}",
                             hint="drop the GPU cap / cost budget, or plan by time and cost.")
    unit = J_PER_KWH if metric == "energy" else 1.0  # per-step values are J (energy) or kg (co2)
    cap = None if max_value is None else max_value * unit
    clusters = sorted({o.cluster_index for o in problem.options})
    if usd_weight and max_value is not None:
        raise ValueError("a cap and a cost weight together are not supported")
    items = energy_items(problem, metric, clusters, usd_weight)
    if not items or problem.max_islands < 1:
        return EnergyFrontier(solver=f"dp-{metric}", points=(), metric=metric,
                              proven_exact=True)
    tables = EnergyTables(problem, clusters, items)
    levels = np.unique(np.array([i.step_time_s for i in items]))
    bounds = energy_lower_bounds(problem, items, levels)
    classes = [c for r in range(1, len(clusters) + 1)
               for c in itertools.combinations(range(len(clusters)), r)]
    sigma = {(u, m): group_sync_s(problem, m, [clusters[k] for k in u])
             for u in classes for m in range(len(u), problem.max_islands + 1)}
    steps = problem.inner_steps_total
    stop_at = None if time_limit_s is None else time.monotonic() + time_limit_s
    candidates: list[_Candidate] = []
    position, finished, swept = 0, True, 0
    pending: list[tuple[float, float]] = []
    seen, least_below = 0, math.inf
    for index, level in enumerate(levels.tolist()):
        swept = index + 1
        changed = set()
        while position < len(items) and items[position].step_time_s <= level:
            tables.add(items[position])
            changed.add(items[position].cluster)
            position += 1
        cache: dict[tuple[int, float], np.ndarray] = {}
        for (u, m), sig in sigma.items():
            if not changed.intersection(u):
                continue
            period = level + sig / problem.inner_steps
            hs = [cache.setdefault((k, period), tables.at_period(k, period)[0]) for k in u]
            value = _class_value(tables, hs, m) * steps
            if math.isfinite(value):
                candidates.append(_Candidate(wall_time_s=wall_time_s(problem, level, sig),
                                             value=value, level_s=level, period_s=period,
                                             cluster_set=u, islands=m))
        if index + 1 == len(levels):
            break
        floor_w = steps * float(levels[index + 1])
        while seen < len(candidates):
            heapq.heappush(pending, (candidates[seen].wall_time_s, candidates[seen].value))
            seen += 1
        while pending and pending[0][0] <= floor_w:
            least_below = min(least_below, heapq.heappop(pending)[1])
        if least_below <= bounds[index + 1]:
            break  # every later plan is dominated by a point found already
        if problem.deadline_s is not None and floor_w > problem.deadline_s:
            break
        if cap is not None and bounds[index + 1] > cap:
            break
        if stop_at is not None and time.monotonic() > stop_at:
            finished = False
            break
    # plans are re-filtered exactly
    front = _front([c for c in candidates
                    if (problem.deadline_s is None or c.wall_time_s <= problem.deadline_s)
                    and (cap is None or c.value <= cap * (1 + 1e-9))])
    plans = [_rebuild(problem, clusters, items, cand) for cand in front]
    field = FIELD[metric]
    plans = [p for p in plans if cap is None or getattr(p, field) <= max_value]
    key = ((lambda p: getattr(p, field) + usd_weight * p.cost_usd) if usd_weight
           else (lambda p: getattr(p, field)))
    LOG.info("energy dp (%s): %d of %d levels, %d candidates, %d points", metric, swept,
             len(levels), len(candidates), len(plans))
    return EnergyFrontier(solver=f"dp-{metric}", points=tuple(nondominated_by(plans, key)),
                          metric=metric, proven_exact=finished, levels_swept=swept,
                          levels_total=len(levels),
                          note="" if finished else "the energy DP sweep hit the time limit")


def _front(cands: Sequence[_Candidate]) -> list[_Candidate]:
    ordered = sorted(cands, key=lambda c: (c.wall_time_s, c.value))
    out: list[_Candidate] = []
    for cand in ordered:
        if not out or cand.value < out[-1].value:
            if out and cand.wall_time_s == out[-1].wall_time_s:
                continue
            out.append(cand)
    return out


def nondominated_by(plans: Sequence[Plan], field: str | Callable[[Plan], float]) -> list[Plan]:
    """Non-dominated (wall_time_s, field) plans, W ascending (ties: the first); `field` is a Plan
    field name or a function of the plan."""
    value = field if callable(field) else (lambda p: getattr(p, field))
    ordered = sorted(plans, key=lambda p: (p.wall_time_s, value(p)))
    out: list[Plan] = []
    for plan in ordered:
        if not out or value(plan) < value(out[-1]):
            if out and plan.wall_time_s == out[-1].wall_time_s:
                continue
            out.append(plan)
    return out


def _rebuild(problem: Problem, clusters: Sequence[int], items: Sequence[EnergyItem],
             cand: _Candidate) -> Plan:
    """A plan of a candidate: the tables at its level, split over its clusters, peeled."""

    tables = EnergyTables(problem, clusters, items)
    admitted = [i for i in items if i.step_time_s <= cand.level_s]
    for item in admitted:
        tables.add(item)
    target = cand.value / problem.inner_steps_total
    parts = _split(tables, [tables.at_period(k, cand.period_s) for k in cand.cluster_set],
                   cand.islands, target)
    choices: list[IslandChoice] = []
    for k, (m, b, gpus, value) in zip(cand.cluster_set, parts, strict=True):
        choices.extend(_peel(tables, [i for i in admitted if i.cluster == k], k, m, b, gpus, value,
                             cand.period_s))
    return evaluate(problem, choices)


def _close(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-300)


def _split(tables: EnergyTables, hv: Sequence[tuple[np.ndarray, np.ndarray]], islands: int,
           target: float) -> list[tuple[int, int, int, float]]:
    """(m, b, G, value) per cluster of the class whose sum is `target`."""
    batch = tables.batch
    hs = [h for h, _ in hv]
    prefixes = [hs[0]]
    for h in hs[1:-1]:
        prefixes.append(tables.conv(prefixes[-1], h, islands))
    out: list[tuple[int, int, int, float]] = []
    m_left, b_left, value = islands, batch, target
    for pos in range(len(hs) - 1, 0, -1):
        rest, h = prefixes[pos - 1], hs[pos]
        found = None
        for m in range(1, m_left):
            if m >= h.shape[0] or m_left - m >= rest.shape[0]:
                continue
            sums = rest[m_left - m, b_left - np.arange(b_left + 1)] + h[m, : b_left + 1]
            hits = np.flatnonzero(np.isclose(sums, value, rtol=1e-9, atol=0.0))
            if hits.size:
                found = (m, int(hits[0]))
                break
        if found is None:
            raise RuntimeError("energy dp: no split of the candidate over its clusters")
        m, b = found
        out.append((m, b, int(np.argmin(hv[pos][1][m, :, b])), float(h[m, b])))
        m_left, b_left, value = m_left - m, b_left - b, value - float(h[m, b])
    out.append((m_left, b_left, int(np.argmin(hv[0][1][m_left, :, b_left])),
                float(hs[0][m_left, b_left])))
    return out[::-1]


def _peel(tables: EnergyTables, own: Sequence[EnergyItem], k: int, m: int, b: int, gpus: int,
          value: float, period_s: float) -> list[IslandChoice]:
    """Items of one cluster's optimal multiset for (m islands, G GPUs, b sequences)."""

    f = tables.f[k]
    rest = value - period_s * tables.alpha[k] * gpus
    n = int(np.argmin(np.abs(f[m, :, gpus, b] - rest)))
    rest = float(f[m, n, gpus, b])
    out: list[IslandChoice] = []
    while m > 0:
        for item in own:
            mm, nn, gg, bb = m - 1, n - item.nodes, gpus - item.gpus, b - item.seqs
            if min(nn, gg, bb) >= 0 and _close(float(f[mm, nn, gg, bb]) + item.b, rest):
                out.append(IslandChoice(pair_index=item.pair_index, accum_steps=item.accum_steps))
                m, n, gpus, b, rest = mm, nn, gg, bb, float(f[mm, nn, gg, bb])
                break
        else:
            raise RuntimeError("energy dp: knapsack table cannot be peeled")
    if n or gpus or b:
        raise RuntimeError("energy dp: peeling did not reach the empty state")
    return out
