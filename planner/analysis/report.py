"""Frontier and plan reports: records (JSON/CSV/table) and the paper's figure-7/8 style plots.

Per-island throughput is the island's share of the run: seqs_per_step·S/(τ + σ/H) tokens/s (all
islands advance in lockstep at the slowest island's pace plus the amortised sync); per-island cost
is W/3600·usd_per_hour of the island. Where the island table has layout or checkpointing columns,
each island also says its `layout` and `ac` (and the row's layout columns); the clusters and
options that contribute no row are `exclusion_records` (the JSON `excluded` list of a plan).

Claim: every plan says what to rent where: identical islands fold into `island_groups` ("8 ×
(1 node × 8 H200-SXM-141GB) @ RunPod community (A), m 4, k 1") carrying provider, tier, price
list and region; plan and pareto JSON are versioned objects (`frontier_document`,
`plan_document`, schemas in planner/schemas/) naming each GPU's profile provenance; the frontier
stays exact (every point kept) but points whose gain over a neighbour is below `min_gain` are
marked `near_duplicate`, and `usd_per_hour_saved` is measured against a faster point that saves
at least that fraction of wall time (`marginal_costs`); given the solve's `PlanBands`
(`planner.model.uncertainty`), every plan record carries the p10/p90 band of its wall time, cost,
tokens/s, energy and CO2 next to each figure, with `interval_groups` and `interval_note`.
Why: a label like "1x8x8 A100 + 1x8x8 H200" drops the GPU variant and the provider (labels
now read "1x8x8 A100-PCIe-80GB @ RunPod/B + ...", `plan_label`); a dollar
difference divided by 15 seconds saved reads as hundreds of thousands of dollars per hour.
Checked by: tests/test_plan_output.py (groups sum to the plan, near-duplicates and the per-hour
figure on the case study, the JSON validates against its schema, CSV rows per island group) and
tests/test_terminal.py (pareto, plan and pareto --vary at 80 columns); the bands by
tests/test_plan_bands.py.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perfmodel.facts import insert_after
from perfmodel.tables import gpu_profile
from planner.analysis.pareto import Frontier
from planner.model.energy import FIELD
from planner.model.instance import Instance
from planner.model.problem import ClusterInfo, Island, Plan, Problem
from planner.model.uncertainty import PlanBands
from planner.requests import DEFAULT_MIN_GAIN

LOG = logging.getLogger(__name__)

TOP_THROUGHPUT_PLANS = 20
"""Plans shown in the figure-8 style chart."""
SCHEMA_VERSION = 1
"""`schema_version` of plan and pareto JSON (planner/schemas/plan.schema.json and
pareto.schema.json): raised when a key changes meaning or goes; new keys do not raise it."""
GROUP_KEYS = ("cluster", "tier", "gpu_type", "nodes", "gpus_per_node", "micro_batch",
              "accum_steps", "layout", "ac")
"""Islands of a plan with equal values of these keys form one island group."""


def plan_label(plan: Plan, problem: Problem | None = None) -> str:
    """Paper figure-8 label naming what to rent from whom: '1x8x8 A100-PCIe-80GB @ RunPod/B +
    1x8x8 H200-SXM-141GB @ RunPod/A': per GPU type and seller, its island shapes 'count x nodes x
    gpus_per_node' ('2x1x8+1x8x8 H200-SXM-141GB @ RunPod/A' for two shapes on one cluster), the
    seller with most islands first.

    Why: the paper's '1x8x8 A100 + 1x8x8 H200' drops the GPU variant (A100-PCIe-80GB and
    A100-SXM4-40GB differ in price, memory and speed) and the provider, so a reader cannot rent
    it (issue 29); shapes of one seller share its name so the label stays short for 80-column
    tables. The seller is `_seller`: the provider's first word and the cluster (the cluster
    alone when priced in the instance file or named after its provider), with the tier where
    the failure model lets one cluster be rented at several tiers. Checked by
    tests/test_html_report.py (test_plan_label_names_variant_and_provider),
    tests/test_scenarios.py (labels of a scenario study) and tests/test_terminal.py (plan
    --vary at 80 columns)."""
    tiers = _tiered_clusters(problem)
    sellers: dict[tuple[str, str], dict[tuple[int, int], int]] = {}
    for island in plan.islands:
        shapes = sellers.setdefault((island.gpu_type, _seller(problem, island, tiers)), {})
        shape = (island.nodes, island.gpus_per_node)
        shapes[shape] = shapes.get(shape, 0) + 1
    parts = sorted(sellers.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    return " + ".join(
        "+".join(f"{n}x{nodes}x{g}" for (nodes, g), n in sorted(
            shapes.items(), key=lambda kv: (-kv[1], -kv[0][0], -kv[0][1])))
        + f" {gpu} @ {seller}" for (gpu, seller), shapes in parts)


def _tiered_clusters(problem: Problem | None) -> set[str]:
    """Clusters rentable at several tiers in one plan (the failure model on: a cluster and its
    alternatives); their islands' labels name the tier."""
    if problem is None or problem.risk is None:
        return set()
    tiers: dict[str, set[str]] = {}
    for option in problem.options:
        tiers.setdefault(option.cluster, set()).add(option.tier)
    return {cluster for cluster, names in tiers.items() if len(names) > 1}


def _seller(problem: Problem | None, island: Island, tiered: set[str]) -> str:
    """'RunPod/A' (provider's first word / cluster; 'AWS p5en.48xlarge' -> 'AWS': the company,
    the instance type is in the price list), the cluster alone where it is priced in the
    instance file or its name already holds the company ('aws-h200-spot'), with ' spot' (the
    tier) for a cluster in `tiered`."""
    provider = None
    if problem is not None:
        info = next((c for c in problem.clusters if c.name == island.cluster), None)
        provider = info.provider if info is not None else None
    text = island.cluster
    if provider:
        company = provider.split()[0]
        if company.lower() not in island.cluster.lower():  # 'runpod-h100' names its provider
            text = f"{company}/{island.cluster}"
    return f"{text} {island.tier}" if island.cluster in tiered else text


def marginal_costs(points: Sequence[Plan], min_gain: float = DEFAULT_MIN_GAIN,
                   metric: str = "cost") -> list[float | None]:
    """Per point (fastest first): USD (or kWh, kg CO2 for `metric` energy, co2) paid per hour of
    wall time saved by moving to a faster point, (X_j − X)/(W − W_j)·3600, where j is the
    slowest faster point that saves at least `min_gain` of this point's wall time W; None for
    the fastest point and where no faster point saves that much. A jump marks the knee.

    Why not the adjacent point: two exact frontier points seconds apart on a run of days divide a
    real cost difference by almost no time and read as hundreds of thousands of dollars per hour
    saved; measured against the nearest point that saves a noticeable share of the run, the
    figure is the price of time along the frontier. `min_gain` 0 gives the adjacent quotient."""
    ordered = sorted(points, key=lambda p: p.wall_time_s)
    out: list[float | None] = []
    for i, plan in enumerate(ordered):
        value: float | None = None
        for faster in reversed(ordered[:i]):
            saved_s = plan.wall_time_s - faster.wall_time_s
            if saved_s > 0 and saved_s >= min_gain * plan.wall_time_s:
                value = (_metric(faster, metric) - _metric(plan, metric)) / (saved_s / 3600.0)
                break
        out.append(value)
    return out


def near_duplicates(points: Sequence[Plan], min_gain: float = DEFAULT_MIN_GAIN,
                    metric: str = "cost") -> list[bool]:
    """Per point (fastest first): is its gain over a neighbour below `min_gain`? A point is
    marked when it is faster than the next slower point by less than `min_gain` of that point's
    wall time (it costs more for almost no time), or cheaper (less `metric`) than the next faster
    point by less than `min_gain` of that point's figure (it is slower for almost no saving).
    Every point stays on the frontier: it is exact; the mark says which choices barely differ."""
    ordered = sorted(points, key=lambda p: p.wall_time_s)
    marks = [False] * len(ordered)
    for i, (fast, slow) in enumerate(zip(ordered, ordered[1:], strict=False)):
        if _gain(slow.wall_time_s, fast.wall_time_s) < min_gain:
            marks[i] = True
        if _gain(_metric(fast, metric), _metric(slow, metric)) < min_gain:
            marks[i + 1] = True
    return marks


def _metric(plan: Plan, metric: str) -> float:
    """The plan's second objective: cost_usd, energy_kwh or co2_kg."""
    value = plan.cost_usd if metric == "cost" else getattr(plan, FIELD[metric])
    return math.nan if value is None else float(value)


def _gain(reference: float, better: float) -> float:
    """(reference − better)/reference: the fraction `better` gains (inf when reference is 0)."""
    if not reference > 0:
        return math.inf
    return (reference - better) / reference


def plan_record(plan: Plan, problem: Problem, bands: PlanBands | None = None) -> dict[str, Any]:
    """One plan as a JSON-able record (required keys: wall_time_s, cost_usd, tokens_per_s,
    islands); with `bands`, each banded figure is followed by its `*_p10`/`*_p90` (and
    `*_lo`/`*_hi`) and the record states `interval_groups`, `interval_note` (and
    `interval_level`) after `co2_kg` (`planner.model.uncertainty.PlanBands`)."""
    period_s = plan.inner_step_s + plan.sync_s / problem.inner_steps
    risky = problem.risk is not None
    clusters = {c.name: c for c in problem.clusters}
    islands = []
    for island in plan.islands:
        tokens_per_s = island.seqs_per_step * problem.seq_len / period_s
        gpus = island.nodes * island.gpus_per_node
        more = {"participation": island.participation} if risky else {}
        islands.append({
            "cluster": island.cluster,
            "gpu_type": island.gpu_type,
            "nodes": island.nodes,
            "gpus_per_node": island.gpus_per_node,
            "micro_batch": island.micro_batch,
            "accum_steps": island.accum_steps,
            "seqs_per_step": island.seqs_per_step,
            "step_time_s": island.step_time_s,
            "tokens_per_s": tokens_per_s,
            "tokens_per_s_per_gpu": tokens_per_s / gpus,
            "usd_per_hour": island.usd_per_hour,
            "cost_usd": plan.wall_time_s / 3600.0 * island.usd_per_hour,
            "tier": island.tier,
            **_price_fields(clusters.get(island.cluster)),
            **more,
            **_layout_fields(island),
        })
    record = {
        "label": plan_label(plan, problem),
        "wall_time_s": plan.wall_time_s,
        "wall_time_h": plan.wall_time_s / 3600.0,
        "cost_usd": plan.cost_usd,
        "tokens_per_s": plan.tokens_per_s,
        "tokens_per_s_per_gpu": plan.tokens_per_s / plan.num_gpus,
        "num_islands": len(plan.islands),
        "num_gpus": plan.num_gpus,
        "usd_per_hour": plan.usd_per_hour,
        "inner_step_s": plan.inner_step_s,
        "sync_s": plan.sync_s,
        "cost_rounding_bound_usd": plan.cost_rounding_bound_usd,
        "energy_kwh": plan.energy_kwh,
        "co2_kg": plan.co2_kg,
        **_energy_notes(problem),
        **expected_fields(plan, problem),
        "islands": islands,
        "island_groups": island_groups(islands),
    }
    if bands is None:
        return record
    extra, stated = bands.fields(plan)
    extra["co2_kg"] = {**extra.get("co2_kg", {}), **stated}
    return insert_after(record, extra)


def _price_fields(cluster: ClusterInfo | None) -> dict[str, Any]:
    """Who an island is rented from: provider, price list and region of its cluster."""
    if cluster is None:
        return {"provider": None, "price_list": "", "region": None}
    return {"provider": cluster.provider, "price_list": cluster.price_list,
            "region": cluster.region}


def island_groups(islands: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Identical islands of a plan record (equal GROUP_KEYS) as one group each, most islands
    first: `count`, the shared fields (with provider, price list and region) and the group's
    summed tokens/s, USD per hour and cost; `description` says it in one line."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for island in islands:
        key = tuple(island.get(k) for k in GROUP_KEYS)
        group = groups.get(key)
        if group is None:
            group = {"count": 0, **{k: island[k] for k in GROUP_KEYS if k in island},
                     **{k: island.get(k) for k in ("provider", "price_list", "region")},
                     "tokens_per_s": 0.0, "usd_per_hour": 0.0, "cost_usd": 0.0}
            groups[key] = group
        group["count"] += 1
        for total in ("tokens_per_s", "usd_per_hour", "cost_usd"):
            group[total] += island[total]
    out = sorted(groups.values(), key=lambda g: (-g["count"], str(g["cluster"]), -g["nodes"]))
    for group in out:
        group["description"] = describe_group(group)
    return out


def describe_group(group: dict[str, Any]) -> str:
    """'8 × (1 node × 8 H200-SXM-141GB) @ RunPod community (A), m 4, k 1' (with a layout:
    ', tp2 pp2 1f1b dp4, ac full')."""
    nodes = group["nodes"]
    seller = group.get("provider") or "instance price"
    text = (f"{group['count']} × ({nodes} node{'s' if nodes != 1 else ''} × "
            f"{group['gpus_per_node']} {group['gpu_type']}) @ {seller} {group['tier']} "
            f"({group['cluster']}), m {group['micro_batch']}, k {group['accum_steps']}")
    if group.get("layout"):
        text += f", {group['layout']}, ac {group.get('ac')}"
    return text


def expected_fields(plan: Plan, problem: Problem) -> dict[str, Any]:
    """goodput, expected wall time and cost of a plan (issue 28); without the failure model the
    goodput is 1 and the expected figures are the plan's own."""
    out: dict[str, Any] = {"goodput": plan.goodput, "expected_wall_time_s": plan.wall_time_s,
                           "expected_cost_usd": plan.cost_usd}
    if problem.risk is not None:
        out.update(failure_free_wall_time_s=plan.failure_free_wall_time_s,
                   failure_free_cost_usd=plan.failure_free_cost_usd,
                   egress_usd=plan.egress_usd,
                   checkpoint_interval_s=plan.checkpoint_interval_s)
    return out


def failure_assumptions(problem: Problem) -> dict[str, Any]:
    """The failure model's sources and assumptions, for a frontier's or plan's metadata."""
    if problem.risk is None:
        return {}
    risk = problem.risk
    return {"failures": True, "checkpoint_mode": risk.checkpoint_mode,
            "checkpoint_bytes": risk.checkpoint_bytes, "egress_priced": risk.egress_on,
            "billing_applied": risk.billing_on,
            "failure_assumptions": list(risk.assumptions)}


def _layout_fields(island: Island) -> dict[str, Any]:
    """The island's layout and checkpointing mode, and its row's layout columns (none for a plain
    FSDP table: its records keep their keys)."""
    if not island.variant:
        return {}
    return {"layout": island.layout, "ac": island.ac,
            **{c: _typed(v) for c, v in island.variant if c not in ("layout", "ac")}}


def _typed(text: str) -> Any:
    """A layout cell for JSON: whole numbers as int, true/false as bool, else the text."""
    if text.isdigit():
        return int(text)
    return {"true": True, "false": False}.get(text, text)


def exclusion_records(problem: Problem) -> list[dict[str, Any]]:
    """The clusters and island options that contribute no row to the plan, each with its reason
    and the smallest change that makes it usable (`Problem.excluded`)."""
    return [e.record() for e in problem.excluded]


def _energy_notes(problem: Problem) -> dict[str, Any]:
    """Where the energy figures come from: the all-busy fallback of tables without a split."""
    data = problem.energy
    if data is None or not data.energy_known:
        return {"energy_note": "energy unknown: a GPU has no TDP in the catalog or table"}
    if not data.split_known:
        return {"energy_note": "island table without an activity split: every step counted as "
                               "compute at full power (an upper bound)"}
    return {}


def frontier_records(frontier: Frontier, problem: Problem, *,
                     min_gain: float = DEFAULT_MIN_GAIN,
                     metric: str = "cost", bands: PlanBands | None = None) -> list[dict[str, Any]]:
    """Frontier points (fastest first) with the frontier's provenance on each point, each marked
    `near_duplicate` (`near_duplicates` at `min_gain`); on the time-vs-cost frontier each also
    has `usd_per_hour_saved` (`marginal_costs`)."""
    out = []
    marginal = marginal_costs(frontier.points, min_gain, metric)
    marks = near_duplicates(frontier.points, min_gain, metric)
    for i, plan in enumerate(sorted(frontier.points, key=lambda p: p.wall_time_s)):
        record = {"point": i, **plan_record(plan, problem, bands)}
        if metric == "cost":
            record["usd_per_hour_saved"] = marginal[i]
        record["near_duplicate"] = marks[i]
        record["solver"] = frontier.solver
        record["proven_exact"] = frontier.proven_exact
        out.append(record)
    return out


def frontier_meta(frontier: Frontier) -> dict[str, Any]:
    """How the frontier was computed."""
    return {
        "solver": frontier.solver,
        "proven_exact": frontier.proven_exact,
        "points": len(frontier.points),
        "num_solves": frontier.num_solves,
        "solve_time_s": frontier.solve_time_s,
        "price_resolution_usd_per_hour": frontier.price_resolution_usd_per_hour,
        "max_cost_rounding_usd": frontier.max_cost_rounding_usd,
        "cross_checks": frontier.cross_checks,
        **({"not_exact_because": frontier.note} if not frontier.proven_exact else {}),
    }


def gpu_profiles(instance: Instance, gpu_types: Sequence[str]) -> list[dict[str, str]]:
    """Per GPU type (sorted, once each): the profile its island-table rows rest on and that
    profile's provenance, measured > calibrated > prior (`perfmodel.tables.gpu_profile`). An
    instance with a fixed `islands_table` rests on that file's figures: profile = the file,
    provenance "island table"."""
    fixed = instance.islands_table_path
    out = []
    for gpu in sorted(set(gpu_types)):
        if fixed is not None:
            out.append({"gpu_type": gpu, "profile": str(fixed), "provenance": "island table"})
            continue
        name, provenance = gpu_profile(gpu)
        out.append({"gpu_type": gpu, "profile": name, "provenance": provenance})
    return out


def _gpus_of(records: Sequence[dict[str, Any]]) -> list[str]:
    return [str(i["gpu_type"]) for r in records for i in r["islands"]]


def frontier_document(records: list[dict[str, Any]], meta: dict[str, Any], *,
                      instance: Instance, problem: Problem, metric: str = "cost",
                      min_gain: float = DEFAULT_MIN_GAIN) -> dict[str, Any]:
    """`pareto --format json`: the frontier's points under `frontier` (fastest first), with the
    schema version, the objectives, the profile provenance of every GPU on the frontier, how it
    was solved and what was left out (planner/schemas/pareto.schema.json)."""
    return {"schema_version": SCHEMA_VERSION, "instance": problem.name,
            "objectives": ["time", metric], "min_gain": min_gain,
            "profiles": gpu_profiles(instance, _gpus_of(records)), "frontier": records,
            "solve": meta, "excluded": exclusion_records(problem)}


def plan_document(record: dict[str, Any], *, instance: Instance) -> dict[str, Any]:
    """`plan --format json`: the plan record (what was asked, the plan with its islands and
    island groups, how it was solved, `excluded`) with the schema version and the profile
    provenance of its GPUs (planner/schemas/plan.schema.json)."""
    return {"schema_version": SCHEMA_VERSION, **record,
            "profiles": gpu_profiles(instance, _gpus_of([record]))}


GROUP_CSV_KEYS = ("count", "cluster", "gpu_type", "nodes", "gpus_per_node", "micro_batch",
                  "accum_steps", "tier", "provider", "price_list", "region", "layout", "ac")
"""The island-group columns of plan and frontier CSV (layout and ac where the table has them)."""


def groups_cell(groups: Mapping[str, str]) -> str:
    """A record's `interval_groups` (cluster -> residual group) as one CSV cell:
    "A=prior;B=calibrated"."""
    return ";".join(f"{c}={g}" for c, g in groups.items())


def group_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Plan and frontier CSV: one row per island group of every plan record, the plan's figures
    (with the p10/p90 band of time, cost and tokens/s, and its residual groups as
    `interval_groups` "A=prior;B=calibrated", and `interval_extrapolation` where the record has
    them) repeated on each of its rows, then the group's (`group_` summed tokens/s, USD/h,
    cost)."""
    plan_keys = ("point", "wall_time_h", "wall_time_s", *_band_keys("wall_time_s"), "cost_usd",
                 *_band_keys("cost_usd"), "usd_per_hour_saved", "near_duplicate", "tokens_per_s",
                 *_band_keys("tokens_per_s"), "num_gpus", "usd_per_hour", "goodput",
                 "interval_level", "interval_extrapolation")
    rows = []
    for record in records:
        head = {k: record[k] for k in plan_keys if k in record}
        if "interval_groups" in record:
            head["interval_groups"] = groups_cell(record["interval_groups"])
        for group in record["island_groups"]:
            rows.append({**head, **{k: group[k] for k in GROUP_CSV_KEYS if k in group},
                         "group_tokens_per_s": group["tokens_per_s"],
                         "group_usd_per_hour": group["usd_per_hour"],
                         "group_cost_usd": group["cost_usd"]})
    return rows


def _band_keys(key: str) -> tuple[str, ...]:
    """The band columns of a figure in CSV: p10, p90, lo, hi (those a record has)."""
    return tuple(f"{key}_{suffix}" for suffix in ("p10", "p90", "lo", "hi"))


def points_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per point (islands folded into the label); for tables and CSV."""
    keep = ["point", "label", "wall_time_h", "wall_time_s", "cost_usd", "usd_per_hour_saved",
            "tokens_per_s", "tokens_per_s_per_gpu", "num_islands", "num_gpus", "usd_per_hour",
            "inner_step_s", "sync_s", "energy_kwh", "co2_kg"]
    if records and "egress_usd" in records[0]:  # the failure model is on
        keep += ["goodput", "failure_free_wall_time_s", "egress_usd"]
    rows = [{k: r[k] for k in keep if k in r} for r in records]
    for row, record in zip(rows, records, strict=True):
        row["islands"] = "; ".join(
            f"{i['cluster']}{'/' + i['tier'] if 'tier' in i else ''}:{i['nodes']}x"
            f"{i['gpus_per_node']} m{i['micro_batch']} k{i['accum_steps']}"
            + (f" [{i['layout']}; ac {i['ac']}]" if "layout" in i else "")
            for i in record["islands"])
    return pd.DataFrame(rows)


def islands_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per island of every point."""
    rows = []
    for record in records:
        for island in record["islands"]:
            rows.append({"point": record.get("point", 0),
                         **{k: v for k, v in island.items() if k != "gpu_type"}})
    return pd.DataFrame(rows)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write a result file whole or not at all: a temporary file next to it, fsynced, then
    renamed over it, so a run killed mid-write leaves the previous file (or none), never half a
    table. A path that is not a regular file (a device, a pipe) is written directly."""
    target = Path(path)
    if target.exists() and not target.is_file():
        with target.open("w") as fh:
            fh.write(text)
        return
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_csv(records: Sequence[dict[str, Any]], path: str | Path) -> None:
    """Frontier CSV: one row per island group of every point (`group_rows`; written
    atomically)."""
    write_text_atomic(path, pd.DataFrame(group_rows(records)).to_csv(index=False))


# ---- plots ----------------------------------------------------------------------------------


def _pyplot() -> Any:
    # lazy: matplotlib loads only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib loads only when a figure is drawn
    import matplotlib.pyplot as plt

    return plt


def plot_frontier(all_plans: Sequence[Plan], frontier: Sequence[Plan], path: str | Path, *,
                  sampled: bool, title: str) -> None:
    """Figure-7 style: every feasible plan (or a sample) in grey, the frontier highlighted."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    if all_plans:
        ax.scatter([p.wall_time_s / 3600 for p in all_plans], [p.cost_usd for p in all_plans], s=6,
                   color="0.7",
                   label=("sampled" if sampled else "all") + f" feasible plans ({len(all_plans)})")
    front = sorted(frontier, key=lambda p: p.wall_time_s)
    xs = [p.wall_time_s / 3600 for p in front]
    ys = [p.cost_usd for p in front]
    ax.step(xs, ys, where="post", color="tab:red", linewidth=1.2)
    ax.scatter(xs, ys, s=22, color="tab:red", zorder=3, label=f"Pareto frontier ({len(front)})")
    # lazy: matplotlib loads only when a figure is drawn
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    values_x = xs + [p.wall_time_s / 3600 for p in all_plans]
    values_y = ys + [p.cost_usd for p in all_plans]
    for values, axis, set_scale in ((values_x, ax.xaxis, ax.set_xscale),
                                    (values_y, ax.yaxis, ax.set_yscale)):
        if values and max(values) > 10 * min(values):
            set_scale("log")
            axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(plain)
            axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("wall-clock time (hours)")
    ax.set_ylabel("cost (USD)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_top_throughput(frontier: Sequence[Plan], path: str | Path, *, title: str,
                        top: int = TOP_THROUGHPUT_PLANS, problem: Problem | None = None) -> None:
    """Figure-8 style: throughput bars of the highest-throughput frontier plans, cost on a twin
    axis."""
    plt = _pyplot()
    best = sorted(frontier, key=lambda p: -p.tokens_per_s)[:top]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(best) + 3), 5.5))
    positions = list(range(len(best)))
    ax.bar(positions, [p.tokens_per_s for p in best], color="tab:blue", label="throughput")
    ax.set_ylabel("throughput (tokens/s)")
    ax.set_xticks(positions)
    ax.set_xticklabels([plan_label(p, problem) for p in best], rotation=60, ha="right", fontsize=7)
    twin = ax.twinx()
    twin.plot(positions, [p.cost_usd for p in best], color="tab:red", marker="o", label="cost")
    twin.set_ylabel("cost (USD)")
    twin.set_ylim(bottom=0)  # a cost axis cut above zero exaggerates small differences
    ax.set_xlabel("island configuration (count x nodes x GPUs per node)")
    ax.set_title(title)
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(handles, ["throughput", "cost"], loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def throughput_plot_path(path: str | Path) -> Path:
    """Where the figure-8 chart goes next to the figure-7 plot."""
    path = Path(path)
    return path.with_name(f"{path.stem}_throughput{path.suffix or '.png'}")


def plot_scenarios(frontiers: Sequence[tuple[str, Sequence[Plan]]], path: str | Path, *,
                   title: str) -> None:
    """The frontiers of several scenarios side by side (shared axes, cost from zero)."""
    plt = _pyplot()
    count = max(1, len(frontiers))
    cols = min(count, 4)
    rows = -(-count // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.2 * rows + 0.6), sharex=True,
                             sharey=True, squeeze=False)
    for ax, (name, points) in zip(axes.flat, frontiers, strict=False):
        front = sorted(points, key=lambda p: p.wall_time_s)
        xs = [p.wall_time_s / 3600 for p in front]
        ys = [p.cost_usd for p in front]
        ax.step(xs, ys, where="post", color="tab:red", linewidth=1.0)
        ax.scatter(xs, ys, s=14, color="tab:red", zorder=3)
        ax.set_title(name, fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    for ax in list(axes.flat)[len(frontiers):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("wall-clock time (hours)")
    for ax in axes[:, 0]:
        ax.set_ylabel("cost (USD)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
