"""Commands `predict`, `simulate` and `sweep`: one step, its timeline and micro-batch sweeps
(`streaming` lives in `planner.cli.streaming_cmd`). A thin layer: the numbers come from perfmodel."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from perfmodel.errors import UserInputError
from perfmodel.recipe import AC_MODES
from planner.cli.common import emit_json, emit_mapping, emit_records, emit_table, format_option
from planner.cli.outer_opts import (
    DILOCO_DEFAULT_INNER_STEPS,
    describe_outer,
    dtype_option,
    outer_option_list,
    resolve_outer,
    streaming_outer,
    sync_link,
)
from planner.cli.recipe_opts import recipe_from_options, recipe_option_list

logger = logging.getLogger(__name__)

AC_CHOICES = AC_MODES
STRATEGIES = ("fsdp", "diloco", "streaming-diloco")
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


def _workload_option_list(*, examples: bool = False, recipe: bool = False) -> list[Callable[..., Any]]:
    """Model-independent workload options; with `examples` the GPU and sizes may be left out;
    with `recipe` the training-recipe options too (`--ac` then defaults to the recipe's)."""
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
        click.option("--ac", type=click.Choice(AC_CHOICES), default=None if recipe else "none",
                     show_default=not recipe,
                     help="Activation checkpointing" + (" (default: the recipe's)." if recipe else ".")),
        click.option("--profile", "profile_name", default=None,
                     help="Hardware profile name or YAML path (default: the GPU's, measured beats prior)."),
        *(recipe_option_list(ac=False) if recipe else []),
    ]


def _workload_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Workload and training-recipe options (predict, simulate)."""
    return _apply(_workload_option_list(recipe=True), func)


def recipe_options_no_ac(func: Callable[..., Any]) -> Callable[..., Any]:
    """The recipe options for a command that declares --ac itself (sweep)."""
    return _apply(recipe_option_list(ac=False), func)


def _recipe_payload(payload: dict[str, Any], recipe: Any, fmt: str) -> dict[str, Any]:
    """`payload` with the recipe: the whole mapping in JSON, its one-line summary otherwise."""
    return {**payload, "recipe": recipe.to_dict() if fmt == "json" else recipe.summary()}


def _strategy_options(func: Callable[..., Any]) -> Callable[..., Any]:
    return _apply([
        click.option("--strategy", type=click.Choice(STRATEGIES), default="fsdp", show_default=True),
        click.option("--islands", type=int, default=None, help="Islands M (default 1 for fsdp, else 2)."),
        click.option("--inner-steps", type=int, default=None,
                     help="DiLoCo H (default: the recipe's, else 100; streaming: F·τ)."),
        *_wan_options(),
        click.option("--fragments", type=int, default=None,
                     help="Streaming DiLoCo fragments F (default: the recipe's, else 3)."),
        click.option("--delay", type=int, default=None,
                     help="Streaming DiLoCo delay τ in inner steps (default: the recipe's, else 2)."),
        *outer_option_list(),
    ], func)


def _wan_options() -> list[Callable[..., Any]]:
    return [
        click.option("--wan-gbit-s", type=float, default=10.0, show_default=True, help="Slowest WAN uplink, Gbit/s."),
        click.option("--wan-latency-ms", type=float, default=50.0, show_default=True, help="Largest WAN latency, ms."),
        dtype_option(),
    ]


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
    recipe: Any
    """TrainingRecipe every island trains with."""

    @property
    def ac(self) -> str:
        """Activation checkpointing mode (the recipe's)."""
        return str(self.recipe.ac)


def _positive(option: str, value: float, *, zero_ok: bool = False) -> None:
    if value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise UserInputError(f"{option} {value}: must be {bound}", hint=f"pass {option} with a value {bound}.")


def _workload(model_name: str, *, gpu_name: str, nodes: int, gpus_per_node: int, seq_len: int,
              micro_batch: int, accum: int, ac: str | None, profile_name: str | None,
              recipe: Any = None) -> Workload:
    """`recipe` defaults to torchtitan; `ac` (when set) overrides its checkpointing mode."""
    from perfmodel import catalog
    from perfmodel.fsdp import resolve_recipe
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
                    micro_batch=micro_batch, accum=accum, recipe=resolve_recipe(recipe, ac))


SIMULATED_ACCUM_MAX = 16
"""Above this many micro-steps the step is simulated with this many and extended in closed form:
every micro-step starts with both streams idle, so T(k) = step_fixed_s + k·microstep_s exactly
(`perfmodel.fsdp` module doc) and so are the busy/idle sums; the timeline shows the first ones."""


def _simulate(w: Workload) -> Any:
    from perfmodel.fsdp import simulate_step, step_costs

    costs = step_costs(w.model, w.profile, w.island, seq_len=w.seq_len, micro_batch=w.micro_batch,
                       recipe=w.recipe)
    if w.accum <= SIMULATED_ACCUM_MAX:
        return simulate_step(costs, accum_steps=w.accum)
    return _extended_step(simulate_step(costs, accum_steps=SIMULATED_ACCUM_MAX - 1),
                          simulate_step(costs, accum_steps=SIMULATED_ACCUM_MAX), w.accum)


def _extended_step(before: Any, last: Any, accum: int) -> Any:
    """The StepResult of `accum` micro-steps from those of SIMULATED_ACCUM_MAX - 1 and
    SIMULATED_ACCUM_MAX (linear in k); the schedule stays the simulated one."""
    from dataclasses import replace

    logger.info("--accum %d: simulating %d micro-steps, the rest in closed form (exact)", accum,
                SIMULATED_ACCUM_MAX)
    extra = accum - last.accum_steps
    fields = ("step_time_s", "compute_busy_s", "comm_busy_s", "exposed_comm_s", "compute_idle_s")
    return replace(last, accum_steps=accum, **{f: getattr(last, f) + extra * (getattr(last, f)
                                                                              - getattr(before, f))
                                               for f in fields})


def _outer(strategy: str, w: Workload, *, inner_steps: int | None, fragments: int | None, delay: int | None,
           dtype: str | None, flags: dict[str, Any]) -> Any:
    """The DiLoCo settings of predict / simulate (flags, then the recipe, then CLI defaults)."""
    if strategy == "streaming-diloco":
        return streaming_outer(w.recipe, model=w.model, fragments=fragments, delay=delay, sync_every=inner_steps,
                               dtype=dtype, fragment_pattern=flags.get("fragment_pattern"),
                               overlap_backward=flags.get("overlap_backward"))
    if inner_steps is not None:
        _positive("--inner-steps", inner_steps)
    return resolve_outer(w.recipe, defaults={"inner_steps": DILOCO_DEFAULT_INNER_STEPS, "num_fragments": 1,
                                             "delay_steps": 0}, inner_steps=inner_steps,
                         pseudo_gradient_dtype=dtype)


def _with_outer(w: Workload, outer: Any) -> Workload:
    from dataclasses import replace

    return replace(w, recipe=replace(w.recipe, outer=outer))


def _link(strategy: str, w: Workload, islands: int | None, wan_gbit_s: float, wan_latency_ms: float,
          flags: dict[str, Any]) -> Any:
    return sync_link(w.island, islands=_islands(strategy, islands), wan_gbit_s=wan_gbit_s,
                     wan_latency_ms=wan_latency_ms, dtype=w.recipe.outer.pseudo_gradient_dtype,
                     same_cluster=bool(flags.get("islands_same_cluster")))


def _outer_opt_s(w: Workload) -> float:
    """Seconds of one Nesterov outer step over the whole model on one island."""
    from perfmodel.diloco import outer_optimizer_s

    return outer_optimizer_s(w.model.total_params, num_gpus=w.island.num_gpus, hbm_bytes_per_s=w.gpu.hbm_bytes_per_s)


# ---- predict ---------------------------------------------------------------------------------

def _memory(w: Workload) -> dict[str, Any]:
    from perfmodel.hardware import GIB
    from perfmodel.memory import max_micro_batch, memory_breakdown

    gpus = w.island.num_gpus
    # The memory of the recipe the step is predicted for, at its k micro-steps.
    peak = memory_breakdown(w.model, num_gpus=gpus, seq_len=w.seq_len, micro_batch=w.micro_batch,
                            recipe=w.recipe, accum_steps=w.accum).peak_bytes
    largest = max_micro_batch(w.model, gpu_memory_bytes=w.gpu.usable_memory_bytes, num_gpus=gpus,
                              seq_len=w.seq_len, recipe=w.recipe, accum_steps=w.accum)
    return {"peak_gib": peak / GIB, "usable_memory_gib": w.gpu.usable_memory_bytes / GIB,
            "fits": peak <= w.gpu.usable_memory_bytes, "max_micro_batch": largest}


def _prediction(w: Workload, *, strategy: str, wan: Any, inner_steps: int, streaming: Any) -> dict[str, Any]:
    from perfmodel import formulas
    from perfmodel.analysis import analyse_step, classify_regime
    from perfmodel.diloco import StreamingConfig, pseudo_gradient_bytes, utilisation_steps
    from perfmodel.streaming import run_streaming

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
        sync = float(formulas.sync_time_s(islands, pseudo_gradient_bytes(w.model, wan.dtype), wan.bw_bytes_per_s,
                                          wan.latency_s))
        opt = _outer_opt_s(w)
        step_s, comm_s = step_s + (sync + opt) / inner_steps, comm_s + sync / inner_steps
        out.update(inner_steps=inner_steps, outer_sync_s=sync, amortised_outer_sync_s=sync / inner_steps,
                   outer_optimizer_s=opt, sync_link=wan.kind)
    elif strategy == "streaming-diloco":
        per_param = _outer_opt_s(w) / w.model.total_params
        config = streaming if isinstance(streaming, StreamingConfig) else StreamingConfig.from_recipe(streaming)
        steps, first = utilisation_steps(config)
        run = run_streaming(w.model, step_s=step.step_time_s, wan=wan, config=config, num_steps=steps,
                            seq_len=w.seq_len, opt_s_per_param=per_param)
        utilisation = run.utilisation(first)
        step_s = step.step_time_s / utilisation  # steady state: one period of H steps after warm-up
        out.update(fragments=config.num_fragments, delay_steps=config.delay_steps,
                   sync_every=config.sync_every, fragment_pattern=config.fragment_pattern,
                   overlap_backward=config.overlap_backward, simulated_steps=run.num_steps,
                   blocked_s=run.blocked_s, amortised_blocked_s=run.blocked_s / run.num_steps,
                   outer_optimizer_s=run.outer_optimizer_s / run.num_steps * config.sync_every,
                   compute_utilisation=utilisation, sync_link=wan.kind)
    tokens_per_s = sequences * w.seq_len / step_s
    out.update(step_time_s=step_s, tokens_per_s=tokens_per_s,
               tokens_per_s_per_gpu=tokens_per_s / (islands * w.island.num_gpus),
               mfu=w.model.model_flops_per_token(w.seq_len) * tokens_per_s
               / (w.gpu.bf16_flops_per_s * islands * w.island.num_gpus),
               bound=info.regime if strategy == "fsdp" else
               classify_regime(step_s, step.compute_busy_s, comm_s if strategy == "diloco" else step.comm_busy_s),
               island_bound=info.regime, exposed_comm_s=step.exposed_comm_s, compute_idle_s=step.compute_idle_s,
               comm_idle_s=step.comm_idle_s, critical_path_comm_fraction=info.critical_comm_fraction,
               **_memory(w), profile=w.profile.name, provenance=w.profile.provenance,
               **_provenance(w))
    return out


def _provenance(w: Workload) -> dict[str, str]:
    """Which profile and provenance (measured / calibrated / prior) the compute and each link
    of the island's ring use (links a profile lacks fall back to the catalog prior)."""
    out = {"compute_provenance": f"{w.profile.compute_provenance('forward')} ({w.profile.name})"}
    for link in w.island.ring_links:
        kinds = {w.profile.comm_provenance(op, [link]) for op in ("all_gather", "reduce_scatter")}
        out[f"link_{link}_provenance"] = "/".join(sorted(kinds))
    return out


@click.command()
@click.argument("model_name", metavar="MODEL")
@_workload_options
@_strategy_options
@format_option()
def predict(model_name: str, gpu_name: str, nodes: int, gpus_per_node: int, seq_len: int, micro_batch: int,
            accum: int, ac: str, profile_name: str | None, strategy: str, islands: int | None, inner_steps: int,
            wan_gbit_s: float, wan_latency_ms: float, dtype: str, fragments: int, delay: int, fmt: str,
            recipe_name: str, **recipe_flags: Any) -> None:
    """Predict one training step of MODEL: time, throughput, MFU, memory and what bounds it."""
    w = _workload(model_name, gpu_name=gpu_name, nodes=nodes, gpus_per_node=gpus_per_node, seq_len=seq_len,
                  micro_batch=micro_batch, accum=accum, ac=None, profile_name=profile_name,
                  recipe=recipe_from_options(recipe_name, ac=ac, **recipe_flags))
    m = _islands(strategy, islands)
    outer = _outer(strategy, w, inner_steps=inner_steps, fragments=fragments, delay=delay, dtype=dtype,
                   flags=recipe_flags)
    w = _with_outer(w, outer)
    wan = _link(strategy, w, islands, wan_gbit_s, wan_latency_ms, recipe_flags)
    payload = _prediction(w, strategy=strategy, wan=wan, inner_steps=outer.inner_steps,
                          streaming=outer if strategy == "streaming-diloco" else None)
    if strategy != "fsdp":
        payload["outer"] = describe_outer(outer, wan)
    emit_mapping(_recipe_payload(payload, w.recipe, fmt), fmt,
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
             trace_path: Path | None, plot_path: Path | None, fmt: str, recipe_name: str,
             **recipe_flags: Any) -> None:
    """Simulate MODEL's step timeline (or a DiLoCo / Streaming DiLoCo run) and export it."""
    from perfmodel import trace

    w = _workload(model_name, gpu_name=gpu_name, nodes=nodes, gpus_per_node=gpus_per_node, seq_len=seq_len,
                  micro_batch=micro_batch, accum=accum, ac=None, profile_name=profile_name,
                  recipe=recipe_from_options(recipe_name, ac=ac, **recipe_flags))
    outer = _outer(strategy, w, inner_steps=inner_steps, fragments=fragments, delay=delay, dtype=dtype,
                   flags=recipe_flags)
    w = _with_outer(w, outer)
    wan = _link(strategy, w, islands, wan_gbit_s, wan_latency_ms, recipe_flags)
    step = _simulate(w)
    title = f"{w.model.name}, {nodes}x{gpus_per_node} {w.gpu.name}, m={micro_batch}, k={accum} ({strategy})"
    if strategy == "fsdp":
        spans, summary = trace.schedule_spans(step.schedule), _step_summary(step)
    elif strategy == "diloco":
        spans, summary = _diloco_spans(w, step, wan, outer.inner_steps if steps is None else steps)
    else:
        from perfmodel.diloco import StreamingConfig

        spans, summary = _streaming_spans(w.model, step, wan, StreamingConfig.from_recipe(outer), steps)
    if strategy != "fsdp":
        summary["outer"] = describe_outer(outer, wan)
    summary["provenance"] = w.profile.provenance
    if trace_path:
        summary["trace"] = str(trace.write_chrome_trace(spans, trace_path, metadata={"title": title}))
    if plot_path:
        summary["plot"] = str(trace.plot_timelines([(title, spans)], plot_path))
    emit_mapping(_recipe_payload(summary, w.recipe, fmt), fmt, title=title)


def _step_summary(step: Any) -> dict[str, Any]:
    from perfmodel.analysis import analyse_step

    info = analyse_step(step)
    return {"step_time_s": step.step_time_s, "compute_busy_s": step.compute_busy_s,
            "comm_busy_s": step.comm_busy_s, "exposed_comm_s": step.exposed_comm_s,
            "compute_idle_s": step.compute_idle_s, "largest_compute_gap_s": info.largest_compute_gap_s,
            "critical_path_tasks": len(step.schedule.critical_path),
            "critical_path_comm_fraction": info.critical_comm_fraction, "bound": info.regime}


def _diloco_spans(w: Workload, step: Any, wan: Any, inner_steps: int) -> tuple[list[Any], dict[str, Any]]:
    from perfmodel import formulas, trace
    from perfmodel.diloco import pseudo_gradient_bytes, simulate_diloco

    _positive("--steps", inner_steps)
    sync = float(formulas.sync_time_s(wan.num_islands, pseudo_gradient_bytes(w.model, wan.dtype),
                                      wan.bw_bytes_per_s, wan.latency_s))
    opt = _outer_opt_s(w)
    result = simulate_diloco({f"island{i}": step.step_time_s for i in range(wan.num_islands)},
                             inner_steps=inner_steps, sync_s=sync, outer_opt_s=opt)
    detailed = len(step.schedule.intervals) * inner_steps * wan.num_islands <= MAX_PLOTTED_SPANS
    spans = trace.expand_steps(result.schedule, step.schedule) if detailed else trace.schedule_spans(result.schedule)
    return spans, {"inner_step_time_s": step.step_time_s, "inner_steps": inner_steps, "outer_sync_s": sync,
                   "outer_optimizer_s": opt, "outer_step_s": result.outer_step_s, "amortised_step_s": result.amortised_step_s,
                   "fsdp_detail": detailed}


def _streaming_spans(model: Any, step: Any, wan: Any, config: Any, steps: int | None) -> tuple[list[Any], dict[str, Any]]:
    from perfmodel import trace
    from perfmodel.diloco import COMPUTE_STREAM, TRAIN_ISLAND
    from perfmodel.streaming import run_streaming

    if steps is not None:
        _positive("--steps", steps)
    run = run_streaming(model, step_s=step.step_time_s, wan=wan, config=config,
                        num_steps=steps or config.sync_every + config.delay_steps + 1)
    # steps cut at exchange points (backward overlap) are drawn whole-step, without FSDP detail
    detailed = not run.split_steps and len(step.schedule.intervals) * run.num_steps <= MAX_PLOTTED_SPANS
    spans = trace.expand_steps(run.schedule, step.schedule) if detailed else trace.schedule_spans(run.schedule)
    spans += trace.blocked_spans(run.schedule, island=TRAIN_ISLAND, stream=COMPUTE_STREAM)
    return spans, _streaming_summary(run) | {"fsdp_detail": detailed}


def _streaming_summary(run: Any) -> dict[str, Any]:
    c = run.config
    return {"fragments": c.num_fragments, "delay_steps": c.delay_steps, "sync_every": c.sync_every,
            "send_interval": c.send_interval, "steps": run.num_steps, "inner_step_time_s": run.compute_s / run.num_steps,
            "exchange_s_max": max(e.end_s - e.start_s for e in run.exchanges) if run.exchanges else 0.0,
            "total_s": run.total_s, "blocked_s": run.blocked_s, "blocks": run.blocks,
            "link_bound": run.link_bound}


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
@click.option("--ac", type=click.Choice(AC_CHOICES), default=None, help="Activation checkpointing (default: the recipe's).")
@click.option("--profile", "profile_name", default=None, help="Hardware profile name or YAML path.")
@click.option("--plot", "plot_path", type=_PATH, default=None,
              help="Figure 4 PNG here; figure 5 (throughput vs runtime) next to it as *_throughput.png.")
@click.option("--timelines", "timeline_path", type=_PATH, default=None,
              help="Figure 3 PNG: step timelines of the first model/island at up to 4 micro-batches.")
@recipe_options_no_ac
@format_option()
def sweep(model_names: tuple[str, ...], models: str | None, gpu_name: str, nodes_text: str, gpn_text: str,
          seq_len: int, mb_text: str, accum: int, ac: str | None, profile_name: str | None, plot_path: Path | None,
          timeline_path: Path | None, fmt: str, recipe_name: str, **recipe_flags: Any) -> None:
    """Sweep micro-batch sizes: iteration time, throughput and where compute-bound begins."""
    import pandas as pd

    from perfmodel.analysis import batch_sweep, regime_changes, transition_micro_batch

    names = list(model_names) + [m.strip() for m in (models or "").split(",") if m.strip()]
    if not names:
        raise UserInputError("no model given", hint="pass MODEL... or --models A,B,C.")
    micro_batches = _int_list("--micro-batches", mb_text)
    recipe = recipe_from_options(recipe_name, ac=ac, **recipe_flags)
    frames, summary, workloads = [], [], []
    for name in names:
        for nodes in _int_list("--nodes", nodes_text):
            for gpn in _int_list("--gpus-per-node", gpn_text):
                w = _workload(name, gpu_name=gpu_name, nodes=nodes, gpus_per_node=gpn, seq_len=seq_len,
                              micro_batch=1, accum=accum, ac=None, profile_name=profile_name, recipe=recipe)
                largest = _memory(w)["max_micro_batch"]
                frame = batch_sweep(w.model, w.profile, w.island, seq_len=seq_len, micro_batches=micro_batches,
                                    ac=recipe.ac, accum_steps=accum, max_micro_batch=largest, recipe=recipe)
                frames.append(frame)
                workloads.append(w)
                summary.append({"model": w.model.name, "gpus": w.island.num_gpus, "max_micro_batch": largest,
                                "transition_micro_batch": transition_micro_batch(frame),
                                "changes": "; ".join(f"{a}->{b} at m={m}" for m, a, b in regime_changes(frame)),
                                "provenance": w.profile.provenance})
    table = pd.concat(frames, ignore_index=True)
    outputs = _sweep_plots(table, workloads[0], micro_batches, plot_path, timeline_path)
    if fmt == "json":
        emit_json({"points": table.to_dict(orient="records"), "summary": summary, "outputs": outputs,
                   "recipe": recipe.to_dict()})
    elif fmt == "csv":
        emit_records(table, "csv")
    else:
        emit_table(table.drop(columns=["nodes", "gpus_per_node"]), title="micro-batch sweep")
        click.echo(f"recipe: {recipe.summary()}")
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
