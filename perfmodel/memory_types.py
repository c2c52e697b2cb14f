"""Configuration and results of the per-GPU memory model (`perfmodel.memory`, which re-exports
them).

`MemoryConfig` holds the model's constants the recipe does not set (allocator reserve, RMSNorm
saves, legacy dtype overrides); `MemoryBreakdown` is the predicted peak of one GPU by component
(one per FSDPMemTracker category, `COMPONENTS`); `MemoryCoefficients` is the closed form of the
peak as a function of the micro-batch: every phase of a step is affine in it, so
peak(m) = (1 + reserve_fraction)·max_i(fixed_i + m·per_sequence_i) + reserve_bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from perfmodel.errors import UserInputError
from perfmodel.hardware import GIB


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryConfig:
    """Constants of the memory model that the recipe does not set."""

    reserve_bytes: int = 512 * 2**20
    """Fixed reserve outside the tracked tensors: cuBLAS/cuDNN workspaces and NCCL buffers
    (512 MiB). The CUDA context is already excluded by the GPU's usable memory."""
    reserve_fraction: float = 0.05
    """Caching-allocator fragmentation, as a fraction of the tracked peak."""
    rms_norm_fp32_saves: bool = True
    """RMSNorm as torch composes it (CPU, and the tracker's fake CPU tensors) saves the fp32
    upcast input and normalised tensor (8h + 4 B/token); a fused CUDA kernel saves only the
    input and rstd (b·h + 4). True matches the ground-truth tracker."""
    compute_param_bytes: float | None = None
    """Legacy override of the compute (param dtype) element size; None: the recipe's."""
    reduce_grad_bytes: float | None = None
    """Legacy override of the reduce dtype element size; None: the recipe's."""
    activation_bytes: float | None = None
    """Legacy alias of `compute_param_bytes` (activations are in the compute dtype)."""
    logits_bytes: float | None = None
    """Legacy alias of `compute_param_bytes` for the logits."""

    def __post_init__(self) -> None:
        if isinstance(self.reserve_bytes, bool) or not isinstance(self.reserve_bytes, int) \
                or self.reserve_bytes < 0:
            raise UserInputError(f"MemoryConfig.reserve_bytes is {self.reserve_bytes!r}",
                                 hint="set reserve_bytes to a byte count >= 0.")
        if not isinstance(self.reserve_fraction, int | float) or not 0 <= self.reserve_fraction < 1:
            raise UserInputError(f"MemoryConfig.reserve_fraction is {self.reserve_fraction!r}",
                                 hint="set reserve_fraction in [0, 1).")
        for name in ("compute_param_bytes", "reduce_grad_bytes", "activation_bytes",
                     "logits_bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise UserInputError(f"MemoryConfig.{name} is {value!r}",
                                     hint=f"leave {name} unset or give a byte count > 0.")


DEFAULT_CONFIG = MemoryConfig()
"""The documented defaults."""

COMPONENTS = ("sharded_params", "optimizer_states", "sharded_grads", "unsharded_params",
              "unsharded_grads", "all_gather", "reduce_scatter", "activations", "temporaries",
              "outer_states")
"""Tracked components, one per FSDPMemTracker category (Sharded Param, OptState, Sharded Grad,
Unsharded Param, Unsharded Grad, All Gather, Reduce Scatter, Activation + Inputs, Temp), and
the DiLoCo outer optimizer state, which plain FSDP training (and the tracker) does not have."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryBreakdown:
    """Predicted memory of one GPU at its peak phase, by component, in bytes."""

    num_gpus: int
    """G: GPUs sharing the states (the FSDP island)."""
    seq_len: int
    """S: tokens per sequence."""
    micro_batch: int
    """m: sequences per GPU per micro-step."""
    accum_steps: int
    """k: micro-steps per optimizer step."""
    ac: str
    """Activation checkpointing mode."""
    accum_mode: str
    """Gradient accumulation mode."""
    phase: str
    """The phase of the step at which the peak occurs."""
    sharded_params_bytes: int
    """Master parameter shards (Sharded Param)."""
    optimizer_states_bytes: int
    """AdamW moment shards (OptState)."""
    sharded_grads_bytes: int
    """Gradient shards alive at the peak (Sharded Grad)."""
    unsharded_params_bytes: int
    """Gathered parameters of the units unsharded at the peak (Unsharded Param)."""
    unsharded_grads_bytes: int
    """Unsharded gradients handed to a post-backward reduce-scatter (Unsharded Grad)."""
    all_gather_bytes: int
    """All-gather output buffer of the last gathered / prefetched unit (All Gather)."""
    reduce_scatter_bytes: int
    """Reduce-scatter input of the previous unit, still alive (Reduce Scatter)."""
    activations_bytes: int
    """Tensors saved in forward for backward, and the input tokens (Activation, Inputs)."""
    temporaries_bytes: int
    """Tensors created in backward: gradients of activations and logits, recomputed activations,
    gradients not yet reduced, no-sync accumulated gradients, a reduce-scatter input (Temp)."""
    outer_states_bytes: int
    """DiLoCo outer optimizer state when asked: fp32 global copy + Nesterov momentum, 8 B/param
    sharded over the island (0 for plain FSDP)."""
    reserve_bytes: int
    """Allocator and workspace reserve (not tracked by FSDPMemTracker)."""

    def components(self) -> dict[str, int]:
        """Component name (without `_bytes`) -> bytes, the reserve last."""
        return {f.name.removesuffix("_bytes"): getattr(self, f.name)
                for f in fields(self) if f.name.endswith("_bytes")}

    @property
    def tracked_bytes(self) -> int:
        """The peak FSDPMemTracker would report: every component but the reserve."""
        return self.peak_bytes - self.reserve_bytes

    @property
    def peak_bytes(self) -> int:
        """Predicted peak: the sum of all components."""
        return sum(self.components().values())

    def as_gib(self) -> dict[str, float]:
        """Components and the peak in GiB."""
        out = {k: v / GIB for k, v in self.components().items()}
        out["peak"] = self.peak_bytes / GIB
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryCoefficients:
    """peak(m) = (1 + reserve_fraction)·max_i(fixed_i + m·per_sequence_i) + reserve_bytes."""

    fixed_bytes: tuple[float, ...]
    """Per phase: bytes independent of the micro-batch."""
    per_sequence_bytes: tuple[float, ...]
    """Per phase: bytes added by each sequence of the micro-batch."""
    reserve_bytes: int
    """Fixed reserve."""
    reserve_fraction: float
    """Fragmentation reserve as a fraction of the tracked peak."""

    def peak_bytes(self, micro_batch: Any) -> Any:
        """Peak for an int or a numpy array of micro-batches (int bytes / int64 array)."""
        m = np.asarray(micro_batch, dtype=float)
        tracked = np.max([f + m * s for f, s in zip(self.fixed_bytes, self.per_sequence_bytes,
                                                     strict=True)], axis=0)
        peak = np.floor(tracked) + np.floor(self.reserve_fraction * np.floor(tracked)) \
            + self.reserve_bytes
        return int(peak) if peak.ndim == 0 else peak.astype(np.int64)

    def max_micro_batch(self, memory_bytes: int) -> int:
        """Largest m >= 0 with peak_bytes(m) <= memory_bytes."""
        budget = (memory_bytes - self.reserve_bytes) / (1.0 + self.reserve_fraction)
        limits = [math.floor((budget - f) / s) if s > 0 else (math.inf if f <= budget else -1)
                  for f, s in zip(self.fixed_bytes, self.per_sequence_bytes, strict=True)]
        m = min(limits)
        return 0 if m < 1 else int(min(m, 2**31))
