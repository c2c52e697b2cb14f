"""The solver-neutral data of the planning problem (DESIGN §3): clusters, island options and pairs,
the menu, islands, plans, the `Problem` itself and a backend's answer (`SubResult`).

Building a `Problem` from an instance and scoring a plan (`evaluate`) are `planner.model.evaluate`,
which re-exports every name of this module.

Island pairs and the menu
-------------------------
A *pair* is one table row: an island option o = (cluster, nodes n, GPUs per node g) with one
parallel layout, one checkpointing mode and one micro-batch m (a plain FSDP table has one row per
(o, m)). The row's `dp` data-parallel ranks each take m sequences per micro-step, so an island of
the pair with k accumulation micro-steps processes b = k·m·dp sequences per inner step (dp = n·g
for plain FSDP: b = k·m·n·g) in t = step_fixed_s + k·microstep_s (`IslandPair.step_time_s`, the one
formula every backend uses). k is *admissible* when min_accum <= k <= max_accum and k is a multiple
of accum_multiple (a 1F1B pipeline needs k >= pp, an interleaved one k a multiple of pp, GPipe's
memory bounds k; a row whose accumulation buffers do not fit the GPU runs k = 1 only) and
b <= B (`IslandPair.accum_steps_range`).

The *menu* keeps, for each option o and each batch contribution b <= B, only the admissible
(row, k) with k·m·dp = b of minimum t (ties: smallest m, then the first pair in the problem's
stable pair order). Claim: this is an exact reduction. Why: an island's price, nodes and GPUs
depend only on o, its batch contribution only on b, and its t enters W only through
τ = max t (energy is not priced from the menu: `planner.solvers.energy_dp` reads every (pair, k));
swapping an island's (row, k) for the menu's (row', k') of the same (o, b) keeps the plan feasible
(same nodes, GPUs and Σ b = B) and can only lower τ, hence W and C. So every non-dominated
(W, C) point has a plan built from menu items only; the DP, CP-SAT and MILP backends choose menu
items. Checked by: tests/test_planner_layouts.py (every backend's frontier against brute force
over every admissible (row, k), on random tables with layout and checkpointing columns) and
tests/test_planner_properties.py (plain tables).

Exactly dominated rows
----------------------
`exactly_dominated` drops a row r when another row r* of the same option has the same batch
contribution per micro-step (m·dp), an admissible k-set containing r's, step_fixed_s and
microstep_s no larger, an activity split and TDP no larger and memory no larger. Claim: no
non-dominated (W, C) or (W, energy) point is lost. Why: at every admissible k of r, r* is
admissible with the same b, t no larger and per-step energy no larger, on the same nodes, GPUs
and price; swapping r for r* in any plan keeps it feasible and W, C and energy do not grow.
Checked by: tests/test_planner_layouts.py (no dominated row survives; brute force over the
unreduced table equals every backend's frontier on the reduced one, cost and energy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from perfmodel.facts import LIMITS
from perfmodel.spec.errors import UserInputError

PRICE_UNITS_PER_USD_PER_HOUR = 1_000_000
"""Integer price units per USD/h: prices are quantised to 1e-6 USD per hour."""
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterInfo:
    """What the planner needs to know about one cluster."""

    name: str
    """Cluster name (matches the island table's `cluster` column)."""
    num_nodes: int
    """Nodes available to all islands of this cluster together."""
    wan_bw_bytes_per_s: float
    """WAN uplink bandwidth, bytes per second."""
    wan_latency_s: float
    """WAN latency, seconds."""
    fabric_bw_bytes_per_s: float | None = None
    """Inter-node fabric bandwidth, bytes/s, of a sync among islands of this cluster alone
    (None: unknown, such a sync uses the WAN uplink)."""
    fabric_latency_s: float | None = None
    """Latency of that fabric, seconds (None: the WAN latency)."""
    price_source: str = ""
    """Where the price comes from, for labels: "provider tier" of a price-list reference, else
    the cluster name."""
    provider: str | None = None
    """Provider of the cluster's price list (None: priced in the instance file)."""
    price_list: str = ""
    """The price list its prices come from: "provider DATE" (DATE "newest" when the instance
    names no snapshot date), or "instance file" for an explicit price."""
    region: str | None = None
    """Grid region of its data centre (None: not given)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class IslandOption:
    """One island option (cluster, nodes, GPUs per node) of the island table."""

    cluster: str
    """Cluster the nodes come from."""
    cluster_index: int
    """Index of the cluster in `Problem.clusters`."""
    gpu_type: str
    """GPU name as in the table."""
    nodes: int
    """Nodes of the island."""
    gpus_per_node: int
    """GPUs used per node."""
    usd_per_hour: float
    """Price of the whole island per hour, as in the table."""
    price_units: int
    """`usd_per_hour` quantised to integer price units."""
    tier: str = "on-demand"
    """Price tier the island is rented at (a cluster's own tier or one of its alternatives)."""
    source: str = ""
    """"provider tier" of the price, for labels (the cluster name when priced explicitly)."""

    @property
    def num_gpus(self) -> int:
        """GPUs of the island."""
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True, kw_only=True, slots=True)
class IslandPair:
    """One row of the island table: an island option with one layout, checkpointing mode and
    micro-batch (see the module docstring)."""

    option_index: int
    """Index into `Problem.options`."""
    micro_batch: int
    """Sequences per data-parallel rank per micro-step (m)."""
    microstep_s: float
    """Time of one accumulation micro-step."""
    step_fixed_s: float
    """Time added once per inner step."""
    max_accum_steps: int
    """Largest admissible k: k·m·dp <= global batch, k <= the row's max_accum, a multiple of
    accum_multiple, and 1 where the row's `accum_fits` is false."""
    seqs_per_accum_step: int
    """m·dp: sequences one accumulation step adds."""
    min_accum_steps: int = 1
    """Smallest admissible k (the row's min_accum rounded up to a multiple of accum_multiple)."""
    accum_multiple: int = 1
    """k must be a multiple of this (interleaved 1F1B: pp)."""
    data_parallel: int = 0
    """dp: data-parallel ranks of the island (n·g/(tp·pp·cp); n·g for plain FSDP)."""
    layout: str = ""
    """Display string of the row's parallel layout ("" for a plain FSDP table)."""
    ac: str = ""
    """Checkpointing mode of the row ("" when the table has no `ac` column)."""
    variant: tuple[tuple[str, str], ...] = ()
    """(column, value) of the row's layout and checkpointing columns: what tells rows of one
    option and micro-batch apart (empty for a plain FSDP table)."""

    def step_time_s(self, accum_steps: int) -> float:
        """Inner-step time t = step_fixed_s + k·microstep_s (the one formula every backend uses)."""
        return self.step_fixed_s + accum_steps * self.microstep_s

    def accum_steps_range(self) -> range:
        """Every admissible k, ascending (empty when none is)."""
        return range(self.min_accum_steps, self.max_accum_steps + 1, self.accum_multiple)

    def admits(self, accum_steps: int) -> bool:
        """Is k admissible for this row?"""
        return (self.min_accum_steps <= accum_steps <= self.max_accum_steps
                and accum_steps % self.accum_multiple == 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class IslandChoice:
    """One island of a plan in solver terms."""

    pair_index: int
    """Index into `Problem.pairs`."""
    accum_steps: int
    """Accumulation micro-steps k >= 1 per inner step."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MenuItem:
    """The fastest way an island of one option contributes b sequences per inner step."""

    option_index: int
    """Index into `Problem.options`."""
    pair_index: int
    """Pair (row: layout, checkpointing, micro-batch) achieving it."""
    accum_steps: int
    """k = b / (m·dp)."""
    seqs: int
    """b = k·m·dp: sequences per inner step of the island."""
    step_time_s: float
    """t of the island."""


def build_menu(options: Sequence[IslandOption], pairs: Sequence[IslandPair],
               batch: int) -> tuple[MenuItem, ...]:
    """Menu items of every option, ordered by option then b (see the module docstring)."""
    # the guard counts what it always counted: (B / sequences per data-parallel rank) per row,
    # B // (n·g) for a plain FSDP row; it bounds the menu and the solvers' work after it
    work = sum(batch // (pair.data_parallel or options[pair.option_index].num_gpus)
               for pair in pairs)
    limit = LIMITS["menu_work"]
    if work > limit.maximum:
        raise UserInputError(
            f"the planner's menu would take {work:,} evaluations (training.global_batch_seqs "
            f"{batch:,} x sequences per data-parallel rank x island-table rows), above "
            f"{limit.maximum:,.0f} ({limit.reason})",
            hint="lower training.global_batch_seqs, or the island options (num_nodes, "
                 "island_nodes, allowed_gpus_per_node).")
    best: dict[tuple[int, int], tuple[float, int, int, int]] = {}
    for i, pair in enumerate(pairs):
        for k in pair.accum_steps_range():
            key = (pair.option_index, k * pair.seqs_per_accum_step)
            entry = (pair.step_time_s(k), pair.micro_batch, i, k)
            if key not in best or entry < best[key]:
                best[key] = entry
    return tuple(MenuItem(option_index=o, pair_index=i, accum_steps=k, seqs=b, step_time_s=t)
                 for (o, b), (t, _, i, k) in sorted(best.items()))


def dominated_options(problem: Problem) -> frozenset[int]:
    """Options another option of the same cluster makes redundant (exact reduction).

    o' is dropped when some o of the same cluster has the same GPU count n·g (an equal GPU use
    under a GPU cap), no more nodes, no higher price, and for every batch contribution b that o'
    offers, a menu item of o with the same b and a step time no larger; with the failure model
    on, also no higher interruption rates, restarts, checkpoint stall or billing
    (`OptionRisk.no_worse_than`). Swapping o' for o in any plan keeps it feasible, σ unchanged, τ
    and the price not larger, and every island's expected loss not larger (it grows with τ and
    each rate): W and C, expected or not, do not grow. Of options that dominate each other one
    is kept.
    """
    times: dict[int, dict[int, float]] = {}
    for item in problem.menu:
        times.setdefault(item.option_index, {})[item.seqs] = item.step_time_s
    dropped: set[int] = set()
    for j, worse in enumerate(problem.options):
        for i, better in enumerate(problem.options):
            if i == j or i in dropped or better.cluster_index != worse.cluster_index:
                continue
            if better.num_gpus != worse.num_gpus or better.nodes > worse.nodes \
                    or better.price_units > worse.price_units:
                continue
            if problem.risk is not None and not problem.risk.options[i].no_worse_than(
                    problem.risk.options[j]):
                continue
            t_better, t_worse = times.get(i, {}), times.get(j, {})
            if all(s in t_better and t_better[s] <= t for s, t in t_worse.items()):
                dropped.add(j)
                break
    return frozenset(dropped)


def exactly_dominated(pairs: Sequence[IslandPair],
                      costs: Sequence[Sequence[float]]) -> frozenset[int]:
    """Pairs (table rows) another row of the same option beats at every admissible k (exact; see
    "Exactly dominated rows" in the module docstring).

    `costs[i]` lists row i's quantities where smaller is never worse (step_fixed_s, microstep_s,
    the activity split, TDP, memory), the same length for the rows of one option; NaN compares
    equal only to NaN (an unknown value is never taken as smaller). Row r is dropped when a row r*
    of the same option and m·dp weakly beats it in every quantity with an admissible k-set
    containing r's, and r* is strictly better somewhere or comes first (of rows that beat each
    other exactly the first is kept). No dropped row is needed: the kept rows include, for each
    dropped one, a row that beats it (weak dominance is transitive).
    """
    groups: dict[tuple[int, int], list[int]] = {}
    for i, pair in enumerate(pairs):
        groups.setdefault((pair.option_index, pair.seqs_per_accum_step), []).append(i)
    dropped: set[int] = set()
    for members in groups.values():
        if len(members) < 2:
            continue
        for j in members:
            for i in members:
                if i != j and _beats(pairs[i], costs[i], pairs[j], costs[j]) and (
                        i < j or not _beats(pairs[j], costs[j], pairs[i], costs[i])):
                    dropped.add(j)
                    break
    return frozenset(dropped)


def _beats(better: IslandPair, better_costs: Sequence[float], worse: IslandPair,
           worse_costs: Sequence[float]) -> bool:
    """Weak dominance of `worse` by `better` (same option and m·dp assumed)."""
    if not _contains(better, worse):
        return False
    for x, y in zip(better_costs, worse_costs, strict=True):
        if x != x or y != y:  # NaN: only NaN against NaN
            if not (x != x and y != y):
                return False
        elif x > y:
            return False
    return True


def _contains(outer: IslandPair, inner: IslandPair) -> bool:
    """Is every admissible k of `inner` admissible for `outer`?"""
    ks = inner.accum_steps_range()
    if not ks:
        return True
    if ks[0] < outer.min_accum_steps or ks[-1] > outer.max_accum_steps:
        return False
    q = outer.accum_multiple
    return ks[0] % q == 0 and (len(ks) == 1 or ks.step % q == 0)


class ExclusionRecord(Protocol):
    """What the performance model reports for a cluster or island option it leaves out of the
    table (`perfmodel.tables.ModelTable.excluded`); any object with these attributes will do."""

    @property
    def cluster(self) -> str:
        """Cluster name."""

    @property
    def nodes(self) -> int | None:
        """Nodes of the option (None: the whole cluster)."""

    @property
    def gpus_per_node(self) -> int | None:
        """GPUs per node of the option (None: the whole cluster)."""

    @property
    def reason(self) -> str:
        """Why it contributes no row."""

    @property
    def fix(self) -> str:
        """The smallest change that makes it usable."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Exclusion:
    """A cluster or island option that contributes no row to the plan, with why and the fix."""

    cluster: str
    """Cluster name."""
    nodes: int | None = None
    """Nodes of the option (None: the whole cluster)."""
    gpus_per_node: int | None = None
    """GPUs per node of the option (None: the whole cluster)."""
    reason: str
    """Why it contributes no row."""
    fix: str
    """The smallest change that makes it usable."""

    @classmethod
    def of(cls, record: ExclusionRecord) -> Exclusion:
        """A planner copy of any exclusion record (the performance model's, duck-typed)."""
        nodes, gpn = record.nodes, record.gpus_per_node
        return cls(cluster=str(record.cluster), nodes=None if nodes is None else int(nodes),
                   gpus_per_node=None if gpn is None else int(gpn), reason=str(record.reason),
                   fix=str(record.fix))

    @property
    def where(self) -> str:
        """"cluster A" or "A 2x8" (nodes x GPUs per node)."""
        if self.nodes is None and self.gpus_per_node is None:
            return f"cluster {self.cluster}"
        nodes = "*" if self.nodes is None else str(self.nodes)
        gpn = "*" if self.gpus_per_node is None else str(self.gpus_per_node)
        return f"{self.cluster} {nodes}x{gpn}"

    def record(self) -> dict[str, Any]:
        """A JSON-able record (cluster, nodes, gpus_per_node, reason, fix)."""
        return {"cluster": self.cluster, "nodes": self.nodes, "gpus_per_node": self.gpus_per_node,
                "reason": self.reason, "fix": self.fix}


@dataclass(frozen=True, kw_only=True, slots=True)
class Island:
    """One island of an evaluated plan."""

    cluster: str
    """Cluster the island runs on."""
    gpu_type: str
    """GPU name."""
    nodes: int
    """Nodes of the island."""
    gpus_per_node: int
    """GPUs per node."""
    micro_batch: int
    """Sequences per data-parallel rank per micro-step (m)."""
    accum_steps: int
    """Accumulation micro-steps per inner step (k)."""
    seqs_per_step: int
    """Sequences per inner step: k·m·dp (k·m·n·g for plain FSDP)."""
    step_time_s: float
    """Inner-step time of this island alone: step_fixed_s + k·microstep_s."""
    usd_per_hour: float
    """Price of the island per hour (quantised)."""
    tier: str = "on-demand"
    """Price tier of the island."""
    participation: float = 1.0
    """Share of the outer steps the island trains in expectation (1 without the failure model,
    and for a plan of one island: its checkpoints carry it)."""
    layout: str = ""
    """Parallel layout of the island's row ("" for a plain FSDP table)."""
    ac: str = ""
    """Checkpointing mode of the island's row ("" when the table has no `ac` column)."""
    variant: tuple[tuple[str, str], ...] = ()
    """The row's layout and checkpointing columns as (column, value) (`IslandPair.variant`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """An evaluated plan: islands plus DESIGN §3 wall time and cost. With the failure model on
    (`Problem.risk`), `wall_time_s` and `cost_usd` are the expected values the solvers optimise
    (`planner.model.risk`) and the failure-free ones are kept beside them."""

    islands: tuple[Island, ...]
    """Islands, in a canonical order."""
    choices: tuple[IslandChoice, ...]
    """The same islands in solver terms (pair index, k)."""
    inner_step_s: float
    """τ = max island step time."""
    sync_s: float
    """σ: blocking pseudo-gradient all-reduce per outer step (0 for one island)."""
    wall_time_s: float
    """W = D/(B·S)·(τ + σ/H)."""
    cost_usd: float
    """C = W/3600·Σ usd_per_hour."""
    usd_per_hour: float
    """Σ usd_per_hour of the islands (quantised)."""
    price_units: int
    """Σ price units (the exact integer the solvers minimise)."""
    tokens_per_s: float
    """D / W."""
    num_gpus: int
    """Σ n·g."""
    cost_rounding_bound_usd: float
    """Largest difference between `cost_usd` and the cost at unquantised prices."""
    energy_kwh: float | None = None
    """Facility energy of the run, kWh (planner.model.energy; None: a GPU without a known
    TDP)."""
    co2_kg: float | None = None
    """Emissions of that energy at the clusters' grid intensities, kg CO2e (None: a cluster
    without a region)."""
    goodput: float = 1.0
    """Failure-free wall time over expected wall time (1 without the failure model)."""
    failure_free_wall_time_s: float | None = None
    """W without failures (None without the failure model: then it is `wall_time_s`)."""
    failure_free_cost_usd: float | None = None
    """C without failures (None without the failure model: then it is `cost_usd`)."""
    egress_usd: float = 0.0
    """Egress part of `cost_usd` (0 without the failure model)."""
    checkpoint_interval_s: float | None = None
    """Compute time between checkpoints of a one-island plan under the failure model."""

    @property
    def key(self) -> tuple[float, float]:
        """(wall_time_s, cost_usd)."""
        return (self.wall_time_s, self.cost_usd)


@dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """A solver-neutral planning problem (DESIGN §3)."""

    name: str
    """Instance name."""
    global_batch_seqs: int
    """B: sequences per inner step, all islands together."""
    seq_len: int
    """S: tokens per sequence."""
    train_tokens: float
    """D: training tokens."""
    inner_steps: int
    """H: inner steps per outer step."""
    pseudo_gradient_bytes: float
    """P: bytes exchanged per island in the outer all-reduce."""
    clusters: tuple[ClusterInfo, ...]
    """Clusters named by the instance."""
    options: tuple[IslandOption, ...]
    """Usable island options."""
    pairs: tuple[IslandPair, ...]
    """Usable rows (option, layout, checkpointing, micro-batch) with at least one admissible
    k."""
    max_islands: int
    """Effective island cap (already bounded by nodes, GPUs and batch)."""
    max_gpus: int | None
    """GPU cap, None when unlimited."""
    budget_usd: float | None = None
    """Cost cap, None when unlimited."""
    deadline_s: float | None = None
    """Wall-time cap in seconds, None when unlimited."""
    menu: tuple[MenuItem, ...] = ()
    """The fastest (row, k) per (option, b): see the module docstring."""
    levels_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Sorted distinct step times of the menu items: the values τ takes in solver plans."""
    energy: Any = None
    """`planner.model.energy.EnergyData` of the pairs and clusters (None: energy not
    modelled)."""
    risk: Any = None
    """`planner.model.risk.RiskModel` (None: failures not modelled, every figure as without
    them)."""
    excluded: tuple[Exclusion, ...] = ()
    """Clusters and island options of the instance that contribute no row, with why and the fix
    (the performance model's records, options without a row, options the limits rule out)."""
    rows_dropped: int = 0
    """Table rows left out as exactly dominated (`exactly_dominated`)."""

    @property
    def inner_steps_total(self) -> float:
        """D/(B·S): inner steps of the whole run."""
        return self.train_tokens / (self.global_batch_seqs * self.seq_len)


@dataclass(frozen=True, kw_only=True, slots=True)
class SolveProvenance:
    """How a frontier was found: the one provenance record every solver's result carries
    (`planner.analysis.pareto.Frontier`, `planner.solvers.dp.DpResult`,
    `planner.solvers.energy_dp.EnergyFrontier` extend it with their points)."""

    solver: str
    """The backend that produced it (its registry name; energy frontiers add the metric)."""
    proven_exact: bool
    """True when every step finished proven optimal (false under a binding time limit)."""
    num_solves: int = 0
    """Backend solves (staircase steps; 0 for the DPs, brute force and the heuristic)."""
    levels_swept: int = 0
    """DP levels processed before the stop rule or the time limit (0 for other backends)."""
    levels_total: int = 0
    """Distinct step times the DP would sweep (0 for other backends)."""
    solve_time_s: float = 0.0
    """Wall-clock seconds spent."""
    note: str = ""
    """Why the result is not proven exact (empty when it is)."""
    cross_checks: int = 0
    """Infeasible staircase steps after a feasible one, re-checked by a second method."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubResult:
    """Answer of a backend to "cheapest plan with W <= ε"."""

    status: str
    """optimal | feasible (time limit, not proven) | infeasible | unknown (no answer in time)."""
    choices: tuple[IslandChoice, ...] = ()
    """The plan found (empty unless optimal/feasible)."""
    price_units: int = 0
    """Its Σ price units."""
