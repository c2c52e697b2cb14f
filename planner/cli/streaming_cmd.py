"""Command `streaming`: simulate a Streaming DiLoCo schedule, find blocking, tune it, and answer
`--bandwidth-for-utilisation` (the link Gbit/s each compute utilisation needs). A thin layer: the
numbers come from `perfmodel.api.predict` (`streaming`, `bandwidth_for_utilisation`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from perfmodel import api
from perfmodel.api.workload import Workload, positive
from perfmodel.numbers import format_duration, format_number
from perfmodel.sim import trace
from perfmodel.spec.errors import UserInputError
from planner.cli.common import (
    echo_wrapped,
    emit_compact,
    emit_json,
    emit_records,
    format_option,
    refuse_unused,
    wide_option,
)
from planner.cli.outer_opts import dtype_option, outer_option_list
from planner.cli.recipe_opts import recipe_from_options
from planner.cli.sim_cmd import _PATH, _apply, _workload_option_list


def _streaming_options(func: Any) -> Any:
    return _apply(
        [
            *_workload_option_list(examples=True, recipe=True),
            click.option(
                "--islands",
                type=int,
                default=2,
                show_default=True,
                help="Islands M exchanging fragments.",
            ),
            click.option(
                "--wan-gbit-s",
                type=float,
                default=10.0,
                show_default=True,
                help="Slowest WAN uplink, Gbit/s.",
            ),
            click.option(
                "--wan-latency-ms",
                type=float,
                default=50.0,
                show_default=True,
                help="Largest WAN latency, ms.",
            ),
            dtype_option(),
            click.option(
                "--fragments",
                type=int,
                default=None,
                help="Fragments F (default: the recipe's, else 3).",
            ),
            click.option(
                "--delay",
                type=int,
                default=None,
                help="Delay τ in inner steps (default: the recipe's, else 2).",
            ),
            click.option(
                "--sync-every",
                "--inner-steps",
                "sync_every",
                type=int,
                default=None,
                help="H, any value >= 1 (default: the recipe's, else F·τ: "
                     "one fragment every τ steps).",
            ),
            *outer_option_list(),
            click.option(
                "--steps", type=int, default=None, help="Inner steps to simulate (default 2H+τ+1)."
            ),
            click.option(
                "--max-delay-steps",
                type=int,
                default=None,
                help="Tuner bound on τ (replica drift).",
            ),
            click.option(
                "--max-sync-every",
                type=int,
                default=None,
                help="Tuner bound on H (sync frequency).",
            ),
            click.option(
                "--example",
                type=click.Choice(["A", "B", "C", "D", "all"]),
                default=None,
                help="Paper figure 6: A fast WAN, B slow WAN blocks, C more fragments, "
                     "D longer delay.",
            ),
            click.option(
                "--bandwidth-for-utilisation",
                "for_utilisation",
                is_flag=True,
                default=False,
                help="Instead: the link Gbit/s that reaches each --utilisation (bisection on "
                     "the simulator).",
            ),
            click.option(
                "--utilisation",
                "utilisation_text",
                default="0.5,0.8,0.9,0.95,0.99",
                show_default=True,
                help="Compute utilisation targets for --bandwidth-for-utilisation "
                     "(fractions in (0, 1)).",
            ),
            click.option(
                "--step-time-s",
                type=float,
                default=None,
                help="Inner step compute time in seconds instead of simulating MODEL on --gpu.",
            ),
            click.option(
                "--plot", "plot_path", type=_PATH, default=None, help="Figure 6 style PNG here."
            ),
            click.option(
                "--trace", "trace_path", type=_PATH, default=None, help="Chrome trace JSON here."
            ),
        ],
        func,
    )


@click.command()
@click.argument("model_name", metavar="MODEL", required=False)
@_streaming_options
@format_option()
@wide_option()
def streaming(model_name: str | None, gpu_name: str | None, nodes: int, gpus_per_node: int,
              seq_len: int | None, micro_batch: int | None, accum: int | None, ac: str,
              profile_name: str | None, recipe_name: str, islands: int, wan_gbit_s: float,
              wan_latency_ms: float, dtype: str | None, fragments: int | None, delay: int | None,
              sync_every: int | None, fragment_pattern: str | None, overlap_backward: bool | None,
              islands_same_cluster: bool, steps: int | None, max_delay_steps: int | None,
              max_sync_every: int | None, example: str | None, for_utilisation: bool,
              utilisation_text: str, step_time_s: float | None, plot_path: Path | None,
              trace_path: Path | None, fmt: str, wide: bool, **recipe_flags: Any) -> None:
    """Streaming DiLoCo: simulate a fragment schedule, find blocking, tune fragments and delay.

    The tuner keeps H and recommends ONE configuration: the shortest delay τ, then the fewest
    fragments F, that never block within --max-delay-steps (bounds against replica drift); the
    other lines are single changes that also remove blocking. --bandwidth-for-utilisation prints
    the link bandwidth each compute utilisation needs instead."""
    if for_utilisation:
        refuse_unused(("steps", "max_delay_steps", "max_sync_every", "example", "plot_path",
                       "trace_path"), why="with --bandwidth-for-utilisation (no schedule is "
                      "simulated, tuned or drawn)",
                      fix="drop them, or drop --bandwidth-for-utilisation.")
    else:
        refuse_unused(("step_time_s", "utilisation_text"),
                      why="without --bandwidth-for-utilisation",
                      fix="add --bandwidth-for-utilisation, or drop them (the inner step is "
                          "simulated from MODEL and --gpu).")
    if example is not None:
        refuse_unused(("wan_gbit_s", "fragments", "delay", "sync_every"),
                      why="with --example (each figure 6 example sets its own link, F, τ and H)",
                      fix="drop them, or drop --example to study your own settings.")
    if islands_same_cluster:
        refuse_unused(("wan_gbit_s", "wan_latency_ms"), why="with --islands-same-cluster (the "
                      "sync uses the cluster's inter-node fabric)",
                      fix="drop them, or drop --islands-same-cluster.")
    for option, value in (("--steps", steps), ("--max-delay-steps", max_delay_steps),
                          ("--max-sync-every", max_sync_every)):
        if value is not None:
            positive(option, value, zero_ok=option == "--max-delay-steps",
                     limit="delay_steps" if option == "--max-delay-steps" else "sim_steps")
    recipe = recipe_from_options(recipe_name, ac=ac, **recipe_flags)
    outer = api.OuterSpec(strategy="streaming-diloco", islands=islands, inner_steps=sync_every,
                          fragments=fragments, delay_steps=delay, pseudo_gradient_dtype=dtype,
                          fragment_pattern=fragment_pattern, overlap_backward=overlap_backward,
                          islands_same_cluster=islands_same_cluster, wan_gbit_s=wan_gbit_s,
                          wan_latency_ms=wan_latency_ms)
    where: dict[str, Any] = {"gpu_name": gpu_name, "nodes": nodes, "gpus_per_node": gpus_per_node,
                             "seq_len": seq_len, "micro_batch": micro_batch, "accum": accum,
                             "profile_name": profile_name, "recipe": recipe}
    if for_utilisation:
        targets = _targets(utilisation_text)
        _emit_bandwidth(api.bandwidth_for_utilisation(model_name, outer, targets=targets,
                                                      step_time_s=step_time_s, **where), fmt)
        return
    study = api.streaming(model_name, outer, steps=steps, max_delay_steps=max_delay_steps,
                          max_sync_every=max_sync_every, example=example, **where)
    _outputs(study.panels, study.spans, study.workload, plot_path, trace_path)
    _emit_streaming(study.records, fmt, [str(p) for p in (plot_path, trace_path) if p],
                    wide=wide)


def _outputs(panels: list[Any], spans: list[Any], w: Workload, plot_path: Path | None,
             trace_path: Path | None) -> None:

    if plot_path:
        trace.plot_timelines(panels, plot_path, title=f"Streaming DiLoCo, {w.model.name} on "
                             f"{w.island.num_nodes}x{w.island.gpus_per_node} {w.gpu.name}")
    if trace_path:
        trace.write_chrome_trace(spans, trace_path)


def _emit_streaming(records: list[dict[str, Any]], fmt: str, outputs: list[str], *,
                    wide: bool = False) -> None:
    if fmt == "json":
        emit_json({"cases": records, "outputs": outputs})
        return
    flat = [
        {k: ("; ".join(v) if isinstance(v, list) else v) for k, v in r.items()} for r in records
    ]
    if fmt == "csv":
        emit_records(flat, "csv")
        return
    if not wide:
        _streaming_view(records)
        for path in outputs:
            echo_wrapped(f"wrote {path}")
        return
    keys = (
        "case",
        "wan_gbit_s",
        "fragments",
        "delay_steps",
        "sync_every",
        "inner_step_time_s",
        "exchange_s_max",
        "blocked_s",
        "tuned_fragments",
        "tuned_delay_steps",
        "tuned_sync_every",
    )
    emit_records([{k: r[k] for k in keys} for r in flat], "table", title="Streaming DiLoCo")
    echo_wrapped(f"recipe {records[0]['recipe']}")
    for r in records:
        echo_wrapped(f"{r['case']}: {r['outer']}")
        if r["note"]:
            echo_wrapped(f"{r['case']}: {r['note']}")
        echo_wrapped(f"{r['case']}: tuner — {r['tuner']}")
        for remedy in r["remedies"]:
            echo_wrapped(f"{r['case']}: remedy — {remedy}")
    for path in outputs:
        click.echo(f"wrote {path}")


def _streaming_view(records: list[dict[str, Any]]) -> None:
    """Answer first: per case whether the schedule blocks and what the tuner recommends, then
    the cases as a compact table (units in the headers), then the remedies (`--wide`: the
    former table)."""
    for r in records:
        blocked = float(r["blocked_s"] or 0.0)
        # the API decides whether it blocks (perfmodel.diloco.streaming: rounding of the
        # schedule's sums is not a wait; a link that cannot keep up blocks later if not yet)
        verdict = ("never blocked" if not r["blocks"]
                   else f"blocked {format_duration(blocked)} in {r['sync_every']} inner steps"
                   if blocked > 0 else "blocks later: the link cannot carry one "
                   f"pseudo-gradient per {r['sync_every']} inner steps")
        echo_wrapped(f"{r['case']}: F {r['fragments']}, τ {r['delay_steps']}, H "
                     f"{r['sync_every']} over {format_number(r['wan_gbit_s'])} Gbit/s: {verdict}; "
                     f"tuner — {r['tuner']}")
    click.echo("")
    emit_compact([{"case": str(r["case"]), "WAN Gbit/s": format_number(r["wan_gbit_s"]),
                   "F": str(r["fragments"]), "τ": str(r["delay_steps"]), "H": str(r["sync_every"]),
                   "inner step": format_duration(r["inner_step_time_s"]),
                   "exchange": format_duration(r["exchange_s_max"]),
                   "blocked": format_duration(float(r["blocked_s"] or 0.0)),
                   "tuned F/τ/H": "/".join(_cell(r[k]) for k in ("tuned_fragments",
                                                                 "tuned_delay_steps",
                                                                 "tuned_sync_every"))}
                  for r in records])
    echo_wrapped(f"recipe {records[0]['recipe']}")
    for r in records:
        if r["note"]:
            echo_wrapped(f"{r['case']}: {r['note']}")
        for remedy in r["remedies"]:
            echo_wrapped(f"{r['case']}: remedy — {remedy}")


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


# ---- --bandwidth-for-utilisation ---------------------------------------------------------------


def _targets(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise UserInputError(
            f"--utilisation {text!r}: not a list of numbers",
            hint="write --utilisation 0.5,0.8,0.9,0.95,0.99.",
        ) from err
    if not values or any(not 0 < v < 1 for v in values):
        raise UserInputError(
            f"--utilisation {text!r}: targets must lie strictly between 0 and 1",
            hint="write fractions, e.g. --utilisation 0.5,0.9,0.99.",
        )
    return values


def _emit_bandwidth(table: api.BandwidthTable, fmt: str) -> None:
    if fmt == "json":
        emit_json({**table.header, **table.details, "rows": table.rows})
        return
    if fmt == "csv":
        emit_records(table.rows, "csv")
        return
    emit_records(table.rows, "table",
                 title=f"{'Fabric' if table.link_kind == 'fabric' else 'WAN'} bandwidth for "
                       f"compute utilisation, {table.header['model']}, "
                       f"step {table.step_time_s:.3g} s")
    echo_wrapped(f"recipe {table.header['recipe']}")
    echo_wrapped(str(table.header["outer"]))
    echo_wrapped(f"outer optimizer: {table.header['outer_optimizer']}")
