"""Generate docs/ENERGY.md: energy and CO2 of the multi-cloud instance's cheapest, fastest and
lowest-CO2 plans, and how much CO2 a 5 % cost premium buys away.

Usage: .venv/bin/python -m scripts.make_energy_doc [--check]

Every number in the document is computed by this run (the planner's library calls, the same as
`shardmeter plan/pareto`); every conclusion sentence is built from those results. `--check`
regenerates the text without writing anything and exits 1 when docs/ENERGY.md differs.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from perfmodel.costs.power import DEFAULT_POWER
from perfmodel.formatting import markdown_table
from planner.analysis import report
from planner.analysis.energy import min_co2_within_cost, solve_energy
from planner.analysis.pareto import cheapest, fastest, solve_instance
from planner.model.instance import load_instance
from planner.model.island_table import load_island_table
from scripts._docgen import check_or_write

ROOT = Path(__file__).resolve().parent.parent



DOC = ROOT / "docs" / "ENERGY.md"
INSTANCE = ROOT / "instances" / "multi-cloud.yaml"
PREMIUM = 0.05
"""Cost premium over the cheapest plan the CO2 question allows."""


def solve() -> dict[str, Any]:
    """Both exact frontiers of the multi-cloud instance and the plans the document compares."""
    instance = load_instance(INSTANCE)
    table = load_island_table(instance)
    problem, cost_front = solve_instance(instance, table)
    _, co2_front = solve_energy(instance, table, "co2")
    cheap, fast = cheapest(cost_front.points), fastest(cost_front.points)
    green = min(co2_front.points, key=lambda p: (p.co2_kg, p.wall_time_s))
    capped = min_co2_within_cost(problem, (1 + PREMIUM) * cheap.cost_usd, cheapest_plan=cheap,
                                 within=[*cost_front.points, *co2_front.points])
    return {
        "instance": instance,
        "problem": problem,
        "cheapest": cheap,
        "fastest": fast,
        "lowest_co2": green,
        "premium": capped.best,
        "premium_lower_kg": capped.lower_bound_kg,
        "premium_solves": capped.solves,
        "cost_points": len(cost_front.points),
        "co2_points": len(co2_front.points),
        "co2_exact": co2_front.proven_exact and cost_front.proven_exact,
    }


def _row(name: str, plan: Any, problem: Any) -> list[str]:
    gpu_hours = plan.num_gpus * plan.wall_time_s / 3600
    return [name, report.plan_label(plan, problem), f"{plan.wall_time_s / 3600:,.1f}",
            f"{plan.cost_usd:,.0f}", f"{plan.energy_kwh:,.0f}", f"{plan.co2_kg:,.0f}",
            str(plan.num_gpus), f"{plan.energy_kwh / gpu_hours:.3f}"]


def _pct(new: float, old: float) -> str:
    return f"{100 * (new - old) / old:+.1f} %"


def conclusions(r: dict[str, Any]) -> str:
    cheap, fast, green, prem = r["cheapest"], r["fastest"], r["lowest_co2"], r["premium"]
    saved = cheap.co2_kg - prem.co2_kg
    most = cheap.co2_kg - r["premium_lower_kg"]
    cap = (1 + PREMIUM) * cheap.cost_usd
    lines = [
        f"- The lowest-CO2 plan emits {green.co2_kg:,.0f} kg CO2e, "
        f"{_pct(green.co2_kg, cheap.co2_kg)} vs the cheapest plan ({cheap.co2_kg:,.0f} kg), at "
        f"{_pct(green.cost_usd, cheap.cost_usd)} cost and "
        f"{_pct(green.wall_time_s, cheap.wall_time_s)} wall time.",
        f"- The fastest plan emits {fast.co2_kg:,.0f} kg CO2e ({_pct(fast.co2_kg, cheap.co2_kg)} "
        f"vs the cheapest) and uses {fast.energy_kwh:,.0f} kWh "
        f"({_pct(fast.energy_kwh, cheap.energy_kwh)}).",
    ]
    found = (
        f"the plan {report.plan_label(prem, r['problem'])} costs "
        f"{_pct(prem.cost_usd, cheap.cost_usd)} and emits {prem.co2_kg:,.0f} kg"
        if saved > 0
        else "no plan found within it emits less than the cheapest"
    )
    lines.append(
        f"- A {100 * PREMIUM:.0f} % cost premium (at most {cap:,.0f} USD) buys away at least "
        f"{saved:,.0f} and at most {most:,.0f} kg CO2e (at most {100 * most / cheap.co2_kg:.1f} % "
        f"of the cheapest plan's): {found}; no plan within the premium emits less than "
        f"{r['premium_lower_kg']:,.0f} kg."
    )
    if green.co2_kg < cheap.co2_kg and green.energy_kwh > cheap.energy_kwh:
        lines.append(
            "- The lowest-CO2 plan uses more energy than the cheapest one: it moves work to a "
            "cleaner grid rather than saving kWh."
        )
    return "\n".join(lines)


def assumptions(r: dict[str, Any]) -> str:
    rows = [[info.name, energy.region, f"{energy.gco2e_per_kwh:.1f}", f"{energy.pue:.2f}",
             energy.pue_source.split(":")[0]]
            for info, energy in zip(r["problem"].clusters, r["problem"].energy.clusters,
                                    strict=True)]
    return markdown_table(["cluster", "region", "gCO2e/kWh", "PUE", "PUE source"], rows)


def build() -> str:
    r = solve()
    p = DEFAULT_POWER
    problem = r["problem"]
    table = markdown_table(
        ["plan", "islands", "wall time (h)", "cost (USD)", "energy (kWh)", "CO2 (kg CO2e)",
         "GPUs", "kWh per GPU-hour"],
        [_row("cheapest", r["cheapest"], problem),
         _row("fastest", r["fastest"], problem),
         _row("lowest CO2", r["lowest_co2"], problem),
         _row(f"least CO2 within +{100 * PREMIUM:.0f} % cost", r["premium"], problem)])
    # A backslash at the end of a line below joins it to the next one in the text.
    return f"""# Energy and CO2 of the multi-cloud plans

Generated by `.venv/bin/python -m scripts.make_energy_doc` (`--check` verifies this file is current)
from `instances/multi-cloud.yaml`; every number and every conclusion below is computed by that run.
Equivalent CLI queries: `shardmeter plan instances/multi-cloud.yaml --objective co2` and
`shardmeter pareto instances/multi-cloud.yaml --objectives time,co2`.

How the figures are made (`planner/model/energy.py` derives the formula): every rented GPU is
powered for the whole run; per inner step an island computes, communicates only, or waits (for
the slowest island and the DiLoCo sync), at {p.compute_frac:g} / {p.comm_frac:g} /
{p.idle_frac:g} x TDP, plus {p.host_w_per_gpu:g} W of host per GPU, times the data centre's PUE;
CO2 uses the grid intensity of the cluster's region (`catalogs/energy/`, source and date per
row). The regions are assumptions marked in the instance file.

{assumptions(r)}

{table}

The time-cost frontier has {r["cost_points"]} points, the exact time-vs-CO2 frontier
{r["co2_points"]} (both proven exact: {r["co2_exact"]}). Least CO2 under a cost cap is a third
objective the planner does not trace exactly; it is bracketed instead \
(`planner.analysis.energy.min_co2_within_cost`,
{r["premium_solves"]} exact sweeps of CO2 + λ·cost): \
"least CO2 within +{100 * PREMIUM:.0f} % cost" is
the lowest-CO2 plan found that costs at most {100 * PREMIUM:.0f} % more than the cheapest plan (a
real plan: what it saves, the premium surely buys), and Lagrangian duality proves that no plan
within the cap emits less than {r["premium_lower_kg"]:,.0f} kg CO2e \
(what the premium can buy at most).

What the comparison shows (computed from the table above):

{conclusions(r)}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if docs/ENERGY.md is not current"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    text = build()
    raise SystemExit(
        check_or_write(DOC, text, check=args.check, generator="python -m scripts.make_energy_doc")
    )


if __name__ == "__main__":
    main()
