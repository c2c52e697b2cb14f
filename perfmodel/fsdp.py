"""FSDP training-step graphs (paper §II Fig. 1, §III-C; DESIGN §2 and §3).

Units are the transformer blocks followed by the root unit (embedding, final norm, LM head;
`ModelSpec.fsdp_units` order). One micro-step runs 2U compute *slots*: forward of units
0..U-1, then backward of units U-1..0. Every slot needs its unit's parameters all-gathered
(reshard after forward, so the backward gathers again). Per island there is one compute stream
and one communication stream (NCCL collectives share the links, so at most one runs).

Schedule rules (FSDP2 as in TorchTitan):

* Prefetch: the all_gather of slot s may start once slot s-2 has finished (its buffer is freed),
  i.e. the communication stream runs at most one unit ahead of compute. The look-ahead is
  applied uniformly, including across the forward/backward boundary.
* Communication order follows the hooks: the prefetch AG(s+1) is issued at slot s's pre-hook,
  the reduce_scatter RS(s) at its post-backward hook, so in backward the stream runs
  AG(s+1), RS(s), AG(s+2), RS(s+1), ...
* Gradient accumulation: k micro-steps; every micro-step repeats all all_gathers; only the
  last micro-step reduce-scatters (gradients of earlier ones accumulate unsharded). The
  sharded optimizer step runs on the compute stream after the last reduce_scatter.
* Micro-step boundary: the first all_gather of a micro-step waits for the previous micro-step's
  compute (FSDP2's root pre-forward makes the all-gather stream wait for the compute stream),
  so no prefetch crosses micro-steps.

Because of that boundary every non-final micro-step is the same shifted schedule, so a step of
k micro-steps takes exactly  T(k) = step_fixed_s + k·microstep_s  with microstep_s the duration of
a non-final micro-step and step_fixed_s = (last micro-step + optimizer) - microstep_s
(`step_decomposition`; tests check it against full graphs for k up to 8).

Activation checkpointing: a block's backward includes recomputing part of its forward, timed as
forward time x (recompute FLOPs / forward FLOPs) of the block from `perfmodel.arch`
(selective: attention core; full: the whole block forward). The root unit is not checkpointed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from perfmodel.arch import ModelSpec
from perfmodel.graph import Schedule, TaskGraph
from perfmodel.hardware import IslandSpec

COMPUTE_STREAM = "compute"
COMM_STREAM = "comm"
DEFAULT_PARAM_BYTES = 2
"""bf16 parameters are all-gathered (mixed precision: bf16 compute copies)."""
DEFAULT_GRAD_BYTES = 4
"""fp32 gradients are reduce-scattered (FSDP2 MixedPrecisionPolicy(reduce_dtype=float32))."""
AC_MODES = ("none", "selective", "full")


class CostModel(Protocol):
    """What the step builder needs from a hardware profile (perfmodel.profile.HardwareProfile)."""

    def compute_time_s(self, phase: str, model: ModelSpec, seq_len: int, micro_batch: Any,
                       unit: str = "model", num_shards: int = 1) -> Any: ...

    def island_comm_time_s(self, op: str, island: IslandSpec, payload_bytes: Any) -> Any: ...


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
    """One all_gather of the unit's parameters (done before forward and again before backward)."""
    reduce_scatter_s: float
    """The reduce_scatter of the unit's gradients (last micro-step only)."""

    def __post_init__(self) -> None:
        for key in ("forward_s", "backward_s", "all_gather_s", "reduce_scatter_s"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"unit {self.name!r}: {key} must be finite and >= 0, got {value}")


@dataclass(frozen=True, kw_only=True, slots=True)
class StepCosts:
    """All durations of an FSDP step: the small object the simulators consume."""

    units: tuple[UnitCosts, ...]
    """Units in forward order (blocks, then root)."""
    optimizer_s: float
    """Sharded optimizer step, once per step."""

    def __post_init__(self) -> None:
        if not self.units:
            raise ValueError("an FSDP step needs at least one unit")
        if not (math.isfinite(self.optimizer_s) and self.optimizer_s >= 0):
            raise ValueError(f"optimizer_s must be finite and >= 0, got {self.optimizer_s}")

    @classmethod
    def uniform(cls, *, num_blocks: int, block: UnitCosts, root: UnitCosts | None,
                optimizer_s: float) -> StepCosts:
        """`num_blocks` identical blocks followed by an optional root unit."""
        blocks = tuple(UnitCosts(name=f"block{i}", forward_s=block.forward_s, backward_s=block.backward_s,
                                 all_gather_s=block.all_gather_s, reduce_scatter_s=block.reduce_scatter_s)
                       for i in range(num_blocks))
        return cls(units=blocks + ((root,) if root is not None else ()), optimizer_s=optimizer_s)

    @property
    def compute_s(self) -> float:
        """Compute of one micro-step (forward + backward of every unit)."""
        return sum(u.forward_s + u.backward_s for u in self.units)

    @property
    def all_gather_s(self) -> float:
        """All-gathers of one micro-step (two per unit)."""
        return sum(2 * u.all_gather_s for u in self.units)

    @property
    def reduce_scatter_s(self) -> float:
        return sum(u.reduce_scatter_s for u in self.units)


@dataclass(frozen=True, kw_only=True, slots=True)
class StepDecomposition:
    """DESIGN §3: T(k) = step_fixed_s + k·microstep_s."""

    microstep_s: float
    """Duration of one non-final gradient-accumulation micro-step."""
    step_fixed_s: float
    """Extra once per step: the last micro-step's reduce_scatter tail and the optimizer."""

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
    """Summed compute durations."""
    comm_busy_s: float
    """Summed communication durations."""
    exposed_comm_s: float
    """Communication not overlapped by compute."""
    compute_idle_s: float
    """Step time minus compute busy time (waiting for communication)."""

    @property
    def comm_idle_s(self) -> float:
        return self.step_time_s - self.comm_busy_s


def slot_units(num_units: int) -> list[tuple[int, bool]]:
    """(unit index, is_backward) for each compute slot of a micro-step."""
    return [(u, False) for u in range(num_units)] + [(u, True) for u in reversed(range(num_units))]


def add_step(graph: TaskGraph, costs: StepCosts, *, accum_steps: int = 1, island: str = "island0",
             after: int | None = None) -> int:
    """Append one FSDP step (k micro-steps + optimizer) to `graph`; returns the optimizer task id.

    `after` is a task the step waits for (e.g. the previous step's optimizer)."""
    if accum_steps < 1:
        raise ValueError(f"accum_steps must be >= 1, got {accum_steps}")
    sync = after
    for micro in range(accum_steps):
        sync = _add_microstep(graph, costs, island=island, sync=sync, final=micro == accum_steps - 1,
                              label=f"m{micro}" if accum_steps > 1 else "")
    return graph.add("optimizer", island=island, stream=COMPUTE_STREAM, kind="optimizer",
                     duration_s=costs.optimizer_s, deps=[sync])


def _add_microstep(graph: TaskGraph, costs: StepCosts, *, island: str, sync: int | None,
                   final: bool, label: str) -> int:
    """Append one micro-step; returns the id of the task the next micro-step waits for."""
    units = costs.units
    slots = slot_units(len(units))
    suffix = f" {label}" if label else ""

    def gather(s: int, dep: int | None) -> int:
        u, back = slots[s]
        return graph.add(f"AG {units[u].name}{' bwd' if back else ''}{suffix}", island=island,
                         stream=COMM_STREAM, kind="all_gather", duration_s=units[u].all_gather_s, deps=[dep])

    compute: list[int] = []
    gathers = [gather(0, sync)]
    last_rs: int | None = None
    for s, (u, back) in enumerate(slots):
        if s + 1 < len(slots):  # prefetch: at most one unit ahead of compute
            gathers.append(gather(s + 1, compute[s - 1] if s >= 1 else sync))
        kind = "backward" if back else "forward"
        compute.append(graph.add(f"{'B' if back else 'F'} {units[u].name}{suffix}", island=island,
                                 stream=COMPUTE_STREAM, kind=kind,
                                 duration_s=units[u].backward_s if back else units[u].forward_s,
                                 deps=[gathers[s]]))
        if final and back:
            last_rs = graph.add(f"RS {units[u].name}", island=island, stream=COMM_STREAM,
                                kind="reduce_scatter", duration_s=units[u].reduce_scatter_s,
                                deps=[compute[s]])
    return last_rs if last_rs is not None else compute[-1]


def simulate_step(costs: StepCosts, *, accum_steps: int = 1, island: str = "island0") -> StepResult:
    """Build and simulate one FSDP step of `accum_steps` micro-steps."""
    graph = TaskGraph()
    add_step(graph, costs, accum_steps=accum_steps, island=island)
    schedule = graph.simulate()
    compute = schedule.busy_s(comm=False)
    return StepResult(schedule=schedule, accum_steps=accum_steps, step_time_s=schedule.makespan_s,
                      compute_busy_s=compute, comm_busy_s=schedule.busy_s(comm=True),
                      exposed_comm_s=schedule.exposed_comm_s(),
                      compute_idle_s=schedule.compute_idle_s())


def step_decomposition(costs: StepCosts) -> StepDecomposition:
    """microstep_s and step_fixed_s from simulating k = 1 and k = 2 (exact; see module doc)."""
    one = simulate_step(costs, accum_steps=1).step_time_s
    two = simulate_step(costs, accum_steps=2).step_time_s
    return StepDecomposition(microstep_s=two - one, step_fixed_s=2 * one - two)


# ---- durations from a hardware profile ------------------------------------------------------

def recompute_fraction(model: ModelSpec, seq_len: int, ac: str) -> float:
    """Recompute FLOPs of one block as a fraction of its forward FLOPs (0 without checkpointing)."""
    if ac not in AC_MODES:
        raise ValueError(f"ac must be one of {AC_MODES}, got {ac!r}")
    block_forward = model.num_layers * model.block_forward_flops_per_token(seq_len)
    return model.recompute_flops_per_token(seq_len, ac) / block_forward


@dataclass(frozen=True, kw_only=True, slots=True)
class UnitDurations:
    """Durations of the block and root units; each field a float or a numpy array (per micro-batch)."""

    block_forward_s: Any
    """Forward of one block."""
    block_backward_s: Any
    """Backward of one block including recompute."""
    root_forward_s: Any
    """Forward of the root unit (LM head)."""
    root_backward_s: Any
    """Backward of the root unit."""
    optimizer_s: Any
    """Sharded optimizer step of the whole model."""
    block_all_gather_s: float
    """All-gather of one block's parameters."""
    block_reduce_scatter_s: float
    """Reduce-scatter of one block's gradients."""
    root_all_gather_s: float
    """All-gather of the root unit."""
    root_reduce_scatter_s: float
    """Reduce-scatter of the root unit."""


def unit_durations(model: ModelSpec, profile: CostModel, island: IslandSpec, *, seq_len: int,
                   micro_batch: Any, ac: str = "none", param_bytes: int = DEFAULT_PARAM_BYTES,
                   grad_bytes: int = DEFAULT_GRAD_BYTES) -> UnitDurations:
    """Task durations from a profile; `micro_batch` may be an int or a numpy array."""
    if param_bytes <= 0 or grad_bytes <= 0:
        raise ValueError(f"param_bytes and grad_bytes must be positive, got {param_bytes}, {grad_bytes}")
    frac = recompute_fraction(model, seq_len, ac)
    units = model.fsdp_units(seq_len)
    block_params, root_params = units[0].params, units[-1].params

    def compute(phase: str, unit: str) -> Any:
        return profile.compute_time_s(phase, model, seq_len, micro_batch, unit=unit)

    def comm(op: str, payload_bytes: int) -> float:
        # A single-GPU island has nothing to gather or reduce.
        return 0.0 if island.num_gpus == 1 else float(profile.island_comm_time_s(op, island, payload_bytes))

    block_fwd = compute("forward", "block")
    return UnitDurations(
        block_forward_s=block_fwd, block_backward_s=compute("backward", "block") + frac * block_fwd,
        root_forward_s=compute("forward", "root"), root_backward_s=compute("backward", "root"),
        optimizer_s=profile.compute_time_s("optimizer", model, seq_len, micro_batch, unit="model",
                                           num_shards=island.num_gpus),
        block_all_gather_s=comm("all_gather", block_params * param_bytes),
        block_reduce_scatter_s=comm("reduce_scatter", block_params * grad_bytes),
        root_all_gather_s=comm("all_gather", root_params * param_bytes),
        root_reduce_scatter_s=comm("reduce_scatter", root_params * grad_bytes))


def step_costs(model: ModelSpec, profile: CostModel, island: IslandSpec, *, seq_len: int,
               micro_batch: int, ac: str = "none", param_bytes: int = DEFAULT_PARAM_BYTES,
               grad_bytes: int = DEFAULT_GRAD_BYTES) -> StepCosts:
    """The StepCosts of one island and micro-batch."""
    d = unit_durations(model, profile, island, seq_len=seq_len, micro_batch=micro_batch, ac=ac,
                       param_bytes=param_bytes, grad_bytes=grad_bytes)
    block = UnitCosts(name="block", forward_s=float(d.block_forward_s), backward_s=float(d.block_backward_s),
                      all_gather_s=d.block_all_gather_s, reduce_scatter_s=d.block_reduce_scatter_s)
    root = UnitCosts(name="root", forward_s=float(d.root_forward_s), backward_s=float(d.root_backward_s),
                     all_gather_s=d.root_all_gather_s, reduce_scatter_s=d.root_reduce_scatter_s)
    return StepCosts.uniform(num_blocks=model.num_layers, block=block, root=root,
                             optimizer_s=float(d.optimizer_s))


def total_compute_s(costs: StepCosts, accum_steps: int) -> float:
    """Compute stream work of a step of k micro-steps."""
    return accum_steps * costs.compute_s + costs.optimizer_s


def total_comm_s(costs: StepCosts, accum_steps: int) -> float:
    """Communication stream work of a step of k micro-steps."""
    return accum_steps * costs.all_gather_s + costs.reduce_scatter_s
