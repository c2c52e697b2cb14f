"""Per-GPU memory model under FSDP and the largest micro-batch that fits (DESIGN §2).

One GPU of a G-way FSDP island training a micro-batch of m sequences of length S holds
(tokens = m·S; every figure is bytes; defaults in `MemoryConfig`):

Fixed part (independent of the micro-batch)
  * sharded training states, ceil(P/G) parameters per rank (FSDP pads shards to equal size):
    fp32 master parameters 4 B, fp32 gradients 4 B, Adam first and second moments 4 + 4 B,
    i.e. 16 B/param / G. The bf16 compute copies are not kept; they are the gathered units below.
  * unsharded bf16 parameters of the unit that computes and of the one prefetched:
    2 x largest FSDP unit x 2 B.
  * reduce-scatter buffer: the unsharded bf16 gradient of one unit being reduce-scattered
    (largest unit x 2 B). Assumption: reduce dtype bf16 and one reduce-scatter in flight; its
    sharded result is accumulated into the fp32 gradients already counted.
  * runtime reserve: caching-allocator fragmentation, cuBLAS/cuDNN workspaces (a constant).

Per-token part: activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", §4, generalised to GQA, gated MLPs and any head dim; bf16, no dropout).
With h hidden, q = a·d query width, k = a_kv·d key/value width, f MLP width, n norms per block,
one layer saves per token:
  * norms:    n x (2h input + 2h output); a norm's output is the input of the next linear(s)
              (QKV projection, first MLP linear; Phi's single norm feeds both)
  * attention: Q 2q + K 2k (for QKᵀ), V 2k (for AV), attention output 2q (out-projection input)
  * scores:   softmax output 2·a·S (per token: a rows of S scores; no dropout, so the softmax
              output is the AV input and is stored once)
  * MLP:      gated (SwiGLU/GeGLU): gate output 2f, up output 2f, activation output 2f,
              product 2f = 8f; plain: activation input 2f + output 2f = 4f
With Korthikanti's MHA, f = 4h, plain MLP this is 32h + 2aS, i.e. their 34sbh + 5as²b per
sequence less the dropout masks (2h + aS) and the dropout output (2aS).
  * "none":      the whole set above for every layer. The scores term models eager attention
                 (materialised softmax); with SDPA/flash kernels the scores are never stored, so
                 a flash run without checkpointing is closer to "selective" (conservative choice).
  * "selective": drops the scores term (attention core recomputed, Korthikanti selective
                 recompute); recomputing one layer's core materialises that layer's scores once
                 (`recompute_bytes`). Flash kernels' softmax statistics (4·a B/token) are ignored.
  * "full":      only each block's input (2h) is stored, plus one layer's complete "none" working
                 set while that layer is recomputed in backward (`recompute_bytes`).
  Outside the blocks: final-norm input 2h + LM-head input 2h per token.
Logits: V per token as bf16 LM-head output (2 B) + fp32 copy for the loss (4 B) + fp32 gradient
of the logits in backward (4 B) = 10·V B/token. Assumption: the loss is not fused or chunked.

The peak is the sum of all components (conservative: they nearly coincide at the start of the
backward pass, when all activations, the logits and their gradient are alive). Every component is
linear in the micro-batch, so `MemoryCoefficients` gives a cheap (vectorisable) peak.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from perfmodel.arch import ModelSpec
from perfmodel.errors import UserInputError
from perfmodel.hardware import GIB

logger = logging.getLogger(__name__)

AC_MODES = ("none", "selective", "full")
"""Activation checkpointing modes."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryConfig:
    """Bytes per stored element and constants of the memory model (defaults: bf16 mixed precision
    with fp32 master weights and Adam, as in FSDP2 `MixedPrecisionPolicy(param_dtype=bf16)`)."""

    master_param_bytes: int = 4
    """Sharded fp32 master copy of each parameter."""
    grad_bytes: int = 4
    """Sharded fp32 gradient of each parameter."""
    optimizer_state_bytes: int = 8
    """Sharded optimizer state per parameter (Adam: two fp32 moments)."""
    compute_param_bytes: int = 2
    """Unsharded (all-gathered) parameter element, bf16."""
    gathered_units: int = 2
    """FSDP units held unsharded at once: the computing one and the prefetched one."""
    reduce_grad_bytes: int = 2
    """Unsharded gradient element of the unit being reduce-scattered, bf16."""
    reduce_units: int = 1
    """Units whose unsharded gradient is held for reduce-scatter at once."""
    activation_bytes: int = 2
    """Stored activation element, bf16."""
    logits_bytes: int = 2
    """LM-head output element, bf16."""
    loss_logits_bytes: int = 4
    """fp32 copy of the logits the loss is computed on."""
    logits_grad_bytes: int = 4
    """fp32 gradient of the logits during backward."""
    reserve_bytes: int = GIB
    """Runtime reserve: allocator fragmentation and library workspaces (1 GiB). CUDA context and
    NCCL buffers are already excluded by the GPU's usable memory."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UserInputError(f"MemoryConfig.{name} must be a non-negative integer, got {value!r}",
                                     hint=f"set {name} to a byte count >= 0.")


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryBreakdown:
    """Predicted memory of one GPU, by component, in bytes."""

    num_gpus: int
    """G: GPUs sharing the states (the FSDP island)."""
    seq_len: int
    """S: tokens per sequence."""
    micro_batch: int
    """m: sequences per GPU per micro-step."""
    ac: str
    """Activation checkpointing mode."""
    master_params_bytes: int
    """Sharded fp32 master parameters."""
    grads_bytes: int
    """Sharded fp32 gradients."""
    optimizer_states_bytes: int
    """Sharded optimizer states."""
    unsharded_params_bytes: int
    """bf16 parameters of the gathered (current + prefetched) units."""
    reduce_scatter_bytes: int
    """bf16 unsharded gradient of the unit being reduce-scattered."""
    activations_bytes: int
    """Activations saved for backward by all layers and the final norm."""
    recompute_bytes: int
    """Transient working set of the layer being recomputed (selective / full)."""
    logits_bytes: int
    """Logits (bf16), their fp32 copy for the loss and its fp32 gradient."""
    reserve_bytes: int
    """Runtime reserve."""

    def __post_init__(self) -> None:
        negative = [k for k, v in self.components().items() if v < 0]
        if negative:
            raise UserInputError(f"negative memory component(s) {negative}", hint="check MemoryConfig.")

    def components(self) -> dict[str, int]:
        """Component name (without `_bytes`) -> bytes."""
        return {f.name.removesuffix("_bytes"): getattr(self, f.name)
                for f in fields(self) if f.name.endswith("_bytes")}

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
    """peak_bytes(m) = fixed_bytes + m · per_sequence_bytes (the model is linear in m)."""

    fixed_bytes: int
    """Bytes independent of the micro-batch (states, gathered units, buffers, reserve)."""
    per_sequence_bytes: int
    """Bytes added by each sequence of the micro-batch (activations, recompute, logits)."""

    def peak_bytes(self, micro_batch: Any) -> Any:
        """Peak for an int or a numpy array of micro-batches."""
        return self.fixed_bytes + micro_batch * self.per_sequence_bytes

    def max_micro_batch(self, memory_bytes: int) -> int:
        """Largest m >= 0 with peak_bytes(m) <= memory_bytes."""
        if memory_bytes < self.fixed_bytes + self.per_sequence_bytes:
            return 0
        return (memory_bytes - self.fixed_bytes) // self.per_sequence_bytes


DEFAULT_CONFIG = MemoryConfig()
"""The documented defaults."""


# ---- validation ---------------------------------------------------------------------------

def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserInputError(f"{name} must be a positive integer, got {value!r}",
                             hint=f"give {name} >= 1.")
    return value


def _check_ac(ac: str) -> str:
    if ac not in AC_MODES:
        raise UserInputError(f"activation checkpointing mode must be one of {AC_MODES}, got {ac!r}",
                             hint="use none, selective or full.")
    return ac


# ---- per-token activation terms -------------------------------------------------------------

def layer_activation_elements(model: ModelSpec, seq_len: int) -> dict[str, int]:
    """Elements one layer saves per token with no checkpointing, by term (see module doc)."""
    h, q, k, f = model.hidden_size, model.q_dim, model.kv_dim, model.intermediate_size
    return {
        "norms": model.norms_per_block * 2 * h,
        "attention": 2 * q + 2 * k,
        "scores": model.num_heads * seq_len,
        "mlp": (4 if model.gated_mlp else 2) * f,
    }


def activation_bytes_per_token(model: ModelSpec, seq_len: int, ac: str,
                               config: MemoryConfig = DEFAULT_CONFIG) -> tuple[int, int]:
    """(saved bytes per token over all layers + final norm, recompute working set per token)."""
    terms = layer_activation_elements(model, seq_len)
    layer = sum(terms.values()) * config.activation_bytes
    root = 2 * model.hidden_size * config.activation_bytes
    if ac == "none":
        return model.num_layers * layer + root, 0
    scores = terms["scores"] * config.activation_bytes
    if ac == "selective":
        return model.num_layers * (layer - scores) + root, scores
    block_input = model.hidden_size * config.activation_bytes
    return model.num_layers * block_input + root, layer


def logits_bytes_per_token(model: ModelSpec, config: MemoryConfig = DEFAULT_CONFIG) -> int:
    """Logits, their fp32 loss copy and fp32 gradient per token."""
    per_element = config.logits_bytes + config.loss_logits_bytes + config.logits_grad_bytes
    return model.vocab_size * per_element


# ---- fixed terms ---------------------------------------------------------------------------

def _fixed_components(model: ModelSpec, num_gpus: int, config: MemoryConfig) -> dict[str, int]:
    shard = math.ceil(model.total_params / num_gpus)
    largest_unit = max(u.params for u in model.fsdp_units(1))
    return {
        "master_params_bytes": shard * config.master_param_bytes,
        "grads_bytes": shard * config.grad_bytes,
        "optimizer_states_bytes": shard * config.optimizer_state_bytes,
        "unsharded_params_bytes": config.gathered_units * largest_unit * config.compute_param_bytes,
        "reduce_scatter_bytes": config.reduce_units * largest_unit * config.reduce_grad_bytes,
        "reserve_bytes": config.reserve_bytes,
    }


def _token_components(model: ModelSpec, seq_len: int, ac: str, config: MemoryConfig) -> dict[str, int]:
    saved, recompute = activation_bytes_per_token(model, seq_len, ac, config)
    return {"activations_bytes": saved, "recompute_bytes": recompute,
            "logits_bytes": logits_bytes_per_token(model, config)}


# ---- public API ------------------------------------------------------------------------------

def memory_breakdown(model: ModelSpec, *, num_gpus: int, seq_len: int, micro_batch: int,
                     ac: str = "none", config: MemoryConfig = DEFAULT_CONFIG) -> MemoryBreakdown:
    """Predicted per-GPU memory of FSDP training with `num_gpus`-way sharding."""
    _positive("num_gpus", num_gpus)
    _positive("seq_len", seq_len)
    _positive("micro_batch", micro_batch)
    _check_ac(ac)
    tokens = micro_batch * seq_len
    per_token = _token_components(model, seq_len, ac, config)
    breakdown = MemoryBreakdown(
        num_gpus=num_gpus, seq_len=seq_len, micro_batch=micro_batch, ac=ac,
        **_fixed_components(model, num_gpus, config),
        **{k: v * tokens for k, v in per_token.items()})
    logger.debug("%s G=%d S=%d m=%d ac=%s: peak %.3f GiB", model.name, num_gpus, seq_len,
                 micro_batch, ac, breakdown.peak_bytes / GIB)
    return breakdown


def memory_coefficients(model: ModelSpec, *, num_gpus: int, seq_len: int, ac: str = "none",
                        config: MemoryConfig = DEFAULT_CONFIG) -> MemoryCoefficients:
    """The peak as fixed + m · per-sequence bytes: the cheap path for sweeps and the planner."""
    _positive("num_gpus", num_gpus)
    _positive("seq_len", seq_len)
    _check_ac(ac)
    fixed = sum(_fixed_components(model, num_gpus, config).values())
    per_token = sum(_token_components(model, seq_len, ac, config).values())
    return MemoryCoefficients(fixed_bytes=fixed, per_sequence_bytes=per_token * seq_len)


def max_micro_batch(model: ModelSpec, *, gpu_memory_bytes: int, num_gpus: int, seq_len: int,
                    ac: str = "none", config: MemoryConfig = DEFAULT_CONFIG) -> int:
    """Largest micro-batch m >= 0 whose predicted peak fits in `gpu_memory_bytes` (0: not even
    m = 1 fits). No upper cap: any memory size works ("what would a bigger GPU give?").

    The closed form from `memory_coefficients` is confirmed against `memory_breakdown`
    (peak(m) <= memory < peak(m + 1)), walking in the monotone direction if they ever disagree.
    """
    _positive("gpu_memory_bytes", gpu_memory_bytes)
    coeffs = memory_coefficients(model, num_gpus=num_gpus, seq_len=seq_len, ac=ac, config=config)
    m = coeffs.max_micro_batch(gpu_memory_bytes)

    def fits(n: int) -> bool:
        return n == 0 or memory_breakdown(model, num_gpus=num_gpus, seq_len=seq_len, micro_batch=n,
                                          ac=ac, config=config).peak_bytes <= gpu_memory_bytes

    while m > 0 and not fits(m):
        m -= 1
    while fits(m + 1):
        m += 1
    return m
