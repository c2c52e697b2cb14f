"""Fast path: the FSDP step schedule of `perfmodel.fsdp`, vectorised over configurations.

The graph simulator schedules each task at max(end of its stream predecessor, end of its
dependencies). For the FSDP step graph those predecessors are known in closed form (see the
rules in `perfmodel.fsdp`), so the schedule reduces to two running clocks — the compute stream
and the communication stream — advanced slot by slot with numpy `maximum` and `+` over all
configurations at once. Only the 2U slots of one micro-step are looped over (in Python), never
tasks, configurations or micro-steps: a non-final micro-step is simulated once, the final one
(with reduce_scatters) once, and T(k) = step_fixed_s + k·microstep_s follows exactly.

The arithmetic is the simulator's own (same maxima, same additions in the same order), so the
two agree to rounding (tests: 1e-9 relative on randomised configurations).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel.arch import ModelSpec
from perfmodel.fsdp import (
    DEFAULT_GRAD_BYTES,
    DEFAULT_PARAM_BYTES,
    CostModel,
    StepCosts,
    unit_durations,
)
from perfmodel.hardware import IslandSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class FastCosts:
    """Durations of T distinct unit types over N configurations, and the unit sequence."""

    forward_s: np.ndarray
    """(T, N) forward time of each unit type."""
    backward_s: np.ndarray
    """(T, N) backward time (with recompute)."""
    all_gather_s: np.ndarray
    """(T, N) one all_gather."""
    reduce_scatter_s: np.ndarray
    """(T, N) one reduce_scatter."""
    optimizer_s: np.ndarray
    """(N,) optimizer step."""
    unit_types: tuple[int, ...]
    """Type index of each unit in forward order (length U)."""

    def __post_init__(self) -> None:
        shape = self.forward_s.shape
        if len(shape) != 2 or not self.unit_types:
            raise ValueError(f"need (T, N) duration arrays and >= 1 unit, got shape {shape}")
        for key in ("backward_s", "all_gather_s", "reduce_scatter_s"):
            if getattr(self, key).shape != shape:
                raise ValueError(f"{key} has shape {getattr(self, key).shape}, expected {shape}")
        if self.optimizer_s.shape != shape[1:]:
            raise ValueError(f"optimizer_s has shape {self.optimizer_s.shape}, expected {shape[1:]}")
        if min(self.unit_types) < 0 or max(self.unit_types) >= shape[0]:
            raise ValueError(f"unit_types must index 0..{shape[0] - 1}")

    @property
    def size(self) -> int:
        return int(self.forward_s.shape[1])

    @classmethod
    def from_step_costs(cls, costs: Sequence[StepCosts]) -> FastCosts:
        """Stack configurations with the same number of units (one type per unit position)."""
        num_units = {len(c.units) for c in costs}
        if len(num_units) != 1:
            raise ValueError(f"configurations must share the unit count, got {sorted(num_units)}")

        def grid(key: str) -> np.ndarray:
            return np.array([[getattr(u, key) for u in c.units] for c in costs], dtype=float).T

        return cls(forward_s=grid("forward_s"), backward_s=grid("backward_s"),
                   all_gather_s=grid("all_gather_s"), reduce_scatter_s=grid("reduce_scatter_s"),
                   optimizer_s=np.array([c.optimizer_s for c in costs], dtype=float),
                   unit_types=tuple(range(num_units.pop())))


@dataclass(frozen=True, kw_only=True, slots=True)
class FastStep:
    """Vectorised step quantities (each an (N,) array)."""

    microstep_s: np.ndarray
    """One non-final micro-step."""
    step_fixed_s: np.ndarray
    """Last micro-step's extra + optimizer."""
    microstep_compute_s: np.ndarray
    """Compute work of one micro-step."""
    microstep_comm_s: np.ndarray
    """All-gather work of one micro-step."""
    reduce_scatter_s: np.ndarray
    """Reduce-scatter work of a step (once)."""
    optimizer_s: np.ndarray
    """Optimizer work of a step (once)."""

    def step_time_s(self, accum_steps: Any = 1) -> np.ndarray:
        return self.step_fixed_s + np.asarray(accum_steps) * self.microstep_s

    def compute_busy_s(self, accum_steps: Any = 1) -> np.ndarray:
        return np.asarray(accum_steps) * self.microstep_compute_s + self.optimizer_s

    def comm_busy_s(self, accum_steps: Any = 1) -> np.ndarray:
        return np.asarray(accum_steps) * self.microstep_comm_s + self.reduce_scatter_s


def fast_step(costs: FastCosts) -> FastStep:
    """Evaluate the FSDP step schedule for every configuration in `costs`."""
    types = costs.unit_types
    num_units = len(types)
    slots = [(types[u], False) for u in range(num_units)] + [(types[u], True) for u in reversed(range(num_units))]
    ag, rs = costs.all_gather_s, costs.reduce_scatter_s
    zero = np.zeros(costs.size)

    # Forward slots are common to the non-final and the final micro-step.
    comm, comp = ag[slots[0][0]].copy(), zero
    gathers, ends = [comm], []
    for s in range(num_units):
        comm = np.maximum(comm, ends[s - 1] if s >= 1 else zero) + ag[slots[s + 1][0]]
        gathers.append(comm)
        comp = np.maximum(comp, gathers[s]) + costs.forward_s[slots[s][0]]
        ends.append(comp)

    def backward(final: bool) -> tuple[np.ndarray, np.ndarray]:
        comm_b, comp_b, g, e = comm, comp, list(gathers), list(ends)
        for s in range(num_units, 2 * num_units):
            if s + 1 < 2 * num_units:
                comm_b = np.maximum(comm_b, e[s - 1]) + ag[slots[s + 1][0]]
                g.append(comm_b)
            unit = slots[s][0]
            comp_b = np.maximum(comp_b, g[s]) + costs.backward_s[unit]
            e.append(comp_b)
            if final:
                comm_b = np.maximum(comm_b, comp_b) + rs[unit]
        return comp_b, comm_b

    micro, _ = backward(final=False)
    last_comp, last_comm = backward(final=True)
    final = np.maximum(last_comp, last_comm) + costs.optimizer_s
    idx = np.asarray(types)
    return FastStep(
        microstep_s=micro, step_fixed_s=final - micro,
        microstep_compute_s=(costs.forward_s[idx] + costs.backward_s[idx]).sum(axis=0),
        microstep_comm_s=2 * ag[idx].sum(axis=0), reduce_scatter_s=rs[idx].sum(axis=0),
        optimizer_s=costs.optimizer_s)


def model_fast_costs(model: ModelSpec, profile: CostModel, island: IslandSpec, *, seq_len: int,
                     micro_batches: np.ndarray, ac: str = "none", param_bytes: int = DEFAULT_PARAM_BYTES,
                     grad_bytes: int = DEFAULT_GRAD_BYTES) -> FastCosts:
    """FastCosts of one model and island over an array of micro-batches (types: block, root)."""
    mb = np.asarray(micro_batches)
    d = unit_durations(model, profile, island, seq_len=seq_len, micro_batch=mb, ac=ac,
                       param_bytes=param_bytes, grad_bytes=grad_bytes)
    n = mb.shape[0]

    def pair(block: Any, root: Any) -> np.ndarray:
        return np.stack([np.broadcast_to(np.asarray(block, dtype=float), (n,)),
                         np.broadcast_to(np.asarray(root, dtype=float), (n,))])

    return FastCosts(
        forward_s=pair(d.block_forward_s, d.root_forward_s),
        backward_s=pair(d.block_backward_s, d.root_backward_s),
        all_gather_s=pair(d.block_all_gather_s, d.root_all_gather_s),
        reduce_scatter_s=pair(d.block_reduce_scatter_s, d.root_reduce_scatter_s),
        optimizer_s=np.broadcast_to(np.asarray(d.optimizer_s, dtype=float), (n,)).copy(),
        unit_types=(0,) * model.num_layers + (1,))
