"""Generate docs/RELIABILITY.md: plans that survive failures and preemption (issue 28).

Usage: .venv/bin/python -m scripts.make_reliability [--check] [--executor SPEC]

Every number in the document is computed by this run: the performance model's `predict` with the
failure model, the closed forms of `perfmodel.spec.failure_model`, the discrete-event Monte Carlo of
`perfmodel.sim.failures` (fixed seeds) and the planner's exact expected-value frontiers. Inputs
come from the sourced catalogs (catalogs/reliability/) and are fixed there, not here; every
conclusion sentence is built from the results. `--check` regenerates the text without writing and
exits 1 when docs/RELIABILITY.md differs.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from perfmodel import api
from perfmodel.costs.reliability import FailureSpec, checkpointed_job
from perfmodel.formatting import markdown_table
from perfmodel.sim.failures import Interruptions, simulate_checkpointed_run
from perfmodel.spec import failure_model as formulas
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.inputs import LIMITS
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import DEFAULT_RECIPE
from perfmodel.spec.reliability_catalog import (
    checkpoint_write_gbit_s_per_node,
    failures_per_gpu_hour,
    preemptions_per_node_hour,
    restart_s,
    spot_capacity_wait_s,
)
from planner.analysis import report
from planner.analysis.pareto import cheapest, cheapest_at_throughput, fastest, solve_instance
from planner.executor import run_or_exit, run_tasks
from planner.model.evaluate import evaluate
from planner.model.instance import instance_from_mapping, load_instance
from planner.model.island_table import load_island_table
from scripts._docgen import check_or_write

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "RELIABILITY.md"
PAPER = ROOT / "instances" / "paper-case-study.yaml"
MULTI = ROOT / "instances" / "multi-cloud.yaml"
HOUR = 3600.0

LLAMA: dict[str, Any] = {"model_name": "Llama-3.1-405B", "gpu_name": "H100-SXM5-80GB",
                         "nodes": 2048, "gpus_per_node": 8, "seq_len": 8192, "micro_batch": 1,
                         "accum": 16}
"""The issue's 405B workload (16,384 GPUs)."""
LLAMA_LAYOUT = ParallelLayout(tp=8, pp=16)
"""Meta's published layout for it: TP 8 x PP 16 x DP 128 (dp_shard inferred)."""
LLAMA_CLI = ("shardmeter predict Llama-3.1-405B --gpu H100-SXM5-80GB --nodes 2048 "
             "--gpus-per-node 8 --seq-len 8192 --micro-batch 1 --accum 16 --tp 8 --pp 16 "
             "--ac full --failures")
RESTART_SWEEP_S = (60.0, 300.0, 600.0, 1200.0, 1800.0)
"""Restart times the sensitivity table shows (the default is the catalog's)."""
MC_GRID = ((200.0, 1.0, 600.0), (200.0, 6.0, 60.0), (500.0, 24.0, 600.0))
"""(job hours, MTBF hours, checkpoint write s) of the Monte Carlo table; the 16k-GPU job's MTBF and
write time are added as a row of their own (`monte_carlo`)."""
MC_RUNS = 200
ISLAND_SPLITS = (1, 2, 8, 16, 64)
"""Island counts the 16,384 GPUs are split into for the DiLoCo comparison."""
ISLAND_PERIODS_S = (300.0, 3000.0)
"""Outer-step periods of that comparison (H x inner step; inputs of the comparison, stated)."""
PREEMPTION_SWEEP = (0.0002, 0.002, 0.02, 0.05, 0.2, 1.0)
"""Preemptions per node-hour tried on multi-cloud's spot clusters."""


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


# ---- 1. the Llama 3 check --------------------------------------------------------------------


def _job(restart: float | None = None, mode: str = "sync",
         step_s: float | None = None) -> Any:
    """The failure model `predict --failures` runs (`checkpointed_job`) for the 405B job."""
    return checkpointed_job(spec=FailureSpec(restart_s=restart), gpu=LLAMA["gpu_name"],
                            num_gpus=LLAMA["nodes"] * LLAMA["gpus_per_node"],
                            num_nodes=LLAMA["nodes"],
                            params=get_model(LLAMA["model_name"]).total_params,
                            master_dtype="fp32", mode=mode, step_time_s=step_s)


def llama_check() -> dict[str, Any]:
    recipe = replace(DEFAULT_RECIPE.with_overrides(ac="full"), parallel=LLAMA_LAYOUT)
    demo_nodes = LLAMA["nodes"]
    try:
        demo = api.predict(api.WorkloadSpec(**LLAMA, recipe=recipe), api.OuterSpec(),
                           FailureSpec())
        refusal = ""
    except UserInputError as err:
        refusal = err.message
        demo_nodes = int(LIMITS["step_nodes"].maximum)
        demo = api.predict(api.WorkloadSpec(**{**LLAMA, "nodes": demo_nodes}, recipe=recipe),
                           api.OuterSpec(), FailureSpec())
    params = get_model(LLAMA["model_name"]).total_params
    gpus = LLAMA["nodes"] * LLAMA["gpus_per_node"]
    return {"job": _job(), "sweep": [(r, _job(restart=r).goodput) for r in RESTART_SWEEP_S],
            "async": _job(mode="async"), "spot": _spot_16k(params, gpus), "gpus": gpus,
            "refusal": refusal, "demo": demo.record, "demo_nodes": demo_nodes}


def _spot_16k(params: float, gpus: int) -> dict[str, float]:
    """The 16k-GPU job on spot nodes: failures plus preemptions (AWS H100 band), a preemption
    restarting after the restart and the capacity wait."""
    rate_f = failures_per_gpu_hour("H100-SXM5-80GB").value * gpus / HOUR
    rate_p = (preemptions_per_node_hour("AWS p5.48xlarge", "H100-SXM5-80GB").value
              * LLAMA["nodes"] / HOUR)
    restart = restart_s().value
    wait = spot_capacity_wait_s().value
    size = float(formulas.checkpoint_bytes(params))
    write = size * 8 / (checkpoint_write_gbit_s_per_node().value * 1e9 * LLAMA["nodes"])
    rate = rate_f + rate_p
    factor, interval = formulas.checkpointed_wall_factor(
        rate_per_s=rate, stall_s=write, write_lag_s=0.0, restart_s=[restart, restart + wait],
        weights=[rate_f / rate, rate_p / rate])
    return {"goodput": 1 / factor, "interval_s": interval, "rate_per_h": rate * HOUR,
            "preempt_per_h": rate_p * HOUR}


def llama_section(r: dict[str, Any]) -> str:
    job, demo = r["job"], r["demo"]
    inputs = markdown_table(["input", "value", "source"], [
        ["GPUs", f"{r['gpus']:,} H100-SXM5-80GB ({LLAMA['nodes']:,} nodes x 8)",
         "the issue's workload"],
        ["interruptions per GPU-hour", f"{job.failures_per_gpu_hour:.4g} "
         f"(job MTBF {1 / job.interruptions_per_hour:.2f} h)",
         "Llama 3 report: 419 unexpected interruptions in 54 days on 16,384 GPUs"],
        ["checkpoint", f"{job.checkpoint_bytes / 1e12:.2f} TB (fp32 weights + AdamW moments)",
         "12 B per parameter, `failure_model.checkpoint_bytes`"],
        ["checkpoint write", f"{job.checkpoint_write_s:.2f} s at "
         f"{checkpoint_write_gbit_s_per_node().value:g} Gbit/s per node",
         "Llama 3 report: Tectonic 2 TB/s sustained"],
        ["restart", f"{job.restart_s:g} s", "ML Systems (harvard-edge) mlsysim default; "
         "the Llama 3 report gives none"],
    ])
    sweep = markdown_table(["restart (min)", "goodput"],
                           [[f"{restart / 60:g}", _pct(g)] for restart, g in r["sweep"]])
    consistent = job.goodput > 0.9
    spot = r["spot"]
    refused = (f"The CLI refuses that island (\"{r['refusal']}\"), so the figure "
               "below is computed by the function `predict --failures` runs "
               "(`perfmodel.costs.reliability.checkpointed_job`) for the 16,384 GPUs"
               if r["refusal"] else "The command computes the figure below")
    plural = "" if demo["checkpoint_interval_steps"] == 1 else "s"
    if r["refusal"]:
        demo_text = (f"The same command on the largest island the limits admit "
                     f"({r['demo_nodes']:,} nodes x 8 = {r['demo_nodes'] * 8:,} GPUs) predicts a "
                     f"step of {demo['step_time_s']:,.1f} s")
    else:
        demo_text = (f"The command predicts a step of {demo['step_time_s']:,.1f} s on "
                     f"{ParallelLayout(**demo['layout']).describe()}")
    return f"""## 1. Llama 3 405B on 16,384 H100: the published "more than 90 %"

The issue's check, on Meta's layout (the step time enters only through the checkpoint interval;
the failure model is the point):

    {LLAMA_CLI}

{refused}. The inputs, each fixed from its source in `catalogs/reliability/` before the run:

{inputs}

With steps short against the checkpoint interval (the report's 3-D layout steps in seconds),
checkpoints every {job.checkpoint_interval_s:,.0f} s of compute (Daly's exact optimum; Young's
first-order interval: {job.young_interval_s:,.0f} s) give **effective training time (goodput)
{_pct(job.goodput)}**: {'consistent with' if consistent else 'NOT consistent with'} the report's
"higher than 90 % effective training time". Asynchronous checkpoints (`--checkpoint-mode async`:
the sourced 6.3 s / 148.8 s stall, {r['async'].checkpoint_stall_s:.3g} s here, the write finishing
in the background) allow a checkpoint every {r['async'].checkpoint_interval_s:,.0f} s and keep
{_pct(r['async'].goodput)}: less work is lost per failure.

{demo_text}; checkpoints then fall on step boundaries (every
{demo['checkpoint_interval_steps']:.0f} step{plural}, {demo['checkpoint_interval_s']:,.0f} s) and
goodput is {_pct(demo['goodput'])}.

What the restart time (the one input the report does not publish) does to the 16,384-GPU figure:

{sweep}

On spot capacity (the AWS H100 Spot band, {spot['preempt_per_h']:.2f} preemptions per hour over
{LLAMA['nodes']:,} nodes, each costing the restart plus a
{spot_capacity_wait_s().value / 60:g}-minute capacity wait) the same job would keep
{_pct(spot['goodput'])}: a job that one interruption stops cannot use spot nodes unless the price
is below that share of the on-demand price.
"""


# ---- 2. Monte Carlo ------------------------------------------------------------------------------


MC_RESTARTS_S, MC_WEIGHTS = (600.0, 3600.0), (0.7, 0.3)
"""Restart seconds and shares of the Monte Carlo's interruption types (failures, preemptions)."""


def monte_carlo(job: Any, executor: str | None = None) -> list[list[str]]:
    """One row per grid point; each point is one task of `executor` (`planner.executor`), with
    its own seed, so the rows are the same on every executor."""
    grid = [*MC_GRID, (200.0, 1 / job.interruptions_per_hour, job.checkpoint_write_s)]
    return run_tasks(mc_row, sorted(grid, key=lambda g: (g[0], g[1])), executor)


def mc_row(work_h: float, mtbf_h: float, write: float) -> list[str]:
    """The simulated mean wall time of MC_RUNS checkpointed jobs against Daly's closed form and
    the first-order form, at one (job hours, MTBF hours, checkpoint write s)."""
    rate = 1 / (mtbf_h * HOUR)
    factor, interval = formulas.checkpointed_wall_factor(
        rate_per_s=rate, stall_s=write, write_lag_s=0.0, restart_s=list(MC_RESTARTS_S),
        weights=list(MC_WEIGHTS))
    sample = simulate_checkpointed_run(
        work_s=work_h * HOUR, interval_s=interval, stall_s=write,
        process=Interruptions(rate_per_s=rate, weights=MC_WEIGHTS, restart_s=MC_RESTARTS_S),
        runs=MC_RUNS, seed=11)
    mean = sample.mean_wall_time_s
    first = work_h * HOUR * (1 + write / interval + rate * (interval / 2 + 0.7 * 600 + 0.3
                                                            * 3600))
    return [f"{work_h:g}", f"{mtbf_h:.3g}", f"{write:.3g}", f"{interval / 60:.1f}",
            f"{mean / HOUR:.2f}", f"{work_h * factor:.2f}",
            f"{100 * (work_h * HOUR * factor / mean - 1):+.2f} %",
            f"{100 * (first / mean - 1):+.2f} %"]


def mc_section(rows: list[list[str]]) -> str:
    table = markdown_table(["job (h)", "MTBF (h)", "write (s)", "interval (min)",
                            f"simulated mean (h), {MC_RUNS} runs", "Daly (h)", "Daly vs sim",
                            "first order vs sim"], rows)
    return f"""## 2. The closed form against a discrete-event simulation

`perfmodel.sim.failures` plays failures (70 %, 10-minute restart) and preemptions (30 %, one-hour
restart) out event by event — interrupted restarts, lost segments, checkpoints — with numpy random
numbers and none of the closed forms. Daly's exact form matches its mean; the first-order form
(lost time = half an interval + restart per failure) does not once checkpoints or restarts are
not small against the MTBF. tests/test_failures.py checks 24 grid points (sync and async, job
sizes, MTBFs, checkpoint costs) and DiLoCo islands within 2 %.

{table}
"""


# ---- 3. DiLoCo island independence -------------------------------------------------------------


def islands_table(r: dict[str, Any]) -> dict[str, Any]:
    """16,384 H100 as M islands of equal size: one island is the checkpointed job; M >= 2
    islands each fail alone and skip their share until they rejoin."""
    rate_gpu = failures_per_gpu_hour("H100-SXM5-80GB").value / HOUR
    restart = restart_s().value
    rows, worse = [], []
    one = r["job"].goodput
    for m in ISLAND_SPLITS:
        cells = [str(m), f"{r['gpus'] // m:,}"]
        for period in ISLAND_PERIODS_S:
            value = one if m == 1 else formulas.island_participation(
                rate_gpu * r["gpus"] / m, period, [restart], [1.0])
            cells.append(_pct(value))
            if m > 1 and value < one:
                worse.append((m, period, value))
        rows.append(cells)
    return {"rows": rows, "worse": worse, "one": one}


def islands_section(result: dict[str, Any]) -> str:
    rows, worse = result["rows"], result["worse"]
    table = markdown_table(["islands", "GPUs per island"]
                           + [f"goodput, outer step {p:g} s" for p in ISLAND_PERIODS_S], rows)
    if worse:
        cases = "; ".join(f"{m} islands with {p:g} s outer steps keep {_pct(v)}"
                          for m, p, v in worse)
        finding = (f"Islands do not always win: {cases}, below the one job's "
                   f"{_pct(result['one'])} — an island loses a whole outer step per failure, so "
                   "a split pays when the outer step is short against the island's MTBF.")
    else:
        finding = "Every split keeps more goodput than the one job."
    return f"""## 3. How DiLoCo's island independence changes the picture

The same 16,384 GPUs at the same failure rate and restart, as one FSDP job (which every
interruption stops and which must checkpoint) or as M DiLoCo islands, each of which stops alone,
loses the outer step it fails in and rejoins at the next one (its share of the global batch is
skipped meanwhile; the run needs correspondingly more outer steps; the global model is
checkpointed off the critical path). The outer-step period is an input of this comparison (H x
the island's inner step, which differs per layout); the rejoin fetch of the model is not counted
here (the planner adds it per cluster):

{table}

{finding}
"""


# ---- 4. the planner: paper case study and multi-cloud -------------------------------------------


def _solve(instance: Any) -> tuple[Any, Any]:
    return solve_instance(instance, load_island_table(instance))


def frontier_rows(problem: Any, points: Any) -> list[list[str]]:
    rows = []
    for i, plan in enumerate(sorted(points, key=lambda p: p.wall_time_s)):
        tiers = sorted({(isl.cluster, isl.tier) for isl in plan.islands})
        rows.append([str(i), report.plan_label(plan, problem),
                     ", ".join(f"{c}: {t}" for c, t in tiers),
                     f"{plan.wall_time_s / HOUR:,.2f}", f"{plan.cost_usd:,.0f}",
                     _pct(plan.goodput), f"{plan.egress_usd:,.0f}",
                     f"{(plan.failure_free_wall_time_s or plan.wall_time_s) / HOUR:,.2f}",
                     f"{(plan.failure_free_cost_usd or plan.cost_usd):,.0f}"])
    return rows


FRONTIER_HEADER = ["point", "islands", "tiers", "E[W] (h)", "E[C] (USD)", "goodput",
                   "egress (USD)", "failure-free W (h)", "failure-free C (USD)"]


def _summary(before: Any, after: Any) -> dict[str, Any]:
    f0, c0 = fastest(before.points), cheapest(before.points)
    f1, c1 = fastest(after.points), cheapest(after.points)
    _, save0 = cheapest_at_throughput(before.points, 0.99)
    _, save1 = cheapest_at_throughput(after.points, 0.99)
    return {"f0": f0, "c0": c0, "f1": f1, "c1": c1, "save0": save0, "save1": save1}


def paper_section() -> str:
    base = load_instance(PAPER)
    problem0, before = _solve(base)
    problem, after = _solve(base.with_failures())
    s = _summary(before, after)
    table = markdown_table(FRONTIER_HEADER, frontier_rows(problem, after.points))
    assumptions = "\n".join(f"- {a}" for a in problem.risk.assumptions)
    return f"""## 4. The paper's case study under failures

`shardmeter pareto instances/paper-case-study.yaml --failures` (both clusters RunPod Community
Cloud: on-demand pods, no preemptions; RunPod publishes no egress fees). The assumptions the run
used:

{assumptions}

{table}

Solver {after.solver}, proven exact: {after.proven_exact}; {len(after.points)} points (failure-free:
{len(before.points)}). Failures cost the fastest plan {_pct(s['f1'].wall_time_s /
s['f0'].wall_time_s - 1)} wall time and {_pct(s['f1'].cost_usd / s['f0'].cost_usd - 1)} money,
the cheapest plan {_pct(s['c1'].cost_usd / s['c0'].cost_usd - 1)} money
({report.plan_label(s['c1'], problem)}{_interval(s['c1'])}). The paper's
query (cheapest at >= 99 % of the best throughput) saves {s['save1']:.2f} % under failures
({s['save0']:.2f} % without).
"""


def evaluate_plan(problem: Any, plan: Any) -> Any:
    """A failure-free plan scored with the failure model of `problem`."""
    return evaluate(problem, plan.choices)


def _interval(plan: Any) -> str:
    if plan.checkpoint_interval_s is None:
        return ""
    return f": one island, checkpointing every {plan.checkpoint_interval_s / HOUR:.2f} h of compute"


def _multi_preemption(rate: float) -> tuple[Any, Any]:
    raw = yaml.safe_load(MULTI.read_text())
    for cluster in raw["clusters"]:
        if cluster["name"].endswith("-spot"):
            cluster["preemptions_per_node_hour"] = rate
    raw["failures"] = {}
    return _solve(instance_from_mapping(raw, MULTI))


def _spot_tiers(plan: Any) -> str:
    tiers = sorted({i.tier for i in plan.islands if i.cluster.endswith("-spot")})
    return "/".join(tiers) if tiers else "none"


def multi_section() -> str:
    base = load_instance(MULTI)
    problem0, before = _solve(base)
    problem, after = _solve(base.with_failures())
    table = markdown_table(FRONTIER_HEADER, frontier_rows(problem, after.points))
    egress_share = max(p.egress_usd / p.cost_usd for p in after.points)
    fast0 = fastest(before.points)
    same = next(p for p in after.points + tuple(
        [evaluate_plan(problem, fast0)]) if p.failure_free_wall_time_s == fast0.wall_time_s
        and p.failure_free_cost_usd == fast0.cost_usd)
    pick0, save0 = cheapest_at_throughput(before.points, 0.99)
    pick1, save1 = cheapest_at_throughput(after.points, 0.99)
    on_demand_points = [p for p in after.points if any(
        i.cluster.endswith("-spot") and i.tier == "on-demand" for i in p.islands)]
    sweep_rows = []
    switch = None
    for rate in PREEMPTION_SWEEP:
        _, found = _multi_preemption(rate)
        pick, _ = cheapest_at_throughput(found.points, 0.99)
        tiers = _spot_tiers(pick)
        if "on-demand" in tiers and switch is None:
            switch = rate
        sweep_rows.append([f"{rate:g}", str(len(found.points)), report.plan_label(pick, problem),
                           tiers, f"{pick.wall_time_s / HOUR:,.2f}", f"{pick.cost_usd:,.0f}"])
    sweep = markdown_table(["preemptions per node-hour", "frontier points",
                            "cheapest plan at >= 99 % of the best throughput",
                            "its spot clusters' tiers", "E[W] (h)", "E[C] (USD)"], sweep_rows)
    band = preemptions_per_node_hour("AWS p5en", "H200-SXM-141GB").value
    verdict = (f"the plan the paper's query picks first rents a spot cluster's nodes on demand at "
               f"{switch:g} preemptions per node-hour, {switch / band:,.0f}x the catalogued band"
               if switch is not None else
               f"the plan the paper's query picks stays on spot up to {PREEMPTION_SWEEP[-1]:g} "
               f"preemptions per node-hour, {PREEMPTION_SWEEP[-1] / band:,.0f}x the catalogued "
               "band")
    return f"""## 5. Multi-cloud: spot or on demand, and what egress costs

`shardmeter pareto instances/multi-cloud.yaml --failures`: the two spot clusters may also rent
their nodes on demand (`alternatives`), the planner chooses per island; syncs between providers
pay the sending provider's internet egress (tiered per month), syncs within a site none.

{table}

Solver {after.solver}, proven exact: {after.proven_exact}; {len(after.points)} points (failure-free:
{len(before.points)}). Egress is up to {_pct(egress_share)} of a plan's expected cost: the
failure-free fastest plan ({report.plan_label(fast0, problem0)}) costs
{_pct(same.cost_usd / fast0.cost_usd - 1)} more in expectation, {same.egress_usd:,.0f} USD of it
egress. Single-provider plans (no egress) join the frontier. On-demand islands of the spot
clusters appear on {len(on_demand_points)} points, all within
{_pct(max((p.wall_time_s for p in on_demand_points), default=0) / fastest(after.points).wall_time_s
          - 1)} of the fastest expected time: they buy a sliver of time (a spot island's
preemptions cost it a share of outer steps) at a large price. The paper's query (cheapest plan at
>= 99 % of the best throughput) picks {report.plan_label(pick1, problem)} under failures
({pick1.wall_time_s / HOUR:,.2f} h, {pick1.cost_usd:,.0f} USD, saving {save1:.2f} %) and
{report.plan_label(pick0, problem0)} without ({pick0.wall_time_s / HOUR:,.2f} h,
{pick0.cost_usd:,.0f} USD, saving {save0:.2f} %).

When is spot worth it? The catalogued spot band is {band:.3g} preemptions per node-hour. Raising
the preemption rate of both spot clusters (`--vary clusters.aws-h200-spot.preemptions_per_node_hour
=...` does one) and asking the same query:

{sweep}

So {verdict}: a DiLoCo island that is preempted stops alone and loses one outer step's share.
A job that one interruption stops (section 1) keeps only {{spot_16k}} on spot at the catalogued
band.
"""


def build(executor: str | None = None) -> str:
    llama = llama_check()
    return "\n".join([
        "# Plans that survive failures and preemption",
        "",
        "Generated by `.venv/bin/python -m scripts.make_reliability` (`--check` verifies this file "
        "is current); every number\nand every conclusion below is computed by that run from the "
        "sourced inputs in `catalogs/reliability/`\n(each row with its source and date). How the "
        "model works: `perfmodel/costs/reliability.py` (predict),\n`planner/model/risk.py` "
        "(plans), `planner/solvers/expected.py` (the exact expected-value frontier),\n"
        "`perfmodel/sim/failures.py` (the simulation that checks the closed forms).",
        "",
        llama_section(llama),
        mc_section(monte_carlo(llama["job"], executor)),
        islands_section(islands_table(llama)),
        paper_section(),
        multi_section().replace("{spot_16k}", _pct(llama["spot"]["goodput"])),
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/RELIABILITY.md is not current")
    parser.add_argument("--executor", default=None, metavar="SPEC",
                        help="where the Monte Carlo grid runs (planner.executor): local "
                             "(default), local:N, serial or dask://HOST:PORT; the document is "
                             "the same on each")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    raise SystemExit(check_or_write(DOC, run_or_exit(parser, build, args.executor),
                                    check=args.check,
                                    generator="python -m scripts.make_reliability"))


if __name__ == "__main__":
    main()
