"""Generate docs/CASE_STUDY.md: the paper's case study (section V) and a sweep over the assumptions
the paper leaves open, showing where its 21.69 % saving at 99 % throughput could come from; then
what free layouts change (section 7) and what expert parallelism and FP8 change for a
mixture-of-experts job (section 8, `moe_section`).

Usage: .venv/bin/python -m scripts.make_case_study [--check] [--executor SPEC]

Every number in the document is computed by this run (the planner's library calls, the same as
the CLI's); every conclusion sentence is built from those results. `--check` regenerates the text
without writing anything and exits 1 when docs/CASE_STUDY.md differs (figures are not compared).
"""

from __future__ import annotations

import argparse
import logging
import math
import re
from pathlib import Path
from typing import Any

from perfmodel.formatting import markdown_table
from perfmodel.numbers import format_number
from perfmodel.spec.errors import InfeasibleError
from planner import api
from planner.analysis import report
from planner.analysis.pareto import (
    cheapest_at_throughput,
    cheapest_within_deadline,
    fastest,
    fastest_within_budget,
)
from planner.analysis.scenarios import Scenario, solve_all
from planner.executor import run_or_exit
from planner.model.instance import load_instance
from planner.model.island_table import load_island_table
from planner.model.uncertainty import (
    ErrorModel,
    cluster_groups,
    plan_at_quantile,
    residuals_path,
)
from planner.requests import DEFAULT_MIN_GAIN
from scripts._docgen import check_or_write

ROOT = Path(__file__).resolve().parent.parent



INSTANCE = ROOT / "instances" / "paper-case-study.yaml"
MULTICLOUD = ROOT / "instances" / "llama-70b-multicloud.yaml"
FREE_MODES = ["none", "op-sac", "full"]
"""Section 7: the checkpointing modes the planner may choose from when layouts are free."""
LAYOUT_STUDIES = (
    (INSTANCE, "pinned: FSDP, op-sac (as shipped)", ()),
    (INSTANCE, "free: tp <= 2, pp 1, checkpointing none/op-sac/full",
     (("training.parallel", {"max_tp": 2, "max_pp": 1}),
      ("training.activation_checkpointing", FREE_MODES))),
    (MULTICLOUD, "pinned: FSDP, op-sac",
     (("training.parallel", None), ("training.activation_checkpointing", "op-sac"))),
    (MULTICLOUD, "free: tp <= 8, pp <= 4, checkpointing none/op-sac/full (as shipped)", ()),
)
"""Section 7 (issue 25): each instance with the layout pinned to plain FSDP and one checkpointing
mode, and with layouts and checkpointing left to the planner (the paper's 8B model with tp <= 2
and no pipelines: one H200 or A100 holds its FSDP shard, and the wider space of 80 island
options per cluster, tp up to 8, took minutes to tabulate, too long for this generator's
`--check` in CI)."""
MOE_INSTANCE = ROOT / "instances" / "qwen3-30b-a3b-moe.yaml"
DEEPSEEK_CONFIG = ROOT / "tests" / "data" / "configs" / "deepseek_v3" / "config.json"
"""Section 8: the DeepSeek-V3 config.json the planner refuses (its refusal is quoted)."""
_MOE_FSDP = {"tp": 1, "pp": 1, "dp_replicate": 1}
MOE_STUDIES = (
    ("ep 1, bf16", (("training.parallel", {**_MOE_FSDP, "ep": 1}),
                    ("training.compute_dtype", "bf16"))),
    ("ep free, bf16", (("training.compute_dtype", "bf16"),)),
    ("ep 1, bf16 or fp8", (("training.parallel", {**_MOE_FSDP, "ep": 1}),)),
    ("ep free, bf16 or fp8 (as shipped)", ()),
)
"""Section 8 (issue 26): the MoE instance with expert parallelism pinned to 1 or left to the
planner, and with bf16 only or bf16 and FP8 (tensorwise) to choose from per island."""
FP8_DTYPE = "fp8-tensorwise"
"""The FP8 recipe the MoE instance offers."""
DOC = ROOT / "docs" / "CASE_STUDY.md"
FIGURES = ROOT / "docs" / "figures"
PAPER_SAVING_PCT = 21.69
"""The paper's figure (section V): cost saving of the cheapest plan at >= 99 % of the best
throughput."""
NEAR_PCT = 5.0
"""A scenario's saving counts as "near the paper's" within this many percentage points."""
TOKENS_PER_BATCH = 256 * 8192
"""The paper's 2M-token global batch; a sequence-length scenario keeps it (B = tokens / S)."""

BOTH = ("A", "B")


def _both(field: str, value: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((f"clusters.{c}.{field}", value) for c in BOTH)


def sweep() -> list[tuple[str, str, tuple[tuple[str, Any], ...]]]:
    """(group, scenario name, overrides): one assumption at a time, then a few combinations."""
    one = [("base", "instance as shipped", ())]
    for gbit in (1, 100):
        one.append(("WAN bandwidth", f"WAN {gbit} Gbit/s", _both("wan_gbit_s", gbit)))
    for ms in (10, 200):
        one.append(("WAN latency", f"WAN latency {ms} ms", _both("wan_latency_ms", ms)))
    for h in (10, 500):
        one.append(("H", f"H = {h}", (("training.inner_steps", h),)))
    for dtype in ("bf16", "int8", "fp4"):
        one.append(
            (
                "pseudo-gradient dtype",
                f"pseudo-gradient {dtype}",
                (("training.pseudo_gradient_dtype", dtype),),
            )
        )
    one.append(("single-node islands", "islands of one node", _both("max_nodes_per_island", 1)))
    for seq in (2048, 4096):
        one.append(
            (
                "sequence length",
                f"S = {seq} (B = {TOKENS_PER_BATCH // seq})",
                (
                    ("training.seq_len", seq),
                    ("training.global_batch_seqs", TOKENS_PER_BATCH // seq),
                ),
            )
        )
    one.append(("recipe / profile", "paper recipe", (("training.recipe", {"base": "paper"}),)))
    one.append(("recipe / profile", "B = A100-SXM4-80GB (calibrated profile) at $1.19",
                (("clusters.B.gpu", "A100-SXM4-80GB"), ("clusters.B.price", None),
                 ("clusters.B.price_usd_per_gpu_hour", 1.19))))
    combos = []
    for gbit in (1, 10, 100):
        for single in (False, True):
            for h in (100, 500):
                if not single and (h == 100 or gbit == 10):
                    continue  # the base scenario or a one-at-a-time row above
                overrides = _both("wan_gbit_s", gbit) + (("training.inner_steps", h),)
                if single:
                    overrides += _both("max_nodes_per_island", 1)
                name = f"WAN {gbit} Gbit/s, H = {h}" + (", one-node islands" if single else "")
                combos.append(("combination", name, overrides))
    return one + combos


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else format_number(value, digits=digits)
    return str(value)


SWEEP_COLUMNS = [
    "assumption", "scenario", "points", "fastest plan", "fastest h", "fastest USD", "99% pick",
    "99% pick USD", "saving %", "exact",
]
"""The columns of the scenario table in section 5."""


def md_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    return markdown_table(columns, ([_fmt(r.get(c)) for c in columns] for r in rows))


def frontier_section(result: Any) -> str:
    records = report.frontier_records(result.frontier, result.problem)
    rows = [
        {
            k: r[k]
            for k in (
                "point", "label", "wall_time_h", "cost_usd", "usd_per_hour_saved", "tokens_per_s",
                "num_islands", "num_gpus", "inner_step_s", "sync_s",
            )
        }
        for r in records
    ]
    meta = report.frontier_meta(result.frontier)
    return (
        md_table(rows, list(rows[0]))
        + "\n\n"
        + f"Solver: {meta['solver']}; proven exact: {meta['proven_exact']}; {meta['points']} "
        "points. "
        + "`usd_per_hour_saved`: what the nearest faster point that saves at least "
        f"{DEFAULT_MIN_GAIN:.1%} of the wall time costs per hour of wall time it saves "
        "(a jump marks the knee)."
    )


def sweep_rows(results: list[Any], groups: dict[str, str]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        row: dict[str, Any] = {"assumption": groups[r.scenario.name], "scenario": r.scenario.name}
        if not r.points:
            row.update({"fastest plan": f"no plan ({r.error})"})
        else:
            best = fastest(r.points)
            chosen, saving = cheapest_at_throughput(r.points, 0.99)
            row.update(
                {
                    "points": len(r.points),
                    "fastest plan": report.plan_label(best, r.problem),
                    "fastest h": best.wall_time_s / 3600,
                    "fastest USD": best.cost_usd,
                    "99% pick": report.plan_label(chosen, r.problem),
                    "99% pick USD": chosen.cost_usd,
                    "saving %": saving,
                    "exact": r.frontier.proven_exact,
                }
            )
        rows.append(row)
    return rows


def conclusions(rows: list[dict[str, Any]]) -> str:
    solved = [r for r in rows if "saving %" in r]
    zero = [r["scenario"] for r in solved if r["saving %"] == 0.0]
    positive = sorted((r for r in solved if r["saving %"] > 0), key=lambda r: -r["saving %"])
    near = [r for r in solved if abs(r["saving %"] - PAPER_SAVING_PCT) <= NEAR_PCT]
    closest = min(solved, key=lambda r: abs(r["saving %"] - PAPER_SAVING_PCT)) if solved else None
    out = [f"- Scenarios solved: {len(solved)} of {len(rows)}; every frontier proven exact: "
           f"{all(r['exact'] for r in solved)}."]
    out.append(
        f"- Saving exactly 0 (the fastest plan is also the cheapest within 1 % of its throughput): "
        f"{len(zero)} scenarios" + (f" ({'; '.join(zero)})." if zero else ".")
    )
    if positive:
        out.append(
            "- Positive savings: "
            + "; ".join(f"{r['scenario']}: {r['saving %']:.2f} %" for r in positive)
            + "."
        )
    else:
        out.append("- No scenario gives a positive saving.")
    if near:
        out.append(f"- Within {NEAR_PCT:g} points of the paper's {PAPER_SAVING_PCT} %: "
                   + "; ".join(f"{r['scenario']} ({r['saving %']:.2f} %)" for r in near) + ".")
    else:
        out.append(
            f"- No scenario comes within {NEAR_PCT:g} points of the paper's {PAPER_SAVING_PCT} %."
        )
    if closest is not None:
        out.append(
            f"- Closest to {PAPER_SAVING_PCT} %: {closest['scenario']} with "
            f"{closest['saving %']:.2f} % (fastest plan {closest['fastest plan']}, 99 % pick "
            f"{closest['99% pick']})."
        )
    return "\n".join(out)


def queries_section(result: Any) -> str:
    points = result.points
    lines = []
    budget = fastest(points).cost_usd * 0.9
    pick = fastest_within_budget(points, budget)
    lines.append(
        f"- Fastest plan within a budget of 90 % of the fastest plan's cost ({budget:,.0f} USD): "
        + (
            f"{report.plan_label(pick, result.problem)}, "
            f"{format_number(pick.wall_time_s / 3600)} h, "
            f"{pick.cost_usd:,.0f} USD."
            if pick
            else "none."
        )
    )
    deadline_s = 2 * fastest(points).wall_time_s
    pick = cheapest_within_deadline(points, deadline_s)
    lines.append(f"- Cheapest plan within twice the fastest wall time "
                 f"({format_number(deadline_s / 3600)} h): "
                 + (f"{report.plan_label(pick, result.problem)}, "
                    f"{format_number(pick.wall_time_s / 3600)} h, "
                    f"{pick.cost_usd:,.0f} USD." if pick else "none."))
    return "\n".join(lines)


def heuristic_section(result: Any) -> str:
    from planner.analysis.pareto import compute_frontier

    heur = compute_frontier(result.problem, solver="heuristic")
    rows = [
        {
            "label": report.plan_label(p, result.problem),
            "wall_time_h": p.wall_time_s / 3600,
            "cost_usd": p.cost_usd,
            "on exact frontier": any(p.key == e.key for e in result.points),
        }
        for p in heur.points
    ]
    return (
        md_table(rows, ["label", "wall_time_h", "cost_usd", "on exact frontier"])
        if rows
        else "No heuristic plan."
    )


CONFIDENCE = 0.9
"""The quantile of section 6's plan (`shardmeter plan --quantile 0.9`)."""


DEADLINE_FACTORS = (2.0, 1.5)
"""Section 6's deadlines, as multiples of the fastest point-estimate wall time."""


def quantile_section(result: Any) -> str:
    """Section 6: the cheapest plan within a deadline, on point estimates and at the CONFIDENCE
    quantile of the error model (catalogs/uncertainty/residuals.csv), for each DEADLINE_FACTORS."""
    if not residuals_path().is_file():
        return (f"Not computed: {residuals_path().relative_to(ROOT)} is missing. To fix: run "
                "`python -m scripts.make_residuals`, then this generator.")
    model = ErrorModel.from_residuals()
    pct = round(100 * CONFIDENCE)
    rows = []
    groups = cluster_groups(load_island_table(load_instance(INSTANCE)))
    for factor in DEADLINE_FACTORS:
        deadline_s = factor * fastest(result.points).wall_time_s
        point = cheapest_within_deadline(result.points, deadline_s)
        options = api.SolveOptions(deadline_hours=deadline_s / 3600, quantile=CONFIDENCE,
                                   error_model=model)
        try:
            answer = api.query(api.QueryRequest(instance_paths=(INSTANCE,), objective="cost",
                                                options=options))
        except InfeasibleError:
            answer = None
        if point is None:
            continue
        wall_q, cost_q = plan_at_quantile(result.problem, point, groups, model, CONFIDENCE)
        held = answer.plan if isinstance(answer, api.PlanAnswer) else None
        rows.append({
            "deadline h": f"{format_number(deadline_s / 3600)} ({factor:g} x fastest)",
            "point plan": report.plan_label(point, result.problem),
            "point plan USD": f"{point.cost_usd:,.0f}",
            f"point plan P{pct} h": f"{format_number(wall_q / 3600)}"
                                    + (" (misses)" if wall_q > deadline_s else " (meets)"),
            f"point plan P{pct} USD": f"{cost_q:,.0f}",
            f"{pct} % plan": report.plan_label(held, result.problem) if held else "none",
            f"{pct} % plan P{pct} h": f"{format_number(held.wall_time_s / 3600)}" if held else "-",
            f"{pct} % plan P{pct} USD": f"{held.cost_usd:,.0f}" if held else "-",
            "extra cost": f"{100 * (held.cost_usd / point.cost_usd - 1):+.1f} %"
                          if held else "no plan meets it"})
    table = md_table(rows, list(rows[0])) if rows else "No plan meets the deadlines."
    return f"""The error model: {model.describe(CONFIDENCE)}. Query: the cheapest plan within a \
deadline, `shardmeter plan instances/paper-case-study.yaml --objective cost --deadline-hours H` \
without and with `--quantile {CONFIDENCE}`; the {pct} % plan's time and cost are P{pct} figures \
(residual group of each cluster's profile: \
{", ".join(f"{c} {g}" for c, g in sorted(groups.items()))}). "Extra cost" is the {pct} % plan's \
P{pct} cost over the point-estimate plan's predicted cost.

{table}"""


def _island_choice(island: Any) -> str:
    """One island of a plan as '<cluster> <nodes>x<gpus> <layout>, ac <mode>'."""
    return (f"{island.cluster} {island.nodes}x{island.gpus_per_node} "
            f"{island.layout or 'fsdp'}, ac {island.ac or '-'}")


def _clusters_used(plan: Any) -> str:
    counts: dict[str, int] = {}
    for island in plan.islands:
        counts[island.cluster] = counts.get(island.cluster, 0) + 1
    return ", ".join(f"{name} ({n})" if n > 1 else name for name, n in sorted(counts.items()))


def layouts_section(executor: str | None) -> str:
    """Section 7: what changes when the planner may choose layouts and checkpointing: the
    frontier's two ends, the clusters each uses, and every cluster the pinned plan leaves out
    (with the performance model's reason) that the free plan brings back."""

    results = []
    for path, name, overrides in LAYOUT_STUDIES:
        results += solve_all([str(path)], [Scenario(name=name, overrides=overrides)], {},
                             executor=executor)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for (path, name, _), result in zip(LAYOUT_STUDIES, results, strict=True):
        if result.frontier is None or result.problem is None:
            rows.append({"instance": path.name, "layouts": name, "points": 0,
                         "fastest plan": f"no plan: {result.error}"})
            continue
        best, low = fastest(result.points), min(result.points, key=lambda p: (p.cost_usd,
                                                                                 p.wall_time_s))
        listed = sorted({e.cluster for e in result.problem.excluded
                         if e.nodes is None and e.gpus_per_node is None})
        rows.append({
            "instance": path.name, "layouts": name, "points": len(result.points),
            "fastest h": best.wall_time_s / 3600, "fastest USD": best.cost_usd,
            "cheapest h": low.wall_time_s / 3600, "cheapest USD": low.cost_usd,
            "clusters (fastest)": _clusters_used(best),
            "clusters left out": ", ".join(listed) or "none",
            "exact": result.frontier.proven_exact,
        })
        notes.append(f"- `{path.name}`, {name}: fastest plan "
                     + "; ".join(sorted({_island_choice(i) for i in best.islands})) + ".")
        for excluded in result.problem.excluded:
            if excluded.nodes is None and excluded.gpus_per_node is None:
                notes.append(f"  - left out: {excluded.cluster}: {excluded.reason}"
                             + (f" (fix: {excluded.fix})" if excluded.fix else ""))
    columns = ["instance", "layouts", "points", "fastest h", "fastest USD", "cheapest h",
               "cheapest USD", "clusters (fastest)", "clusters left out", "exact"]
    lines = [md_table(rows, columns), "", *notes, ""]
    for base, free in ((rows[0], rows[1]), (rows[2], rows[3])):
        if "fastest h" not in base or "fastest h" not in free:
            continue
        gain_time = 100.0 * (1.0 - free["fastest h"] / base["fastest h"])
        gain_cost = 100.0 * (1.0 - free["cheapest USD"] / base["cheapest USD"])
        back = sorted(set(base["clusters left out"].split(", "))
                      - set(free["clusters left out"].split(", ")) - {"none"})
        lines.append(
            f"- `{base['instance']}`: with free layouts the fastest plan is {gain_time:.1f} % "
            f"{'faster' if gain_time >= 0 else 'slower'} and the cheapest "
            f"{abs(gain_cost):.1f} % {'cheaper' if gain_cost >= 0 else 'dearer'} than pinned to "
            "FSDP; "
            + (f"clusters that come back: {', '.join(back)}." if back
               else "no cluster the pinned plan left out comes back."))
    return "\n".join(lines)


def _moe_island(island: Any) -> str:
    """One island of a plan as '<cluster> <nodes>x<gpus> (<layout>)': the performance model's
    layout text, which names ep and an FP8 compute dtype when the row uses them."""
    return f"{island.cluster} {island.nodes}x{island.gpus_per_node} ({island.layout})"


_EP = re.compile(r"\bep (\d+)")


def _frontier_use(points: Any) -> str:
    """How many islands of a frontier's plans use ep > 1 and FP8 (from their layout text)."""
    islands = [i for p in points for i in p.islands]
    ep = sorted({int(m.group(1)) for i in islands if (m := _EP.search(i.layout))})
    fp8 = sum("fp8" in i.layout for i in islands)
    return (f"{sum(bool(_EP.search(i.layout)) for i in islands)} of {len(islands)} islands "
            f"use ep > 1 ({', '.join(map(str, ep)) or 'none'}), {fp8} use FP8")


def _change(new: float, old: float, better: str, worse: str) -> str:
    """'12.3 % faster' style text of new against old (lower is better)."""
    pct = 100.0 * (1.0 - new / old)
    if abs(pct) < 0.05:
        return "unchanged"
    return f"{abs(pct):.1f} % {better if pct >= 0 else worse}"


def moe_section(executor: str | None) -> str:
    """Section 8: what the Qwen3-MoE instance costs, and how expert parallelism and FP8 move its
    frontier: each `MOE_STUDIES` scenario's frontier ends and the islands of its fastest plan,
    then comparisons computed from them."""
    # lazy: the parameter report and the FP8 catalog are only needed here
    from perfmodel.api.models import parameter_report
    from perfmodel.costs.precision import fp8_gpus
    from perfmodel.spec.catalog import get_model
    from perfmodel.spec.errors import ShardMeterError
    from planner.model.instance import load_instance as load

    instance = load(str(MOE_INSTANCE))
    counts = parameter_report(str(MOE_INSTANCE.parent / instance.model)).record
    try:
        get_model(str(DEEPSEEK_CONFIG)).check_step_modelled("a training step")
        refusal = "it is modelled now (rewrite this section)"
    except ShardMeterError as err:
        refusal = f"the planner refuses it: \"{err.message}\""
    able = set(fp8_gpus(FP8_DTYPE))
    gpus = sorted({c.gpu for c in instance.clusters})
    without = [g for g in gpus if g not in able]
    profiles = ", ".join(f"{p['gpu_type']} {p['provenance']}"
                         for p in report.gpu_profiles(instance, gpus))
    prices = ", ".join(sorted({f"{c.price.provider} {c.price.tier} (price list of "
                               f"{c.price.as_of})" for c in instance.clusters if c.price}))
    results = solve_all([str(MOE_INSTANCE)],
                        [Scenario(name=name, overrides=o) for name, o in MOE_STUDIES], {},
                        executor=executor)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for (name, _), result in zip(MOE_STUDIES, results, strict=True):
        if result.frontier is None or result.problem is None:
            rows.append({"scenario": name, "points": 0, "fastest plan": f"no plan: {result.error}"})
            continue
        best = fastest(result.points)
        low = min(result.points, key=lambda p: (p.cost_usd, p.wall_time_s))
        rows.append({"scenario": name, "points": len(result.points),
                     "fastest h": best.wall_time_s / 3600, "fastest USD": best.cost_usd,
                     "fastest GPUs": sum(i.nodes * i.gpus_per_node for i in best.islands),
                     "cheapest h": low.wall_time_s / 3600, "cheapest USD": low.cost_usd,
                     "frontier islands": _frontier_use(result.points),
                     "exact": result.frontier.proven_exact})
        notes.append(f"- {name}: fastest plan " + "; ".join(_moe_island(i) for i in best.islands)
                     + "; cheapest plan " + "; ".join(_moe_island(i) for i in low.islands) + ".")
        for excluded in result.problem.excluded:
            if excluded.nodes is None and excluded.gpus_per_node is None:
                notes.append(f"  - left out: {excluded.cluster}: {excluded.reason}")
    columns = ["scenario", "points", "fastest h", "fastest USD", "fastest GPUs", "cheapest h",
               "cheapest USD", "frontier islands", "exact"]
    findings = []
    pairs = (("expert parallelism", 0, 1, "bf16 only"), ("expert parallelism", 2, 3,
                                                            "bf16 or FP8"),
             ("FP8", 0, 2, "ep 1"), ("FP8", 1, 3, "ep free"))
    for what, old, new, given in pairs:
        a, b = rows[old], rows[new]
        if "fastest h" not in a or "fastest h" not in b:
            continue
        findings.append(
            f"- {what} ({given}): the fastest plan is "
            f"{_change(b['fastest h'], a['fastest h'], 'faster', 'slower')} "
            f"({format_number(a['fastest h'])} h, {a['fastest USD']:,.0f} USD -> "
            f"{format_number(b['fastest h'])} h, "
            f"{b['fastest USD']:,.0f} USD) and the cheapest "
            f"{_change(b['cheapest USD'], a['cheapest USD'], 'cheaper', 'dearer')} "
            f"({a['cheapest USD']:,.0f} -> {b['cheapest USD']:,.0f} USD).")
    return "\n".join([
        f"Instance: `instances/qwen3-30b-a3b-moe.yaml`: Qwen3-30B-A3B "
        f"({counts['total_params'] / 1e9:.2f}B parameters, {counts['active_params'] / 1e9:.2f}B "
        f"active per token: {counts['num_experts']} routed experts per layer, "
        f"{counts['experts_per_token']} per token, {counts['moe_layers']} MoE layers) at "
        f"{instance.training.seq_len} tokens of context on {', '.join(gpus)} clusters priced "
        f"from {prices}, DiLoCo between islands, plain "
        "FSDP inside each with the experts' all-to-alls and expert FSDP priced by the "
        "performance model (routing load imbalance 1.0: perfectly balanced experts, an "
        "optimistic assumption the recipe's `moe_load_imbalance` changes). DeepSeek-V3 is the "
        f"other MoE class the issue names; {refusal}.",
        "",
        f"Profiles: {profiles}. "
        f"FP8 (`{FP8_DTYPE}`) figures are a prior: the datasheet FP8 rate times a sourced "
        "efficiency ratio (`catalogs/precision.csv`); no GPU measured them. "
        + (f"{', '.join(without)} {'has' if len(without) == 1 else 'have'} no FP8, so "
           f"{'its' if len(without) == 1 else 'their'} islands stay bf16 in every scenario. "
           if without else "")
        + "Reproduce a row with `shardmeter pareto instances/qwen3-30b-a3b-moe.yaml --vary "
        "training.parallel=... --vary training.compute_dtype=bf16` (the overrides are "
        "`MOE_STUDIES` in the script).",
        "", md_table(rows, columns), "", *notes, "", "What pinning and freeing them changes "
        "(computed from the table):", "", *findings])


def build(executor: str | None, write_figures: bool) -> str:
    from importlib.metadata import version

    plan = sweep()
    groups = {name: group for group, name, _ in plan}
    scenarios = [Scenario(name=name, overrides=overrides) for _, name, overrides in plan]
    results = solve_all([str(INSTANCE)], scenarios, {}, executor=executor)
    base = results[0]
    if write_figures:
        from planner.solvers.baselines import sample_plans

        FIGURES.mkdir(parents=True, exist_ok=True)
        cloud, sampled = sample_plans(base.problem, 5000)
        report.plot_frontier(
            cloud,
            base.points,
            FIGURES / "case-study-frontier.png",
            sampled=sampled,
            title="paper-case-study: cost vs wall-clock time",
        )
        report.plot_top_throughput(
            base.points,
            FIGURES / "case-study-frontier_throughput.png",
            title="paper-case-study: highest-throughput frontier plans",
            problem=base.problem,
        )
        report.plot_scenarios(
            [(r.scenario.name, r.points) for r in results[:8]],
            FIGURES / "case-study-scenarios.png",
            title="paper-case-study: frontier per assumption",
        )
    chosen, saving = cheapest_at_throughput(base.points, 0.99)
    best = fastest(base.points)
    rows = sweep_rows(results, groups)
    # A backslash at the end of a line below joins it to the next one in the text.
    return f"""# The paper's case study (section V), reproduced

Generated by `.venv/bin/python -m scripts.make_case_study` (ShardMeter {version("shardmeter")});
`--check` verifies this file is current. Every number and every conclusion below is computed by that
run. Instance: `instances/paper-case-study.yaml` (every assumption the paper leaves open is marked
there). Profiles: the shipped datasheet priors for H200-SXM-141GB and A100-PCIe-80GB
(`provenance: prior`), so absolute times are priors; each frontier is exact for them. Islands that
share a cluster synchronise over its inter-node fabric (catalog InfiniBand link), islands on both
clusters over the slower WAN uplink.

## 1. The exact cost-vs-time frontier (paper figures 7 and 8)

![frontier](figures/case-study-frontier.png)
![top plans](figures/case-study-frontier_throughput.png)

{frontier_section(base)}

## 2. The paper's query: cheapest plan at >= 99 % of the best throughput

Fastest plan: {report.plan_label(best, base.problem)}, {format_number(best.wall_time_s / 3600)} h, \
{best.cost_usd:,.2f} USD.
Cheapest plan with at least 99 % of its throughput: {report.plan_label(chosen, base.problem)},
{format_number(chosen.wall_time_s / 3600)} h, {chosen.cost_usd:,.2f} USD: \
a saving of {saving:.2f} % (the paper: {PAPER_SAVING_PCT} %).

## 3. The paper's heuristic (throughput-proportional split, iterative refinement) as a baseline

{heuristic_section(base)}

## 4. Other queries on the same frontier

{queries_section(base)}

## 5. Where does 21.69 % come from? The assumptions the paper leaves open

One scenario per assumption (the others as shipped), then combinations of the WAN bandwidth, H
and one-node islands (pods without a fast fabric). Reproduce any row with `shardmeter plan
instances/paper-case-study.yaml --min-throughput-fraction 0.99 --vary PATH=VALUE ...` (the
overrides are listed in `sweep()` of the script). The first eight frontiers side by side:

![scenarios](figures/case-study-scenarios.png)

{md_table(rows, SWEEP_COLUMNS)}

What the sweep shows (computed from the table above):

{conclusions(rows)}

## 6. A plan that holds with 90 % probability

{quantile_section(base)}

## 7. What free layouts change (issue 25)

The same planner with the layout (tensor / pipeline / HSDP degrees, schedule) and the
checkpointing mode left to it, per island, against the layout pinned to plain FSDP with one
checkpointing mode: the paper's instance and `instances/llama-70b-multicloud.yaml` (Llama-3.1-70B
at 8k context on six clusters of five providers). Both frontiers of each pair are exact for
their table; the free table contains every pinned row, so the free frontier can only be at least
as good. Reproduce a row with `shardmeter pareto INSTANCE --vary training.parallel=...`.

{layouts_section(executor)}

## 8. A mixture-of-experts job: what expert parallelism and FP8 change (issue 26)

{moe_section(executor)}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if docs/CASE_STUDY.md is not current"
    )
    parser.add_argument(
        "--executor", default=None, metavar="SPEC",
        help="where the scenarios are solved (planner.executor): local (default: one process "
             "per CPU), local:N, serial or dask://HOST:PORT; the document is the same on each",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    text = run_or_exit(parser, lambda executor: build(executor, write_figures=not args.check),
                       args.executor)
    raise SystemExit(
        check_or_write(DOC, text, check=args.check, generator="python -m scripts.make_case_study")
    )

if __name__ == "__main__":
    main()
