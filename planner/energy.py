"""Energy and CO2 of a plan, and the exact time-vs-energy (or time-vs-CO2) frontier (issue 14).

Energy of a plan
----------------
Every rented GPU is powered for the whole wall time W = steps·(τ + σ/H), steps = D/(B·S). Per
inner step island i (cluster c, n_i·g_i GPUs of TDP P_i, k_i micro-steps) computes
c_i(k) = compute_fixed_s + k·compute_micro_s, communicates only x_i(k) = comm_only_fixed_s +
k·comm_only_micro_s (island table; no gap where neither stream runs, perfmodel.tables) and idles
for the rest of the period L = τ + σ/H (waiting for the slowest island and the outer sync). With
the fractions of `perfmodel.power.PowerAssumptions` (P_comp = f_comp·P, P_comm = f_comm·P,
P_idle = f_idle·P) and a host share h per GPU for the whole period, one GPU's energy per period is

    P_comp·c + P_comm·x + P_idle·(L − c − x) + h·L = L·(P_idle + h) + (P_comp − P_idle)·c
                                                                   + (P_comm − P_idle)·x,

so over the run (steps periods), with the data centre's PUE:

    E = Σ_i PUE_c·n_i·g_i·[ W·(P_idle + h) + steps·((P_comp − P_idle)·c_i + (P_comm − P_idle)·x_i) ]
    CO2 = Σ_i I_c·E_i                      (I_c: grid intensity of the cluster's region).

A table without the activity split (an old CSV) counts the whole step t_i as compute
("all busy at compute power": c_i = t_i, x_i = 0), an upper bound; the plan says so.

Exactness of the frontier
-------------------------
For a class κ (M islands, cluster set U: fixes σ) and a level τ̄ (a step time) the period
L = τ̄ + σ_κ/H is fixed, and E = steps·Σ_i (L·a_i + b_i) is additive over islands, with
a_i = PUE·n·g·(P_idle + h)·w_c (w_c = 1 for energy, I_c for CO2) depending on the cluster and GPU
count only, and b_i = PUE·n·g·((P_comp − P_idle)·c_i + (P_comm − P_idle)·x_i)·w_c. So per cluster
a knapsack F_c[m, n, G, b] = least Σ b_i over m islands of n nodes and G GPUs carrying b
sequences is independent of L; min_{n,G} (F_c + L·α_c·G) (a_i = α_c·G_i) gives the cluster's
table at this L, and min-plus convolution over the clusters of U, read at (M, B), gives the least
E of the class at τ̄. As in `planner.dp` a candidate whose class did not change at τ̄ is dominated
by its own plan at a lower level, so only classes with a changed cluster are evaluated, and the
sweep stops once a found point with W <= steps·τ̄' has E <= LB(τ̄') = steps·B·min_i
(max(τ̄', t_i)·a_i + b_i)/b_i_seqs (every plan with τ >= τ̄' has each L >= max(τ̄', t_i)).
Items are every (pair, k) (not the time menu: a slower (m, k) may use less energy), less those
another item of the same option and batch share beats on both t and b.
Caps on energy/CO2 and a deadline filter the frontier exactly (the fastest plan within a cap is
a frontier point). A cost budget is a third objective the DP does not trace: refused (exit 2).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from perfmodel.errors import UserInputError
from perfmodel.power import DEFAULT_POWER, J_PER_KWH, PowerAssumptions

if TYPE_CHECKING:
    from planner.problem import IslandChoice, Plan, Problem

LOG = logging.getLogger(__name__)

METRICS = ("energy", "co2")
"""Objectives the energy DP traces against wall time."""
FIELD = {"energy": "energy_kwh", "co2": "co2_kg"}
"""Plan field of each metric."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PairPower:
    """The power-relevant facts of one island-table row (one `Problem.pairs` entry)."""

    compute_fixed_s: float
    """Compute busy time once per inner step."""
    compute_micro_s: float
    """Compute busy time per micro-step."""
    comm_only_fixed_s: float
    """Communication-only time once per inner step."""
    comm_only_micro_s: float
    """Communication-only time per micro-step."""
    tdp_w: float
    """TDP of one GPU, watts."""
    split_known: bool
    """False: the table has no activity split; the whole step counts as compute."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tdp_w) and self.tdp_w > 0):
            raise ValueError(f"PairPower needs a positive finite TDP, got {self.tdp_w!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterEnergy:
    """Facility and grid of one cluster."""

    pue: float
    """Power usage effectiveness."""
    pue_source: str
    """Where the PUE comes from."""
    region: str | None
    """Grid region key (None: CO2 unknown)."""
    gco2e_per_kwh: float | None
    """Grid intensity of the region."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.pue) and self.pue >= 1.0):
            raise ValueError(f"PUE must be >= 1, got {self.pue!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class EnergyData:
    """What the planner needs to price a plan in joules and kilograms CO2e."""

    pairs: tuple[PairPower | None, ...]
    """Per `Problem.pairs` entry (None: no TDP known, energy unknown)."""
    clusters: tuple[ClusterEnergy, ...]
    """Per `Problem.clusters` entry."""
    power: PowerAssumptions = DEFAULT_POWER
    """Fractions of TDP per state and host share."""

    @property
    def energy_known(self) -> bool:
        """Every pair has a TDP."""
        return all(p is not None for p in self.pairs)

    @property
    def co2_known(self) -> bool:
        """Energy known and every cluster has a region."""
        return self.energy_known and all(c.gco2e_per_kwh is not None for c in self.clusters)

    @property
    def split_known(self) -> bool:
        """Every pair has its activity split (else the all-busy fallback applies somewhere)."""
        return all(p is not None and p.split_known for p in self.pairs)


# ---- building ------------------------------------------------------------------------------


def pair_power(row: Any, tdp_fallback: float | None) -> PairPower | None:
    """PairPower of an island-table row (a namedtuple of `itertuples`)."""
    tdp = getattr(row, "tdp_w", None)
    tdp = float(tdp) if tdp is not None and math.isfinite(float(tdp)) else tdp_fallback
    if tdp is None:
        return None
    split = [getattr(row, c, None) for c in ("compute_fixed_s", "compute_micro_s",
                                             "comm_only_fixed_s", "comm_only_micro_s")]
    if any(v is None or not math.isfinite(float(v)) for v in split):
        return PairPower(compute_fixed_s=float(row.step_fixed_s), compute_micro_s=float(row.microstep_s),
                         comm_only_fixed_s=0.0, comm_only_micro_s=0.0, tdp_w=tdp, split_known=False)
    cf, cm, xf, xm = (float(v) for v in split)
    return PairPower(compute_fixed_s=cf, compute_micro_s=cm, comm_only_fixed_s=xf, comm_only_micro_s=xm,
                     tdp_w=tdp, split_known=True)


def cluster_energy(cluster: Any) -> ClusterEnergy:
    """PUE (instance override, else the price list provider's) and grid of an instance cluster."""
    from perfmodel.energy_catalog import carbon_intensity_g_per_kwh, provider_pue

    if cluster.pue is not None:
        pue, source = float(cluster.pue), "instance"
    else:
        pue, source = provider_pue(cluster.price.provider if cluster.price is not None else None)
    region = cluster.region
    return ClusterEnergy(pue=pue, pue_source=source, region=region,
                         gco2e_per_kwh=None if region is None else carbon_intensity_g_per_kwh(region))


def table_tdp(gpu: str) -> float | None:
    """Catalog TDP of a GPU, for tables without a `tdp_w` column."""
    from perfmodel.energy_catalog import gpu_tdp_w

    return gpu_tdp_w(gpu)


def build_energy(instance: Any, rows: Sequence[Any], gpu_types: Sequence[str]) -> EnergyData:
    """EnergyData of the kept table rows (one per pair, with its GPU type) of an instance."""
    tdp_of = {gpu: table_tdp(gpu) for gpu in set(gpu_types)}
    pairs = tuple(pair_power(row, tdp_of[gpu]) for row, gpu in zip(rows, gpu_types, strict=True))
    return EnergyData(pairs=pairs, clusters=tuple(cluster_energy(c) for c in instance.clusters))


# ---- one plan ------------------------------------------------------------------------------


def island_coefficients(problem: Problem, pair_index: int, accum_steps: int,
                        metric: str = "energy") -> tuple[float, float]:
    """(a, b) of one island: facility power while waiting, W (a·W is its baseline energy over the
    run), and its extra energy per inner step above idle, J; both × grid intensity (kg/J) for co2."""
    data: EnergyData = problem.energy
    pp = data.pairs[pair_index]
    if pp is None:
        raise ValueError("no TDP for this pair")
    option = problem.options[problem.pairs[pair_index].option_index]
    cluster = data.clusters[option.cluster_index]
    p = data.power
    scale = cluster.pue * option.num_gpus
    if metric == "co2":
        if cluster.gco2e_per_kwh is None:
            raise ValueError("no grid region for this cluster")
        scale *= cluster.gco2e_per_kwh / 1000.0 / J_PER_KWH
    c = pp.compute_fixed_s + accum_steps * pp.compute_micro_s
    x = pp.comm_only_fixed_s + accum_steps * pp.comm_only_micro_s
    a = scale * (pp.tdp_w * p.idle_frac + p.host_w_per_gpu)
    b = scale * pp.tdp_w * ((p.compute_frac - p.idle_frac) * c + (p.comm_frac - p.idle_frac) * x)
    return a, b


def plan_energy(problem: Problem, choices: Sequence[IslandChoice], wall_s: float) -> tuple[float | None, float | None]:
    """(energy_kwh, co2_kg) of a plan with wall time `wall_s` (None where unknown)."""
    data: EnergyData | None = problem.energy
    if data is None or not choices or not all(data.pairs[c.pair_index] is not None for c in choices):
        return None, None
    steps = problem.inner_steps_total
    joules, co2 = 0.0, 0.0
    co2_ok = True
    for choice in choices:
        a, b = island_coefficients(problem, choice.pair_index, choice.accum_steps)
        e = a * wall_s + steps * b
        joules += e
        option = problem.options[problem.pairs[choice.pair_index].option_index]
        intensity = data.clusters[option.cluster_index].gco2e_per_kwh
        if intensity is None:
            co2_ok = False
        else:
            co2 += e / J_PER_KWH * intensity / 1000.0
    return joules / J_PER_KWH, co2 if co2_ok else None


def require_metric(problem: Problem, metric: str) -> None:
    """Exit 2 when the instance cannot price `metric` (no TDP, no region)."""
    data: EnergyData | None = problem.energy
    if data is None or not data.energy_known:
        raise UserInputError(f"the energy of {problem.name!r} is unknown: a GPU has no TDP",
                             hint="use catalog GPUs or give the island table a tdp_w column.")
    if metric == "co2" and not data.co2_known:
        missing = [problem.clusters[i].name for i, c in enumerate(data.clusters) if c.gco2e_per_kwh is None]
        raise UserInputError(f"the CO2 of {problem.name!r} is unknown: clusters {missing} have no region",
                             hint="add `region:` (a key of catalogs/energy/carbon_intensity.csv) to them.")


# ---- the exact time-vs-energy frontier (module docstring) --------------------------------------

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
class EnergyFrontier:
    """Non-dominated (W, metric) plans, fastest first, with provenance."""

    points: tuple[Plan, ...]
    """Plans within the deadline and the cap."""
    metric: str
    """energy | co2."""
    proven_exact: bool
    """False when the time limit stopped the sweep."""
    levels_swept: int
    """Levels processed."""
    levels_total: int
    """Distinct step times of the items."""


def energy_unsupported(problem: Problem) -> str | None:
    """Why the energy DP cannot solve `problem` (None: it can)."""
    from planner.dp import dp_unsupported

    reason = dp_unsupported(problem)
    if reason is not None:
        return reason
    if problem.budget_usd is not None:
        return "a cost budget on a time-vs-energy frontier is a third objective"
    return None


def energy_items(problem: Problem, metric: str, clusters: Sequence[int],
                 usd_weight: float = 0.0) -> list[EnergyItem]:
    """Every (pair, k), less items another of the same option and batch share beats on t and b;
    `usd_weight` λ adds λ·price per second to a (cost = W·Σ price)."""
    from planner.problem import PRICE_UNITS_PER_USD_PER_HOUR, SECONDS_PER_HOUR

    position = {c: i for i, c in enumerate(clusters)}
    groups: dict[tuple[int, int], list[EnergyItem]] = {}
    for pi, pair in enumerate(problem.pairs):
        option = problem.options[pair.option_index]
        for k in range(1, pair.max_accum_steps + 1):
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
            raise ValueError("rows of one cluster differ in TDP (or, with a cost weight, in price per GPU)")
        out[item.cluster] = value
    return out


class EnergyTables:
    """Per-cluster tables F_c[m, n, G, b] = least Σ b over such multisets (float, inf: none)."""

    def __init__(self, problem: Problem, clusters: Sequence[int], items: Sequence[EnergyItem]) -> None:
        from planner.dp import _node_bound

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
        """Admit any number of islands of `item` (binary splitting, as `planner.dp.DpTables.add`)."""
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


def energy_lower_bounds(problem: Problem, items: Sequence[EnergyItem], levels: np.ndarray) -> np.ndarray:
    """LB(τ̄) of the module docstring (metric units per run) for every level."""
    t = np.array([i.step_time_s for i in items])
    a = np.array([i.a for i in items])
    b = np.array([i.b for i in items])
    s = np.array([i.seqs for i in items], dtype=float)
    per_seq = (np.maximum(levels[:, None], t[None, :]) * a[None, :] + b[None, :]) / s[None, :]
    return problem.inner_steps_total * problem.global_batch_seqs * per_seq.min(axis=1) * (1.0 - 1e-9)


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
    import time

    from planner.problem import group_sync_s, wall_time_s

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
        return EnergyFrontier(points=(), metric=metric, proven_exact=True, levels_swept=0, levels_total=0)
    tables = EnergyTables(problem, clusters, items)
    levels = np.unique(np.array([i.step_time_s for i in items]))
    bounds = energy_lower_bounds(problem, items, levels)
    classes = [c for r in range(1, len(clusters) + 1) for c in itertools.combinations(range(len(clusters)), r)]
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
                candidates.append(_Candidate(wall_time_s=wall_time_s(problem, level, sig), value=value,
                                             level_s=level, period_s=period, cluster_set=u, islands=m))
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
    front = _front([c for c in candidates if (problem.deadline_s is None or c.wall_time_s <= problem.deadline_s)
                    and (cap is None or c.value <= cap * (1 + 1e-9))])  # plans are re-filtered exactly
    plans = [_rebuild(problem, clusters, items, cand) for cand in front]
    field = FIELD[metric]
    plans = [p for p in plans if cap is None or getattr(p, field) <= max_value]
    key = (lambda p: getattr(p, field) + usd_weight * p.cost_usd) if usd_weight else (lambda p: getattr(p, field))
    LOG.info("energy dp (%s): %d of %d levels, %d candidates, %d points", metric, swept, len(levels),
             len(candidates), len(plans))
    return EnergyFrontier(points=tuple(nondominated_by(plans, key)), metric=metric,
                          proven_exact=finished, levels_swept=swept, levels_total=len(levels))


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


def _rebuild(problem: Problem, clusters: Sequence[int], items: Sequence[EnergyItem], cand: _Candidate) -> Plan:
    """A plan of a candidate: the tables at its level, split over its clusters, peeled."""
    from planner.problem import evaluate

    tables = EnergyTables(problem, clusters, items)
    admitted = [i for i in items if i.step_time_s <= cand.level_s]
    for item in admitted:
        tables.add(item)
    target = cand.value / problem.inner_steps_total
    parts = _split(tables, [tables.at_period(k, cand.period_s) for k in cand.cluster_set], cand.islands, target)
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
    out.append((m_left, b_left, int(np.argmin(hv[0][1][m_left, :, b_left])), float(hs[0][m_left, b_left])))
    return out[::-1]


def _peel(tables: EnergyTables, own: Sequence[EnergyItem], k: int, m: int, b: int, gpus: int,
          value: float, period_s: float) -> list[IslandChoice]:
    """Items of one cluster's optimal multiset for (m islands, G GPUs, b sequences)."""
    from planner.problem import IslandChoice

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


# ---- solving an instance -------------------------------------------------------------------

CAP_FLAGS = {"co2": ("max_co2_kg", "--max-co2-kg", "kg CO2e"), "energy": ("max_energy_kwh", "--max-energy-kwh", "kWh")}
"""Per metric: the InfeasibleError binding name, the CLI flag and the unit."""


def metric_of(objective: str | None, max_co2_kg: float | None, max_energy_kwh: float | None) -> str | None:
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
                             hint=f"use --objective time or {capped} (exact on the time-vs-{capped} "
                                  "frontier), or pareto --objectives time," + capped + ".")
    return asked or capped


def solve_energy(instance: Any, table: Any, metric: str, *, max_value: float | None = None,
                 solver: str = "auto", time_limit_s: float | None = None, budget_usd: float | None = None,
                 deadline_hours: float | None = None, **_: Any) -> tuple[Problem, Any]:
    """The problem and its exact time-vs-`metric` frontier (a `planner.pareto.Frontier`);
    InfeasibleError naming the cap when only the cap binds."""
    import time

    from perfmodel.errors import InfeasibleError
    from planner.pareto import Frontier, solve_instance
    from planner.problem import build_problem

    if solver not in ("auto", "dp", "brute"):
        raise UserInputError(f"--solver {solver} does not model energy or CO2",
                             hint="use --solver dp or auto (exact) or brute (small instances).")
    start = time.perf_counter()
    problem = build_problem(instance, table, budget_usd=budget_usd, deadline_hours=deadline_hours)
    require_metric(problem, metric)
    if solver == "brute":
        points, exact = brute_energy_frontier(problem, metric, max_value=max_value), True
    else:
        found = energy_frontier(problem, metric, max_value=max_value, time_limit_s=time_limit_s)
        points, exact = list(found.points), found.proven_exact
    frontier = Frontier(points=tuple(points), solver=f"{'dp' if solver == 'auto' else solver}-{metric}",
                        proven_exact=exact, num_solves=0, solve_time_s=time.perf_counter() - start,
                        max_cost_rounding_usd=max((p.cost_rounding_bound_usd for p in points), default=0.0),
                        note="" if exact else "the energy DP sweep hit the time limit")
    if points:
        return problem, frontier
    if max_value is not None:
        free = solve_energy(instance, table, metric, solver=solver, time_limit_s=time_limit_s,
                            budget_usd=budget_usd, deadline_hours=deadline_hours)[1].points
        if free:
            binding, flag, unit = CAP_FLAGS[metric]
            least = min(getattr(p, FIELD[metric]) for p in free)
            raise InfeasibleError(f"{flag} {max_value:.6g} {unit} is below the lowest-{metric} plan "
                                  f"({least:.6g} {unit}" + (" within the deadline" if deadline_hours or
                                                             instance.limits.deadline_hours else "") + ")",
                                  binding=binding, hint=f"allow at least {least:.6g} {unit}.")
    solve_instance(instance, table, solver="auto", budget_usd=budget_usd, deadline_hours=deadline_hours)
    raise InfeasibleError("no plan found", binding="unknown", hint="report this instance.")


def brute_energy_frontier(problem: Problem, metric: str, *, max_value: float | None = None) -> list[Plan]:
    """The reference: every plan enumerated (no reductions), non-dominated in (W, metric)."""
    from planner.baselines import BruteForce

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
        return min(points, key=lambda p: (p.co2_kg + weight * p.cost_usd, p.cost_usd))

    feasible = [p for p in (*within, cheapest_plan) if p.cost_usd <= max_cost_usd]
    if cheapest_plan.cost_usd > max_cost_usd:
        raise ValueError("the cheapest plan breaks the cost cap")
    lo, solves = solve(0.0), 1
    lower = lo.co2_kg
    high = cheapest_plan
    if lo.cost_usd <= max_cost_usd:
        feasible.append(lo)
    else:
        while solves < max_solves and lo.cost_usd > high.cost_usd:
            weight = (high.co2_kg - lo.co2_kg) / (lo.cost_usd - high.cost_usd)
            plan, solves = solve(weight), solves + 1
            line = lo.co2_kg + weight * lo.cost_usd
            lower = max(lower, min(line, plan.co2_kg + weight * plan.cost_usd) - weight * max_cost_usd)
            if plan.co2_kg + weight * plan.cost_usd >= line * (1 - 1e-12):
                break  # no plan below the hull edge: the dual bound is reached
            if plan.cost_usd <= max_cost_usd:
                feasible.append(plan)
                high = plan
            else:
                lo = plan
    best = min(feasible, key=lambda p: (p.co2_kg, p.cost_usd))
    return CappedCo2(max_cost_usd=max_cost_usd, best=best, lower_bound_kg=max(min(lower, best.co2_kg), 0.0),
                     solves=solves)
