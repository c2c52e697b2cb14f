"""Reference and baseline planners: brute-force enumeration and the paper's heuristic.

`BruteForce` enumerates every feasible plan of a (small) problem — every multiset of islands
(table row: option, layout, checkpointing mode, micro-batch m; admissible accumulation steps k)
with Σ k·m·dp = B within the island, node and GPU limits — and answers the epsilon-constraint
oracle by scanning them. It is the reference the DP, CP-SAT and MILP backends are tested against.

With `reduce=True` it enumerates fewer islands using an exact reduction: price, node and GPU use
of an island depend only on its option, and its batch contribution only on the option and on
b = k·m·dp (sequences per inner step); its step time t enters W only through τ = max t.
Replacing an island's (row, k) by another (row', k') of the same option with k'·m'·dp' = b and a
smaller or equal t keeps the plan feasible and can only lower τ, so W and C do not grow. Hence
for each (option, b) only the (row, k) of minimum t matters (ties → smallest m, then the first
row), and the reduced enumeration reaches every non-dominated (W, C) point (the menu of
`planner.model.problem`).

`heuristic_plans` is the paper's proportional heuristic (section III-D): for each admissible
combination of island options, split B in proportion to the islands' throughput at their largest
micro-batch (of several rows with that micro-batch, the one of most sequences per second), then
refine per-island batches in steps of the island's granularity (accum_multiple·m·dp) until the
sum is exactly B, falling back to smaller micro-batches when the granularity cannot reach B.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel.spec.errors import ShardMeterError
from planner.model.evaluate import evaluate, nondominated
from planner.model.problem import IslandChoice, Plan, Problem

LOG = logging.getLogger(__name__)

DEFAULT_MAX_PLANS = 2_000_000
"""Brute force refuses problems with more plans than this."""
DEFAULT_MAX_COMBINATIONS = 200_000
"""The heuristic evaluates at most this many island-option combinations."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Cand:
    """An island the enumerator may place."""

    pair_index: int
    """Index into Problem.pairs."""
    accum_steps: int
    """k."""
    seqs: int
    """k·m·dp."""
    cluster_index: int
    """Cluster of the option."""
    nodes: int
    """Nodes used."""
    gpus: int
    """GPUs used."""


class TooManyPlans(ShardMeterError):
    """Brute force would enumerate more plans than allowed."""


def island_candidates(problem: Problem, *, reduce: bool) -> list[_Cand]:
    """Every admissible (pair, k) island, or with `reduce` the min-t (row, k) per (option,
    k·m·dp)."""
    best: dict[tuple[int, int], tuple[float, int, int, int]] = {}
    out = []
    for pi, pair in enumerate(problem.pairs):
        for k in pair.accum_steps_range():
            if not reduce:
                out.append((pi, k))
                continue
            key = (pair.option_index, k * pair.seqs_per_accum_step)
            t = pair.step_time_s(k)
            if key not in best or (t, pair.micro_batch) < best[key][:2]:
                best[key] = (t, pair.micro_batch, pi, k)
    if reduce:
        out = [(pi, k) for (_, _, pi, k) in best.values()]
    cands = []
    for pi, k in out:
        pair = problem.pairs[pi]
        option = problem.options[pair.option_index]
        cands.append(_Cand(pair_index=pi, accum_steps=k, seqs=k * pair.seqs_per_accum_step,
                           cluster_index=option.cluster_index, nodes=option.nodes,
                           gpus=option.num_gpus))
    return sorted(cands, key=lambda c: (c.seqs, c.pair_index, c.accum_steps))


def enumerate_choices(problem: Problem, *,
                      reduce: bool = False) -> Iterator[tuple[IslandChoice, ...]]:
    """Every feasible plan (as island choices), each multiset once."""
    cands = island_candidates(problem, reduce=reduce)
    node_cap = [c.num_nodes for c in problem.clusters]
    gpu_cap = problem.max_gpus if problem.max_gpus is not None else math.inf
    max_seqs = max((c.seqs for c in cands), default=0)
    chosen: list[IslandChoice] = []
    nodes = [0] * len(node_cap)

    def rec(start: int, remaining: int, gpus: int) -> Iterator[tuple[IslandChoice, ...]]:
        if remaining == 0:
            yield tuple(chosen)
            return
        slots = problem.max_islands - len(chosen)
        if slots == 0 or remaining > slots * max_seqs:
            return
        for j in range(start, len(cands)):
            c = cands[j]
            if c.seqs > remaining:
                break
            if (nodes[c.cluster_index] + c.nodes > node_cap[c.cluster_index]
                    or gpus + c.gpus > gpu_cap):
                continue
            nodes[c.cluster_index] += c.nodes
            chosen.append(IslandChoice(pair_index=c.pair_index, accum_steps=c.accum_steps))
            yield from rec(j, remaining - c.seqs, gpus + c.gpus)
            chosen.pop()
            nodes[c.cluster_index] -= c.nodes

    yield from rec(0, problem.global_batch_seqs, 0)


class BruteForce:
    """Enumerate every plan; answer the epsilon-constraint oracle exactly by scanning."""

    name = "brute"

    def __init__(self, problem: Problem, *, reduce: bool = False,
                 max_plans: int = DEFAULT_MAX_PLANS) -> None:
        self.problem = problem
        self.reduce = reduce
        self.max_plans = max_plans
        self.proven_exact = True
        self.num_solves = 0
        self._by_cost: list[Plan] | None = None

    def plans(self) -> list[Plan]:
        """All feasible plans, evaluated (cheapest first, ties by W)."""
        if self._by_cost is None:
            out = []
            for choices in enumerate_choices(self.problem, reduce=self.reduce):
                out.append(evaluate(self.problem, choices))
                if len(out) > self.max_plans:
                    raise TooManyPlans(f"brute force: more than {self.max_plans} plans",
                                       hint="use --solver cpsat, or shrink the instance.")
            self._by_cost = sorted(out, key=lambda p: (p.cost_usd, p.wall_time_s))
        return self._by_cost

    def min_cost(self, max_wall_s: float | None, *, strict: bool) -> Plan | None:
        """Cheapest plan with W <= max_wall_s (< when strict); ties → smaller W."""
        best = None
        for plan in self.plans():
            if best is not None and plan.cost_usd > best.cost_usd:
                break
            ok = max_wall_s is None or (plan.wall_time_s < max_wall_s if strict
                                        else plan.wall_time_s <= max_wall_s)
            if ok and (best is None or plan.wall_time_s < best.wall_time_s):
                best = plan
        return best

    def nondominated(self) -> list[Plan]:
        """Non-dominated plans within budget and deadline (direct filter, no epsilon loop)."""
        return nondominated(p for p in self.plans() if _within(self.problem, p))


def _within(problem: Problem, plan: Plan) -> bool:
    return (problem.budget_usd is None or plan.cost_usd <= problem.budget_usd) and (
        problem.deadline_s is None or plan.wall_time_s <= problem.deadline_s)


# ---- the paper's heuristic -------------------------------------------------------------------


def option_combinations(problem: Problem, limit: int) -> tuple[list[tuple[int, ...]], bool]:
    """Admissible multisets of island options (limits and Σ min step <= B); truncated flag."""
    pairs_of: dict[int, list[int]] = {}
    for pi, pair in enumerate(problem.pairs):
        pairs_of.setdefault(pair.option_index, []).append(pi)
    min_step = {o: min(_first_seqs(problem.pairs[p]) for p in ps) for o, ps in pairs_of.items()}
    opts = sorted(pairs_of)
    out: list[tuple[int, ...]] = []
    nodes = [0] * len(problem.clusters)
    gpu_cap = problem.max_gpus if problem.max_gpus is not None else math.inf
    chosen: list[int] = []

    def rec(start: int, batch: int, gpus: int) -> bool:
        if chosen:
            out.append(tuple(chosen))
            if len(out) >= limit:
                return True
        if len(chosen) == problem.max_islands:
            return False
        for j in range(start, len(opts)):
            o = problem.options[opts[j]]
            if batch + min_step[opts[j]] > problem.global_batch_seqs or gpus + o.num_gpus > gpu_cap:
                continue
            if nodes[o.cluster_index] + o.nodes > problem.clusters[o.cluster_index].num_nodes:
                continue
            nodes[o.cluster_index] += o.nodes
            chosen.append(opts[j])
            stop = rec(j, batch + min_step[opts[j]], gpus + o.num_gpus)
            chosen.pop()
            nodes[o.cluster_index] -= o.nodes
            if stop:
                return True
        return False

    truncated = rec(0, 0, 0)
    return out, truncated


def _option_ladders(problem: Problem) -> tuple[dict[int, list[int]], list[float]]:
    """(option -> its rows' indices, largest micro-batch first, then the fastest; every row's
    `_rate`): what `proportional_split` reads for each option, computed once per problem (the
    heuristic calls it for up to `DEFAULT_MAX_COMBINATIONS` combinations)."""
    rates = [_rate(pair) for pair in problem.pairs]
    by_option: dict[int, list[int]] = {}
    for pi, pair in enumerate(problem.pairs):
        by_option.setdefault(pair.option_index, []).append(pi)
    for rows in by_option.values():
        rows.sort(key=lambda p: (-problem.pairs[p].micro_batch, -rates[p], p))
    return by_option, rates


def proportional_split(problem: Problem, option_ids: tuple[int, ...], *,
                       ladders: tuple[dict[int, list[int]], list[float]] | None = None,
                       ) -> list[IslandChoice] | None:
    """The paper's split of B over the given islands, or None if the granularity defeats it.
    `ladders`: `_option_ladders(problem)`, when the caller splits many combinations."""
    by_option, rates = ladders if ladders is not None else _option_ladders(problem)
    ladder = [by_option[o] for o in option_ids]
    level = [0] * len(option_ids)
    while True:
        rows = [ladder[i][level[i]] for i in range(len(option_ids))]
        pairs = [problem.pairs[r] for r in rows]
        rate = [rates[r] for r in rows]
        share = [problem.global_batch_seqs * r / sum(rate) for r in rate]
        first_ks = [_nearest_k(p, s) for s, p in zip(share, pairs, strict=True)]
        ks = _refine(problem.global_batch_seqs, pairs, first_ks)
        if ks is not None:
            return [IslandChoice(pair_index=rows[i], accum_steps=k) for i, k in enumerate(ks)]
        lower = [i for i in range(len(option_ids)) if level[i] + 1 < len(ladder[i])]
        if not lower:
            return None
        level[max(lower, key=lambda i: (pairs[i].seqs_per_accum_step, -i))] += 1


def _first_seqs(pair: Any) -> int:
    """The smallest batch contribution of a row: its smallest admissible k times m·dp."""
    return int(pair.min_accum_steps * pair.seqs_per_accum_step)


def _rate(pair: Any) -> float:
    """Sequences per second of a row at its smallest admissible k (k = 1 for plain rows)."""
    return float(_first_seqs(pair) / pair.step_time_s(pair.min_accum_steps))


def _nearest_k(pair: Any, share: float) -> int:
    """The admissible k whose batch contribution is at or below `share` sequences (the smallest
    admissible k when none is; the largest when all are below)."""
    q = pair.accum_multiple
    below = int(share // pair.seqs_per_accum_step) // q * q
    return int(min(pair.max_accum_steps, max(pair.min_accum_steps, below)))


def _refine(batch: int, pairs: list[Any], ks: list[int]) -> list[int] | None:
    """Move k one granule (accum_multiple micro-steps) at a time until Σ k·m·dp = B (None if
    stuck): while over B, take a granule from the slowest island that can lose one (ties: the
    first); while under, give one to the island fastest after the move among those it fits
    (ties: the first).

    Each pick is the top of a heap keyed as the choice is ((−t, i) down, (t', i) up), which
    gives the same island as scanning every island per move. Why a stale top can be dropped
    for good: an island that cannot lose a granule never can again (k only falls while over
    B), and one that cannot take a granule never can again (k only rises and B − Σ only
    shrinks while under B). Checked by: tests/test_baselines_refine.py (against the scan on
    random rows with ties)."""
    total = sum(k * p.seqs_per_accum_step for k, p in zip(ks, pairs, strict=True))
    if total > batch:
        over = [(-p.step_time_s(ks[i]), i) for i, p in enumerate(pairs)]
        heapq.heapify(over)
        while total > batch:
            while over and ks[over[0][1]] - pairs[over[0][1]].accum_multiple \
                    < pairs[over[0][1]].min_accum_steps:
                heapq.heappop(over)
            if not over:
                return None
            i = over[0][1]
            ks[i] -= pairs[i].accum_multiple
            total -= pairs[i].accum_multiple * pairs[i].seqs_per_accum_step
            heapq.heapreplace(over, (-pairs[i].step_time_s(ks[i]), i))
    if total < batch:
        under = [(p.step_time_s(ks[i] + p.accum_multiple), i) for i, p in enumerate(pairs)]
        heapq.heapify(under)
        while total < batch:
            while under and not _can_take(pairs[under[0][1]], ks[under[0][1]], batch - total):
                heapq.heappop(under)
            if not under:
                return None
            i = under[0][1]
            ks[i] += pairs[i].accum_multiple
            total += pairs[i].accum_multiple * pairs[i].seqs_per_accum_step
            heapq.heapreplace(under, (pairs[i].step_time_s(ks[i] + pairs[i].accum_multiple), i))
    return ks


def _can_take(pair: Any, k: int, room: int) -> bool:
    """Can an island at k take one more granule with `room` sequences left to fill?"""
    return bool(pair.accum_multiple * pair.seqs_per_accum_step <= room
                and k + pair.accum_multiple <= pair.max_accum_steps)


def heuristic_plans(problem: Problem, *,
                    max_combinations: int = DEFAULT_MAX_COMBINATIONS) -> tuple[list[Plan], bool]:
    """Plans of the paper's heuristic for every admissible combination; truncated flag."""
    combos, truncated = option_combinations(problem, max_combinations)
    if truncated:
        LOG.warning("heuristic: stopped after %d island combinations", max_combinations)
    plans = []
    ladders = _option_ladders(problem)
    for combo in combos:
        choices = proportional_split(problem, combo, ladders=ladders)
        if choices is not None:
            plan = evaluate(problem, choices)
            if _within(problem, plan):
                plans.append(plan)
    return plans, truncated


# ---- plans for the figure-7 cloud --------------------------------------------------------------


def sample_plans(problem: Problem, count: int, *, seed: int = 0,
                 max_enumerate: int = 20_000) -> tuple[list[Plan], bool]:
    """All feasible plans if there are at most `max_enumerate`, else up to `count` random ones;
    sampled flag.

    The sample comes from random greedy construction (uniform over the islands that still fit,
    preferring an island that closes the batch half of the time): it shows the cloud's shape,
    it is not uniform over plans.
    """
    out = []
    for choices in enumerate_choices(problem, reduce=True):
        out.append(choices)
        if len(out) > max_enumerate:
            break
    else:
        return [evaluate(problem, c) for c in out], False
    rng = np.random.default_rng(seed)
    cands = island_candidates(problem, reduce=True)
    arrays = {k: np.array([getattr(c, k) for c in cands])
              for k in ("seqs", "nodes", "gpus", "cluster_index")}
    seen: set[tuple[IslandChoice, ...]] = set()
    for _ in range(count * 3):
        drawn = _random_plan(problem, cands, arrays, rng)
        if drawn is not None:
            seen.add(tuple(sorted(drawn, key=lambda c: (c.pair_index, c.accum_steps))))
        if len(seen) >= count:
            break
    return [evaluate(problem, c) for c in sorted(seen, key=str)], True


def _random_plan(problem: Problem, cands: list[_Cand], arrays: dict[str, np.ndarray],
                 rng: np.random.Generator) -> list[IslandChoice] | None:
    remaining = problem.global_batch_seqs
    nodes = np.array([c.num_nodes for c in problem.clusters])
    gpus = problem.max_gpus if problem.max_gpus is not None else math.inf
    chosen: list[IslandChoice] = []
    while remaining > 0 and len(chosen) < problem.max_islands:
        fits = np.flatnonzero((arrays["seqs"] <= remaining)
                              & (arrays["nodes"] <= nodes[arrays["cluster_index"]])
                              & (arrays["gpus"] <= gpus))
        if fits.size == 0:
            return None
        exact = fits[arrays["seqs"][fits] == remaining]
        pool = exact if exact.size and rng.random() < 0.5 else fits
        pick = cands[int(rng.choice(pool))]
        chosen.append(IslandChoice(pair_index=pick.pair_index, accum_steps=pick.accum_steps))
        remaining -= pick.seqs
        nodes[pick.cluster_index] -= pick.nodes
        gpus -= pick.gpus
    return chosen if remaining == 0 else None
