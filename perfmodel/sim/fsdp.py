"""FSDP training-step graphs as PyTorch FSDP2 runs them (paper §II Fig. 1; DESIGN §2 and §3).

Units are the transformer blocks followed by the root unit (embedding, final norm, LM head;
`ModelSpec.fsdp_units` order). One micro-step runs the compute slots

    F block0 .. F block{L-1}, F root, B root, B block{L-1} .. B block0

(the root's forward is the final norm + LM head + loss, its backward the LM head's; the
embedding lookup in front of block 0 costs no matmul FLOPs and is folded into the root). Per
island there is one compute stream and one communication stream (NCCL collectives share the
links, so at most one runs). The order of collectives is the one FSDP2 (torch 2.13) issues; the
test `tests/test_fsdp_order.py` records it from a real 2-rank gloo run and compares:

* the root's all_gather comes first (the root pre-forward, before the embedding), then one
  all_gather per block before its forward;
* the root is not resharded after forward (FSDP2 never reshards the root: backward needs it
  first), so backward gathers it again only if the recipe reshards it; the last block is kept
  when the recipe says so (torchtitan), every other block is gathered again before its backward
  when `reshard_blocks_after_forward`;
* a reduce_scatter after each block's backward; the root's reduce_scatter LAST, in FSDP2's
  post-backward callback, after the whole backward — fully exposed;
* `accum_mode`: ``reduce_scatter`` reduce-scatters every micro-step (torchtitan), ``no_sync``
  only on the last (`set_requires_gradient_sync(False)` before); the sharded optimizer step runs
  on the compute stream after the last reduce_scatter.

Timing rules (`step_plan` is the only place they live; the fast path compiles its output):

* Prefetch: an all_gather whose consumer is compute slot c is issued at the pre-hook of slot
  c - d (d = `prefetch_depth`) and may start once slot c - d - 1 has finished (its unsharded
  buffer is freed), i.e. the communication stream runs at most d units ahead of compute.
  On the stream, collectives run in issue order: in backward AG, RS(s), AG, RS(s+1), ...
* Micro-step boundary: the first all_gather of a micro-step waits for the previous micro-step's
  last task (FSDP2's root pre-forward makes the all-gather stream wait for the compute stream;
  its post-backward callback makes the compute stream wait for the reduce-scatters), so every
  micro-step starts with both streams idle and a step of k micro-steps takes exactly
  T(k) = step_fixed_s + k·microstep_s (`step_decomposition`; tests check it for k up to 8).
* Contention: compute progresses at rate 1/`overlap_slowdown` while a collective of the same
  island is in flight (`perfmodel.sim.graph`); 1.0 leaves compute durations as they are.

Activation checkpointing: a block's backward includes recomputing part of its forward, timed as
forward time x (recompute FLOPs / forward FLOPs) of the block from `perfmodel.spec.arch` (the
`CheckpointPolicy` of the recipe: op-sac its recomputed linears, attn the attention core, full
the whole block forward, layer:N the whole forward of every N-th block only), times the
profile's `recompute_factor`. The root unit is not checkpointed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from perfmodel.costs.model import CostModel
from perfmodel.sim.graph import Schedule, TaskGraph
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.formulas import dtype_bytes
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe

COMPUTE_STREAM = "compute"
COMM_STREAM = "comm"
COST_FIELDS = ("forward_s", "backward_s", "all_gather_s", "reduce_scatter_s")
"""Per-unit durations a task may take (`TaskSpec.cost`); the optimizer uses `optimizer_s`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class UnitCosts:
    """Durations of one FSDP unit's tasks in one micro-step."""

    name: str
    """Unit name (block{i} or root)."""
    forward_s: float
    """Forward compute."""
    backward_s: float
    """Backward compute including any activation recompute."""
    all_gather_s: float
    """One all_gather of the unit's parameters (before forward; again before backward if
    resharded)."""
    reduce_scatter_s: float
    """One reduce_scatter of the unit's gradients."""

    def __post_init__(self) -> None:
        for key in COST_FIELDS:
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"unit {self.name!r}: {key} must be finite and >= 0, got {value}")


@dataclass(frozen=True, kw_only=True, slots=True)
class StepCosts:
    """All durations of an FSDP step and the recipe that orders them (what simulators consume)."""

    units: tuple[UnitCosts, ...]
    """Units in forward order (blocks, then root when `has_root`)."""
    optimizer_s: float
    """Sharded optimizer step, once per step."""
    recipe: TrainingRecipe = field(default=DEFAULT_RECIPE)
    """Training recipe: resharding, prefetch depth and accumulation mode shape the graph."""
    has_root: bool = True
    """Whether the last unit is the root (embedding, final norm, LM head)."""
    overlap_slowdown: float = 1.0
    """Compute runs this many times slower while a collective of the island is in flight."""

    def __post_init__(self) -> None:
        if not self.units:
            raise ValueError("an FSDP step needs at least one unit")
        if not (math.isfinite(self.optimizer_s) and self.optimizer_s >= 0):
            raise ValueError(f"optimizer_s must be finite and >= 0, got {self.optimizer_s}")
        check_slowdown(self.overlap_slowdown)

    @classmethod
    def uniform(cls, *, num_blocks: int, block: UnitCosts, root: UnitCosts | None,
                optimizer_s: float, recipe: TrainingRecipe = DEFAULT_RECIPE,
                overlap_slowdown: float = 1.0) -> StepCosts:
        """`num_blocks` identical blocks followed by an optional root unit."""
        blocks = tuple(UnitCosts(name=f"block{i}", forward_s=block.forward_s,
                                 backward_s=block.backward_s, all_gather_s=block.all_gather_s,
                                 reduce_scatter_s=block.reduce_scatter_s)
                       for i in range(num_blocks))
        return cls(units=blocks + ((root,) if root is not None else ()), optimizer_s=optimizer_s,
                   recipe=recipe, has_root=root is not None, overlap_slowdown=overlap_slowdown)

    @property
    def compute_s(self) -> float:
        """Compute of one micro-step (forward + backward of every unit), without contention."""
        return sum(u.forward_s + u.backward_s for u in self.units)

    def plan(self, accum_steps: int) -> tuple[TaskSpec, ...]:
        """The task structure of a step of `accum_steps` micro-steps."""
        return step_plan(len(self.units), has_root=self.has_root, recipe=self.recipe,
                         accum_steps=accum_steps)

    def duration_s(self, spec: TaskSpec) -> float:
        """Duration of one planned task."""
        if spec.unit is None:
            return self.optimizer_s
        return float(getattr(self.units[spec.unit], spec.cost))


def check_slowdown(value: Any) -> None:
    """ValueError unless `value` is a finite number >= 1."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value >= 1):
        raise ValueError(f"overlap_slowdown must be a finite number >= 1, got {value!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class StepDecomposition:
    """DESIGN §3: T(k) = step_fixed_s + k·microstep_s."""

    microstep_s: float
    """Duration of one non-final gradient-accumulation micro-step."""
    step_fixed_s: float
    """Extra once per step: the last micro-step's reduce_scatters (no-sync) and the optimizer."""

    def step_time_s(self, accum_steps: int) -> float:
        return self.step_fixed_s + accum_steps * self.microstep_s


@dataclass(frozen=True, kw_only=True, slots=True)
class StepResult:
    """A simulated FSDP step of one island."""

    schedule: Schedule
    """Intervals, critical path, gaps."""
    accum_steps: int
    """Micro-steps k."""
    step_time_s: float
    """Makespan of the step."""
    compute_busy_s: float
    """Time the compute stream is busy (contention included)."""
    comm_busy_s: float
    """Summed communication durations."""
    exposed_comm_s: float
    """Communication not overlapped by compute."""
    compute_idle_s: float
    """Step time minus compute busy time (waiting for communication)."""

    @property
    def comm_idle_s(self) -> float:
        return self.step_time_s - self.comm_busy_s


# ---- the schedule rules ------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class TaskSpec:
    """One task of a planned step: what `add_step` adds and `perfmodel.sim.fastpath` compiles."""

    name: str
    """Label template, e.g. 'AG {unit} bwd m1' ({unit}: the unit's name)."""
    stream: str
    """COMPUTE_STREAM or COMM_STREAM."""
    kind: str
    """forward, backward, all_gather, reduce_scatter or optimizer."""
    unit: int | None
    """Unit index whose `cost` is the duration; None: the optimizer."""
    cost: str
    """A COST_FIELDS name (or 'optimizer_s')."""
    deps: tuple[int, ...]
    """Indices of earlier tasks of the plan this one waits for."""
    micro_step: int = 0
    """Micro-step the task belongs to (0-based; the optimizer: the last one)."""


def _spec(name: str, stream: str, kind: str, unit: int | None, cost: str,
          deps: tuple[int, ...], micro_step: int = 0) -> TaskSpec:
    return TaskSpec(name=name, stream=stream, kind=kind, unit=unit, cost=cost, deps=deps,
                    micro_step=micro_step)


def _slots(num_units: int, has_root: bool) -> list[tuple[int, bool]]:
    """(unit, is_backward) of each compute slot of a micro-step."""
    blocks = list(range(num_units - 1 if has_root else num_units))
    root = [num_units - 1] if has_root else []
    return ([(b, False) for b in blocks] + [(r, False) for r in root] + [(r, True) for r in root]
            + [(b, True) for b in reversed(blocks)])


def _gathers(num_units: int, has_root: bool, recipe: TrainingRecipe) -> list[tuple[int, bool, int]]:
    """(unit, is_backward, consumer slot) of each all_gather of a micro-step, in issue order."""
    slots = _slots(num_units, has_root)
    slot_of = {key: s for s, key in enumerate(slots)}
    blocks = list(range(num_units - 1 if has_root else num_units))
    out: list[tuple[int, bool, int]] = []
    if has_root:  # the root pre-forward gathers the root before the embedding runs
        out.append((num_units - 1, False, 0))
    out += [(b, False, slot_of[(b, False)]) for b in blocks]
    if has_root and recipe.reshard_root_after_forward:
        out.append((num_units - 1, True, slot_of[(num_units - 1, True)]))
    for b in reversed(blocks):
        reshard = (recipe.reshard_last_block_after_forward if b == blocks[-1]
                   else recipe.reshard_blocks_after_forward)
        if reshard:
            out.append((b, True, slot_of[(b, True)]))
    return out


@lru_cache(maxsize=256)
def step_plan(num_units: int, *, has_root: bool = True, recipe: TrainingRecipe = DEFAULT_RECIPE,
              accum_steps: int = 1) -> tuple[TaskSpec, ...]:
    """The tasks of one FSDP step (k micro-steps + optimizer) in add order (module docstring);
    cached: the plan is immutable and depends only on these arguments."""
    if num_units < 1:
        raise ValueError(f"an FSDP step needs at least one unit, got {num_units}")
    if accum_steps < 1:
        raise ValueError(f"accum_steps must be >= 1, got {accum_steps}")
    tasks: list[TaskSpec] = []
    sync: int | None = None
    for micro in range(accum_steps):
        final = micro == accum_steps - 1
        reduce = final or recipe.accum_mode == "reduce_scatter"
        label = f" m{micro}" if accum_steps > 1 else ""
        sync = _plan_microstep(tasks, num_units, has_root, recipe, sync=sync, reduce=reduce,
                               label=label, micro=micro)
    tasks.append(_spec("optimizer", COMPUTE_STREAM, "optimizer", None, "optimizer_s",
                       () if sync is None else (sync,), accum_steps - 1))
    return tuple(tasks)


def _plan_microstep(tasks: list[TaskSpec], num_units: int, has_root: bool,
                    recipe: TrainingRecipe, *, sync: int | None, reduce: bool, label: str,
                    micro: int) -> int:
    """Append one micro-step to `tasks`; returns the index of the task the next one waits for."""
    slots = _slots(num_units, has_root)
    gathers = _gathers(num_units, has_root, recipe)
    depth = recipe.prefetch_depth
    root = num_units - 1 if has_root else None

    def add(spec: TaskSpec) -> int:
        tasks.append(replace(spec, micro_step=micro))
        return len(tasks) - 1

    compute: list[int] = []
    ready: dict[int, list[int]] = {}  # consumer slot -> its all_gathers
    g = 0
    for s, (u, back) in enumerate(slots):
        # Gathers whose consumer is at most `depth` slots ahead are issued at slot s's pre-hook.
        while g < len(gathers) and max(gathers[g][2] - depth, 0) <= s:
            gu, gback, consumer = gathers[g]
            after = compute[s - 1] if s >= 1 else sync  # slot c - d - 1 freed its buffer
            ready.setdefault(consumer, []).append(add(_spec(
                f"AG {{unit}}{' bwd' if gback else ''}{label}", COMM_STREAM, "all_gather", gu,
                "all_gather_s", () if after is None else (after,))))
            g += 1
        # The compute stream orders slots; the first slot also waits for the previous micro-step.
        deps = tuple(ready.get(s, ())) + ((sync,) if s == 0 and sync is not None else ())
        compute.append(add(_spec(f"{'B' if back else 'F'} {{unit}}{label}", COMPUTE_STREAM,
                                    "backward" if back else "forward", u,
                                    "backward_s" if back else "forward_s", deps)))
        if reduce and back and u != root:
            add(_spec(f"RS {{unit}}{label}", COMM_STREAM, "reduce_scatter", u, "reduce_scatter_s",
                         (compute[-1],)))
    if reduce and root is not None:  # FSDP2's post-backward callback, after the whole backward
        return add(_spec(f"RS {{unit}}{label}", COMM_STREAM, "reduce_scatter", root,
                         "reduce_scatter_s", (compute[-1],)))
    return len(tasks) - 1 if reduce else compute[-1]


def add_step(graph: TaskGraph, costs: StepCosts, *, accum_steps: int = 1, island: str = "island0",
             after: int | None = None) -> int:
    """Append one FSDP step (k micro-steps + optimizer) to `graph`; returns the optimizer task id.

    `after` is a task the step waits for (e.g. the previous step's optimizer)."""
    ids: list[int] = []
    for spec in costs.plan(accum_steps):
        deps: list[int | None] = [ids[d] for d in spec.deps] or [after]
        name = spec.name.format(unit=costs.units[spec.unit].name if spec.unit is not None else "")
        ids.append(graph.add(name, island=island, stream=spec.stream, kind=spec.kind,
                             duration_s=costs.duration_s(spec), deps=deps))
    if costs.overlap_slowdown != 1.0:
        graph.set_overlap_slowdown(island, costs.overlap_slowdown)
    return ids[-1]


def simulate_step(costs: StepCosts, *, accum_steps: int = 1, island: str = "island0") -> StepResult:
    """Build and simulate one FSDP step of `accum_steps` micro-steps."""
    graph = TaskGraph()
    add_step(graph, costs, accum_steps=accum_steps, island=island)
    schedule = graph.simulate()
    return StepResult(schedule=schedule, accum_steps=accum_steps, step_time_s=schedule.makespan_s,
                      compute_busy_s=schedule.busy_s(comm=False),
                      comm_busy_s=schedule.busy_s(comm=True),
                      exposed_comm_s=schedule.exposed_comm_s(),
                      compute_idle_s=schedule.compute_idle_s())


def step_decomposition(costs: StepCosts) -> StepDecomposition:
    """microstep_s and step_fixed_s from simulating k = 1 and k = 2 (exact; see module doc)."""
    one = simulate_step(costs, accum_steps=1).step_time_s
    two = simulate_step(costs, accum_steps=2).step_time_s
    return StepDecomposition(microstep_s=two - one, step_fixed_s=2 * one - two)


# ---- durations from a hardware profile ------------------------------------------------------

def recompute_fraction(model: ModelSpec, seq_len: int, ac: str, *, whole: bool = False) -> float:
    """Recompute FLOPs of one block as a fraction of its forward FLOPs (0 without checkpointing;
    1 for a block checkpointed whole); the FLOPs come from
    `ModelSpec.block_recompute_flops_per_token` (their one home)."""
    return (model.block_recompute_flops_per_token(seq_len, ac, whole=whole)
            / model.block_forward_flops_per_token(seq_len))


def resolve_recipe(recipe: TrainingRecipe | None, ac: str | None) -> TrainingRecipe:
    """`recipe` (default: torchtitan) with an explicit `ac` applied (legacy keyword)."""
    base = DEFAULT_RECIPE if recipe is None else recipe
    return base if ac is None or ac == base.ac else base.with_overrides(ac=ac)


@dataclass(frozen=True, kw_only=True, slots=True)
class UnitDurations:
    """Durations of the block and root units; each field a float or a numpy array (per
    micro-batch)."""

    block_forward_s: Any
    """Forward of one block."""
    block_backward_s: Any
    """Backward of one block including what the policy recomputes in it (for layer:N: a block
    not checkpointed whole)."""
    whole_backward_s: Any
    """Backward of a block checkpointed whole (its forward recomputed): every block under full,
    every N-th under layer:N."""
    root_forward_s: Any
    """Forward of the root unit (LM head)."""
    root_backward_s: Any
    """Backward of the root unit."""
    optimizer_s: Any
    """Sharded optimizer step of the whole model."""
    block_all_gather_s: float
    """All-gather of one block's parameters in the recipe's param dtype."""
    block_reduce_scatter_s: float
    """Reduce-scatter of one block's gradients in the recipe's reduce dtype."""
    root_all_gather_s: float
    """All-gather of the root unit."""
    root_reduce_scatter_s: float
    """Reduce-scatter of the root unit."""
    recipe: TrainingRecipe
    """The recipe the durations are for."""
    overlap_slowdown: float
    """The profile's compute-communication contention factor (1.0 if it has none)."""


def unit_durations(model: ModelSpec, profile: CostModel, island: IslandSpec, *, seq_len: int,
                   micro_batch: Any, recipe: TrainingRecipe | None = None,
                   ac: str | None = None) -> UnitDurations:
    """Task durations from a profile; `micro_batch` may be an int or a numpy array. `ac`
    overrides the recipe's checkpointing mode."""
    recipe = resolve_recipe(recipe, ac)
    # recompute_factor (profile): recompute runs at its own speed relative to forward
    rf = profile.recompute_factor
    frac = recompute_fraction(model, seq_len, recipe.ac) * rf
    whole_frac = recompute_fraction(model, seq_len, recipe.ac, whole=True) * rf
    units = model.fsdp_units(seq_len)
    block_params, root_params = units[0].params, units[-1].params
    param_bytes, grad_bytes = dtype_bytes(recipe.param_dtype), dtype_bytes(recipe.reduce_dtype)
    slowdown = profile.overlap_slowdown
    check_slowdown(slowdown)

    def compute(phase: str, unit: str) -> Any:
        return profile.compute_time_s(phase, model, seq_len, micro_batch, unit=unit)

    copy_s_per_byte = profile.fsdp_copy_s_per_byte

    def comm(op: str, payload_bytes: float) -> float:
        # A single-GPU island has nothing to gather or reduce.
        if island.num_gpus == 1:
            return 0.0
        # FSDP2 copies the payload once unsharded and once sharded around each collective.
        copy_s = copy_s_per_byte * payload_bytes * (1.0 + 1.0 / island.num_gpus)
        return float(profile.island_comm_time_s(op, island, payload_bytes)) + copy_s

    block_fwd = compute("forward", "block")
    return UnitDurations(
        block_forward_s=block_fwd, block_backward_s=compute("backward", "block") + frac * block_fwd,
        whole_backward_s=compute("backward", "block") + whole_frac * block_fwd,
        root_forward_s=compute("forward", "root"), root_backward_s=compute("backward", "root"),
        optimizer_s=profile.compute_time_s("optimizer", model, seq_len, micro_batch, unit="model",
                                           num_shards=island.num_gpus),
        block_all_gather_s=comm("all_gather", block_params * param_bytes),
        block_reduce_scatter_s=comm("reduce_scatter", block_params * grad_bytes),
        root_all_gather_s=comm("all_gather", root_params * param_bytes),
        root_reduce_scatter_s=comm("reduce_scatter", root_params * grad_bytes),
        recipe=recipe, overlap_slowdown=float(slowdown))


def step_costs(model: ModelSpec, profile: CostModel, island: IslandSpec, *, seq_len: int,
               micro_batch: int, recipe: TrainingRecipe | None = None,
               ac: str | None = None) -> StepCosts:
    """The StepCosts of one island and micro-batch under `recipe` (default torchtitan)."""
    d = unit_durations(model, profile, island, seq_len=seq_len, micro_batch=micro_batch,
                       recipe=recipe, ac=ac)
    layered = d.recipe.checkpoint.mode == "layer"
    blocks = tuple(
        UnitCosts(name=f"block{i}", forward_s=float(d.block_forward_s),
                  backward_s=float(d.whole_backward_s if layered and d.recipe.checkpoint
                                   .checkpointed(i) else d.block_backward_s),
                  all_gather_s=d.block_all_gather_s, reduce_scatter_s=d.block_reduce_scatter_s)
        for i in range(model.num_layers))
    root = UnitCosts(name="root", forward_s=float(d.root_forward_s),
                     backward_s=float(d.root_backward_s), all_gather_s=d.root_all_gather_s,
                     reduce_scatter_s=d.root_reduce_scatter_s)
    return StepCosts(units=(*blocks, root), optimizer_s=float(d.optimizer_s), recipe=d.recipe,
                     overlap_slowdown=d.overlap_slowdown)


def total_compute_s(costs: StepCosts, accum_steps: int) -> float:
    """Compute stream work of a step of k micro-steps (without contention)."""
    return accum_steps * costs.compute_s + costs.optimizer_s


def total_comm_s(costs: StepCosts, accum_steps: int) -> float:
    """Communication stream work of a step of k micro-steps."""
    return sum(costs.duration_s(t) for t in costs.plan(accum_steps) if t.stream == COMM_STREAM)
