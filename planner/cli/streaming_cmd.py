"""Command `streaming`: simulate a Streaming DiLoCo schedule, find blocking, tune it, and answer
`--bandwidth-for-utilisation` (the link Gbit/s each compute utilisation needs). A thin layer: the
numbers come from `perfmodel.streaming`."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import click

from perfmodel.errors import UserInputError
from planner.cli.common import emit_json, emit_records, format_option
from planner.cli.outer_opts import (
    describe_outer,
    dtype_option,
    outer_option_list,
    streaming_outer,
    sync_link,
)
from planner.cli.recipe_opts import recipe_from_options
from planner.cli.sim_cmd import (
    _PATH,
    EXAMPLE_ACCUM,
    EXAMPLE_MICRO_BATCH,
    EXAMPLE_SEQ_LEN,
    Workload,
    _apply,
    _positive,
    _simulate,
    _streaming_spans,
    _workload,
    _workload_option_list,
)


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
                help="H, any value >= 1 (default: the recipe's, else F·τ: one fragment every τ steps).",
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
                help="Paper figure 6: A fast WAN, B slow WAN blocks, C more fragments, D longer delay.",
            ),
            click.option(
                "--bandwidth-for-utilisation",
                "for_utilisation",
                is_flag=True,
                default=False,
                help="Instead: the link Gbit/s that reaches each --utilisation (bisection on the simulator).",
            ),
            click.option(
                "--utilisation",
                "utilisation_text",
                default="0.5,0.8,0.9,0.95,0.99",
                show_default=True,
                help="Compute utilisation targets for --bandwidth-for-utilisation (fractions in (0, 1)).",
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
def streaming(
    model_name: str | None,
    gpu_name: str | None,
    nodes: int,
    gpus_per_node: int,
    seq_len: int | None,
    micro_batch: int | None,
    accum: int | None,
    ac: str,
    profile_name: str | None,
    recipe_name: str,
    islands: int,
    wan_gbit_s: float,
    wan_latency_ms: float,
    dtype: str | None,
    fragments: int | None,
    delay: int | None,
    sync_every: int | None,
    fragment_pattern: str | None,
    overlap_backward: bool | None,
    islands_same_cluster: bool,
    steps: int | None,
    max_delay_steps: int | None,
    max_sync_every: int | None,
    example: str | None,
    for_utilisation: bool,
    utilisation_text: str,
    step_time_s: float | None,
    plot_path: Path | None,
    trace_path: Path | None,
    fmt: str,
    **recipe_flags: Any,
) -> None:
    """Streaming DiLoCo: simulate a fragment schedule, find blocking, tune fragments and delay.

    The tuner keeps H and recommends ONE configuration: the shortest delay τ, then the fewest
    fragments F, that never block within --max-delay-steps (bounds against replica drift); the
    other lines are single changes that also remove blocking. --bandwidth-for-utilisation prints
    the link bandwidth each compute utilisation needs instead."""
    from perfmodel import streaming as st

    for option, value in (
        ("--steps", steps),
        ("--max-delay-steps", max_delay_steps),
        ("--max-sync-every", max_sync_every),
    ):
        if value is not None:
            _positive(option, value, zero_ok=option == "--max-delay-steps")
    recipe = recipe_from_options(recipe_name, ac=ac, **recipe_flags)
    if for_utilisation:
        _bandwidth_query(
            model_name,
            recipe,
            gpu_name=gpu_name,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            seq_len=seq_len,
            micro_batch=micro_batch,
            accum=accum,
            ac=ac,
            profile_name=profile_name,
            islands=islands,
            wan_gbit_s=wan_gbit_s,
            wan_latency_ms=wan_latency_ms,
            dtype=dtype,
            fragments=fragments,
            delay=delay,
            sync_every=sync_every,
            fragment_pattern=fragment_pattern,
            overlap_backward=overlap_backward,
            same_cluster=islands_same_cluster,
            utilisation_text=utilisation_text,
            step_time_s=step_time_s,
            fmt=fmt,
        )
        return
    w, step, cases, outer = _streaming_cases(
        model_name,
        recipe,
        gpu_name=gpu_name,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        seq_len=seq_len,
        micro_batch=micro_batch,
        accum=accum,
        ac=ac,
        profile_name=profile_name,
        islands=islands,
        wan_gbit_s=wan_gbit_s,
        wan_latency_ms=wan_latency_ms,
        dtype=dtype,
        fragments=fragments,
        delay=delay,
        sync_every=sync_every,
        fragment_pattern=fragment_pattern,
        overlap_backward=overlap_backward,
        same_cluster=islands_same_cluster,
        example=example,
    )
    records, panels, spans_all = [], [], []
    for label, (wan, config, note) in cases.items():
        tuning = st.tune_streaming(
            w.model,
            step_s=step.step_time_s,
            wan=wan,
            current=config,
            max_delay_steps=st.DEFAULT_MAX_DELAY_STEPS
            if max_delay_steps is None
            else max_delay_steps,
            max_sync_every=max_sync_every or max(st.DEFAULT_MAX_SYNC_EVERY, config.sync_every),
            seq_len=w.seq_len,
        )
        spans, summary = _streaming_spans(w.model, step, wan, config, steps)
        best = tuning.config
        records.append(
            {
                "case": label,
                "note": note,
                "wan_gbit_s": wan.bw_bytes_per_s * 8 / 1e9,
                **summary,
                "tuned_fragments": best.num_fragments if best else None,
                "tuned_delay_steps": best.delay_steps if best else None,
                "tuned_sync_every": best.sync_every if best else None,
                "tuner": tuning.reason,
                "remedies": list(tuning.remedies),
                "outer": describe_outer(
                    replace(
                        outer,
                        num_fragments=config.num_fragments,
                        delay_steps=config.delay_steps,
                        inner_steps=config.sync_every,
                        overlap_backward=config.overlap_backward,
                    ),
                    wan,
                ),
                "recipe": recipe.summary(),
                "provenance": w.profile.provenance,
            }
        )
        verdict = f"blocked {summary['blocked_s']:.3g} s" if summary["blocks"] else "no blocking"
        panels.append(
            (
                f"{label}) F={config.num_fragments}, τ={config.delay_steps}, H={config.sync_every}, "
                f"WAN {wan.bw_bytes_per_s * 8 / 1e9:.3g} Gbit/s: {verdict}",
                spans,
            )
        )
        spans_all += [_relabel(s, label) for s in spans] if len(cases) > 1 else spans
    _outputs(panels, spans_all, w, plot_path, trace_path)
    _emit_streaming(records, fmt, [str(p) for p in (plot_path, trace_path) if p])


def _outputs(
    panels: list[Any],
    spans: list[Any],
    w: Workload,
    plot_path: Path | None,
    trace_path: Path | None,
) -> None:
    from perfmodel import trace

    if plot_path:
        trace.plot_timelines(
            panels,
            plot_path,
            title=f"Streaming DiLoCo, {w.model.name} on "
            f"{w.island.num_nodes}x{w.island.gpus_per_node} {w.gpu.name}",
        )
    if trace_path:
        trace.write_chrome_trace(spans, trace_path)


def _streaming_cases(
    model_name: str | None,
    recipe: Any,
    *,
    gpu_name: str | None,
    nodes: int,
    gpus_per_node: int,
    seq_len: int | None,
    micro_batch: int | None,
    accum: int | None,
    ac: str,
    profile_name: str | None,
    islands: int,
    wan_gbit_s: float,
    wan_latency_ms: float,
    dtype: str | None,
    fragments: int | None,
    delay: int | None,
    sync_every: int | None,
    fragment_pattern: str | None,
    overlap_backward: bool | None,
    same_cluster: bool,
    example: str | None,
) -> tuple[Workload, Any, dict[str, Any], Any]:
    """The workload, its simulated inner step, the cases (label -> (link, config, note)) and the
    outer settings."""
    from perfmodel import streaming as st
    from perfmodel.diloco import StreamingConfig

    def pick(value: int | None, default: int) -> int:
        return default if value is None else value

    if example is None and (gpu_name is None or model_name is None):
        raise UserInputError(
            "streaming needs MODEL and --gpu (or --example A|B|C|D|all)",
            hint="e.g. `shardmeter streaming Llama-3.2-1B --gpu H100-SXM5-80GB` or --example B.",
        )
    w = _workload(
        model_name or st.EXAMPLE_MODEL,
        gpu_name=gpu_name or st.EXAMPLE_GPU,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        seq_len=pick(seq_len, EXAMPLE_SEQ_LEN),
        micro_batch=pick(micro_batch, EXAMPLE_MICRO_BATCH if example else 1),
        accum=pick(accum, EXAMPLE_ACCUM if example else 1),
        ac=None,
        profile_name=profile_name,
        recipe=recipe,
    )
    outer = streaming_outer(
        recipe,
        model=w.model,
        fragments=fragments,
        delay=delay,
        sync_every=sync_every,
        dtype=dtype,
        fragment_pattern=fragment_pattern,
        overlap_backward=overlap_backward,
    )
    step = _simulate(w)
    if example is None:
        link = sync_link(
            w.island,
            islands=islands,
            wan_gbit_s=wan_gbit_s,
            wan_latency_ms=wan_latency_ms,
            dtype=outer.pseudo_gradient_dtype,
            same_cluster=same_cluster,
        )
        return w, step, {"user": (link, StreamingConfig.from_recipe(outer), "")}, outer
    _positive("--wan-latency-ms", wan_latency_ms, zero_ok=True)
    if islands < 2:
        raise UserInputError(
            f"--islands {islands}: the examples exchange fragments between islands",
            hint="pass --islands 2 or more.",
        )
    try:
        cases = st.streaming_examples(
            w.model,
            step_s=step.step_time_s,
            latency_s=wan_latency_ms / 1e3,
            num_islands=islands,
            dtype=outer.pseudo_gradient_dtype,
        )
    except ValueError as err:
        raise UserInputError(
            f"--example {example}: {err}",
            hint="lower --wan-latency-ms or lengthen the inner step (--micro-batch, --accum).",
        ) from err
    if overlap_backward or fragment_pattern:  # figure 6 keeps whole-step exchanges unless asked
        cases = {
            k: (
                wan,
                replace(
                    c,
                    overlap_backward=bool(overlap_backward),
                    fragment_pattern=fragment_pattern or c.fragment_pattern,
                ),
                note,
            )
            for k, (wan, c, note) in cases.items()
        }
    return w, step, cases if example == "all" else {example: cases[example]}, outer


def _relabel(span: Any, label: str) -> Any:
    return replace(span, island=f"{label}: {span.island}")


def _emit_streaming(records: list[dict[str, Any]], fmt: str, outputs: list[str]) -> None:
    if fmt == "json":
        emit_json({"cases": records, "outputs": outputs})
        return
    flat = [
        {k: ("; ".join(v) if isinstance(v, list) else v) for k, v in r.items()} for r in records
    ]
    if fmt == "csv":
        emit_records(flat, "csv")
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
    click.echo(f"recipe {records[0]['recipe']}")
    for r in records:
        click.echo(f"{r['case']}: {r['outer']}")
        if r["note"]:
            click.echo(f"{r['case']}: {r['note']}")
        click.echo(f"{r['case']}: tuner — {r['tuner']}")
        for remedy in r["remedies"]:
            click.echo(f"{r['case']}: remedy — {remedy}")
    for path in outputs:
        click.echo(f"wrote {path}")


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


def _bandwidth_query(
    model_name: str | None,
    recipe: Any,
    *,
    gpu_name: str | None,
    nodes: int,
    gpus_per_node: int,
    seq_len: int | None,
    micro_batch: int | None,
    accum: int | None,
    ac: str,
    profile_name: str | None,
    islands: int,
    wan_gbit_s: float,
    wan_latency_ms: float,
    dtype: str | None,
    fragments: int | None,
    delay: int | None,
    sync_every: int | None,
    fragment_pattern: str | None,
    overlap_backward: bool | None,
    same_cluster: bool,
    utilisation_text: str,
    step_time_s: float | None,
    fmt: str,
) -> None:
    from perfmodel import catalog
    from perfmodel import streaming as st
    from perfmodel.diloco import DEFAULT_SEQ_LEN, StreamingConfig

    targets = _targets(utilisation_text)
    if model_name is None or (gpu_name is None and step_time_s is None):
        raise UserInputError(
            "--bandwidth-for-utilisation needs MODEL and --gpu or --step-time-s",
            hint="e.g. `shardmeter streaming Chinchilla-1B --bandwidth-for-utilisation "
            "--step-time-s 0.1 --fragments 8 --delay 1 --sync-every 100`.",
        )
    if step_time_s is not None:
        _positive("--step-time-s", step_time_s)
    model, gpu, island, opt_per_param = catalog.get_model(model_name), None, None, 0.0
    length = seq_len or DEFAULT_SEQ_LEN
    if gpu_name is not None:
        w = _workload(
            model_name,
            gpu_name=gpu_name,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            seq_len=length,
            micro_batch=micro_batch or 1,
            accum=accum or 1,
            ac=None,
            profile_name=profile_name,
            recipe=recipe,
        )
        gpu, island = w.gpu, w.island
        opt_per_param = st.outer_opt_s_per_param(
            num_gpus=island.num_gpus, hbm_bytes_per_s=gpu.hbm_bytes_per_s
        )
        if step_time_s is None:
            step_time_s = _simulate(w).step_time_s
    outer = streaming_outer(
        recipe,
        model=model,
        fragments=fragments,
        delay=delay,
        sync_every=sync_every,
        dtype=dtype,
        fragment_pattern=fragment_pattern,
        overlap_backward=overlap_backward,
    )
    if same_cluster and island is None:
        raise UserInputError(
            "--islands-same-cluster needs --gpu (the cluster's inter-node link)",
            hint="add --gpu, or drop --islands-same-cluster.",
        )
    link = sync_link(
        island,
        islands=islands,
        wan_gbit_s=wan_gbit_s,
        wan_latency_ms=wan_latency_ms,
        dtype=outer.pseudo_gradient_dtype,
        same_cluster=same_cluster,
    )
    rows = st.bandwidth_for_utilisation(
        model,
        step_s=step_time_s,
        wan=link,
        config=StreamingConfig.from_recipe(outer),
        targets=targets,
        seq_len=length,
        opt_s_per_param=opt_per_param,
    )
    records = [
        {
            "model": model.name,
            "utilisation": r.target,
            "gbit_s": r.gbit_s,
            "reached_utilisation": r.utilisation,
            "note": ""
            if r.bw_bytes_per_s is not None
            else "unreachable: latency or outer step too long",
        }
        for r in rows
    ]
    header = {
        "model": model.name,
        "params": model.total_params,
        "step_time_s": step_time_s,
        "outer_optimizer": "not modelled (no --gpu)"
        if gpu is None
        else f"{opt_per_param * model.total_params:.3g} s per full outer step on {island.num_gpus} x {gpu.name}",
        "recipe": recipe.summary(),
        "outer": describe_outer(outer, link, bandwidth=False),
    }
    if fmt == "json":
        emit_json(
            {
                **header,
                "outer_recipe": asdict(outer),
                "islands": link.num_islands,
                "latency_ms": link.latency_s * 1e3,
                "link": link.kind,
                "rows": records,
            }
        )
        return
    if fmt == "csv":
        emit_records(records, "csv")
        return
    emit_records(
        records,
        "table",
        title=f"{'Fabric' if link.kind == 'fabric' else 'WAN'} bandwidth for compute "
        f"utilisation, {model.name}, step {step_time_s:.3g} s",
    )
    click.echo(f"recipe {header['recipe']}")
    click.echo(header["outer"])
    click.echo(f"outer optimizer: {header['outer_optimizer']}")
