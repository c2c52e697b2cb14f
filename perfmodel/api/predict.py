"""Predict, simulate, sweep and the memory of one workload (the Streaming DiLoCo studies are
`perfmodel.api.streaming`).

Each function takes what a user asks for (`WorkloadSpec`, `OuterSpec`), resolves it against the
catalog and profiles (`perfmodel.api.workload`), runs the models and returns a dataclass whose
`record` is the ordered mapping the CLI prints; the CLI only parses options and formats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from perfmodel import progress
from perfmodel.api.streaming import streaming_spans
from perfmodel.api.verdict import does_not_fit, memory_answer, prediction_answer
from perfmodel.api.workload import (
    DILOCO_DEFAULT_INNER_STEPS,
    MAX_PLOTTED_SPANS,
    SIMULATED_ACCUM_MAX,
    OuterSpec,
    Workload,
    WorkloadSpec,
    check_simulated_steps,
    outer_optimizer_seconds,
    positive,
    resolve_outer,
    resolve_placement,
    resolve_workload,
    simulate_inner_step,
    simulate_pipeline_step,
    strategy_islands,
    streaming_outer,
    sync_link,
)
from perfmodel.costs.memory import MemoryBreakdown, max_micro_batch, memory_breakdown
from perfmodel.costs.precision import compute_effect
from perfmodel.costs.reliability import (
    FailureSpec,
    JobReliability,
    checkpointed_job,
    independent_islands,
)
from perfmodel.diloco.fragments import StreamingConfig, utilisation_steps
from perfmodel.diloco.graph import pseudo_gradient_bytes, simulate_diloco
from perfmodel.diloco.tuner import run_streaming
from perfmodel.profiles.profile import default_profile
from perfmodel.sim import trace
from perfmodel.sim.analysis import (
    analyse_step,
    batch_sweep,
    classify_regime,
    regime_changes,
    transition_micro_batch,
)
from perfmodel.sim.pipeline import step_result
from perfmodel.spec import formulas
from perfmodel.spec.formulas import GIB
from perfmodel.spec.recipe import OuterRecipe, TrainingRecipe
from perfmodel.uncertainty.intervals import (
    ErrorModel,
    Query,
    annotate,
    check_level,
    error_model,
    largest_fitting,
    layout_kind,
    memory_group,
    p_fits,
)

if TYPE_CHECKING:

    from perfmodel.diloco.tuner import WanLink
    from perfmodel.sim.fsdp import StepResult



@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryFit:
    """Peak memory of one GPU and the largest micro-batch that fits."""

    peak_gib: float
    usable_memory_gib: float
    fits: bool
    max_micro_batch: int

    def as_dict(self) -> dict[str, Any]:
        """The fields in order (the keys `predict` prints)."""
        return {"peak_gib": self.peak_gib, "usable_memory_gib": self.usable_memory_gib,
                "fits": self.fits, "max_micro_batch": self.max_micro_batch}


@dataclass(frozen=True, kw_only=True, slots=True)
class Prediction:
    """One training step (an amortised outer step for DiLoCo) of a workload."""

    workload: Workload
    strategy: str
    islands: int
    outer: OuterRecipe
    link: WanLink
    step_time_s: float
    tokens_per_s: float
    mfu: float
    bound: str
    record: dict[str, Any] = field(repr=False)
    """Every predicted quantity, in output order."""
    reliability: JobReliability | None = None
    """The failure model's goodput and assumptions (None: failures not modelled)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Simulation:
    """A simulated step timeline (or DiLoCo / Streaming DiLoCo run) with its summary."""

    workload: Workload
    strategy: str
    outer: OuterRecipe
    link: WanLink
    step: StepResult
    spans: list[Any]
    summary: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Sweep:
    """A micro-batch sweep: one row per point, one summary per workload."""

    table: Any
    """pandas DataFrame of every point."""
    summary: list[dict[str, Any]]
    workloads: list[Workload]


def memory(w: Workload) -> MemoryFit:
    """Peak memory of the recipe the step is predicted for, at its k micro-steps."""

    gpus = w.island.num_gpus
    peak = memory_breakdown(w.model, num_gpus=gpus, seq_len=w.seq_len, micro_batch=w.micro_batch,
                            recipe=w.recipe, accum_steps=w.accum).peak_bytes
    largest = max_micro_batch(w.model, gpu_memory_bytes=w.gpu.usable_memory_bytes, num_gpus=gpus,
                              seq_len=w.seq_len, recipe=w.recipe, accum_steps=w.accum)
    return MemoryFit(peak_gib=peak / GIB, usable_memory_gib=w.gpu.usable_memory_bytes / GIB,
                     fits=peak <= w.gpu.usable_memory_bytes, max_micro_batch=largest)


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryReport:
    """The per-GPU memory of one training configuration (`shardmeter memory`)."""

    breakdown: MemoryBreakdown
    """Per-rank bytes by component at the peak phase."""
    max_micro_batch: int
    """Largest micro-batch that fits the GPU's usable memory (0: none)."""
    record: dict[str, Any] = field(repr=False)
    """Every reported quantity, in output order (`breakdown_gib` nested)."""


def memory_report(spec: WorkloadSpec, *, allow_oom: bool = True,
                  interval_level: float | None = None,
                  fit_probability: float | None = None) -> MemoryReport:
    """Per-GPU memory of training `spec` as its recipe trains it (layout included), at its k
    micro-steps, and the largest micro-batch that fits; with `allow_oom` False a peak beyond the
    GPU's usable memory raises `DoesNotFitError` (exit 1) with the smallest fix that fits. The
    peak carries its p10/p90 (and `interval_level`'s bounds) from the memory residuals, `p_fits`
    the probability that it fits; with `fit_probability`, `max_micro_batch` is the largest
    micro-batch that fits with that probability (`perfmodel.uncertainty.intervals`)."""
    _check_uncertainty_options(interval_level, fit_probability)
    model, gpu, island, recipe = resolve_placement(
        spec.model_name, gpu_name=spec.gpu_name, nodes=spec.nodes,
        gpus_per_node=spec.gpus_per_node, seq_len=spec.seq_len, micro_batch=spec.micro_batch,
        accum=spec.accum, recipe=spec.recipe)
    gpus = island.num_gpus
    breakdown = memory_breakdown(model, num_gpus=gpus, seq_len=spec.seq_len,
                                 micro_batch=spec.micro_batch, recipe=recipe,
                                 accum_steps=spec.accum)
    largest = max_micro_batch(model, gpu_memory_bytes=gpu.usable_memory_bytes, num_gpus=gpus,
                              seq_len=spec.seq_len, recipe=recipe, accum_steps=spec.accum)
    gib = breakdown.as_gib()
    peak_gib = gib.pop("peak")
    record = {
        "model": model.name, **model.parameter_counts(), "gpu": gpu.name,
        "nodes": island.num_nodes, "gpus_per_node": island.gpus_per_node, "num_gpus": gpus,
        "seq_len": spec.seq_len, "micro_batch": spec.micro_batch, "ac": breakdown.ac,
        "accum_steps": breakdown.accum_steps, "accum_mode": breakdown.accum_mode,
        "recipe": recipe.name, "layout": recipe.parallel.to_dict(),
        "peak_phase": breakdown.phase, "peak_gib": peak_gib,
        "tracked_gib": breakdown.tracked_bytes / GIB, "reserve_gib": breakdown.reserve_bytes / GIB,
        "usable_memory_gib": gpu.usable_memory_bytes / GIB,
        "fits": breakdown.peak_bytes <= gpu.usable_memory_bytes, "max_micro_batch": largest,
        "breakdown_gib": gib,
    }
    profile = default_profile(gpu.name)
    record.update(profile=profile.name, provenance=profile.provenance)
    if recipe.compute_dtype != "bf16":  # torchao's float8 buffers: no tracker measured them
        record.update(provenance="prior", compute_dtype=recipe.compute_dtype,
                      fp8_all_gather=recipe.fp8_all_gather)
    if not allow_oom and not record["fits"]:
        raise does_not_fit(spec, answer=memory_answer(record), what="memory report")
    mem = error_model(memory_group(model.num_experts), "peak_memory_bytes",
                      Query(num_gpus=gpus, seq_len=spec.seq_len, params=model.total_params,
                            layout=layout_kind(recipe.parallel.tp, recipe.parallel.pp)))
    record = _with_fit_probability(record, mem, fit_probability, lambda budget: max_micro_batch(
        model, gpu_memory_bytes=int(budget), num_gpus=gpus, seq_len=spec.seq_len, recipe=recipe,
        accum_steps=spec.accum), usable_bytes=gpu.usable_memory_bytes)
    record = annotate(record, time=None, memory=mem, level=interval_level)
    return MemoryReport(breakdown=breakdown, max_micro_batch=record["max_micro_batch"],
                        record=record)


def _check_uncertainty_options(interval_level: float | None,
                               fit_probability: float | None) -> None:
    if interval_level is not None:
        check_level(interval_level, field="--interval")
    if fit_probability is not None:
        check_level(fit_probability, field="--fit-probability")


def _with_fit_probability(record: dict[str, Any], mem: ErrorModel, probability: float | None,
                          fits_within: Callable[[float], int], *,
                          usable_bytes: float) -> dict[str, Any]:
    """`record` with `p_fits` after `fits`; with `probability`, `max_micro_batch` the largest
    micro-batch that fits with it (and `fit_probability` after it)."""
    chance = p_fits(mem, peak_bytes=record["peak_gib"], usable_bytes=record["usable_memory_gib"])
    out: dict[str, Any] = {}
    for key, value in record.items():
        out[key] = value
        if key == "fits":
            out["p_fits"] = chance
        if key == "max_micro_batch" and probability is not None:
            out[key] = largest_fitting(fits_within, mem, usable_bytes=usable_bytes,
                                       probability=probability)
            out["fit_probability"] = probability
    return out


def resolve_strategy(w: Workload, spec: OuterSpec) -> tuple[Workload, OuterRecipe, WanLink]:
    """`w` training with the outer settings of `spec`, those settings, and the sync link."""
    if spec.strategy == "streaming-diloco":
        # H defaults to DiLoCo's (100), as in Douillard et al. 2025 (each fragment syncs every H
        # inner steps, the F fragments staggered by H/F), so `predict` compares the two
        # strategies at the same sync period; the tuner (`shardmeter streaming`) keeps F·max(τ, 1).
        outer = streaming_outer(w.recipe, model=w.model, fragments=spec.fragments,
                                delay=spec.delay_steps,
                                sync_every=_streaming_inner_steps(w, spec),
                                dtype=spec.pseudo_gradient_dtype,
                                fragment_pattern=spec.fragment_pattern,
                                overlap_backward=spec.overlap_backward)
    else:
        if spec.inner_steps is not None:
            positive("--inner-steps", spec.inner_steps, limit="inner_steps")
        defaults = {"inner_steps": DILOCO_DEFAULT_INNER_STEPS, "num_fragments": 1,
                    "delay_steps": 0}
        outer = resolve_outer(w.recipe, defaults=defaults, inner_steps=spec.inner_steps,
                              pseudo_gradient_dtype=spec.pseudo_gradient_dtype)
    w = replace(w, recipe=replace(w.recipe, outer=outer))
    link = sync_link(w.island, islands=strategy_islands(spec.strategy, spec.islands),
                     wan_gbit_s=spec.wan_gbit_s, wan_latency_ms=spec.wan_latency_ms,
                     dtype=w.recipe.outer.pseudo_gradient_dtype,
                     same_cluster=spec.islands_same_cluster)
    return w, outer, link


def _streaming_inner_steps(w: Workload, spec: OuterSpec) -> int | None:
    """H of `predict`/`simulate --strategy streaming-diloco`: --inner-steps, else the recipe's
    outer.inner_steps when it sets one (None: `streaming_outer` reads it), else DiLoCo's default
    (DILOCO_DEFAULT_INNER_STEPS). Checked by tests/test_price_scenarios.py."""
    if spec.inner_steps is not None:
        return spec.inner_steps
    if w.recipe.outer.inner_steps != OuterRecipe().inner_steps:
        return None
    return DILOCO_DEFAULT_INNER_STEPS


def provenance(w: Workload) -> dict[str, Any]:
    """Which profile and provenance (measured / calibrated / prior) the compute and each link
    of the island's ring use (links a profile lacks fall back to the catalog prior).

    `link_provenance` is a list of {"link", "provenance"} objects in ring order, so the record's
    keys do not depend on the hardware (schema_version 2; version 1 had one `link_<name>_provenance`
    key per link). Checked by tests/test_schemas.py and tests/test_calibrate.py."""
    links = []
    for link in w.island.ring_links:
        kinds = {w.profile.comm_provenance(op, [link]) for op in ("all_gather", "reduce_scatter")}
        links.append({"link": link, "provenance": "/".join(sorted(kinds))})
    out: dict[str, Any] = {
        "compute_provenance": f"{w.profile.compute_provenance('forward')} ({w.profile.name})",
        "link_provenance": links}
    effect = compute_effect(w.recipe, w.gpu)
    if not effect.identity:  # fp8 / compile: nothing measured them on a GPU
        out["compute_provenance"] = (f"prior ({w.profile.name} x {effect.label} effect of "
                                     "catalogs/precision.csv; no GPU measured it)")
    layout = w.recipe.parallel
    if layout.ep > 1:   # MoE dispatch / combine: fitted all-to-all, else the all_gather fit
        ep_group = layout.resolve(w.island.num_gpus).ep_groups(
            gpus_per_node=w.island.gpus_per_node, intra_link=w.island.intra_link,
            inter_link=w.island.inter_link, nics_per_node=w.island.nics_per_node)[0]
        out["all_to_all_provenance"] = w.profile.all_to_all_provenance(ep_group)
    return out


def predict(workload: WorkloadSpec, outer: OuterSpec | None = None,
            failures: FailureSpec | None = None, *, allow_oom: bool = True,
            interval_level: float | None = None,
            fit_probability: float | None = None) -> Prediction:
    """Predict one training step: time, throughput, MFU, memory and what bounds it; with
    `failures`, also the run's expected goodput, wall time and cost (`perfmodel.costs.reliability`:
    the step figures stay failure-free); with `allow_oom` False a peak beyond the GPU's usable
    memory raises `DoesNotFitError` (exit 1) carrying the prediction's answer line and the
    smallest fix that fits. Every figure carries its p10/p90 (and `interval_level`'s bounds) from
    the residuals of the profile's provenance and of the memory model, `p_fits` the probability
    that the peak fits; `fit_probability` sets the probability `max_micro_batch` is asked at
    (`perfmodel.uncertainty.intervals`)."""
    _check_uncertainty_options(interval_level, fit_probability)
    w = workload.resolve()
    spec = outer or OuterSpec()
    # the strategy check comes before the outer settings' checks
    strategy_islands(spec.strategy, spec.islands)
    w, settings, link = resolve_strategy(w, spec)
    prediction = _prediction(w, strategy=spec.strategy, wan=link, outer=settings)
    if not allow_oom and not prediction.record["fits"]:
        raise does_not_fit(workload, answer=prediction_answer(prediction.record),
                           what="prediction")
    if failures is not None:
        prediction = _with_failures(prediction, failures)
    return _with_intervals(prediction, interval_level, fit_probability)


def _query(w: Workload, strategy: str) -> Query:
    """Where a workload lies, for the intervals' widening rule."""
    return Query(num_gpus=w.island.num_gpus, seq_len=w.seq_len, params=w.model.total_params,
                 layout=layout_kind(w.recipe.parallel.tp, w.recipe.parallel.pp),
                 strategy=strategy)


def _with_intervals(p: Prediction, level: float | None, probability: float | None) -> Prediction:
    """`p` with every figure's interval, `p_fits` and (asked) the probable max micro-batch."""
    w = p.workload
    time = error_model(w.profile.provenance, "step_time_s", _query(w, p.strategy))
    mem = error_model(memory_group(w.model.num_experts), "peak_memory_bytes", _query(w, "fsdp"))
    record = _with_fit_probability(p.record, mem, probability, lambda budget: max_micro_batch(
        w.model, gpu_memory_bytes=int(budget), num_gpus=w.island.num_gpus, seq_len=w.seq_len,
        recipe=w.recipe, accum_steps=w.accum), usable_bytes=w.gpu.usable_memory_bytes)
    return replace(p, record=annotate(record, time=time, memory=mem, level=level))


def _with_failures(p: Prediction, failures: FailureSpec) -> Prediction:
    """`p` with the failure model's expected figures appended to its record."""
    w = p.workload
    mode = failures.checkpoint_mode or "sync"
    if p.islands > 1:
        outer_step_s = p.step_time_s * p.outer.inner_steps
        found = independent_islands(spec=failures, gpu=w.gpu.name,
                                    gpus_per_island=w.island.num_gpus,
                                    params=w.model.total_params, outer_step_s=outer_step_s,
                                    wan_bytes_per_s=p.link.bw_bytes_per_s, mode=mode)
    else:
        found = checkpointed_job(spec=failures, gpu=w.gpu.name, num_gpus=w.island.num_gpus,
                                 num_nodes=w.island.num_nodes, params=w.model.total_params,
                                 master_dtype=w.recipe.master_dtype, mode=mode,
                                 step_time_s=p.step_time_s)
    record = dict(p.record)
    extra = found.record(p.step_time_s)
    record["goodput"] = extra.pop("goodput")
    record["expected_tokens_per_s"] = p.tokens_per_s * found.goodput
    gpus = p.islands * w.island.num_gpus
    if failures.train_tokens is not None:
        wall = failures.train_tokens / p.tokens_per_s
        record.update(train_tokens=failures.train_tokens, wall_time_s=wall,
                      expected_wall_time_s=wall / found.goodput)
        if failures.usd_per_gpu_hour is not None:
            hourly = failures.usd_per_gpu_hour * gpus
            record.update(cost_usd=wall / 3600.0 * hourly,
                          expected_cost_usd=wall / found.goodput / 3600.0 * hourly)
    record.update(extra)
    return replace(p, record=record, reliability=found)


def _prediction(w: Workload, *, strategy: str, wan: WanLink, outer: OuterRecipe) -> Prediction:

    pipe = simulate_pipeline_step(w) if w.recipe.parallel.pp > 1 else None
    step = step_result(pipe) if pipe is not None else simulate_inner_step(w)
    info = analyse_step(step)
    islands = wan.num_islands if strategy != "fsdp" else 1
    # m sequences per data-parallel rank per micro-step; model-parallel ranks share them
    sequences = islands * w.accum * w.micro_batch * w.recipe.parallel.dp
    out: dict[str, Any] = {"model": w.model.name, **w.model.parameter_counts(),
                           "gpu": w.gpu.name, "strategy": strategy,
                           "islands": islands, "nodes": w.island.num_nodes,
                           "gpus_per_node": w.island.gpus_per_node, "seq_len": w.seq_len,
                           "micro_batch": w.micro_batch, "accum": w.accum, "ac": w.ac,
                           "layout": w.recipe.parallel.to_dict(),
                           "inner_step_time_s": step.step_time_s}
    prior_only = w.recipe.parallel.prior_only
    if prior_only:
        out["layout_prior_only"] = list(prior_only)
    if pipe is not None:
        out.update(worst_stage=pipe.worst_stage, bubble_s=pipe.bubble_s,
                   bubble_fraction=pipe.bubble_s / pipe.step_time_s)
    step_s, comm_s = step.step_time_s, step.comm_busy_s
    if strategy == "diloco":
        h = outer.inner_steps
        sync = float(formulas.sync_time_s(islands, pseudo_gradient_bytes(w.model, wan.dtype),
                                          wan.bw_bytes_per_s, wan.latency_s))
        opt = outer_optimizer_seconds(w)
        # the outer sync and optimizer step happen once per H inner steps
        step_s, comm_s = step_s + (sync + opt) / h, comm_s + sync / h
        out.update(inner_steps=h, outer_sync_s=sync, amortised_outer_sync_s=sync / h,
                   outer_optimizer_s=opt, sync_link=wan.kind)
    elif strategy == "streaming-diloco":
        per_param = outer_optimizer_seconds(w) / w.model.total_params
        config = StreamingConfig.from_recipe(outer)
        steps, first = utilisation_steps(config)
        check_simulated_steps(steps, field="the steady state's 3H+τ+1 simulated steps "
                                           "(--sync-every, --delay)")
        run = run_streaming(w.model, step_s=step.step_time_s, wan=wan, config=config,
                            num_steps=steps, seq_len=w.seq_len, opt_s_per_param=per_param)
        utilisation = run.utilisation(first)
        step_s = step.step_time_s / utilisation  # steady state: one period of H steps after warm-up
        out.update(fragments=config.num_fragments, delay_steps=config.delay_steps,
                   sync_every=config.sync_every, fragment_pattern=config.fragment_pattern,
                   overlap_backward=config.overlap_backward, simulated_steps=run.num_steps,
                   blocked_s=run.blocked_s, amortised_blocked_s=run.blocked_s / run.num_steps,
                   outer_optimizer_s=run.outer_optimizer_s / run.num_steps * config.sync_every,
                   compute_utilisation=utilisation, sync_link=wan.kind)
    tokens_per_s = sequences * w.seq_len / step_s
    mfu = w.model.model_flops_per_token(w.seq_len) * tokens_per_s / (
        w.gpu.bf16_flops_per_s * islands * w.island.num_gpus)
    bound = (info.regime if strategy == "fsdp" else
             classify_regime(step_s, step.compute_busy_s,
                             comm_s if strategy == "diloco" else step.comm_busy_s))
    out.update(step_time_s=step_s, tokens_per_s=tokens_per_s,
               tokens_per_s_per_gpu=tokens_per_s / (islands * w.island.num_gpus), mfu=mfu,
               bound=bound, island_bound=info.regime, exposed_comm_s=step.exposed_comm_s,
               compute_idle_s=step.compute_idle_s, comm_idle_s=step.comm_idle_s,
               critical_path_comm_fraction=info.critical_comm_fraction, **memory(w).as_dict(),
               profile=w.profile.name, provenance=w.profile.provenance, **provenance(w))
    effect = compute_effect(w.recipe, w.gpu)
    if not effect.identity:  # fp8 / compile: a prior whatever the profile (module doc)
        out.update(provenance="prior", compute_dtype=w.recipe.compute_dtype,
                   fp8_all_gather=w.recipe.fp8_all_gather, compile=w.recipe.compile,
                   matmul_time_factor=effect.matmul_scale,
                   elementwise_time_factor=effect.compile_scale)
    return Prediction(workload=w, strategy=strategy, islands=islands, outer=outer, link=wan,
                      step_time_s=step_s, tokens_per_s=tokens_per_s, mfu=mfu, bound=bound,
                      record=out)


def simulate(workload: WorkloadSpec, outer: OuterSpec | None = None, *,
             steps: int | None = None) -> Simulation:
    """Simulate the step timeline (FSDP), or `steps` inner steps of a DiLoCo / Streaming DiLoCo run
    (default H, resp. H+τ+1). The step and run times carry their p10/p50/p90 from the residuals
    of the profile's provenance (`perfmodel.uncertainty.intervals`)."""

    spec = outer or OuterSpec()
    w, settings, link = resolve_strategy(workload.resolve(), spec)
    pipe = simulate_pipeline_step(w) if w.recipe.parallel.pp > 1 else None
    step = step_result(pipe) if pipe is not None else simulate_inner_step(w)
    if spec.strategy == "fsdp":
        spans, summary = trace.schedule_spans(step.schedule), step_summary(step)
        if pipe is not None:  # one trace process per pipeline rank (and one for its sends)
            summary.update(worst_stage=pipe.worst_stage, bubble_s=pipe.bubble_s,
                           bubble_fraction=pipe.bubble_s / pipe.step_time_s)
        # past the simulated micro-steps the times are closed-form, the trace is not: say so
        traced = (pipe.simulated_micro_batches if pipe is not None
                  else min(w.accum, SIMULATED_ACCUM_MAX))
        if traced < w.accum:
            summary["traced_micro_batches"] = traced
    elif spec.strategy == "diloco":
        spans, summary = _diloco_spans(w, step, link,
                                       settings.inner_steps if steps is None else steps)
    else:
        spans, summary = streaming_spans(w.model, step, link, StreamingConfig.from_recipe(settings),
                                         steps)
    time = error_model(w.profile.provenance, "step_time_s", _query(w, spec.strategy))
    return Simulation(workload=w, strategy=spec.strategy, outer=settings, link=link, step=step,
                      spans=spans, summary=annotate(summary, time=time, memory=None))


def step_summary(step: StepResult) -> dict[str, Any]:
    """The busy / idle times and critical path of one simulated FSDP step."""

    info = analyse_step(step)
    return {"step_time_s": step.step_time_s, "compute_busy_s": step.compute_busy_s,
            "comm_busy_s": step.comm_busy_s, "exposed_comm_s": step.exposed_comm_s,
            "compute_idle_s": step.compute_idle_s,
            "largest_compute_gap_s": info.largest_compute_gap_s,
            "critical_path_tasks": len(step.schedule.critical_path),
            "critical_path_comm_fraction": info.critical_comm_fraction, "bound": info.regime}


def _diloco_spans(w: Workload, step: StepResult, wan: WanLink,
                  inner_steps: int) -> tuple[list[Any], dict[str, Any]]:

    positive("--steps", inner_steps)
    check_simulated_steps(inner_steps, islands=wan.num_islands, field="--steps (default H)")
    sync = float(formulas.sync_time_s(wan.num_islands, pseudo_gradient_bytes(w.model, wan.dtype),
                                      wan.bw_bytes_per_s, wan.latency_s))
    opt = outer_optimizer_seconds(w)
    result = simulate_diloco({f"island{i}": step.step_time_s for i in range(wan.num_islands)},
                             inner_steps=inner_steps, sync_s=sync, outer_opt_s=opt)
    detailed = len(step.schedule.intervals) * inner_steps * wan.num_islands <= MAX_PLOTTED_SPANS
    spans = (trace.expand_steps(result.schedule, step.schedule) if detailed
             else trace.schedule_spans(result.schedule))
    return spans, {"inner_step_time_s": step.step_time_s, "inner_steps": inner_steps,
                   "outer_sync_s": sync, "outer_optimizer_s": opt,
                   "outer_step_s": result.outer_step_s, "amortised_step_s": result.amortised_step_s,
                   "fsdp_detail": detailed}


def sweep(model_names: list[str], *, gpu_name: str, nodes: list[int], gpus_per_node: list[int],
          seq_len: int, micro_batches: list[int], accum: int = 1, profile_name: str | None = None,
          recipe: TrainingRecipe | None = None) -> Sweep:
    """Sweep micro-batch sizes for every model x nodes x GPUs-per-node: iteration time,
    throughput and where compute-bound begins."""


    frames, summary, workloads = [], [], []
    for name in progress.track(model_names, "sweep (models)"):
        for n in nodes:
            for gpn in gpus_per_node:
                w = resolve_workload(name, gpu_name=gpu_name, nodes=n, gpus_per_node=gpn,
                                     seq_len=seq_len, micro_batch=1, accum=accum,
                                     profile_name=profile_name, recipe=recipe)
                largest = memory(w).max_micro_batch
                frame = batch_sweep(w.model, w.profile, w.island, seq_len=seq_len,
                                    micro_batches=micro_batches, ac=w.recipe.ac, accum_steps=accum,
                                    max_micro_batch=largest,
                                    recipe=w.recipe if recipe is None else recipe)
                frames.append(frame)
                workloads.append(w)
                summary.append({"model": w.model.name, "gpus": w.island.num_gpus,
                                "max_micro_batch": largest,
                                "transition_micro_batch": transition_micro_batch(frame),
                                "changes": "; ".join(f"{a}->{b} at m={m}"
                                                     for m, a, b in regime_changes(frame)),
                                "provenance": w.profile.provenance})
    import pandas as pd  # lazy: a single prediction starts without pandas (issue 29)

    return Sweep(table=pd.concat(frames, ignore_index=True), summary=summary, workloads=workloads)

