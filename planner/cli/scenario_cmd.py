"""`pareto` and `plan` over several instance files and what-if scenarios (`--vary`).

Output: a summary table (one row per instance and scenario), then per instance the cross table
(every plan scored under every scenario, with its regret) and the robust (min-max-regret) choice.
The logic lives in `planner.scenarios`; this module only formats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import pandas as pd

from planner.cli.common import emit_json, emit_records


def _results(paths: Sequence[Path], vary: Sequence[str], solve: dict[str, Any]) -> tuple[list, list]:
    from planner.scenarios import parse_vary, scenarios_of, solve_all

    scenarios = scenarios_of([parse_vary(v) for v in vary])
    return scenarios, solve_all([str(p) for p in paths], scenarios, solve)


def _by_instance(results: Sequence[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for result in results:
        out.setdefault(result.instance_path, []).append(result)
    return out


def _finite(value: float) -> float | None:
    return None if math.isinf(value) else value


def _pct(value: float) -> float | None:
    return None if math.isinf(value) else 100.0 * value


def summary_rows(results: Sequence[Any]) -> list[dict[str, Any]]:
    """One row per (instance, scenario): frontier size, ends, the 99 % saving, exactness."""
    from planner.pareto import cheapest, cheapest_at_throughput, fastest

    rows = []
    for r in results:
        row: dict[str, Any] = {"instance": Path(r.instance_path).name, "scenario": r.scenario.name}
        if not r.points:
            row.update({"points": 0, "note": r.error or "no plan"})
            rows.append(row)
            continue
        fast, cheap = fastest(r.points), cheapest(r.points)
        _, saving = cheapest_at_throughput(r.points, 0.99)
        row.update({"points": len(r.points), "fastest_h": fast.wall_time_s / 3600,
                    "fastest_usd": fast.cost_usd, "cheapest_h": cheap.wall_time_s / 3600,
                    "cheapest_usd": cheap.cost_usd, "saving_at_99pct": saving,
                    "solver": r.frontier.solver, "proven_exact": r.frontier.proven_exact,
                    "solve_time_s": r.frontier.solve_time_s,
                    "note": r.frontier.note if not r.frontier.proven_exact else ""})
        rows.append(row)
    return rows


def cross_frame(scored: Sequence[Any], names: Sequence[str], robust: Any) -> pd.DataFrame:
    """One row per plan; per scenario s<j>: time (h), cost (USD), regret (%)."""
    rows = []
    for i, plan in enumerate(scored):
        found = [f"s{names.index(n)}" for n in plan.found_in]
        row: dict[str, Any] = {"plan": i, "label": plan.label, "found_in": " ".join(found)}
        for j in range(len(names)):
            row[f"s{j}_h"] = _finite(plan.wall_time_s[j] / 3600)
            row[f"s{j}_usd"] = _finite(plan.cost_usd[j])
            row[f"s{j}_regret_pct"] = _pct(plan.regret[j])
        row["max_regret_pct"] = _pct(plan.max_regret)
        row["robust"] = plan is robust
        rows.append(row)
    return pd.DataFrame(rows)


def _scored_json(scored: Sequence[Any], names: Sequence[str], robust: Any) -> list[dict[str, Any]]:
    return [{"label": p.label, "found_in": list(p.found_in), "robust": p is robust,
             "max_regret": _finite(p.max_regret),
             "islands": [dict(zip(("cluster", "nodes", "gpus_per_node", "micro_batch", "accum_steps"), i,
                                  strict=True)) for i in p.islands],
             "by_scenario": [{"scenario": n, "wall_time_s": _finite(p.wall_time_s[j]),
                              "cost_usd": _finite(p.cost_usd[j]), "regret": _finite(p.regret[j])}
                             for j, n in enumerate(names)]} for p in scored]


def _emit(fmt: str, summary: list[dict[str, Any]], sections: list[tuple[str, list[str], Any, Any]],
          payload: dict[str, Any]) -> None:
    if fmt == "json":
        emit_json(payload)
        return
    if fmt == "csv":
        emit_records(pd.DataFrame(summary), "csv")
        return
    emit_records(pd.DataFrame(summary), fmt, title="scenarios")
    for instance, names, frame, robust in sections:
        emit_records(pd.DataFrame({"scenario": [f"s{j}" for j in range(len(names))], "values": names}), fmt,
                     title=f"{instance}: scenario key")
        emit_records(frame, fmt, title=f"{instance}: every plan under every scenario (regret vs hindsight)")
        if robust is not None:
            worst = _pct(robust.max_regret)
            click.echo(f"robust choice (least maximum regret): {robust.label} (max regret "
                       + ("infinite: infeasible or unmatched in some scenario" if worst is None else f"{worst:.3g} %")
                       + ")")
    unproven = [f"{r['instance']} [{r['scenario']}]" for r in summary if r.get("proven_exact") is False]
    if unproven:
        click.echo("warning: NOT proven exact: " + ", ".join(unproven) + ". To fix: raise --time-limit-s.",
                   err=True)


def pareto_scenarios(paths: Sequence[Path], vary: Sequence[str], output: Path | None, plot: Path | None,
                     fmt: str, solve: dict[str, Any]) -> None:
    """`pareto` over several files and/or scenarios."""
    from planner import report
    from planner.scenarios import robust, score_frontiers

    _, results = _results(paths, vary, solve)
    summary = summary_rows(results)
    sections, payload = [], {"summary": summary, "instances": []}
    for index, (path, group) in enumerate(_by_instance(results).items()):
        names = [r.scenario.name for r in group]
        scored = score_frontiers(group)
        best = robust(scored)
        sections.append((Path(path).name, names, cross_frame(scored, names, best), best))
        payload["instances"].append({
            "instance": path, "scenarios": [
                {"scenario": r.scenario.name, "error": r.error,
                 "frontier": report.frontier_records(r.frontier, r.problem) if r.frontier else [],
                 "solve": report.frontier_meta(r.frontier) if r.frontier else {}} for r in group],
            "plans": _scored_json(scored, names, best), "robust": best.label if best else None})
        if plot is not None:
            target = plot if len(paths) == 1 else plot.with_name(f"{plot.stem}_{index}{plot.suffix or '.png'}")
            report.plot_scenarios([(r.scenario.name, r.points) for r in group], target,
                                  title=f"{Path(path).name}: frontier per scenario")
            click.echo(f"wrote {target}", err=True)
    if output is not None:
        frames = [frame.assign(instance=name) for name, _, frame, _ in sections]
        pd.concat(frames, ignore_index=True).to_csv(output, index=False)
    _emit(fmt, summary, sections, payload)


def plan_scenarios(paths: Sequence[Path], vary: Sequence[str], objective: str, fraction: float | None,
                   fmt: str, solve: dict[str, Any]) -> None:
    """`plan` over several files and/or scenarios: each scenario's answer, scored under all."""
    from planner import report
    from planner.cli.plan_cmd import answer
    from planner.pareto import fastest
    from planner.scenarios import robust, score_answers

    solve = {**solve, "first_only": objective == "cost" and fraction is None}
    _, results = _results(paths, vary, solve)
    summary, sections, payload = [], [], {"summary": [], "instances": []}
    for path, group in _by_instance(results).items():
        answers, admissible = [], []
        for r in group:
            row: dict[str, Any] = {"instance": Path(path).name, "scenario": r.scenario.name}
            if not r.points:
                answers.append(None)
                admissible.append(lambda plan: False)
                summary.append({**row, "note": r.error or "no plan"})
                continue
            chosen, extra = answer(r.problem, r.frontier, objective, fraction)
            answers.append(chosen)
            admissible.append(_admissible(r.problem, fastest(r.points) if fraction else None, fraction))
            summary.append({**row, **extra, "label": report.plan_label(chosen, r.problem),
                            "wall_time_h": chosen.wall_time_s / 3600, "cost_usd": chosen.cost_usd,
                            "solver": r.frontier.solver, "proven_exact": r.frontier.proven_exact})
        names = [r.scenario.name for r in group]
        scored = score_answers(group, answers, "time" if objective == "time" and fraction is None else "cost",
                               admissible)
        best = robust(scored)
        sections.append((Path(path).name, names, cross_frame(scored, names, best), best))
        payload["instances"].append({"instance": path, "plans": _scored_json(scored, names, best),
                                     "robust": best.label if best else None})
    payload["summary"] = summary
    _emit(fmt, summary, sections, payload)


def _admissible(problem: Any, fastest_plan: Any, fraction: float | None) -> Any:
    """Does a rescored plan meet this scenario's budget, deadline and throughput floor?"""
    def ok(plan: Any) -> bool:
        if problem.budget_usd is not None and plan.cost_usd > problem.budget_usd:
            return False
        if problem.deadline_s is not None and plan.wall_time_s > problem.deadline_s:
            return False
        return fraction is None or plan.tokens_per_s >= fraction * fastest_plan.tokens_per_s

    return ok
