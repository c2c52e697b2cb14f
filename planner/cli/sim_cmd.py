"""Commands `predict`, `simulate`, `sweep` and `streaming`: one step, its timeline, micro-batch
sweeps and the Streaming DiLoCo tuner. A thin layer: the numbers come from perfmodel."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from perfmodel.errors import UserInputError
from planner.cli.common import emit_json, emit_mapping, emit_records, emit_table, format_option

logger = logging.getLogger(__name__)

AC_CHOICES = ("none", "selective", "full")
STRATEGIES = ("fsdp", "diloco", "streaming-diloco")
DTYPES = ("fp32", "bf16", "int8")
MAX_PLOTTED_SPANS = 20_000
"""Above this many spans a multi-step timeline is drawn at inner-step level (no FSDP detail)."""
_PATH = click.Path(dir_okay=False, path_type=Path)
EXAMPLE_SEQ_LEN, EXAMPLE_MICRO_BATCH, EXAMPLE_ACCUM = 2048, 2, 8
"""Workload of `streaming --example` unless overridden: long enough inner steps (several seconds)
that the derived 'slow WAN' is a plausible inter-site bandwidth."""


def _apply(options: list[Callable[..., Any]], func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(options):
        func = option(func)
    return func


def _workload_option_list(*, examples: bool = False) -> list[Callable[..., Any]]:
    """Model-independent workload options; with `examples` the GPU and sizes may be left out."""
    sizes = ("(default 2048)", "(default 1; examples 2)", "(default 1; examples 8)") if examples else ("", "", "")
    return [
        click.option("--gpu", "gpu_name", required=not examples,
                     help="Catalog GPU name" + (" (required unless --example)." if examples else ".")),
        click.option("--nodes", type=int, default=1, show_default=True, help="Nodes per island."),
        click.option("--gpus-per-node", type=int, default=8, show_default=True, help="GPUs used per node."),
        click.option("--seq-len", type=int, required=not examples, default=None,
                     help=f"Sequence length in tokens {sizes[0]}."),
        click.option("--micro-batch", type=int, default=None if examples else 1, show_default=not examples,
                     help=f"Sequences per GPU per micro-step {sizes[1]}."),
        click.option("--accum", type=int, default=None if examples else 1, show_default=not examples,
                     help=f"Gradient-accumulation micro-steps k {sizes[2]}."),
        click.option("--ac", type=click.Choice(AC_CHOICES), default="none", show_default=True,
                     help="Activation checkpointing."),
        click.option("--profile", "profile_name", default=None,
                     help="Hardware profile name or YAML path (default: the GPU's, measured beats prior)."),
    ]


def _workload_options(func: Callable[..., Any]) -> Callable[..., Any]:
    return _apply(_workload_option_list(), func)


def _strategy_options(func: Callable[..., Any]) -> Callable[..., Any]:
    return _apply([
        click.option("--strategy", type=click.Choice(STRATEGIES), default="fsdp", show_default=True),
        click.option("--islands", type=int, default=None, help="Islands M (default 1 for fsdp, else 2)."),
        click.option("--inner-steps", type=int, default=100, show_default=True, help="DiLoCo H."),
        *_wan_options(),
        click.option("--fragments", type=int, default=3, show_default=True, help="Streaming DiLoCo fragments F."),
        click.option("--delay", type=int, default=2, show_default=True, help="Streaming DiLoCo delay τ (inner steps)."),
    ], func)


def _wan_options() -> list[Callable[..., Any]]:
    return [
        click.option("--wan-gbit-s", type=float, default=10.0, show_default=True, help="Slowest WAN uplink, Gbit/s."),
        click.option("--wan-latency-ms", type=float, default=50.0, show_default=True, help="Largest WAN latency, ms."),
        click.option("--pseudo-gradient-dtype", "dtype", type=click.Choice(DTYPES), default="fp32",
                     show_default=True, help="Dtype of the exchanged pseudo-gradient."),
    ]


def _streaming_options(func: Callable[..., Any]) -> Callable[..., Any]:
    return _apply([
        *_workload_option_list(examples=True),
        click.option("--islands", type=int, default=2, show_default=True, help="Islands M exchanging fragments."),
        *_wan_options(),
        click.option("--fragments", type=int, default=3, show_default=True, help="Fragments F."),
        click.option("--delay", type=int, default=2, show_default=True, help="Delay τ in inner steps."),
        click.option("--sync-every", type=int, default=None, help="H (default F·τ: one fragment every τ steps)."),
        click.option("--steps", type=int, default=None, help="Inner steps to simulate (default H+τ+1)."),
        click.option("--max-delay-steps", type=int, default=None, help="Tuner bound on τ (replica drift)."),
        click.option("--max-sync-every", type=int, default=None, help="Tuner bound on H (sync frequency)."),
        click.option("--example", type=click.Choice(["A", "B", "C", "D", "all"]), default=None,
                     help="Paper figure 6: A fast WAN, B slow WAN blocks, C more fragments, D longer delay."),
        click.option("--plot", "plot_path", type=_PATH, default=None, help="Figure 6 style PNG here."),
        click.option("--trace", "trace_path", type=_PATH, default=None, help="Chrome trace JSON here."),
    ], func)


# ---- shared setup ----------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """A resolved model + island + micro-batch + profile."""

    model: Any
    """ModelSpec."""
    gpu: Any
    """GpuSpec."""
    island: Any
    """IslandSpec."""
    profile: Any
    """HardwareProfile."""
    seq_len: int
    """S."""
    micro_batch: int
    """m."""
    accum: int
    """k."""
    ac: str
    """Activation checkpointing mode."""


def _positive(option: str, value: float, *, zero_ok: bool = False) -> None:
    if value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise UserInputError(f"{option} {value}: must be {bound}", hint=f"pass {option} with a value {bound}.")


def _workload(model_name: str, *, gpu_name: str, nodes: int, gpus_per_node: int, seq_len: int,
              micro_batch: int, accum: int, ac: str, profile_name: str | None) -> Workload:
    from perfmodel import catalog
    from perfmodel.hardware import IslandSpec
    from perfmodel.profile import default_profile, load_profile

    for option, value in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node), ("--seq-len", seq_len),
                          ("--micro-batch", micro_batch), ("--accum", accum)):
        _positive(option, value)
    model = catalog.get_model(model_name)
    gpu = catalog.get_gpu(gpu_name)
    if gpus_per_node > gpu.max_gpus_per_node:
        raise UserInputError(f"--gpus-per-node {gpus_per_node}: a {gpu.name} node holds at most "
                             f"{gpu.max_gpus_per_node} GPUs",
                             hint=f"pass --gpus-per-node {gpu.max_gpus_per_node} or fewer and add --nodes instead.")
    profile = load_profile(profile_name) if profile_name else default_profile(gpu.name)
    if profile.hardware.lower() != gpu.name.lower():
        logger.warning("profile %s was fitted on %s, not %s", profile.name, profile.hardware, gpu.name)
    island = IslandSpec(gpu=gpu, num_nodes=nodes, gpus_per_node=gpus_per_node, intra_link=gpu.intra_node_link,
                        inter_link=gpu.inter_node_link, nics_per_node=gpu.nics_per_node)
    return Workload(model=model, gpu=gpu, island=island, profile=profile, seq_len=seq_len,
                    micro_batch=micro_batch, accum=accum, ac=ac)


def _simulate(w: Workload) -> Any:
    from perfmodel.fsdp import simulate_step, step_costs

    costs = step_costs(w.model, w.profile, w.island, seq_len=w.seq_len, micro_batch=w.micro_batch, ac=w.ac)
    return simulate_step(costs, accum_steps=w.accum)


def _wan(islands: int, wan_gbit_s: float, wan_latency_ms: float, dtype: str) -> Any:
    from perfmodel.analysis import WanLink

    _positive("--islands", islands)
    _positive("--wan-gbit-s", wan_gbit_s)
    _positive("--wan-latency-ms", wan_latency_ms, zero_ok=True)
    return WanLink(num_islands=islands, bw_bytes_per_s=wan_gbit_s * 1e9 / 8, latency_s=wan_latency_ms / 1e3,
                   dtype=dtype)


def _streaming_config(model: Any, fragments: int, delay: int, sync_every: int | None) -> Any:
    from perfmodel.diloco import StreamingConfig

    _positive("--fragments", fragments)
    _positive("--delay", delay, zero_ok=True)
    if fragments > model.num_layers:
        raise UserInputError(f"--fragments {fragments}: {model.name} has only {model.num_layers} layers",
                             hint=f"pass --fragments {model.num_layers} or fewer (a fragment is a layer group).")
    every = sync_every if sync_every is not None else fragments * max(delay, 1)
    if every < 1 or every % fragments:
        raise UserInputError(f"--sync-every {every}: must be a positive multiple of --fragments {fragments}",
                             hint=f"pass --sync-every {fragments * max(delay, 1)} (one fragment every τ steps).")
    return StreamingConfig(num_fragments=fragments, sync_every=every, delay_steps=delay)


# ---- predict ---------------------------------------------------------------------------------

def _memory(w: Workload) -> dict[str, Any]:
    from perfmodel.hardware import GIB
    from perfmodel.memory import max_micro_batch, memory_breakdown

    gpus = w.island.num_gpus
    peak = memory_breakdown(w.model, num_gpus=gpus, seq_len=w.seq_len, micro_batch=w.micro_batch, ac=w.ac).peak_bytes
    largest = max_micro_batch(w.model, gpu_memory_bytes=w.gpu.usable_memory_bytes, num_gpus=gpus,
                              seq_len=w.seq_len, ac=w.ac)
    return {"peak_gib": peak / GIB, "usable_memory_gib": w.gpu.usable_memory_bytes / GIB,
            "fits": peak <= w.gpu.usable_memory_bytes, "max_micro_batch": largest}


def _prediction(w: Workload, *, strategy: str, wan: Any, inner_steps: int, streaming: Any) -> dict[str, Any]:
    from perfmodel.analysis import analyse_step, classify_regime, run_streaming
    from perfmodel.diloco import outer_sync_s, pseudo_gradient_bytes

    step = _simulate(w)
    info = analyse_step(step)
    islands = wan.num_islands if strategy != "fsdp" else 1
    sequences = islands * w.accum * w.micro_batch * w.island.num_gpus
    out: dict[str, Any] = {"model": w.model.name, "gpu": w.gpu.name, "strategy": strategy, "islands": islands,
                           "nodes": w.island.num_nodes, "gpus_per_node": w.island.gpus_per_node,
                           "seq_len": w.seq_len, "micro_batch": w.micro_batch, "accum": w.accum, "ac": w.ac,
                           "inner_step_time_s": step.step_time_s}
    step_s, comm_s = step.step_time_s, step.comm_busy_s
    if strategy == "diloco":
        sync = outer_sync_s(num_islands=islands, payload_bytes=pseudo_gradient_bytes(w.model, wan.dtype),
                            bw_bytes_per_s=wan.bw_bytes_per_s, latency_s=wan.latency_s)
        step_s, comm_s = step_s + sync / inner_steps, comm_s + sync / inner_steps
        out.update(inner_steps=inner_steps, outer_sync_s=sync, amortised_outer_sync_s=sync / inner_steps)
    elif strategy == "streaming-diloco":
        run = run_streaming(w.model, step_s=step.step_time_s, wan=wan, config=streaming)
        step_s = run.total_s / run.num_steps
        out.update(fragments=streaming.num_fragments, delay_steps=streaming.delay_steps,
                   sync_every=streaming.sync_every, simulated_steps=run.num_steps,
                   blocked_s=run.blocked_s, amortised_blocked_s=run.blocked_s / run.num_steps)
    tokens_per_s = sequences * w.seq_len / step_s
    out.update(step_time_s=step_s, tokens_per_s=tokens_per_s,
               tokens_per_s_per_gpu=tokens_per_s / (islands * w.island.num_gpus),
               mfu=w.model.model_flops_per_token(w.seq_len) * tokens_per_s
               / (w.gpu.bf16_flops_per_s * islands * w.island.num_gpus),
               bound=info.regime if strategy == "fsdp" else
               classify_regime(step_s, step.compute_busy_s, comm_s if strategy == "diloco" else step.comm_busy_s),
               island_bound=info.regime, exposed_comm_s=step.exposed_comm_s, compute_idle_s=step.compute_idle_s,
               comm_idle_s=step.comm_idle_s, critical_path_comm_fraction=info.critical_comm_fraction,
               **_memory(w), profile=w.profile.name, provenance=w.profile.provenance)
    return out


@click.command()
@click.argument("model_name", metavar="MODEL")
@_workload_options
@_strategy_options
@format_option()
def predict(model_name: str, gpu_name: str, nodes: int, gpus_per_node: int, seq_len: int, micro_batch: int,
            accum: int, ac: str, profile_name: str | None, strategy: str, islands: int | None, inner_steps: int,
            wan_gbit_s: float, wan_latency_ms: float, dtype: str, fragments: int, delay: int, fmt: str) -> None:
    """Predict one training step of MODEL: time, throughput, MFU, memory and what bounds it."""
    w = _workload(model_name, gpu_name=gpu_name, nodes=nodes, gpus_per_node=gpus_per_node, seq_len=seq_len,
                  micro_batch=micro_batch, accum=accum, ac=ac, profile_name=profile_name)
    m = _islands(strategy, islands)
    _positive("--inner-steps", inner_steps)
    wan = _wan(m, wan_gbit_s, wan_latency_ms, dtype)
    config = _streaming_config(w.model, fragments, delay, None) if strategy == "streaming-diloco" else None
    emit_mapping(_prediction(w, strategy=strategy, wan=wan, inner_steps=inner_steps, streaming=config), fmt,
                 title=f"{w.model.name} on {m} x {nodes}x{gpus_per_node} {w.gpu.name} ({strategy})")


def _islands(strategy: str, islands: int | None) -> int:
    if strategy == "fsdp":
        if islands not in (None, 1):
            raise UserInputError(f"--islands {islands} with --strategy fsdp: FSDP trains one island",
                                 hint="use --strategy diloco (or streaming-diloco) for several islands.")
        return 1
    m = 2 if islands is None else islands
    _positive("--islands", m)
    return m


# ---- simulate --------------------------------------------------------------------------------

@click.command()
@click.argument("model_name", metavar="MODEL")
@_workload_options
@_strategy_options
@click.option("--steps", type=int, default=None, help="Inner steps to simulate (diloco: H; streaming: H+τ+1).")
@click.option("--trace", "trace_path", type=_PATH, default=None, help="Write a Chrome/Perfetto trace JSON here.")
@click.option("--plot", "plot_path", type=_PATH, default=None, help="Write a PNG timeline here.")
@format_option()
def simulate(model_name: str, gpu_name: str, nodes: int, gpus_per_node: int, seq_len: int, micro_batch: int,
             accum: int, ac: str, profile_name: str | None, strategy: str, islands: int | None, inner_steps: int,
             wan_gbit_s: float, wan_latency_ms: float, dtype: str, fragments: int, delay: int, steps: int | None,
             trace_path: Path | None, plot_path: Path | None, fmt: str) -> None:
    """Simulate MODEL's step timeline (or a DiLoCo / Streaming DiLoCo run) and export it."""
    from perfmodel import trace

    w = _workload(model_name, gpu_name=gpu_name, nodes=nodes, gpus_per_node=gpus_per_node, seq_len=seq_len,
                  micro_batch=micro_batch, accum=accum, ac=ac, profile_name=profile_name)
    wan = _wan(_islands(strategy, islands), wan_gbit_s, wan_latency_ms, dtype)
    step = _simulate(w)
    title = f"{w.model.name}, {nodes}x{gpus_per_node} {w.gpu.name}, m={micro_batch}, k={accum} ({strategy})"
    if strategy == "fsdp":
        spans, summary = trace.schedule_spans(step.schedule), _step_summary(step)
    elif strategy == "diloco":
        _positive("--inner-steps", inner_steps)
        spans, summary = _diloco_spans(w, step, wan, inner_steps if steps is None else steps)
    else:
        config = _streaming_config(w.model, fragments, delay, None)
        spans, summary = _streaming_spans(w.model, step, wan, config, steps)
    summary["provenance"] = w.profile.provenance
    if trace_path:
        summary["trace"] = str(trace.write_chrome_trace(spans, trace_path, metadata={"title": title}))
    if plot_path:
        summary["plot"] = str(trace.plot_timelines([(title, spans)], plot_path))
    emit_mapping(summary, fmt, title=title)


def _step_summary(step: Any) -> dict[str, Any]:
    from perfmodel.analysis import analyse_step

    info = analyse_step(step)
    return {"step_time_s": step.step_time_s, "compute_busy_s": step.compute_busy_s,
            "comm_busy_s": step.comm_busy_s, "exposed_comm_s": step.exposed_comm_s,
            "compute_idle_s": step.compute_idle_s, "largest_compute_gap_s": info.largest_compute_gap_s,
            "critical_path_tasks": len(step.schedule.critical_path),
            "critical_path_comm_fraction": info.critical_comm_fraction, "bound": info.regime}


def _diloco_spans(w: Workload, step: Any, wan: Any, inner_steps: int) -> tuple[list[Any], dict[str, Any]]:
    from perfmodel import trace
    from perfmodel.diloco import outer_sync_s, pseudo_gradient_bytes, simulate_diloco

    _positive("--steps", inner_steps)
    sync = outer_sync_s(num_islands=wan.num_islands, payload_bytes=pseudo_gradient_bytes(w.model, wan.dtype),
                        bw_bytes_per_s=wan.bw_bytes_per_s, latency_s=wan.latency_s)
    result = simulate_diloco({f"island{i}": step.step_time_s for i in range(wan.num_islands)},
                             inner_steps=inner_steps, sync_s=sync)
    detailed = len(step.schedule.intervals) * inner_steps * wan.num_islands <= MAX_PLOTTED_SPANS
    spans = trace.expand_steps(result.schedule, step.schedule) if detailed else trace.schedule_spans(result.schedule)
    return spans, {"inner_step_time_s": step.step_time_s, "inner_steps": inner_steps, "outer_sync_s": sync,
                   "outer_step_s": result.outer_step_s, "amortised_step_s": result.amortised_step_s,
                   "fsdp_detail": detailed}


def _streaming_spans(model: Any, step: Any, wan: Any, config: Any, steps: int | None) -> tuple[list[Any], dict[str, Any]]:
    from perfmodel import trace
    from perfmodel.analysis import run_streaming
    from perfmodel.diloco import COMPUTE_STREAM, TRAIN_ISLAND

    if steps is not None:
        _positive("--steps", steps)
    run = run_streaming(model, step_s=step.step_time_s, wan=wan, config=config,
                        num_steps=steps or config.sync_every + config.delay_steps + 1)
    detailed = len(step.schedule.intervals) * run.num_steps <= MAX_PLOTTED_SPANS
    spans = trace.expand_steps(run.schedule, step.schedule) if detailed else trace.schedule_spans(run.schedule)
    spans += trace.blocked_spans(run.schedule, island=TRAIN_ISLAND, stream=COMPUTE_STREAM)
    return spans, _streaming_summary(run) | {"fsdp_detail": detailed}


def _streaming_summary(run: Any) -> dict[str, Any]:
    c = run.config
    return {"fragments": c.num_fragments, "delay_steps": c.delay_steps, "sync_every": c.sync_every,
            "send_interval": c.send_interval, "steps": run.num_steps, "inner_step_time_s": run.compute_s / run.num_steps,
            "exchange_s_max": max(e.end_s - e.start_s for e in run.exchanges) if run.exchanges else 0.0,
            "total_s": run.total_s, "blocked_s": run.blocked_s, "blocks": run.blocks}


# ---- sweep -----------------------------------------------------------------------------------

def _int_list(option: str, text: str) -> list[int]:
    """'1..32' (powers of two), '1-8' (every integer) or '1,2,4'."""
    try:
        if ".." in text:
            lo, hi = (int(x) for x in text.split(".."))
            values = [v for v in (2**i for i in range(hi.bit_length() + 1)) if lo <= v <= hi]
        elif "-" in text.strip("-"):
            lo, hi = (int(x) for x in text.split("-"))
            values = list(range(lo, hi + 1))
        else:
            values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise UserInputError(f"{option} {text!r}: not a list of integers",
                             hint=f"write {option} 1..32 (powers of two), 1-8 or 1,2,4.") from err
    if not values or min(values) < 1:
        raise UserInputError(f"{option} {text!r}: values must be >= 1", hint=f"write {option} 1..32 or 1,2,4.")
    return values


@click.command()
@click.argument("model_names", metavar="MODEL...", nargs=-1)
@click.option("--models", default=None, help="Comma-separated models (added to MODEL...).")
@click.option("--gpu", "gpu_name", required=True, help="Catalog GPU name.")
@click.option("--nodes", "nodes_text", default="1", show_default=True, help="Nodes per island (list).")
@click.option("--gpus-per-node", "gpn_text", default="8", show_default=True, help="GPUs per node (list, e.g. 4,8).")
@click.option("--seq-len", type=int, required=True, help="Sequence length in tokens.")
@click.option("--micro-batches", "mb_text", default="1..32", show_default=True,
              help="Micro-batches: 1..32 (powers of two), 1-8 or 1,2,4.")
@click.option("--accum", type=int, default=1, show_default=True, help="Gradient-accumulation micro-steps k.")
@click.option("--ac", type=click.Choice(AC_CHOICES), default="none", show_default=True)
@click.option("--profile", "profile_name", default=None, help="Hardware profile name or YAML path.")
@click.option("--plot", "plot_path", type=_PATH, default=None,
              help="Figure 4 PNG here; figure 5 (throughput vs runtime) next to it as *_throughput.png.")
@click.option("--timelines", "timeline_path", type=_PATH, default=None,
              help="Figure 3 PNG: step timelines of the first model/island at up to 4 micro-batches.")
@format_option()
def sweep(model_names: tuple[str, ...], models: str | None, gpu_name: str, nodes_text: str, gpn_text: str,
          seq_len: int, mb_text: str, accum: int, ac: str, profile_name: str | None, plot_path: Path | None,
          timeline_path: Path | None, fmt: str) -> None:
    """Sweep micro-batch sizes: iteration time, throughput and where compute-bound begins."""
    import pandas as pd

    from perfmodel.analysis import batch_sweep, regime_changes, transition_micro_batch

    names = list(model_names) + [m.strip() for m in (models or "").split(",") if m.strip()]
    if not names:
        raise UserInputError("no model given", hint="pass MODEL... or --models A,B,C.")
    micro_batches = _int_list("--micro-batches", mb_text)
    frames, summary, workloads = [], [], []
    for name in names:
        for nodes in _int_list("--nodes", nodes_text):
            for gpn in _int_list("--gpus-per-node", gpn_text):
                w = _workload(name, gpu_name=gpu_name, nodes=nodes, gpus_per_node=gpn, seq_len=seq_len,
                              micro_batch=1, accum=accum, ac=ac, profile_name=profile_name)
                largest = _memory(w)["max_micro_batch"]
                frame = batch_sweep(w.model, w.profile, w.island, seq_len=seq_len, micro_batches=micro_batches,
                                    ac=ac, accum_steps=accum, max_micro_batch=largest)
                frames.append(frame)
                workloads.append(w)
                summary.append({"model": w.model.name, "gpus": w.island.num_gpus, "max_micro_batch": largest,
                                "transition_micro_batch": transition_micro_batch(frame),
                                "changes": "; ".join(f"{a}->{b} at m={m}" for m, a, b in regime_changes(frame)),
                                "provenance": w.profile.provenance})
    table = pd.concat(frames, ignore_index=True)
    outputs = _sweep_plots(table, workloads[0], micro_batches, plot_path, timeline_path)
    if fmt == "json":
        emit_json({"points": table.to_dict(orient="records"), "summary": summary, "outputs": outputs})
    elif fmt == "csv":
        emit_records(table, "csv")
    else:
        emit_table(table.drop(columns=["nodes", "gpus_per_node"]), title="micro-batch sweep")
        emit_table(pd.DataFrame(summary), title="regime transitions")
        for path in outputs:
            click.echo(f"wrote {path}")


def _sweep_plots(table: Any, first: Workload, micro_batches: list[int], plot_path: Path | None,
                 timeline_path: Path | None) -> list[str]:
    from dataclasses import replace

    from perfmodel import trace

    out = []
    if plot_path:
        out.append(str(trace.plot_sweep(table, plot_path)))
        out.append(str(trace.plot_throughput(table, plot_path.with_name(plot_path.stem + "_throughput.png"))))
    if timeline_path:
        panels = []
        for m in micro_batches[:4]:
            step = _simulate(replace(first, micro_batch=m))
            panels.append((f"micro-batch {m}: {step.step_time_s:.3g} s, compute idle {step.compute_idle_s:.3g} s",
                           trace.schedule_spans(step.schedule)))
        out.append(str(trace.plot_timelines(panels, timeline_path, title=f"{first.model.name} on "
                                            f"{first.island.num_gpus} x {first.gpu.name}")))
    return out


# ---- streaming -------------------------------------------------------------------------------

@click.command()
@click.argument("model_name", metavar="MODEL", required=False)
@_streaming_options
@format_option()
def streaming(model_name: str | None, gpu_name: str | None, nodes: int, gpus_per_node: int, seq_len: int | None,
              micro_batch: int | None, accum: int | None, ac: str, profile_name: str | None, islands: int, wan_gbit_s: float,
              wan_latency_ms: float, dtype: str, fragments: int, delay: int, sync_every: int | None,
              steps: int | None, max_delay_steps: int | None, max_sync_every: int | None, example: str | None,
              plot_path: Path | None, trace_path: Path | None, fmt: str) -> None:
    """Streaming DiLoCo: simulate a fragment schedule, find blocking, tune fragments and delay.

    The tuner sends one fragment every τ steps (H = F·τ, as the paper's figure 6) and picks the
    fewest fragments, then the shortest delay, that never block within --max-delay-steps and
    --max-sync-every (bounds against replica drift)."""
    from perfmodel import analysis, trace

    for option, value in (("--steps", steps), ("--max-delay-steps", max_delay_steps),
                          ("--max-sync-every", max_sync_every)):
        if value is not None:
            _positive(option, value)
    w, step, cases = _streaming_cases(model_name, gpu_name=gpu_name, nodes=nodes, gpus_per_node=gpus_per_node,
                                      seq_len=seq_len, micro_batch=micro_batch, accum=accum, ac=ac,
                                      profile_name=profile_name, islands=islands, wan_gbit_s=wan_gbit_s,
                                      wan_latency_ms=wan_latency_ms, dtype=dtype, fragments=fragments, delay=delay,
                                      sync_every=sync_every, example=example)
    records, panels, spans_all = [], [], []
    for label, (wan, config, note) in cases.items():
        tuning = analysis.tune_streaming(w.model, step_s=step.step_time_s, wan=wan, current=config,
                                         max_delay_steps=max_delay_steps or analysis.DEFAULT_MAX_DELAY_STEPS,
                                         max_sync_every=max_sync_every or analysis.DEFAULT_MAX_SYNC_EVERY)
        spans, summary = _streaming_spans(w.model, step, wan, config, steps)
        best = tuning.config
        records.append({"case": label, "note": note, "wan_gbit_s": wan.bw_bytes_per_s * 8 / 1e9, **summary,
                        "tuned_fragments": best.num_fragments if best else None,
                        "tuned_delay_steps": best.delay_steps if best else None,
                        "tuned_sync_every": best.sync_every if best else None,
                        "remedies": list(tuning.remedies), "provenance": w.profile.provenance})
        verdict = f"blocked {summary['blocked_s']:.3g} s" if summary["blocks"] else "no blocking"
        panels.append((f"{label}) F={config.num_fragments}, τ={config.delay_steps}, H={config.sync_every}, "
                       f"WAN {wan.bw_bytes_per_s * 8 / 1e9:.3g} Gbit/s: {verdict}", spans))
        spans_all += [_relabel(s, label) for s in spans] if len(cases) > 1 else spans
    if plot_path:
        trace.plot_timelines(panels, plot_path, title=f"Streaming DiLoCo, {w.model.name} on "
                             f"{w.island.num_nodes}x{w.island.gpus_per_node} {w.gpu.name}")
    if trace_path:
        trace.write_chrome_trace(spans_all, trace_path)
    _emit_streaming(records, fmt, [str(p) for p in (plot_path, trace_path) if p])


def _streaming_cases(model_name: str | None, *, gpu_name: str | None, nodes: int, gpus_per_node: int,
                     seq_len: int | None, micro_batch: int | None, accum: int | None, ac: str,
                     profile_name: str | None, islands: int, wan_gbit_s: float, wan_latency_ms: float, dtype: str,
                     fragments: int, delay: int, sync_every: int | None,
                     example: str | None) -> tuple[Workload, Any, dict[str, Any]]:
    """The workload, its simulated inner step and the cases (label -> (wan, config, note)) to run."""
    from perfmodel import analysis

    def pick(value: int | None, default: int) -> int:
        return default if value is None else value

    if example is None and (gpu_name is None or model_name is None):
        raise UserInputError("streaming needs MODEL and --gpu (or --example A|B|C|D|all)",
                             hint="e.g. `shardmeter streaming Llama-3.2-1B --gpu H100-SXM5-80GB` or --example B.")
    w = _workload(model_name or analysis.EXAMPLE_MODEL, gpu_name=gpu_name or analysis.EXAMPLE_GPU, nodes=nodes,
                  gpus_per_node=gpus_per_node, seq_len=pick(seq_len, EXAMPLE_SEQ_LEN),
                  micro_batch=pick(micro_batch, EXAMPLE_MICRO_BATCH if example else 1),
                  accum=pick(accum, EXAMPLE_ACCUM if example else 1), ac=ac, profile_name=profile_name)
    step = _simulate(w)
    if example is None:
        return w, step, {"user": (_wan(islands, wan_gbit_s, wan_latency_ms, dtype),
                                  _streaming_config(w.model, fragments, delay, sync_every), "")}
    _positive("--wan-latency-ms", wan_latency_ms, zero_ok=True)
    if islands < 2:
        raise UserInputError(f"--islands {islands}: the examples exchange fragments between islands",
                             hint="pass --islands 2 or more.")
    try:
        cases = analysis.streaming_examples(w.model, step_s=step.step_time_s, latency_s=wan_latency_ms / 1e3,
                                            num_islands=islands, dtype=dtype)
    except ValueError as err:
        raise UserInputError(f"--example {example}: {err}", hint="lower --wan-latency-ms or lengthen the inner "
                             "step (--micro-batch, --accum).") from err
    return w, step, cases if example == "all" else {example: cases[example]}


def _relabel(span: Any, label: str) -> Any:
    from dataclasses import replace

    return replace(span, island=f"{label}: {span.island}")


def _emit_streaming(records: list[dict[str, Any]], fmt: str, outputs: list[str]) -> None:
    if fmt == "json":
        emit_json({"cases": records, "outputs": outputs})
        return
    flat = [{k: ("; ".join(v) if isinstance(v, list) else v) for k, v in r.items()} for r in records]
    if fmt == "csv":
        emit_records(flat, "csv")
        return
    keys = ("case", "wan_gbit_s", "fragments", "delay_steps", "sync_every", "inner_step_time_s", "exchange_s_max",
            "blocked_s", "tuned_fragments", "tuned_delay_steps", "tuned_sync_every")
    emit_records([{k: r[k] for k in keys} for r in flat], "table", title="Streaming DiLoCo")
    for r in records:
        if r["note"]:
            click.echo(f"{r['case']}: {r['note']}")
        for remedy in r["remedies"]:
            click.echo(f"{r['case']}: remedy — {remedy}")
    for path in outputs:
        click.echo(f"wrote {path}")
