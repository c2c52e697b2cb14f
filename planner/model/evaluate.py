"""The planning problem of DESIGN §3 in solver-neutral form, and the one plan evaluator.

Every backend (CP-SAT, MILP, brute force, heuristic) reads the same `Problem` and scores a plan
with the same `evaluate` function, so two backends that find the same plan report bit-identical
(wall_time_s, cost_usd).

Units and rounding
------------------
Times are kept as the floats of the island table; they never enter a solver as numbers, only as
comparisons (an island may be used when its step time is at most a cut-off taken from the same
floats), so time is not rounded anywhere. Money is quantised once, when the problem is built:
`usd_per_hour` of every island option becomes an integer number of
`1 / PRICE_UNITS_PER_USD_PER_HOUR` USD per hour. Backends minimise the exact integer sum; the cost
of a plan is computed from that integer sum, so the only rounding is the input quantisation,
at most `0.5 / PRICE_UNITS_PER_USD_PER_HOUR` USD/h per island (see `cost_rounding_bound_usd`).

The data classes (`Problem`, `IslandPair`, `Plan`, ...) and the menu reduction are
`planner.model.problem`, re-exported here.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.facts import cluster_fabric
from perfmodel.spec.formulas import payload_bytes, sync_time_s
from planner.model.energy import build_energy, plan_energy
from planner.model.instance import Instance, alternative_prices, size_prices
from planner.model.island_table import (
    OPTION_KEY,
    VARIANT_COLUMNS,
    data_parallel,
    layout_text,
    table_exclusions,
    variant_text,
)
from planner.model.problem import (
    PRICE_UNITS_PER_USD_PER_HOUR,
    SECONDS_PER_HOUR,
    ClusterInfo,
    Exclusion,
    Island,
    IslandChoice,
    IslandOption,
    IslandPair,
    Plan,
    Problem,
    build_menu,
    exactly_dominated,
)
from planner.model.risk import build_risk, expected_point

LOG = logging.getLogger(__name__)


def wall_time_s(problem: Problem, inner_step_s: float, sync_s: float) -> float:
    """W = D/(B·S)·(τ + σ/H)."""
    return problem.inner_steps_total * (inner_step_s + sync_s / problem.inner_steps)


def cost_usd(wall_s: float, price_units: int) -> float:
    """C = W/3600·Σ price, from the exact integer price sum."""
    return wall_s * price_units / (SECONDS_PER_HOUR * PRICE_UNITS_PER_USD_PER_HOUR)


def group_sync_s(problem: Problem, num_islands: int, cluster_indices: Iterable[int]) -> float:
    """σ of `num_islands` islands on the given clusters (issue 10's topology).

    All islands in one cluster: that cluster's inter-node fabric (when known); islands on
    several clusters: the slowest WAN uplink and the largest WAN latency among them.
    """
    used = sorted(set(cluster_indices))
    if num_islands <= 1 or not used:
        return 0.0
    if len(used) == 1:
        info = problem.clusters[used[0]]
        if info.fabric_bw_bytes_per_s is not None:
            latency = info.wan_latency_s if info.fabric_latency_s is None else info.fabric_latency_s
            return float(sync_time_s(num_islands, problem.pseudo_gradient_bytes,
                                     info.fabric_bw_bytes_per_s, latency))
    bw = min(problem.clusters[c].wan_bw_bytes_per_s for c in used)
    lat = max(problem.clusters[c].wan_latency_s for c in used)
    return float(sync_time_s(num_islands, problem.pseudo_gradient_bytes, bw, lat))


def evaluate(problem: Problem, choices: Sequence[IslandChoice]) -> Plan:
    """Score a plan exactly as DESIGN §3 says (no feasibility check; see `violations`); with the
    failure model on, by its expected wall time and cost (`planner.model.risk`)."""
    ordered = tuple(sorted(choices, key=lambda c: (c.pair_index, c.accum_steps)))
    islands = []
    price_units = 0
    for choice in ordered:
        pair = problem.pairs[choice.pair_index]
        option = problem.options[pair.option_index]
        price_units += option.price_units
        islands.append(
            Island(
                cluster=option.cluster,
                gpu_type=option.gpu_type,
                nodes=option.nodes,
                gpus_per_node=option.gpus_per_node,
                micro_batch=pair.micro_batch,
                accum_steps=choice.accum_steps,
                seqs_per_step=choice.accum_steps * pair.seqs_per_accum_step,
                step_time_s=pair.step_time_s(choice.accum_steps),
                usd_per_hour=option.price_units / PRICE_UNITS_PER_USD_PER_HOUR,
                tier=option.tier,
                layout=pair.layout,
                ac=pair.ac,
                variant=pair.variant,
            )
        )
    tau = max(i.step_time_s for i in islands)
    clusters = [problem.options[problem.pairs[c.pair_index].option_index].cluster_index
                for c in ordered]
    sigma = group_sync_s(problem, len(ordered), clusters)
    wall = wall_time_s(problem, tau, sigma)
    cost = cost_usd(wall, price_units)
    extra: dict[str, Any] = {}
    run_s = wall
    if problem.risk is not None:
        point = expected_point(problem, ordered, tau, sigma, wall)
        run_s = point.wall_time_s
        if point.participation:
            islands = [dataclasses.replace(island, participation=a)
                       for island, a in zip(islands, point.participation, strict=True)]
        extra = {"goodput": point.goodput, "failure_free_wall_time_s": wall,
                 "failure_free_cost_usd": cost, "egress_usd": point.egress_usd,
                 "checkpoint_interval_s": point.checkpoint_interval_s}
        cost = point.cost_usd
    rounding = run_s / SECONDS_PER_HOUR * len(ordered) * 0.5 / PRICE_UNITS_PER_USD_PER_HOUR
    energy_kwh, co2 = plan_energy(problem, ordered, run_s)
    return Plan(
        islands=tuple(islands),
        choices=ordered,
        inner_step_s=tau,
        sync_s=sigma,
        wall_time_s=run_s,
        cost_usd=cost,
        usd_per_hour=price_units / PRICE_UNITS_PER_USD_PER_HOUR,
        price_units=price_units,
        tokens_per_s=problem.train_tokens / run_s,
        num_gpus=sum(i.nodes * i.gpus_per_node for i in islands),
        cost_rounding_bound_usd=rounding,
        energy_kwh=energy_kwh,
        co2_kg=co2,
        **extra,
    )


def violations(problem: Problem, choices: Sequence[IslandChoice]) -> list[str]:
    """DESIGN §3 constraints a plan breaks (empty list: feasible)."""
    out = []
    if not choices:
        return ["no islands"]
    seqs = sum(c.accum_steps * problem.pairs[c.pair_index].seqs_per_accum_step for c in choices)
    if seqs != problem.global_batch_seqs:
        out.append(f"batch {seqs} != {problem.global_batch_seqs}")
    if any(c.accum_steps < 1 for c in choices):
        out.append("accum_steps < 1")
    for c in choices:
        pair = problem.pairs[c.pair_index]
        if c.accum_steps >= 1 and not pair.admits(c.accum_steps):
            out.append(f"accum_steps {c.accum_steps} of pair {c.pair_index} not admissible "
                       f"({pair.min_accum_steps}..{pair.max_accum_steps}, multiple of "
                       f"{pair.accum_multiple})")
    if len(choices) > problem.max_islands:
        out.append(f"{len(choices)} islands > {problem.max_islands}")
    nodes = [0] * len(problem.clusters)
    gpus = 0
    for c in choices:
        option = problem.options[problem.pairs[c.pair_index].option_index]
        nodes[option.cluster_index] += option.nodes
        gpus += option.num_gpus
    for info, used in zip(problem.clusters, nodes, strict=True):
        if used > info.num_nodes:
            out.append(f"cluster {info.name}: {used} nodes > {info.num_nodes}")
    if problem.max_gpus is not None and gpus > problem.max_gpus:
        out.append(f"{gpus} GPUs > {problem.max_gpus}")
    return out


def nondominated(plans: Iterable[Plan]) -> list[Plan]:
    """Non-dominated (W, C) points, one plan each (ties: smallest canonical plan), by W
    ascending."""
    ordered = sorted(plans, key=lambda p: (p.wall_time_s, p.cost_usd, _plan_sort_key(p)))
    front: list[Plan] = []
    for plan in ordered:
        if not front or plan.cost_usd < front[-1].cost_usd:
            if front and plan.wall_time_s == front[-1].wall_time_s:
                continue
            front.append(plan)
    return front


def _plan_sort_key(plan: Plan) -> tuple[tuple[int, int], ...]:
    return tuple((c.pair_index, c.accum_steps) for c in plan.choices)


def quantise_price(usd_per_hour: float) -> int:
    """USD/h as integer price units."""
    return int(round(usd_per_hour * PRICE_UNITS_PER_USD_PER_HOUR))


def island_cap(problem_clusters: Sequence[ClusterInfo], options: Sequence[IslandOption],
               pairs: Sequence[IslandPair], batch: int, max_islands: int | None,
               max_gpus: int | None) -> int:
    """Largest useful island count: limited by max_islands, nodes, GPUs and the batch."""
    if not pairs:
        return 0
    caps = [batch // min(p.min_accum_steps * p.seqs_per_accum_step for p in pairs)]
    node_cap = 0
    for ci, info in enumerate(problem_clusters):
        sizes = [o.nodes for o in options if o.cluster_index == ci]
        if sizes:
            node_cap += info.num_nodes // min(sizes)
    caps.append(node_cap)
    if max_gpus is not None:
        caps.append(max_gpus // min(o.num_gpus for o in options))
    if max_islands is not None:
        caps.append(max_islands)
    return max(0, min(caps))


RELAXABLE = ("max_islands", "num_nodes", "max_gpus")
"""Limits `build_problem` can drop, for diagnosing infeasibility."""


def build_problem(instance: Instance, table: pd.DataFrame, *, relax: Collection[str] = (),
                  budget_usd: float | None = None, deadline_hours: float | None = None,
                  reduce_rows: bool = True) -> Problem:
    """The `Problem` of an instance and its validated island table.

    Rows whose gpus_per_node is not allowed for their cluster, whose node count the cluster does
    not offer (num_nodes, island_nodes, max_nodes_per_island) are not options of the instance
    (logged); options with more GPUs than max_gpus and rows without an admissible k (module
    docstring of `planner.model.problem`) are left out and, when a whole option goes, reported in
    `Problem.excluded` with the table's own exclusions (`table_exclusions`). With `reduce_rows`
    exactly dominated rows are dropped (`exactly_dominated`). `relax` removes limits. Budget and
    deadline default to the instance's limits.
    """
    batch = instance.training.global_batch_seqs
    big = batch * max([int(n) for n in table["nodes"]] or [1])
    clusters = tuple(
        ClusterInfo(name=c.name, num_nodes=big if "num_nodes" in relax else c.num_nodes,
                    wan_bw_bytes_per_s=c.wan_bw_bytes_per_s, wan_latency_s=c.wan_latency_s,
                    price_source=(f"{c.price.provider} {c.price.tier}" if c.price is not None
                                  else c.name),
                    provider=c.provider, price_list=price_list_of(c), region=c.region,
                    **_fabric(c))
        for c in instance.clusters
    )
    index = {c.name: i for i, c in enumerate(clusters)}
    max_gpus = None if "max_gpus" in relax else instance.limits.max_gpus
    options: list[IslandOption] = []
    pairs: list[IslandPair] = []
    pair_rows: list[tuple[Any, str]] = []  # (table row, GPU type) per pair, for the power model
    costs: list[tuple[float, ...]] = []  # per pair: what `exactly_dominated` compares
    dropped: list[Exclusion] = []
    by_size = size_prices(instance)
    # a cluster's other price tiers (`alternatives`) are options only under the failure model:
    # without it a dearer tier of the same nodes is never better, and the problem stays main's
    alt_prices = alternative_prices(instance) if instance.failures_on else {}
    keys = [c for c in VARIANT_COLUMNS if c in table.columns]
    # the rows without the table's attrs (recipe, exclusions: read from `table` below): pandas
    # deep-copies attrs into every group slice, which cost most of this function's time
    plain = table.copy(deep=False).reset_index(drop=True)
    plain.attrs = {}
    # every row as a named tuple once: per-group itertuples re-slices each column per group
    records = list(plain.itertuples(index=False))
    groups: Any = plain.groupby(OPTION_KEY, sort=True)  # keys and rows: untyped pandas values
    for (cluster, nodes, gpn), rows in groups:
        spec = instance.cluster(str(cluster))
        reason = _unusable(spec.gpus_per_node_choices, clusters[index[spec.name]].num_nodes,
                           None, int(nodes), int(gpn), spec.max_nodes_per_island,
                           spec.island_nodes)
        if reason:
            LOG.info("island option %s %dx%d dropped: %s", cluster, nodes, gpn, reason)
            continue
        if max_gpus is not None and int(nodes) * int(gpn) > max_gpus:
            dropped.append(Exclusion(
                cluster=spec.name, nodes=int(nodes), gpus_per_node=int(gpn),
                reason=f"{int(nodes) * int(gpn)} GPUs > limits.max_gpus {max_gpus}",
                fix=f"raise limits.max_gpus to {int(nodes) * int(gpn)}"))
            continue
        first = rows.iloc[0]
        usd = float(first["usd_per_hour"])
        listed = by_size.get(spec.name, {}).get(int(gpn))
        if listed is not None:  # the list prices this instance size itself
            usd = int(nodes) * int(gpn) * listed
        base = IslandOption(cluster=spec.name, cluster_index=index[spec.name],
                            gpu_type=str(first["gpu_type"]), nodes=int(nodes),
                            gpus_per_node=int(gpn), usd_per_hour=usd,
                            price_units=quantise_price(usd), tier=spec.tier,
                            source=clusters[index[spec.name]].price_source)
        tiers = [base]
        for tier, per_gpu in alt_prices.get(spec.name, {}).items():
            alt_usd = int(nodes) * int(gpn) * per_gpu
            tiers.append(dataclasses.replace(
                base, tier=tier, usd_per_hour=alt_usd, price_units=quantise_price(alt_usd),
                source=f"{spec.price.provider} {tier}" if spec.price is not None
                else f"{spec.name} {tier}"))
        ordered = rows.sort_values(["micro_batch", *keys], kind="stable")
        for option in tiers:
            new_pairs = []
            least = None  # the smallest first admissible batch contribution, for the exclusion
            for row in (records[i] for i in ordered.index):
                pair, first_seqs = _pair(row, len(options), option, batch, keys)
                least = first_seqs if least is None else min(least, first_seqs)
                if pair is not None:
                    new_pairs.append(pair)
                    pair_rows.append((row, option.gpu_type))
                    costs.append(_row_costs(row))
            if new_pairs:
                options.append(option)
                pairs.extend(new_pairs)
            elif option is base:
                dropped.append(_no_admissible_k(option, batch, least))
    rows_dropped = 0
    if reduce_rows and pairs:
        skip = exactly_dominated(pairs, costs)
        if skip:
            rows_dropped = len(skip)
            LOG.info("%d island-table rows dropped as exactly dominated", rows_dropped)
            kept = [i for i in range(len(pairs)) if i not in skip]
            pairs = [pairs[i] for i in kept]
            pair_rows = [pair_rows[i] for i in kept]
    menu = build_menu(options, pairs, batch)
    max_islands = None if "max_islands" in relax else instance.max_islands
    budget = budget_usd if budget_usd is not None else instance.limits.budget_usd
    deadline_h = deadline_hours if deadline_hours is not None else instance.limits.deadline_hours
    params = instance.pseudo_gradient_parameters
    risk = (build_risk(instance, clusters, options, float(params)) if instance.failures_on
            else None)
    return Problem(
        name=instance.name,
        global_batch_seqs=batch,
        seq_len=instance.training.seq_len,
        train_tokens=instance.training.train_tokens,
        inner_steps=instance.inner_steps,
        pseudo_gradient_bytes=float(payload_bytes(params, instance.training.pseudo_gradient_dtype)),
        clusters=clusters,
        options=tuple(options),
        pairs=tuple(pairs),
        max_islands=island_cap(clusters, options, pairs, batch, max_islands, max_gpus),
        max_gpus=max_gpus,
        budget_usd=budget,
        deadline_s=None if deadline_h is None else deadline_h * SECONDS_PER_HOUR,
        menu=menu,
        levels_s=np.unique(np.array([item.step_time_s for item in menu], dtype=float)),
        energy=build_energy(instance, [r for r, _ in pair_rows], [g for _, g in pair_rows]),
        risk=risk,
        excluded=_exclusions(instance, table, options, dropped),
        rows_dropped=rows_dropped,
    )


def _pair(row: Any, option_index: int, option: IslandOption, batch: int,
          keys: Sequence[str]) -> tuple[IslandPair | None, int]:
    """The pair of one table row (None: no admissible k) and its smallest batch contribution
    first·m·dp (first: the row's smallest admissible k, ignoring the batch)."""
    m = int(row.micro_batch)
    dp = data_parallel(row, option.num_gpus)
    step = m * dp
    multiple = int(getattr(row, "accum_multiple", 1))
    low = -(-int(getattr(row, "min_accum", 1)) // multiple) * multiple
    high = batch // step
    cap = getattr(row, "max_accum", None)
    if cap is not None and cap == cap:  # empty (NaN): no memory bound on k
        high = min(high, int(cap))
    if not bool(getattr(row, "accum_fits", True)):
        high = min(high, 1)  # accumulation buffers do not fit the GPU: k = 1 only (issue 9)
    high = high // multiple * multiple
    if high < low:
        return None, low * step
    variant = tuple((c, variant_text(getattr(row, c))) for c in keys)
    named = dict(variant)
    return IslandPair(option_index=option_index, micro_batch=m,
                      microstep_s=float(row.microstep_s), step_fixed_s=float(row.step_fixed_s),
                      max_accum_steps=high, seqs_per_accum_step=step, min_accum_steps=low,
                      accum_multiple=multiple, data_parallel=dp,
                      layout=named.get("layout") or layout_text(variant), ac=named.get("ac", ""),
                      variant=variant), low * step


def _row_costs(row: Any) -> tuple[float, ...]:
    """What `exactly_dominated` compares of a row: times, activity split, TDP and memory
    (columns the table lacks count as equal)."""
    return tuple(float(getattr(row, c, 0.0)) for c in DOMINANCE_COLUMNS)


DOMINANCE_COLUMNS = ("step_fixed_s", "microstep_s", "compute_fixed_s", "compute_micro_s",
                     "comm_only_fixed_s", "comm_only_micro_s", "tdp_w", "memory_gib",
                     "memory_accum_gib")
"""Row quantities where smaller is never worse (`planner.model.problem.exactly_dominated`)."""


def _no_admissible_k(option: IslandOption, batch: int, least: int | None) -> Exclusion:
    """Why an option with rows keeps none: every row's smallest batch contribution exceeds B, or
    its schedule's smallest k does not fit the memory (accum_fits, max_accum)."""
    if least is not None and least > batch:
        return Exclusion(cluster=option.cluster, nodes=option.nodes,
                         gpus_per_node=option.gpus_per_node,
                         reason=f"its smallest batch contribution (k·m·dp) is {least} sequences, "
                                f"above training.global_batch_seqs {batch}",
                         fix=f"raise training.global_batch_seqs to at least {least}, or use "
                             "fewer GPUs (or more tensor/pipeline parallelism) per island")
    return Exclusion(cluster=option.cluster, nodes=option.nodes,
                     gpus_per_node=option.gpus_per_node,
                     reason="no row can run the accumulation steps its schedule needs within the "
                            "GPU's memory (accum_fits false or max_accum below min_accum)",
                     fix="allow more activation checkpointing (training.activation_checkpointing) "
                         "or a schedule with fewer micro-batches in flight (training.parallel)")


def _exclusions(instance: Instance, table: pd.DataFrame, options: Sequence[IslandOption],
                dropped: Sequence[Exclusion]) -> tuple[Exclusion, ...]:
    """The table's exclusions, the options left out here, and a line for every cluster with no
    usable option (its options' fixes); in instance cluster order, then nodes and GPUs."""
    found = [*table_exclusions(instance, table), *dropped]
    used = {o.cluster for o in options}
    for cluster in instance.clusters:
        if cluster.name in used or any(e.cluster == cluster.name and e.nodes is None
                                       and e.gpus_per_node is None for e in found):
            continue
        own = [e for e in found if e.cluster == cluster.name]
        # One fix for the cluster, not one per option (the options' own lines carry theirs): the
        # largest option's, since more GPUs per island is the usual way out of a memory limit;
        # the per-option fixes differ mostly in their node counts, and joining them all made one
        # unreadable line per cluster (issue 29).
        largest = max(own, key=lambda e: (e.nodes or 0) * (e.gpus_per_node or 0), default=None)
        found.append(Exclusion(
            cluster=cluster.name,
            reason=(f"none of its {len(own)} island options is usable (each is listed)" if own
                    else "it offers no island option"),
            fix=(f"for its largest option ({largest.nodes} x {largest.gpus_per_node} GPUs): "
                 f"{largest.fix}" if largest is not None and largest.nodes is not None
                 else largest.fix if largest is not None
                 else "check island_nodes, max_nodes_per_island and allowed_gpus_per_node")))
    order = {c.name: i for i, c in enumerate(instance.clusters)}
    return tuple(sorted(found, key=lambda e: (order.get(e.cluster, len(order)), e.nodes or 0,
                                              e.gpus_per_node or 0)))


def price_list_of(cluster: Any) -> str:
    """The price list a cluster's prices come from: "provider DATE" (DATE "newest" when the
    instance names no snapshot date), or "instance file" for an explicit price."""
    if cluster.price is None:
        return "instance file"
    return f"{cluster.price.provider} {cluster.price.as_of or 'newest'}"


def _fabric(cluster: Any) -> dict[str, float | None]:
    """Fabric of a cluster: the instance's `fabric_*` fields, else the GPU's catalog link."""
    bw = None if cluster.fabric_gbit_s is None else cluster.fabric_gbit_s * 1e9 / 8.0
    latency = None if cluster.fabric_latency_ms is None else cluster.fabric_latency_ms / 1000.0
    if bw is None or latency is None:
        found = _catalog_fabric(cluster.gpu)
        if found is not None:
            bw = found[0] if bw is None else bw
            latency = found[1] if latency is None else latency
    if bw is None:
        LOG.info("cluster %s: fabric of %s unknown; same-cluster syncs use the WAN", cluster.name,
                 cluster.gpu)
    return {"fabric_bw_bytes_per_s": bw, "fabric_latency_s": latency}


def _catalog_fabric(gpu: str) -> tuple[float, float] | None:
    return cluster_fabric(gpu)


def _unusable(allowed: Sequence[int], num_nodes: int, max_gpus: int | None, nodes: int, gpn: int,
              max_nodes_per_island: int | None = None,
              island_nodes: Sequence[int] | None = None) -> str:
    if max_nodes_per_island is not None and nodes > max_nodes_per_island:
        return f"{nodes} nodes > max_nodes_per_island {max_nodes_per_island}"
    if island_nodes is not None and nodes not in island_nodes:
        return f"{nodes} nodes not in island_nodes {list(island_nodes)}"
    if gpn not in allowed:
        return f"gpus_per_node {gpn} not in allowed_gpus_per_node {list(allowed)}"
    if nodes > num_nodes:
        return f"needs {nodes} nodes, cluster has {num_nodes}"
    if max_gpus is not None and nodes * gpn > max_gpus:
        return f"{nodes * gpn} GPUs > max_gpus {max_gpus}"
    return ""
