"""Setup shared by `perfmodel.api.predict`: resolving a workload, simulating its inner step, and the
DiLoCo / Streaming DiLoCo outer settings and sync link.

Validation errors name the CLI flag (`--nodes`, `--fragments`, ...) because the CLI is the main
caller and those messages are part of its output; the API takes the same values as keywords.

Outer settings: a value that is set wins; otherwise a value a recipe file sets (anything other
than `OuterRecipe`'s default) is kept; otherwise the historical default applies (`predict
--strategy diloco` and `streaming-diloco` H = 100; Streaming DiLoCo F = 3, τ = 2; the `streaming`
tuner H = F·τ).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from perfmodel.costs.precision import check_compute_dtype
from perfmodel.diloco.graph import outer_optimizer_s
from perfmodel.diloco.tuner import WanLink, fabric_link
from perfmodel.profiles.profile import default_profile, load_profile
from perfmodel.sim import pipeline as pipeline_sim
from perfmodel.sim.fsdp import resolve_recipe, simulate_step, step_costs
from perfmodel.sim.pipeline import PipelineResult, pipeline_costs, step_result
from perfmodel.spec import catalog
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.inputs import check_limit
from perfmodel.spec.recipe import OuterRecipe, TrainingRecipe

if TYPE_CHECKING:
    from perfmodel.diloco.tuner import WanLink
    from perfmodel.profiles.profile import HardwareProfile
    from perfmodel.sim.fsdp import StepResult
    from perfmodel.spec.arch import ModelSpec
    from perfmodel.spec.hardware import GpuSpec, IslandSpec

logger = logging.getLogger(__name__)

STREAMING_DEFAULTS = {"num_fragments": 3, "delay_steps": 2}
"""Streaming DiLoCo defaults (the ShardMeter paper's figure 6 schedule); H = F·τ."""
DILOCO_DEFAULT_INNER_STEPS = 100
"""H of `predict --strategy diloco` unless set."""
MAX_PLOTTED_SPANS = 20_000
"""Above this many spans a multi-step timeline is drawn at inner-step level (no FSDP detail)."""
SIMULATED_ACCUM_MAX = 16
"""Above this many micro-steps the step is simulated with this many and extended in closed form:
every micro-step starts with both streams idle, so T(k) = step_fixed_s + k·microstep_s exactly
(`perfmodel.sim.fsdp` module doc) and so are the busy/idle sums; the timeline shows the first
ones."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """A resolved model + island + micro-batch + profile."""

    model: ModelSpec
    gpu: GpuSpec
    island: IslandSpec
    profile: HardwareProfile
    seq_len: int
    """S, tokens per sequence."""
    micro_batch: int
    """m, sequences per data-parallel rank per micro-step (a GPU under plain FSDP)."""
    accum: int
    """k, gradient-accumulation micro-steps."""
    recipe: TrainingRecipe
    """TrainingRecipe every island trains with."""

    @property
    def ac(self) -> str:
        """Activation checkpointing mode (the recipe's)."""
        return str(self.recipe.ac)


def positive(option: str, value: float, *, zero_ok: bool = False, limit: str | None = None) -> None:
    """Raise a UserInputError naming `option` unless `value` > 0 (>= 0 with `zero_ok`) and, with
    `limit`, within that entry of `perfmodel.spec.inputs.LIMITS`."""
    if value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise UserInputError(f"{option} {value}: must be {bound}",
                             hint=f"pass {option} with a value {bound}.")
    if limit is not None:
        check_limit(limit, value, field=option)


def check_simulated_steps(steps: int, *, islands: int = 1, field: str) -> None:
    """A simulation of `steps` inner steps on `islands` islands stays within LIMITS['sim_steps']
    (every island-step is a set of tasks in memory)."""
    check_limit("sim_steps", steps * max(islands, 1),
                field=field if islands <= 1 else f"{field} x islands")


def resolve_workload(model_name: str, *, gpu_name: str, nodes: int, gpus_per_node: int,
                     seq_len: int, micro_batch: int, accum: int, ac: str | None = None,
                     profile_name: str | None = None,
                     recipe: TrainingRecipe | None = None) -> Workload:
    """The catalog model and GPU, the island and the profile; `recipe` defaults to torchtitan and
    `ac` (when set) overrides its checkpointing mode."""
    model, gpu, island, recipe = resolve_placement(
        model_name, gpu_name=gpu_name, nodes=nodes, gpus_per_node=gpus_per_node, seq_len=seq_len,
        micro_batch=micro_batch, accum=accum, ac=ac, recipe=recipe)
    profile = load_profile(profile_name) if profile_name else default_profile(gpu.name)
    if profile.hardware.lower() != gpu.name.lower():
        logger.warning("profile %s was fitted on %s, not %s", profile.name, profile.hardware,
                       gpu.name)
    return Workload(model=model, gpu=gpu, island=island, profile=profile, seq_len=seq_len,
                    micro_batch=micro_batch, accum=accum, recipe=recipe)


def resolve_placement(model_name: str, *, gpu_name: str, nodes: int, gpus_per_node: int,
                      seq_len: int, micro_batch: int, accum: int, ac: str | None = None,
                      recipe: TrainingRecipe | None = None
                      ) -> tuple[ModelSpec, GpuSpec, IslandSpec, TrainingRecipe]:
    """The catalog model and GPU, the island, and the recipe with its layout resolved against
    the island and checked against the model (UserInputError naming the rule and a valid
    layout); everything a step needs but the cost profile."""
    for option, value, limit in (("--nodes", nodes, "step_nodes"),
                                 ("--gpus-per-node", gpus_per_node, "nodes"),
                                 ("--seq-len", seq_len, "seq_len"),
                                 ("--micro-batch", micro_batch, "micro_batch"),
                                 ("--accum", accum, "accum")):
        positive(option, value, limit=limit)
    model = catalog.get_model(model_name)
    model.check_step_modelled("a training step")
    gpu = catalog.get_gpu(gpu_name)
    if gpus_per_node > gpu.max_gpus_per_node:
        raise UserInputError(f"--gpus-per-node {gpus_per_node}: a {gpu.name} node holds at most "
                             f"{gpu.max_gpus_per_node} GPUs",
                             hint=f"pass --gpus-per-node {gpu.max_gpus_per_node} or fewer and add "
                                  "--nodes instead.")
    island = IslandSpec(gpu=gpu, num_nodes=nodes, gpus_per_node=gpus_per_node,
                        intra_link=gpu.intra_node_link, inter_link=gpu.inter_node_link,
                        nics_per_node=gpu.nics_per_node)
    recipe = resolve_recipe(recipe, ac)
    check_compute_dtype(recipe, gpu)   # fp8 on a GPU without FP8: ConfigError with a fix
    layout = recipe.parallel.resolve(island.num_gpus)
    layout.check_model(num_layers=model.num_layers, num_heads=model.num_heads,
                       num_kv_heads=model.num_kv_heads, intermediate_size=model.intermediate_size,
                       seq_len=seq_len, num_experts=model.num_experts)
    return model, gpu, island, replace(recipe, parallel=layout)


def simulate_pipeline_step(w: Workload) -> PipelineResult:
    """The graph simulation of one pipeline step of `w` (pp > 1): k = --accum micro-batches (in
    closed form for many: `perfmodel.sim.pipeline.simulate_pipeline_step`)."""
    costs = pipeline_costs(w.model, w.profile, w.island, seq_len=w.seq_len,
                           micro_batch=w.micro_batch, recipe=w.recipe)
    return pipeline_sim.simulate_pipeline_step(costs, micro_batches=w.accum)


def simulate_inner_step(w: Workload) -> StepResult:
    """The graph simulation of one step of `w` (FSDP: closed-form beyond SIMULATED_ACCUM_MAX;
    pipelines: `simulate_pipeline_step`)."""
    if w.recipe.parallel.pp > 1:
        return step_result(simulate_pipeline_step(w))

    costs = step_costs(w.model, w.profile, w.island, seq_len=w.seq_len, micro_batch=w.micro_batch,
                       recipe=w.recipe)
    if w.accum <= SIMULATED_ACCUM_MAX:
        return simulate_step(costs, accum_steps=w.accum)
    return extended_step(simulate_step(costs, accum_steps=SIMULATED_ACCUM_MAX - 1),
                         simulate_step(costs, accum_steps=SIMULATED_ACCUM_MAX), w.accum)


def extended_step(before: StepResult, last: StepResult, accum: int) -> StepResult:
    """The StepResult of `accum` micro-steps from those of SIMULATED_ACCUM_MAX - 1 and
    SIMULATED_ACCUM_MAX (linear in k); the schedule stays the simulated one."""
    logger.info("--accum %d: simulating %d micro-steps, the rest in closed form (exact)", accum,
                SIMULATED_ACCUM_MAX)
    extra = accum - last.accum_steps
    names = ("step_time_s", "compute_busy_s", "comm_busy_s", "exposed_comm_s", "compute_idle_s")
    return replace(last, accum_steps=accum,
                   **{f: getattr(last, f) + extra * (getattr(last, f) - getattr(before, f))
                      for f in names})


def outer_optimizer_seconds(w: Workload) -> float:
    """Seconds of one Nesterov outer step over the whole model on one island."""

    return outer_optimizer_s(w.model.total_params, num_gpus=w.island.num_gpus,
                             hbm_bytes_per_s=w.gpu.hbm_bytes_per_s)


def strategy_islands(strategy: str, islands: int | None) -> int:
    """Islands M of `strategy`: exactly 1 for FSDP, else `islands` (default 2)."""
    if strategy == "fsdp":
        if islands not in (None, 1):
            raise UserInputError(f"--islands {islands} with --strategy fsdp: "
                                 "FSDP trains one island",
                                 hint="use --strategy diloco (or streaming-diloco) "
                                      "for several islands.")
        return 1
    m = 2 if islands is None else islands
    positive("--islands", m, limit="islands")
    return m


def resolve_outer(recipe: TrainingRecipe, *, defaults: dict[str, Any], **flags: Any) -> OuterRecipe:
    """The outer settings: set flags, else non-default recipe values, else `defaults`."""
    library = OuterRecipe()
    values: dict[str, Any] = {}
    for f in fields(OuterRecipe):
        flag = flags.get(f.name)
        mine = getattr(recipe.outer, f.name)
        if flag is not None:
            values[f.name] = flag
        elif mine != getattr(library, f.name) or f.name not in defaults:
            values[f.name] = mine
        else:
            values[f.name] = defaults[f.name]
    return replace(recipe.outer, **values)


def streaming_outer(recipe: TrainingRecipe, *, model: Any, fragments: int | None, delay: int | None,
                    sync_every: int | None, dtype: str | None, fragment_pattern: str | None,
                    overlap_backward: bool | None) -> OuterRecipe:
    """Streaming DiLoCo settings with the CLI's defaults (H = F·max(τ, 1) unless given)."""
    for option, value, least in (("--fragments", fragments, 1), ("--delay", delay, 0),
                                 ("--sync-every", sync_every, 1)):
        if value is not None and value < least:
            raise UserInputError(f"{option} {value}: must be >= {least}",
                                 hint=f"pass {option} >= {least}.")
    outer = resolve_outer(recipe, defaults=dict(STREAMING_DEFAULTS), num_fragments=fragments,
                          delay_steps=delay, pseudo_gradient_dtype=dtype,
                          fragment_pattern=fragment_pattern, overlap_backward=overlap_backward)
    if sync_every is not None:
        h = sync_every
    elif recipe.outer.inner_steps != OuterRecipe().inner_steps:
        h = recipe.outer.inner_steps
    else:
        h = outer.num_fragments * max(outer.delay_steps, 1)

    def origin(flag: str, value: int | None, field: str, default: int | None) -> str:
        """Who set a value: the flag, the recipe, or the command's default (for messages)."""
        if value is not None:
            return flag
        if getattr(recipe.outer, field) != getattr(OuterRecipe(), field):
            return f"the recipe's outer.{field}"
        return f"the default {flag} (" + ("F·max(τ, 1)" if default is None else str(default)) + ")"

    if outer.num_fragments > model.num_layers:
        where = origin("--fragments", fragments, "num_fragments",
                       STREAMING_DEFAULTS["num_fragments"])
        raise UserInputError(
            f"{where} {outer.num_fragments}: {model.name} has only {model.num_layers} layers",
            hint=f"pass --fragments {model.num_layers} or fewer (a fragment is a layer group).",
        )
    check_limit("delay_steps", outer.delay_steps,
                field=origin("--delay", delay, "delay_steps", STREAMING_DEFAULTS["delay_steps"]))
    check_limit("inner_steps", h, field=origin("--sync-every", sync_every, "inner_steps", None))
    return replace(outer, inner_steps=h)


def sync_link(island: Any, *, islands: int, wan_gbit_s: float, wan_latency_ms: float, dtype: str,
              same_cluster: bool) -> WanLink:
    """The link pseudo-gradients cross: the WAN, or the island's inter-node fabric."""

    if islands < 1:
        raise UserInputError(f"--islands {islands}: must be > 0",
                             hint="pass --islands with a value > 0.")
    check_limit("islands", islands, field="--islands")
    if same_cluster:
        return fabric_link(island.gpu.name, num_islands=islands, dtype=dtype)
    for option, value, zero_ok, limit in (("--wan-gbit-s", wan_gbit_s, False, "wan_gbit_s"),
                                          ("--wan-latency-ms", wan_latency_ms, True,
                                           "latency_ms")):
        positive(option, value, zero_ok=zero_ok, limit=limit)
    return WanLink(num_islands=islands, bw_bytes_per_s=wan_gbit_s * 1e9 / 8,
                   latency_s=wan_latency_ms / 1e3, dtype=dtype)


def describe_outer(outer: OuterRecipe, link: Any, *, bandwidth: bool = True) -> str:
    """One line: the outer settings and the link (part of the streaming records, hence here)."""
    where = "cluster fabric" if link.kind == "fabric" else "WAN"
    speed = f"{link.bw_bytes_per_s * 8 / 1e9:.4g} Gbit/s, " if bandwidth else ""
    return (
        f"outer: H={outer.inner_steps}, F={outer.num_fragments} ({outer.fragment_pattern}), "
        f"τ={outer.delay_steps}, overlap backward {'on' if outer.overlap_backward else 'off'}, "
        f"pseudo-gradient {outer.pseudo_gradient_dtype}, {outer.optimizer} outer optimizer; "
        f"sync over the {where}: {link.num_islands} islands, {speed}{link.latency_s * 1e3:.4g} ms"
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkloadSpec:
    """What to train where, as named in the catalogs (resolved into a `Workload`)."""

    model_name: str
    gpu_name: str
    nodes: int = 1
    gpus_per_node: int = 8
    seq_len: int = 2048
    micro_batch: int = 1
    accum: int = 1
    profile_name: str | None = None
    recipe: TrainingRecipe | None = None

    def resolve(self) -> Workload:
        """The catalog model, GPU, island and profile."""
        return resolve_workload(self.model_name, gpu_name=self.gpu_name, nodes=self.nodes,
                                gpus_per_node=self.gpus_per_node, seq_len=self.seq_len,
                                micro_batch=self.micro_batch, accum=self.accum,
                                profile_name=self.profile_name, recipe=self.recipe)


@dataclass(frozen=True, kw_only=True, slots=True)
class OuterSpec:
    """The strategy across islands and its DiLoCo settings; None means the recipe's, else the
    historical default (`perfmodel.api.workload` module doc)."""

    strategy: str = "fsdp"
    """fsdp, diloco or streaming-diloco."""
    islands: int | None = None
    inner_steps: int | None = None
    fragments: int | None = None
    delay_steps: int | None = None
    pseudo_gradient_dtype: str | None = None
    fragment_pattern: str | None = None
    overlap_backward: bool | None = None
    islands_same_cluster: bool = False
    wan_gbit_s: float = 10.0
    wan_latency_ms: float = 50.0
