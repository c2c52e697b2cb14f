"""The solver-neutral data of the planning problem (DESIGN §3): clusters, island options and pairs,
the menu, islands, plans, the `Problem` itself and a backend's answer (`SubResult`).

Building a `Problem` from an instance and scoring a plan (`evaluate`) are `planner.model.evaluate`,
which re-exports every name of this module.

Island pairs and the menu
-------------------------
A *pair* is (island option, micro-batch m): one table row. An island of a pair with k
accumulation micro-steps processes k·m·n·g sequences per inner step in
t = step_fixed_s + k·microstep_s (`IslandPair.step_time_s`, the one formula every backend uses).

The *menu* keeps, for each option o and each s (sequences per GPU per inner step, s·n·g <= B),
only the (m, k) with k·m = s of minimum t (ties: smallest m). This is an exact reduction: an
island's price, nodes and GPUs depend only on o, its batch contribution only on (o, s), and its
t enters W only through τ = max t; swapping an island's (m, k) for the menu's (m', k') keeps the
plan feasible and can only lower τ, hence W and C. So every non-dominated (W, C) point has a plan
built from menu items only; the CP-SAT and MILP models choose menu items.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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
    """An island option with one micro-batch size: one row of the island table."""

    option_index: int
    """Index into `Problem.options`."""
    micro_batch: int
    """Sequences per GPU per micro-step."""
    microstep_s: float
    """Time of one accumulation micro-step."""
    step_fixed_s: float
    """Time added once per inner step."""
    max_accum_steps: int
    """Largest admissible k: k·m·n·g <= global batch, and 1 where the row's `accum_fits` is
    false."""
    seqs_per_accum_step: int
    """m·n·g: sequences one accumulation step adds."""

    def step_time_s(self, accum_steps: int) -> float:
        """Inner-step time t = step_fixed_s + k·microstep_s (the one formula every backend uses)."""
        return self.step_fixed_s + accum_steps * self.microstep_s



@dataclass(frozen=True, kw_only=True, slots=True)
class IslandChoice:
    """One island of a plan in solver terms."""

    pair_index: int
    """Index into `Problem.pairs`."""
    accum_steps: int
    """Accumulation micro-steps k >= 1 per inner step."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MenuItem:
    """The fastest way an island of one option processes s sequences per GPU per inner step."""

    option_index: int
    """Index into `Problem.options`."""
    pair_index: int
    """Pair (micro-batch) achieving it."""
    accum_steps: int
    """k = s / m."""
    seqs_per_gpu: int
    """s."""
    seqs: int
    """s·n·g: sequences per inner step of the island."""
    step_time_s: float
    """t of the island."""


def build_menu(options: Sequence[IslandOption], pairs: Sequence[IslandPair],
               batch: int) -> tuple[MenuItem, ...]:
    """Menu items of every option (see the module docstring)."""
    by_option: dict[int, list[int]] = {}
    for i, pair in enumerate(pairs):
        by_option.setdefault(pair.option_index, []).append(i)
    work = sum((batch // options[o].num_gpus) * len(ids) for o, ids in by_option.items())
    limit = LIMITS["menu_work"]
    if work > limit.maximum:
        raise UserInputError(
            f"the planner's menu would take {work:,} evaluations (training.global_batch_seqs "
            f"{batch:,} x sequences per GPU x island options x micro-batches), above "
            f"{limit.maximum:,.0f} ({limit.reason})",
            hint="lower training.global_batch_seqs, or the island options (num_nodes, "
                 "allowed_gpus_per_node).")
    items = []
    for o, pair_ids in sorted(by_option.items()):
        gpus = options[o].num_gpus
        for s in range(1, batch // gpus + 1):
            best: tuple[float, int, int] | None = None
            for i in pair_ids:
                m = pairs[i].micro_batch
                if s % m == 0 and s // m <= pairs[i].max_accum_steps:
                    t = pairs[i].step_time_s(s // m)
                    if best is None or (t, m) < best[:2]:
                        best = (t, m, i)
            if best is not None:
                items.append(MenuItem(option_index=o, pair_index=best[2], accum_steps=s // best[1],
                                      seqs_per_gpu=s, seqs=s * gpus, step_time_s=best[0]))
    return tuple(items)


def dominated_options(problem: Problem) -> frozenset[int]:
    """Options another option of the same cluster makes redundant (exact reduction).

    o' is dropped when some o of the same cluster has the same GPU count n·g (so equal s gives an
    equal batch share and GPU use), no more nodes, no higher price, and for every s that o'
    offers, a menu item of o with the same s and a step time no larger; with the failure model
    on, also no higher interruption rates, restarts, checkpoint stall or billing
    (`OptionRisk.no_worse_than`). Swapping o' for o in any plan keeps it feasible, σ unchanged, τ
    and the price not larger, and every island's expected loss not larger (it grows with τ and
    each rate): W and C, expected or not, do not grow.
    Of options that dominate each other one is kept.
    """
    times: dict[int, dict[int, float]] = {}
    for item in problem.menu:
        times.setdefault(item.option_index, {})[item.seqs_per_gpu] = item.step_time_s
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
    """Sequences per GPU per micro-step (m)."""
    accum_steps: int
    """Accumulation micro-steps per inner step (k)."""
    seqs_per_step: int
    """Sequences per inner step: k·m·n·g."""
    step_time_s: float
    """Inner-step time of this island alone: step_fixed_s + k·microstep_s."""
    usd_per_hour: float
    """Price of the island per hour (quantised)."""
    tier: str = "on-demand"
    """Price tier of the island."""
    participation: float = 1.0
    """Share of the outer steps the island trains in expectation (1 without the failure model,
    and for a plan of one island: its checkpoints carry it)."""


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
    """Usable (option, micro-batch) pairs with at least one admissible k."""
    max_islands: int
    """Effective island cap (already bounded by nodes, GPUs and batch)."""
    max_gpus: int | None
    """GPU cap, None when unlimited."""
    budget_usd: float | None = None
    """Cost cap, None when unlimited."""
    deadline_s: float | None = None
    """Wall-time cap in seconds, None when unlimited."""
    menu: tuple[MenuItem, ...] = ()
    """The fastest (m, k) per (option, s): see the module docstring."""
    levels_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Sorted distinct step times of the menu items: the values τ takes in solver plans."""
    energy: Any = None
    """`planner.model.energy.EnergyData` of the pairs and clusters (None: energy not
    modelled)."""
    risk: Any = None
    """`planner.model.risk.RiskModel` (None: failures not modelled, every figure as without
    them)."""

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
