"""Printing of scenario studies: `pareto` and `plan` over several instance files and what-if
scenarios (`--vary`).

Output: a summary table (one row per instance and scenario), then per instance the cross table
(every plan scored under every scenario, with its regret) and the robust (min-max-regret) choice.
The study comes from `planner.api` (`frontier`, `query`; `planner.studies`); this module
only formats.
"""

from __future__ import annotations

import click
import pandas as pd

from planner.cli.common import emit_json, emit_records
from planner.studies import ScenarioStudy


def emit_study(study: ScenarioStudy, fmt: str) -> None:
    """Print a scenario study as JSON, CSV (the summary) or tables; whatever the format, a study
    with scenarios not proven exact (or not solved in the time limit) says so on stderr."""
    _warn_unproven(study)
    if fmt == "json":
        emit_json(study.payload)
        return
    if fmt == "csv":
        emit_records(pd.DataFrame(study.summary), "csv")
        return
    emit_records(pd.DataFrame(study.summary), fmt, title="scenarios")
    for section in study.sections:
        key = pd.DataFrame({"scenario": [f"s{j}" for j in range(len(section.scenarios))],
                            "values": list(section.scenarios)})
        emit_records(key, fmt, title=f"{section.instance}: scenario key")
        emit_records(section.cross_table, fmt,
                     title=f"{section.instance}: every plan under every scenario (regret vs "
                           "hindsight)")
        if section.robust is not None:
            worst = section.robust_max_regret_pct
            click.echo(f"robust choice (least maximum regret): {section.robust.label} (max regret "
                       + ("infinite: infeasible or unmatched in some scenario" if worst is None
                          else f"{worst:.3g} %")
                       + ")")


def _warn_unproven(study: ScenarioStudy) -> None:
    if study.unproven:
        shown = study.unproven[:10]
        more = len(study.unproven) - len(shown)
        click.echo("warning: NOT proven exact: " + ", ".join(shown)
                   + (f" and {more} more" if more else "")
                   + ". To fix: raise --time-limit-s.", err=True)
