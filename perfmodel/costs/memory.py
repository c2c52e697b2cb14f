"""Per-GPU memory of FSDP2 training as the recipe trains it, and the largest micro-batch that fits.

The model follows what PyTorch allocates (validated against `FSDPMemTracker`, see
`perfmodel.profiles.memory_validation` and `shardmeter bench memory`): the peak of a training step
is the
largest of a few *phases*, each a sum of tensors alive at that moment. With G ranks, P parameters
(P_r in the root unit: embedding, final norm, LM head; P_b per block), L blocks, t = m·S tokens,
b = bytes of the recipe's param dtype, r = bytes of its reduce dtype (DTYPE_BYTES):

States (every phase): master shards 4·P/G (padded per parameter like FSDP2), AdamW moments
8·P/G; sharded gradients 4·P/G once a reduce-scatter has produced them (reduce-scatter mode from
the second micro-step on); in no-sync mode the unsharded gradients of every unit, accumulated in
the reduce dtype (r·P), from the second micro-step on.

Activations saved per token and block (b-byte tensors unless noted; SDPA/flash kernels keep Q, K,
V, the output and a 4-byte log-sum-exp per head, never the S×S scores):
  * none: per norm its saved inputs (RMSNorm as torch composes it: the fp32 upcast input and the
    fp32 normalised tensor, 8h + 4 B; LayerNorm: the input plus mean and rstd) and its output;
    attention Q, K, V, output (2q + 2kv elements) and log-sum-exp; MLP gate, up, activation and
    product outputs (4f; plain MLP: 2f).
  * selective (torchtitan's op-level policy, `perfmodel.bench.recipe_wrap.selective_policy`):
    the block input, the outputs of every other matmul (q, v, gate, down projections), the SDPA
    output and log-sum-exp; the rest is recomputed block by block in backward.
  * full: the block input only; the whole block is recomputed in backward.
  Eager attention (recipe.attention == "eager") adds the softmax output, a·S elements per token.
  Sliding-window layers (Mistral, Gemma-3, StarCoder2) save what global layers save: SDPA keeps no
  S×S scores either way, and eager attention materialises the full masked S×S scores. q/k norms
  (Qwen3, Gemma-3, OLMo-2) and learned positions (GPT-2) are in the parameter shards; a q/k
  RMSNorm saves what a block norm saves over the q and k widths, one statistic per head
  (`qk_norm_saved_bytes`; checked on the Qwen3-30B-A3B rows of the MoE tracker grids, the only
  q/k-norm family the trackers run).
  MLA models are refused (`ModelSpec.check_step_modelled`). Mixture-of-experts models
  (`_moe_sizes`, `_moe_activation_spec`): blocks carry the layers' mean (`perfmodel.spec.arch`).
  States: the dense part of each layer (attention, norms, router, shared experts, dense MLPs)
  sharded over the G = dp_shard · cp ranks as above; the routed experts split over ep ranks and
  each rank's E/ep experts FSDP-sharded over the G/ep ranks holding them, so every rank keeps
  1/G of them too (masters, moments and sharded gradients are the same whatever ep); what ep
  shrinks is the unsharded side: a block's all-gather buffer, its unsharded parameters and its
  bf16 gradients hold the dense part plus E/ep experts instead of all E. Activations per token
  of an MoE layer: the MLP terms of a dense MLP whose width is the k routed experts' (times
  the capacity factor, or the load imbalance under ep > 1: the busiest rank) plus the shared
  experts'; plus, when the block is not checkpointed whole, the k dispatched copies of the
  token (the grouped GEMM's input: k·h elements times the capacity factor) and the k expert
  outputs before the weighted combine (k·h elements), the fp32 router logits and scores
  (2·E) and the top-k indices and weights (12 B each). Under ep > 1 the experts are their
  own FSDP unit (torchtitan), back-propagated and reduce-scattered before the rest of their
  block (`_experts_reduce`: their bf16 gradients and reduce-scatter input at once, the experts
  already resharded): until then their new gradient shard does not exist (the block's
  widest backward moments, inside its experts' backward or its recompute, are before it) and
  the reduce-scatter input still alive is the previous block's dense part only; the rest of
  the block's post-backward then holds the experts' reduce-scatter input, which FSDP2 keeps
  until the next reduce-scatter, beside its own (FSDPMemTracker timelines of Mixtral-8x7B at
  ep 2). A block checkpointed whole adds one moment, the end of its recomputed forward in
  backward (`recompute_end_bytes`): all it saves unchecked, its hidden-width forward outputs
  still referenced and, in an MoE layer, the combine's k-fold tensors (the expert outputs
  with the zero row, the weighted rows and the gradient flowing into the combine): wider
  than the MLP's backward for an MoE layer, narrower for a dense one (f > 2h). Two moments
  belong to MoE layers whatever the checkpointing: inside a forward (or a whole block's
  recompute), the dispatch's widest op, where the slot-sized rows of the
  dispatch, the experts and the combine are alive at once (`moe_dispatch_peak_bytes`: at the
  combine all-to-all under ep > 1, six R-row tensors with R = k·capacity factor slots per
  token); and the end of the routed experts' backward, their bf16 weight gradients alive
  beside three R-row gradient-side tensors (`experts_backward_bytes`). With many small experts
  (Qwen3-30B-A3B: R = 12 at capacity factor 1.5) these are a stage's peak (FSDPMemTracker
  timelines of the MoE stage held-out draw). Checked by: tests/test_moe_step.py (against
  FSDPMemTracker on catalogs/profiles/data/memory-tracker-moe.csv, `perfmodel.bench.memory_moe`:
  fixed-capacity routing, two real-width model shapes, EP 1-8).
  MoE pipeline stages (pp > 1, tp = 1). Claim: a stage prices its blocks by global block index
  with the terms above, one layer at a time rather than the mean block: an MoE layer's FSDP
  unit is its dense part (`_moe_layer_params`, padded per tensor) plus its E/ep experts, of
  which each rank keeps the exact 1/(dp_shard·cp) (`_stage_units`); it saves and works as its
  activations' dense twin (`_moe_layer_activation_spec`) plus `moe_layer_saved_bytes` unless
  checkpointed whole, and a block recomputed whole has its `recompute_end_bytes` moment; the
  routed-token factor is `moe_token_factor`'s. Why: torchtitan applies EP and FSDP per model
  part under PP (EP over ep ranks borrowed from each pipeline rank's dp_shard, the experts
  FSDP-sharded over dp_shard/ep, their own unit under ep > 1), so a stage holds what the pp = 1
  model prices for its layers, walked through the schedule as dense stages are; the experts'
  own unit is priced inside its block's (their gradients are converted and kept as the
  block's until REDUCE_GRAD). Checked by: tests/test_memory_moe_pipeline.py (against
  FSDPMemTracker on catalogs/profiles/data/memory-tracker-moe-pipeline.csv and its held-out
  draw, `perfmodel.bench.pipeline_memory` with MoE stages: MAPE <= 3 %, no row beyond 8 %;
  a live dense-then-MoE run, states to the byte; the CLI's per-stage states).
Loss, unfused, as `perfmodel.bench.model` computes it: bf16 logits (b·V), their fp32 copy and the
fp32 log-softmax (saved) at the end of forward; at the start of backward the log-softmax and the
fp32 gradients of the NLL and of the log-softmax (12·V B/token). `chunked` divides the logits
terms by the number of chunks; `fused` keeps one chunk's bf16 logits only. (The project's torch
model computes SDPA attention and the unfused loss, so eager attention and the chunked / fused
losses are estimates the tracker does not check.)

Phases (the last micro-step of a step; `MemoryBreakdown.phase` names the peak one):
  * forward_end: states, root and last block unsharded (FSDP2 keeps them for backward), the
    all-gather buffer of the last gathered block, all saved activations, the forward logits.
  * loss_backward: the same with the backward logits terms instead (usually the peak).
  * block_backward(j): block j recomputed (selective/full) and back-propagated through its MLP
    (the widest moment), the blocks below it still saved, the LM head's gradient, the prefetched
    block's all-gather buffer, the previous block's reduce-scatter input, the shards reduced so far.
  * block_reduce(j): block j's post-backward, its bf16 gradients plus the r-byte reduce-scatter
    input. block phases are affine in j between the ends, so j in {0, 1, L-2, L-1} covers them.
  * embedding_backward: the root still gathered, the last block's reduce-scatter input, the LM
    head's and the embedding's gradients (tied weights: and their accumulated sum).
  * root_reduce: the root's gradients (b) plus its reduce-scatter input (r) at the end of backward.
  * optimizer_step: fused AdamW, master + gradient + moment shards.
Outside the tracked tensors a reserve is added for the caching allocator (fragmentation) and
library workspaces: `reserve_bytes` + `reserve_fraction` of the tracked peak.

Every phase is affine in the micro-batch, so `MemoryCoefficients` (one (fixed, per-sequence) pair
per phase) gives the peak and the largest micro-batch in closed form.

Parallel layouts (issue 23; `RankView`, `rank_view`): one rank of a layout is priced as the FSDP2
memory of its tensor-parallel shard over dp_shard · cp ranks and S/cp tokens; under sequence
parallelism the norm/residual region holds 1/tp of the tokens. Beyond the phases above, layouts
other than plain FSDP add the moments their tracker runs measured: the reduce-scatter output of a
small shard group (`block_reduce_output`, `root_reduce_output`), the op-level-checkpointed block
as recomputed, and under tp > 1 the loss-parallel logits, the whole-vocabulary embedding
gradient, the MLP norm's and the final norm's fp32 backward and the end of a recomputed block
(`_tp_block_moments`, `_tp_final_norm_backward`). Checked by: tests/test_memory_layouts.py
(model vs FSDPMemTracker on catalogs/profiles/data/memory-tracker-layouts*.csv). Pipeline stages
(pp > 1) are `pipeline_memory`'s, on the same `RankView` of one pipeline rank's GPUs.

Pipeline ranks (pp > 1): `pipeline_memory` walks each pipeline rank's schedule through the
moments torch's pipeline runtime allocates (its docstring) and returns a `RankMemory` per rank,
naming its stages and blocks (the in-stage shard is `rank_view`'s); `memory_breakdown`,
`memory_coefficients` and `max_micro_batch` answer for the worst rank.

Types. `MemoryConfig` holds the model's constants the recipe does not set (allocator reserve,
RMSNorm
saves, legacy dtype overrides); `MemoryBreakdown` is the predicted peak of one GPU by component
(one per FSDPMemTracker category, `COMPONENTS`); `MemoryCoefficients` is the closed form of the
peak as a function of the micro-batch: every phase of a step is affine in it, so
peak(m) = (1 + reserve_fraction)·max_i(fixed_i + m·per_sequence_i) + reserve_bytes.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import math
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Generic, TypeVar

import numpy as np

from perfmodel.costs.features import local_model
from perfmodel.costs.precision import block_linear_params, fp8_cast_bytes, gathered_bytes
from perfmodel.spec import pipeline
from perfmodel.spec.arch import ModelSpec, MoeSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.formulas import DTYPE_BYTES, GIB, dtype_bytes
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe, moe_token_factor

logger = logging.getLogger(__name__)

MEMO_SIZE = 4096
"""Results each memoised function of this module keeps (least recently used dropped first)."""


_R = TypeVar("_R")


class _Memo(Generic[_R]):
    """`function` (pure, positional arguments only, frozen results) remembering its last
    `MEMO_SIZE` results by argument value (`get` and `put` let a caller that computed a result
    another way, to the bit the same, share it).

    Claim: a memoised call returns the object the first call with equal arguments returned.
    Why: the functions wrapped here are pure functions of frozen, value-compared inputs (model,
    GPU count, sequence length, recipe, k, config) returning frozen values, and an island table
    asks the same questions many times: every island of the same GPU count prices the same
    per-rank memory whatever its GPU type, price or cluster, and the layout search, the bisection
    over k and the exclusion reasons ask again for the same (layout, mode, k). Arguments that
    cannot be hashed (a model spec holding a list) are computed, not remembered; an exception is
    not remembered.
    Checked by: tests/test_layout_speed.py (memoised answers equal fresh ones) and
    benchmarks/compare_layout_tables.py (whole tables and frontiers equal the code before)."""

    def __init__(self, function: Callable[..., _R]) -> None:
        self.function = function
        self.values: OrderedDict[Any, _R] = OrderedDict()
        functools.update_wrapper(self, function)

    def get(self, args: tuple[Any, ...]) -> _R | None:
        """The remembered result for `args` (None: none)."""
        try:
            value = self.values.get(args)
        except TypeError:   # unhashable arguments
            return None
        if value is not None:
            with contextlib.suppress(KeyError):   # dropped meanwhile by another thread
                self.values.move_to_end(args)
        return value

    def put(self, args: tuple[Any, ...], value: _R) -> None:
        """Remember `value` as the result for `args` (unhashable arguments: nothing)."""
        try:
            self.values[args] = value
        except TypeError:
            return
        self.values.move_to_end(args)
        while len(self.values) > MEMO_SIZE:
            self.values.popitem(last=False)

    def __call__(self, *args: Any) -> _R:
        value = self.get(args)
        if value is None:
            value = self.function(*args)
            self.put(args, value)
        return value

    def cache_clear(self) -> None:
        """Forget every result."""
        self.values.clear()


_MEMOS: list[_Memo[Any]] = []


def _memoised(function: Callable[..., _R]) -> _Memo[_R]:
    """`function` memoised (`_Memo`)."""
    memo = _Memo(function)
    _MEMOS.append(memo)
    return memo


def clear_memos() -> None:
    """Forget every memoised result of this module (a benchmark times a cold start)."""
    for memo in _MEMOS:
        memo.cache_clear()


# ---- configuration and results ------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryConfig:
    """Constants of the memory model that the recipe does not set."""

    reserve_bytes: int = 512 * 2**20
    """ASSUMPTION (not fitted, not yet measured): memory a GPU job holds beyond its tensors —
    cuBLAS/cuDNN workspaces and NCCL's communication buffers — 512 MiB. The CUDA context is
    already excluded by the GPU's usable memory. `scripts/gpu_bench.sh` measures
    torch.cuda.memory_reserved against the tracked peak when a GPU is lent; every memory output
    reports it apart (`reserve_gib`), and every comparison with a tracker or an allocator
    compares tracked bytes only."""
    reserve_fraction: float = 0.05
    """ASSUMPTION (as `reserve_bytes`): the caching allocator's fragmentation (memory_reserved
    beyond memory_allocated), as a fraction of the tracked peak."""
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
FP32_CONFIG = MemoryConfig(compute_param_bytes=4, reduce_grad_bytes=4, activation_bytes=4,
                           logits_bytes=4, reserve_bytes=0)
"""Pure fp32 on the CPU (the torch benchmarks' runs): every element 4 B, no caching-allocator
workspace reserve."""

COMPONENTS = ("sharded_params", "optimizer_states", "sharded_grads", "unsharded_params",
              "unsharded_grads", "all_gather", "reduce_scatter", "activations", "temporaries",
              "outer_states")
"""Tracked components, one per FSDPMemTracker category (Sharded Param, OptState, Sharded Grad,
Unsharded Param, Unsharded Grad, All Gather, Reduce Scatter, Activation + Inputs, Temp), and
the DiLoCo outer optimizer state, which plain FSDP training (and the tracker) does not have."""
_COMPONENT_INDEX = {c: i for i, c in enumerate(COMPONENTS)}


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


# ---- the model ----------------------------------------------------------------------------

FP32 = DTYPE_BYTES["fp32"]
"""Bytes of an fp32 element (master weights, gradients, optimizer states, statistics)."""
ADAM_STATE_BYTES = 2 * FP32
"""AdamW keeps two fp32 moments per parameter."""
OUTER_STATE_BYTES = 2 * FP32
"""DiLoCo's outer Nesterov SGD: an fp32 global copy and an fp32 momentum per parameter."""


# ---- validation ---------------------------------------------------------------------------

def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserInputError(f"{name} must be a positive integer, got {value!r}",
                             hint=f"give {name} >= 1.")
    return value


def resolve_memory_recipe(recipe: TrainingRecipe | None, ac: str | None,
                          accum_mode: str | None = None) -> TrainingRecipe:
    """The recipe (default torchtitan) with `ac` / `accum_mode` overrides applied (None: keep)."""
    recipe = DEFAULT_RECIPE if recipe is None else recipe
    return recipe.with_overrides(ac=ac, accum_mode=accum_mode)


# ---- model geometry ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Sizes:
    """Element sizes and parameter counts one evaluation needs (bytes are floats)."""

    b: float      # compute (param dtype) element
    r: float      # reduce dtype element
    m: float      # master element
    shard_total: float   # padded per-rank parameter elements
    shard_block: float
    shard_root: float
    padded_block: float  # G x padded shard: all-gather / reduce-scatter buffer elements
    padded_root: float
    tensors: int         # parameter tensors (AdamW keeps one fp32 step count per tensor)
    share: float = 1.0   # fraction of each sequence's norm/residual region on this rank (1/tp SP)
    loss_parallel: bool = False   # logits and cross-entropy vocabulary-sharded over tp
    embed_grad: float = 0.0       # elements of the embedding's gradient as backward makes it
    layout_phases: bool = False  # the phases measured for parallel layouts (`RankView`)
    all_reduce_held: bool = False  # HSDP: each unit's all-reduce buffer lives to backward's end
    unsharded_block: float = 0.0   # MoE: a block's unsharded parameters on this rank (0: P_b)
    expert_shard: float = 0.0      # MoE, ep > 1: the expert unit's shard elements per block
    expert_padded: float = 0.0     # MoE, ep > 1: its all-gather / reduce-scatter elements
    moe_saved: float = 0.0         # MoE: bytes per token a block not checkpointed whole adds
    token_factor: float = 1.0      # MoE: routed-expert tokens of the busiest rank over the mean
    ep_experts: int = 1            # MoE: expert-parallel ranks (each holds E/ep experts)
    g: float = 0.0       # bytes per gathered block element (b; less with fp8_all_gather)
    fp8_cast: tuple[float, float] = (0.0, 0.0)  # float8 copies around a matmul (fixed, /token)


def _param_dim0s(spec: ModelSpec) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(dim0, numel) of every parameter of one block and of the root (FSDP2 shards on dim 0)."""
    h, q, kv, f = spec.hidden_size, spec.q_dim, spec.kv_dim, spec.intermediate_size
    block = [(q, q * h), (kv, kv * h), (kv, kv * h), (h, h * q),
             *([(f, f * h)] * (2 if spec.gated_mlp else 1)), (h, h * f)]
    if spec.qkv_bias:
        block += [(q, q), (kv, kv), (kv, kv)]
    if spec.out_bias:
        block.append((h, h))
    if spec.mlp_bias:
        block += [(f, f)] * (2 if spec.gated_mlp else 1) + [(h, h)]
    norm = [(h, h)] * (2 if spec.norm == "layer" else 1)
    block += norm * spec.norms_per_block
    if spec.qk_norm == "head":
        block += [(spec.d, spec.d)] * 2
    elif spec.qk_norm == "full":
        block += [(q, q), (kv, kv)]
    if spec.attention_sinks:
        block.append((spec.num_heads, spec.num_heads))
    root = [(spec.vocab_size, spec.vocab_size * h), *norm]
    if spec.position_embeddings:
        root.append((spec.position_embeddings, spec.position_embeddings * h))
    if not spec.tie_word_embeddings:
        root.append((spec.vocab_size, spec.vocab_size * h))
    if spec.lm_head_bias:
        root.append((spec.vocab_size, spec.vocab_size))
    return block, root


def _shard(params: list[tuple[int, int]], world: int) -> float:
    return float(sum(math.ceil(d0 / world) * (n // d0) for d0, n in params))


def _moe_layer_params(spec: ModelSpec) -> tuple[list[tuple[int, int]], list[tuple[int, int]],
                                                float]:
    """(dense layer's parameters, an MoE layer's parameters but its routed experts, the routed
    experts' elements) of an MoE model, each parameter as (dim0, numel) (module doc: the
    attention and norms, the router and the shared experts are the dense part of an MoE
    layer)."""
    moe = spec.moe
    if moe is None:
        raise ValueError(f"{spec.name} is not a mixture-of-experts model")
    dense_spec = replace(spec, moe=None, published_params=None)
    dense = _param_dim0s(dense_spec)[0]
    mlp = set(range(4, 4 + len(spec.mlp_linears)))   # gate/up/down follow q, k, v, o
    h = spec.hidden_size
    routed = [(moe.num_experts, moe.num_experts * h)]
    routed += [(moe.num_experts, moe.num_experts)] if moe.router_bias else []
    routed += [(1, h)] if moe.shared_expert_gate else []
    width = moe.num_shared_experts * moe.shared_intermediate_size
    shared = ([(width, width * h)] * (2 if spec.gated_mlp else 1) + [(h, h * width)]
              if width else [])
    moe_dense = [e for j, e in enumerate(dense) if j not in mlp] + routed + shared
    return dense, moe_dense, float(moe.num_experts * spec.expert_params)


def _moe_sizes(spec: ModelSpec, world: int, ep: int) -> tuple[float, float, float, float, float]:
    """(shard, all-gather buffer, unsharded parameters, parameter tensors, routed-expert
    elements gathered) of the mean block of an MoE model on one of `world` FSDP ranks under
    expert parallelism `ep` (module doc). The
    dense part is padded per tensor like FSDP2; the experts' shard is their exact 1/world
    (torchtitan shards them on dim 0 or dim 1, whichever the E/ep experts allow)."""
    dense, moe_dense, experts = _moe_layer_params(spec)
    shard = padded = unsharded = tensors = gathered = 0.0
    for i in range(spec.num_layers):
        if spec.is_moe_layer(i):
            gathered += experts / ep
            part = _shard(moe_dense, world)
            shard += part + experts / world
            padded += world * part + experts / ep
            unsharded += sum(n for _, n in moe_dense) + experts / ep
            tensors += len(moe_dense) + len(spec.mlp_linears)
        else:
            part = _shard(dense, world)
            shard += part
            padded += world * part
            unsharded += sum(n for _, n in dense)
            tensors += len(dense)
    L = spec.num_layers
    return shard / L, padded / L, unsharded / L, tensors / L, gathered / L


def _moe_activation_spec(spec: ModelSpec, token_factor: float) -> ModelSpec:
    """The dense model whose MLP activations equal an MoE model's mean block's (module doc):
    MLP width the mean over the layers of k·f_e·token_factor plus the shared experts' (a dense
    layer: its own)."""
    if spec.moe is None:
        return spec
    widths = [_moe_mlp_width(spec, i, token_factor) for i in range(spec.num_layers)]
    return replace(spec, name=f"{spec.name} [MoE activations]", moe=None, published_params=None,
                   intermediate_size=max(1, round(sum(widths) / len(widths))))


def _moe_mlp_width(spec: ModelSpec, layer: int, token_factor: float) -> float:
    """The MLP width of layer `layer`'s activations' dense twin (`_moe_activation_spec`): k·f_e
    ·token_factor plus the shared experts' in an MoE layer, a dense layer's own."""
    moe = spec.moe
    if moe is None or not spec.is_moe_layer(layer):
        return float(spec.intermediate_size)
    return (moe.experts_per_token * moe.expert_intermediate_size * token_factor
            + moe.num_shared_experts * moe.shared_intermediate_size)


def _moe_layer_activation_spec(spec: ModelSpec, layer: int, token_factor: float) -> ModelSpec:
    """`_moe_activation_spec` of one layer (a pipeline stage holds given layers, not the
    mean)."""
    if spec.moe is None:
        return spec
    return replace(spec, name=f"{spec.name} [layer {layer} activations]", moe=None,
                   published_params=None,
                   intermediate_size=max(1, round(_moe_mlp_width(spec, layer, token_factor))))


def moe_saved_bytes(spec: ModelSpec, b: float, token_factor: float) -> float:
    """Bytes per token the MoE layers of the mean block save beyond `_moe_activation_spec`'s
    MLP terms (module doc); 0 for a dense model."""
    if spec.moe is None:
        return 0.0
    return spec.moe_layer_share * moe_layer_saved_bytes(spec, b, token_factor)


def moe_layer_saved_bytes(spec: ModelSpec, b: float, token_factor: float) -> float:
    """Bytes per token one MoE layer not checkpointed whole saves beyond its activations' dense
    twin's MLP terms (module doc): the grouped GEMMs' input, the k·token_factor dispatched slots
    per token (`perfmodel.bench.moe.MoeBlock`), the k expert outputs gathered back per token
    (the weighted combine's input: k rows whatever the capacity), the fp32 router logits and
    scores, the top-k indices and weights. Why k·(token_factor + 1) rows and not 2·k·
    token_factor: the combine gathers one row per choice of each token, not the slots;
    FSDPMemTracker's live tensors at an MoE block's forward end (capacity factor 1.5) hold one
    slot-sized and one choice-sized hidden-width tensor. Checked by: the capacity factor > 1
    rows of the MoE grids (tests/test_moe_step.py, tests/test_memory_moe_pipeline.py)."""
    moe = spec.moe
    if moe is None:
        return 0.0
    return (moe.experts_per_token * (token_factor + 1.0) * spec.hidden_size * b
            + FP32 * 2 * moe.num_experts + 12.0 * moe.experts_per_token)


def moe_dispatch_peak_bytes(spec: ModelSpec, b: float, token_factor: float, ep: int) -> float:
    """Bytes per token an MoE layer's forward holds at its widest moment beyond what it saves
    for backward (`moe_layer_saved_bytes`, its dense twin's MLP terms); 0 for a dense model.

    Claim: with R = k·token_factor slots per token (`perfmodel.bench.moe.MoeBlock`), under
    ep > 1 the widest moment is the combine all-to-all, where the dispatched slots, the slots
    received, the experts' grouped input, their output, its send-ordered copy and the outputs
    received back are all alive (6·R hidden-width rows; the grouped input is saved, the k
    per-choice rows saved later do not exist yet): (5·R - k)·h·b. With ep = 1 it is the sum
    over the k choices: the expert outputs with their zero row, the weighted per-choice rows
    and their sum beyond the saves: (R + k + 1)·h·b. Why: the forward's locals keep every
    tensor of the dispatch alive until it returns, and at real widths these rows outweigh the
    rest of the layer (Qwen3-30B-A3B: R = 12 at capacity factor 1.5); FSDPMemTracker's live
    tensors at that op on a small MoE stage (ep 1 and 2, capacity factor 1.5) are these.
    Checked by: tests/test_memory_moe_pipeline.py (a live tracker run at ep 2 and capacity
    factor 1.5 whose modelled peak is this moment, in a forward and in a recompute, within 3 %;
    the held-out MoE stage rows that peak here)."""
    moe = spec.moe
    if moe is None:
        return 0.0
    k, slots = float(moe.experts_per_token), moe.experts_per_token * token_factor
    rows = 5.0 * slots - k if ep > 1 else slots + k + 1.0
    return rows * spec.hidden_size * b


def moe_forward_peak_bytes(spec: ModelSpec, b: float, token_factor: float, ep: int, *,
                           whole: bool) -> float:
    """Bytes per token an MoE layer's forward holds at its dispatch peak beyond the saves of
    the layer's activations' dense twin (`block_saved` of it, which a block checkpointed whole
    reduces to its input); 0 for a dense model. Not checkpointed whole: the dispatch's rows
    beyond the layer's saves (`moe_dispatch_peak_bytes`). Checkpointed whole: the forward
    saves nothing, so the dispatch holds every row the layer would save
    (`moe_layer_saved_bytes`) plus those, beside the MLP's input and the residual after
    attention (2 hidden-width rows). Checked by: tests/test_memory_moe_pipeline.py (the live
    run without checkpointing, whose modelled peak is this moment; the MoE grids)."""
    if spec.moe is None:
        return 0.0
    dispatch = moe_dispatch_peak_bytes(spec, b, token_factor, ep)
    if not whole:
        return dispatch
    return moe_layer_saved_bytes(spec, b, token_factor) + dispatch + 2.0 * b * spec.hidden_size


def moe_recompute_dispatch_bytes(spec: ModelSpec, b: float, token_factor: float,
                                 ep: int) -> float:
    """Bytes per token an MoE layer checkpointed whole holds at its recompute's dispatch peak
    (`moe_dispatch_peak_bytes`) beyond the end of that recompute (`recompute_end_bytes`); 0
    when the end is wider (ep = 1) or for a dense model.

    Claim: the peak holds the dispatch's rows but not yet the combine's expert outputs with
    their zero row (k·token_factor rows) and weighted per-choice rows (k), nor the MLP's and
    the block's outputs (2 hidden-width rows); the gradient flowing into the combine (k rows)
    is alive at both moments, as it is made before the recompute starts. Why: FSDPMemTracker's
    live tensors at the combine all-to-all of a Qwen3-30B-A3B stage's recompute hold one
    (k, T, h) gradient-side tensor beside the dispatch's six R-row ones. Checked by:
    tests/test_memory_moe_pipeline.py (the live run at capacity factor 1.5 under full
    checkpointing, whose modelled peak is this moment; the stage grid's rows that peak here)."""
    moe = spec.moe
    if moe is None:
        return 0.0
    h = spec.hidden_size
    return max(0.0, moe_dispatch_peak_bytes(spec, b, token_factor, ep)
               - b * h * moe.experts_per_token * (token_factor + 1) - 2.0 * b * h)


def experts_backward_bytes(act: ModelSpec, spec: ModelSpec, seq_len: int, b: float,
                           recipe: TrainingRecipe, token_factor: float,
                           config: MemoryConfig = DEFAULT_CONFIG, *, share: float = 1.0) -> float:
    """Bytes per token an MoE layer holds at the end of its routed experts' backward (the last
    grouped GEMM's), beyond the saves of the blocks before it: what the layer saves unchecked
    (`block_saved_none` of its activations' dense twin `act`, `moe_layer_saved_bytes` of the
    MoE model `spec`) less what the experts' backward has consumed (three of the four R-row
    expert-width saves, the k per-choice rows), plus the gradients then alive: of the expert
    width's input (R rows), of the grouped input from the up and the gate projections (2·R
    hidden-width rows) and of the block output. Why: FSDPMemTracker's live tensors at a real
    Qwen3-30B-A3B stage's peak (the last `bmm` of the experts' backward: three R·h and one
    R·f_e gradient-side tensors beside the block's attention saves); the experts' weight
    gradients are then alive too (fixed, priced by the caller). Recomputed or saved, the same
    tensors are alive, so one term serves every checkpointing mode. Checked by:
    tests/test_memory_moe_pipeline.py (rows of the MoE stage grids that peak there)."""
    moe = spec.moe
    if moe is None:
        return 0.0
    h, slots = spec.hidden_size, moe.experts_per_token * token_factor
    saved = (block_saved_none(act, seq_len, b, recipe.attention, config, share=share)
             + moe_layer_saved_bytes(spec, b, token_factor))
    return (saved - 3.0 * slots * moe.expert_intermediate_size * b
            - moe.experts_per_token * h * b + 2.0 * slots * h * b + b * h)


def _sizes(view: RankView, recipe: TrainingRecipe, config: MemoryConfig) -> _Sizes:
    spec, world = view.model, view.num_shards
    spec.check_step_modelled("its per-GPU memory")   # MLA: never priced as q/k/v/o attention
    block, root = _param_dim0s(spec)
    b = config.compute_param_bytes or config.activation_bytes or dtype_bytes(recipe.param_dtype)
    shard_block, shard_root = _shard(block, world), _shard(root, world)
    padded_block, unsharded_block, block_tensors = world * shard_block, 0.0, float(len(block))
    factor = moe_token_factor(recipe, view.ep)
    expert_shard = expert_padded = 0.0
    if spec.moe is not None:
        shard_block, padded_block, unsharded_block, block_tensors, gathered = _moe_sizes(
            spec, world, view.ep)
        if view.ep > 1:   # the experts are their own FSDP unit (module doc)
            expert_padded, expert_shard = gathered, gathered * view.ep / world
    return _Sizes(b=float(b), r=float(config.reduce_grad_bytes or dtype_bytes(recipe.reduce_dtype)),
                  m=dtype_bytes(recipe.master_dtype),
                  shard_total=spec.num_layers * shard_block + shard_root,
                  shard_block=shard_block, shard_root=shard_root,
                  padded_block=padded_block, padded_root=world * shard_root,
                  tensors=round(spec.num_layers * block_tensors) + len(root),
                  unsharded_block=unsharded_block, token_factor=factor, ep_experts=view.ep,
                  expert_shard=expert_shard, expert_padded=expert_padded,
                  moe_saved=moe_saved_bytes(spec, float(b), factor),
                  share=view.sequence_share, loss_parallel=view.tp > 1,
                  embed_grad=float(view.embedding_grad_elements),
                  layout_phases=view.layout_phases, all_reduce_held=view.dp_replicate > 1,
                  g=(gathered_bytes(spec.block_params, block_linear_params(spec), recipe)
                     / spec.block_params if recipe.fp8_all_gather else float(b)),
                  fp8_cast=fp8_cast_bytes(spec, recipe))


# ---- activations per token ------------------------------------------------------------------

def norm_saved_bytes(spec: ModelSpec, b: float, config: MemoryConfig = DEFAULT_CONFIG) -> float:
    """Bytes per token one normalisation layer saves for backward (its output not included)."""
    h = spec.hidden_size
    if spec.norm == "layer":
        return b * h + 2 * b                     # input, mean and rstd (in the input dtype)
    if config.rms_norm_fp32_saves:
        return FP32 * h + FP32 * h + FP32        # fp32 input, fp32 normalised, fp32 rstd
    return b * h + FP32


def norm_backward_bytes(spec: ModelSpec, b: float, config: MemoryConfig = DEFAULT_CONFIG) -> float:
    """Bytes per token a block's first norm holds at the widest op of its backward (the last of
    the block's backward, when all of its weight gradients exist): its saves and the gradient
    flowing in, and for RMSNorm as torch composes it (fp32 saves) four fp32 gradient buffers of
    the upcast tensors (the decomposition's to_copy / mul / mul / pow backward, FSDPMemTracker
    timelines of pipeline stages)."""
    h = spec.hidden_size
    if spec.norm == "rms" and config.rms_norm_fp32_saves:
        return norm_saved_bytes(spec, b, config) + 4 * FP32 * h + b * h
    return norm_saved_bytes(spec, b, config) + 2 * b * h


def block_saved_none(spec: ModelSpec, seq_len: int, b: float, attention: str,
                     config: MemoryConfig = DEFAULT_CONFIG, *, share: float = 1.0) -> float:
    """Bytes per token one block saves without checkpointing. `share`: the fraction of each
    sequence this rank holds in the norm/residual region (1/tp under sequence parallelism); the
    norms save that share, the linears save their whole input (under sequence parallelism the
    all-gathered one) and their tensor-parallel outputs (`spec` is the rank's shard)."""
    h, q, kv, f, a = (spec.hidden_size, spec.q_dim, spec.kv_dim, spec.intermediate_size,
                      spec.num_heads)
    # Pre-norms feed linears, which save their output; Gemma-2's post-norms feed the residual.
    linear_norms = 1 if spec.norms_per_block == 1 else 2
    norms = share * spec.norms_per_block * norm_saved_bytes(spec, b, config) \
        + linear_norms * b * h
    attn = b * (2 * q + 2 * kv) + FP32 * a        # Q, K, V, output, log-sum-exp
    if attention == "eager":
        attn += b * a * seq_len                   # softmax output (a rows of S scores)
    mlp = b * (4 if spec.gated_mlp else 2) * f
    return norms + attn + mlp + qk_norm_saved_bytes(spec, b, config)


def qk_norm_saved_bytes(spec: ModelSpec, b: float,
                        config: MemoryConfig = DEFAULT_CONFIG) -> float:
    """Bytes per token the q/k RMSNorms of one block save (Qwen3, Gemma-3, OLMo-2; 0 without):
    what `norm_saved_bytes` says an RMSNorm saves, over the q and k widths, with one statistic
    per head (`qk_norm` "head") or per token ("full")."""
    if spec.qk_norm not in ("head", "full"):
        return 0.0
    width = spec.q_dim + spec.kv_dim
    rows = spec.num_heads + spec.num_kv_heads if spec.qk_norm == "head" else 2
    if spec.norm == "rms" and config.rms_norm_fp32_saves:
        return 2 * FP32 * width + FP32 * rows     # fp32 input, fp32 normalised, fp32 rstd
    return b * width + FP32 * rows


def block_saved_selective(spec: ModelSpec, b: float, *, share: float = 1.0) -> float:
    """Bytes per token the op-level policy keeps: block input, every other matmul's output
    (q, v, gate/fc1 and, gated, down projections; v is the tensor SDPA also saves), SDPA output
    and log-sum-exp; under sequence parallelism (`share` < 1) also the two reduce-scatter
    outputs the policy saves (after the o and down projections), and the block input is this
    rank's share of the sequence. The down projection's output is the whole-width partial sum
    before it is reduced."""
    h, q, kv, f = spec.hidden_size, spec.q_dim, spec.kv_dim, spec.intermediate_size
    matmuls = b * (q + kv + f + (h if spec.gated_mlp else 0))
    scattered = 2 * b * h * share if share < 1 else 0.0
    return b * h * share + matmuls + b * q + FP32 * spec.num_heads + scattered


def block_saved_attn(spec: ModelSpec, seq_len: int, b: float, attention: str,
                     config: MemoryConfig = DEFAULT_CONFIG, *, share: float = 1.0) -> float:
    """Bytes per token one block keeps when only its attention core is checkpointed (Megatron's
    selective recompute): everything `none` keeps except what the attention kernel saves for its
    own backward beyond its inputs — SDPA's log-sum-exp (its output stays: the output projection
    saves it as its input), or eager attention's softmax."""
    core = b * spec.num_heads * seq_len if attention == "eager" else FP32 * spec.num_heads
    return block_saved_none(spec, seq_len, b, attention, config, share=share) - core


def block_saved(spec: ModelSpec, seq_len: int, b: float, recipe: TrainingRecipe,
                config: MemoryConfig = DEFAULT_CONFIG, *, whole: bool = False,
                share: float = 1.0) -> float:
    """Bytes per token one block keeps between its forward and its backward under the recipe's
    checkpointing policy; `whole`: a block the policy checkpoints whole (full, layer:N) keeps
    only its input (this rank's `share` of the sequence)."""
    mode = recipe.checkpoint.mode
    if whole or mode == "full":
        return b * spec.hidden_size * share
    if mode == "op-sac":
        extra = b * spec.num_heads * seq_len if recipe.attention == "eager" else 0.0
        return block_saved_selective(spec, b, share=share) + extra
    if mode == "attn":
        return block_saved_attn(spec, seq_len, b, recipe.attention, config, share=share)
    return block_saved_none(spec, seq_len, b, recipe.attention, config, share=share)


def _block_working_set(spec: ModelSpec, seq_len: int, b: float, recipe: TrainingRecipe,
                       config: MemoryConfig, *, whole: bool = False, share: float = 1.0) -> float:
    """Bytes per token that the block being back-propagated adds, at its widest moment (the MLP's
    elementwise backward), beyond what it saved in forward: recomputed activations and the
    gradients of the MLP's intermediate tensors and of the block output (whole width and
    sequence: under sequence parallelism the down projection's output gradient is all-gathered
    before its matmul)."""
    h, f = spec.hidden_size, spec.intermediate_size
    none = block_saved_none(spec, seq_len, b, recipe.attention, config, share=share)
    # gated: -product (freed) + grads of product, activation and up; plain: + grads of two
    grads = b * h + (2 * b * f if spec.gated_mlp else b * f)
    mode = recipe.checkpoint.mode
    if whole or mode == "full":
        return none + grads
    if mode == "op-sac":
        cached = b * (spec.q_dim + spec.kv_dim + spec.intermediate_size) + FP32 * spec.num_heads
        return none - cached + grads
    if mode == "attn":  # the recomputed core is back-propagated before the MLP's widest moment
        return grads
    return grads


def recompute_end_bytes(spec: ModelSpec, seq_len: int, b: float, recipe: TrainingRecipe,
                        config: MemoryConfig = DEFAULT_CONFIG, *, share: float = 1.0,
                        moe: MoeSpec | None = None, token_factor: float = 1.0) -> float:
    """Bytes per token a block checkpointed whole holds at the end of its recomputed forward in
    backward, beyond its checkpoint input: what it saves unchecked (`block_saved_none`, an MoE
    layer's routing terms `moe_layer_saved_bytes` too), the forward's hidden-width outputs
    still referenced there (the attention's output projection, the residual after attention,
    the MLP output and the block output) and the gradient of the block output; an MoE layer's
    combine adds its k-fold copies (`perfmodel.bench.moe.MoeBlock.forward`): the expert
    outputs in slot order with the zero row (k·token_factor rows), the weighted per-choice
    rows, and the gradient flowing into the combine, (k, T, h): the backward of the sum over
    k expands the block's output gradient and the view before it copies that, before the
    first saved tensor is unpacked and the recompute starts (`moe_recompute_dispatch_bytes`
    prices the same gradient earlier in the recompute). `spec` is the layer's activations'
    dense twin (`_moe_layer_activation_spec`), `moe` the model's experts (None: a dense layer).
    For a dense layer with f > 2h this moment is narrower than the MLP's backward
    (`_block_working_set`), so only MoE layers' ends bind. Why: FSDPMemTracker timelines of a
    recomputed MoE block (the last op of its recompute, these tensors alive). Under ep > 1 the
    recompute's dispatch peak is wider still and is priced as this moment plus the difference
    (`moe_recompute_dispatch_bytes`), so this term is checked through it: by
    tests/test_memory_moe_pipeline.py (the live full-checkpointing runs and the stage grids'
    rows that peak at that moment, within 0.2 %); no row of the dense pipeline datasets peaks there
    (tests/test_memory_pipeline.py); the pp = 1 phases have the moment for models whose every
    layer is an MoE layer, where no shipped row peaks."""
    h = spec.hidden_size
    held = block_saved_none(spec, seq_len, b, recipe.attention, config, share=share)
    held += 4 * b * h + b * h * share
    if moe is not None:
        held += moe_layer_saved_bytes(replace(spec, moe=moe), b, token_factor)
        held += b * h * moe.experts_per_token * (token_factor + 2)
    return held


def outside_saved(spec: ModelSpec, b: float, config: MemoryConfig = DEFAULT_CONFIG, *,
                  share: float = 1.0) -> float:
    """Bytes per token saved outside the blocks: final norm (this rank's `share` of the sequence)
    and its output (whole: the LM head's input, all-gathered under sequence parallelism), token
    ids and labels."""
    return share * norm_saved_bytes(spec, b, config) + b * spec.hidden_size + 16.0


def logits_bytes_per_token(spec: ModelSpec, b: float, recipe: TrainingRecipe, *,
                           loss_parallel: bool = False) -> tuple[float, float, float]:
    """(forward-end bytes, saved at backward start, backward temporaries) per token of the loss.

    `loss_parallel` (tensor parallelism: `spec` is the rank's vocabulary shard): torch's
    loss-parallel log-softmax keeps the shifted logits and their exponential beside its result
    (one fp32 vocabulary row more at the end of forward), and its fused NLL + log-softmax
    backward holds the scattered one-hot, the exponential of the saved log-probabilities and
    their sum (three fp32 rows instead of two)."""
    V = spec.vocab_size
    copy = FP32 * V if b < FP32 else 0.0          # .float() is a no-op on fp32 logits
    forward, saved, backward = b * V + copy + FP32 * V, FP32 * V, 2 * FP32 * V
    if loss_parallel:
        forward, backward = forward + FP32 * V, backward + FP32 * V
    if recipe.loss == "chunked":
        c = recipe.loss_chunks
        return forward / c, saved / c, backward / c
    if recipe.loss == "fused":
        return b * V / recipe.loss_chunks, 0.0, b * V / recipe.loss_chunks
    return forward, saved, backward


# ---- phases -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Phase:
    name: str
    fixed: dict[str, float]        # component -> bytes independent of m
    per_token: dict[str, float]    # component -> bytes per token (x m·S)


def _states(spec: ModelSpec, z: _Sizes, recipe: TrainingRecipe, k: int,
            outer: bool = False) -> dict[str, float]:
    out = {"sharded_params": z.m * z.shard_total,
           "optimizer_states": ADAM_STATE_BYTES * z.shard_total + FP32 * z.tensors,
           "outer_states": OUTER_STATE_BYTES * z.shard_total if outer else 0.0}
    out["sharded_grads"] = (FP32 * z.shard_total
                            if recipe.accum_mode == "reduce_scatter" and k > 1 else 0.0)
    return out


def _phases(spec: ModelSpec, seq_len: int, z: _Sizes, recipe: TrainingRecipe, k: int,
            config: MemoryConfig, outer: bool = False) -> list[_Phase]:
    L, b, r = spec.num_layers, z.b, z.r
    P_b, P_r = z.unsharded_block or float(spec.block_params), float(spec.root_params)
    experts = spec.moe if spec.moe is not None and spec.moe_layer_share == 1.0 else None
    model = spec
    spec = _moe_activation_spec(spec, z.token_factor)   # MoE: the activations' dense twin
    lm_side = P_r - (0.0 if spec.tie_word_embeddings else float(spec.embedding_params))
    policy = recipe.checkpoint
    whole = [policy.checkpointed(i) for i in range(L)]
    share = z.share
    saved_by_kind = {False: block_saved(spec, seq_len, b, recipe, config, share=share)
                     + (z.moe_saved if policy.mode != "full" else 0.0),
                     True: block_saved(spec, seq_len, b, recipe, config, whole=True, share=share)}
    work_by_kind = {False: _block_working_set(spec, seq_len, b, recipe, config, share=share),
                    True: _block_working_set(spec, seq_len, b, recipe, config, whole=True,
                                             share=share)}
    whole_upto = list(itertools.accumulate(whole))  # blocks 0..j checkpointed whole

    def saved_upto(j: int) -> float:
        """Bytes per token saved by blocks 0..j (j = -1: none)."""
        n_whole = whole_upto[j] if j >= 0 else 0
        n_plain = j + 1 - n_whole
        return n_plain * saved_by_kind[False] + n_whole * saved_by_kind[True]

    outside = outside_saved(spec, b, config, share=share)
    rope = 2.0 * seq_len * spec.d * b             # cached cos/sin tables
    fwd_logits, bwd_saved_logits, bwd_logits = logits_bytes_per_token(
        spec, b, recipe, loss_parallel=z.loss_parallel)
    states = _states(spec, z, recipe, k, outer)
    no_sync = recipe.accum_mode == "no_sync" and k > 1
    accumulated = r * (L * P_b + P_r) if no_sync else 0.0   # unsharded, all units
    # Under tensor parallelism FSDP2's no-sync accumulation keeps, until the embedding's own
    # backward in the last micro-step, two b-byte copies of the embedding gradient's rows
    # outside the rank's vocabulary shard (measured at tp 2 and 4, small and 7B shapes:
    # tests/test_memory_layouts.py; not derived from the code).
    local_embed = float(spec.embedding_params)
    kept_embed = 2 * b * (z.embed_grad - local_embed) if no_sync else 0.0
    accumulated += kept_embed
    # HSDP: FSDP2 keeps each unit's all-reduce buffer (its r-byte reduce-scatter output) in
    # FSDPParamGroup._all_reduce_state until finalize_backward at the end of that backward (so
    # the next unit's reduce-scatter cannot reuse it while the all-reduce is in flight: torch
    # PR #140044). It is the new gradient shard itself unless the shard is accumulated into an
    # existing gradient (reduce-scatter accumulation after the first micro-step) or cast to
    # the master dtype; then one r-byte shard per unit reduced so far is alive.
    held_ar = (r if z.all_reduce_held and (states["sharded_grads"] or r != z.m) else 0.0)
    last_block = 0.0 if recipe.reshard_last_block_after_forward else z.g * z.padded_block
    # FSDP2 never reshards the root after forward (whatever reshard_root_after_forward says):
    # backward needs it first.
    root_kept = b * z.padded_root

    def phase(name: str, fixed: dict[str, float], per_token: dict[str, float]) -> _Phase:
        return _Phase(name, {**states, **fixed}, per_token)

    # An MoE model whose every layer is an MoE layer: inside the last block's forward, and at
    # the end of each block's experts' backward (`moe_dispatch_peak_bytes`,
    # `experts_backward_bytes`; the pipeline stages' moments, on the mean block)
    # (the per-token terms are the same for every block: the mean block)
    moe_moments: list[_Phase] = []
    expert_elements = experts_end = recompute_wider = 0.0
    if experts is not None:
        expert_elements = experts.num_experts * model.expert_params / z.ep_experts
        experts_end = experts_backward_bytes(spec, model, seq_len, b, recipe, z.token_factor,
                                             config, share=share)
        recompute_wider = moe_recompute_dispatch_bytes(model, b, z.token_factor, z.ep_experts)
        extra = moe_forward_peak_bytes(model, b, z.token_factor, z.ep_experts,
                                       whole=whole[L - 1] or policy.mode == "full")
        moe_moments.append(phase("moe_forward", {
            "unsharded_params": root_kept + z.g * z.padded_block, "activations": rope,
            "temporaries": accumulated}, {"activations": saved_upto(L - 1) + extra}))
    out = [*moe_moments,
        phase("forward_end", {"unsharded_params": root_kept + last_block,
                              "all_gather": z.g * z.padded_block
                              * min(max(recipe.prefetch_depth, 1), max(L - 1, 1)),
                              "activations": rope, "temporaries": accumulated},
              {"activations": saved_upto(L - 1) + outside + fwd_logits}),
        phase("loss_backward", {"unsharded_params": root_kept + last_block,
                                "activations": rope, "temporaries": accumulated},
              {"activations": saved_upto(L - 1) + outside + bwd_saved_logits,
               "temporaries": bwd_logits}),
        phase("optimizer_step", {"sharded_grads": FP32 * z.shard_total}, {}),
    ]
    final_norm = _tp_final_norm_backward(spec, b, config, z, saved_upto(L - 1))
    if final_norm is not None:
        out.append(phase("final_norm_backward", {
            "unsharded_params": root_kept + z.g * z.padded_block, "activations": rope,
            "temporaries": b * lm_side}, final_norm))
    w_down = b * spec.hidden_size * spec.intermediate_size
    # Every term is affine in j among blocks of one kind, so the peak over j lies at the ends:
    # the first two and last two blocks, and the first and last block of each kind.
    ends = {0, 1, L - 2, L - 1}
    for kind in (False, True):
        indices = [i for i in range(L) if whole[i] == kind]
        ends |= set(indices[:2] + indices[-2:])
    for j in sorted(ends & set(range(L))):
        done = L - 1 - j
        sharded = states["sharded_grads"] or FP32 * (z.shard_block * done + z.expert_shard)
        # ... and before block j's experts are reduced (ep > 1: their own unit)
        sharded_pre = states["sharded_grads"] or FP32 * z.shard_block * done
        undone = r * ((j + 1) * P_b + P_r) + kept_embed if no_sync else 0.0
        # the all-gathers of up to prefetch_depth blocks ahead (below j) are live (depth 0 and
        # 1 both hold one: FSDP2's implicit prefetch)
        prefetch = z.g * z.padded_block * min(max(recipe.prefetch_depth, 1), j)
        previous_rs = r * (z.padded_block - z.expert_padded) if done >= 1 else 0.0
        ar_done = held_ar * z.shard_block * done    # HSDP all-reduce buffers of blocks done
        backward_tokens = {"activations": saved_upto(j), "temporaries": work_by_kind[whole[j]]}
        if z.layout_phases and policy.mode == "op-sac" and not whole[j]:
            backward_tokens = _op_sac_backward(spec, seq_len, b, recipe, config, share,
                                               saved_upto(j - 1))
        out.append(phase(f"block_backward({j})", {
            "sharded_grads": sharded_pre,
            "unsharded_params": root_kept + z.g * z.padded_block, "all_gather": prefetch,
            "reduce_scatter": previous_rs, "activations": rope,
            "temporaries": undone + b * lm_side + w_down + ar_done + z.fp8_cast[0]},
            _plus(backward_tokens, "temporaries", z.fp8_cast[1])))
        if experts is not None:   # the end of its experts' backward (before their reduce)
            out.append(phase(f"experts_backward({j})", {
                "sharded_grads": sharded_pre,
                "unsharded_params": root_kept + z.g * z.padded_block, "all_gather": prefetch,
                "reduce_scatter": previous_rs, "activations": rope,
                "unsharded_grads": b * expert_elements,
                "temporaries": undone + b * lm_side + ar_done},
                {"activations": saved_upto(j - 1), "temporaries": experts_end}))
        if whole[j] and experts is not None:   # an MoE block at the end of its recompute
            end = recompute_end_bytes(spec, seq_len, b, recipe, config, share=share,
                                      moe=experts, token_factor=z.token_factor)
            out.append(phase(f"block_recompute_end({j})", {
                "sharded_grads": sharded_pre,
                "unsharded_params": root_kept + z.g * z.padded_block, "all_gather": prefetch,
                "reduce_scatter": previous_rs, "activations": rope,
                "temporaries": undone + b * lm_side + ar_done},
                {"activations": saved_upto(j), "temporaries": end}))
            if recompute_wider:   # ... and at its recompute's dispatch peak
                out.append(phase(f"moe_recompute_dispatch({j})", {
                    "sharded_grads": sharded_pre,
                    "unsharded_params": root_kept + z.g * z.padded_block,
                    "all_gather": prefetch, "reduce_scatter": previous_rs,
                    "activations": rope, "temporaries": undone + b * lm_side + ar_done},
                    {"activations": saved_upto(j), "temporaries": end + recompute_wider}))
        out.extend(phase(name, {
            "sharded_grads": sharded,
            "unsharded_params": root_kept + z.g * z.padded_block, "all_gather": prefetch,
            "reduce_scatter": previous_rs, "activations": rope,
            "temporaries": undone + b * lm_side + weights + ar_done}, per_token)
            for name, weights, per_token in _tp_block_moments(
                spec, seq_len, b, recipe, config, z, j, whole[j], saved_upto))
        # Under ep > 1 the experts are their own FSDP unit, reduced at the end of their
        # backward, before the rest of the block (`_experts_reduce`): the block's own
        # post-backward then holds its dense part's gradients and reduce-scatter input beside
        # the experts' reduce-scatter input, which FSDP2 keeps until the next reduce-scatter.
        E = z.expert_padded
        if E:
            out.append(_experts_reduce(phase, j, model, z, recipe, sharded=sharded_pre,
                                       root_kept=root_kept, undone=undone, lm_side=lm_side,
                                       ar_done=ar_done, rope=rope, saved=saved_upto(j - 1),
                                       expert_elements=expert_elements,
                                       experts_end=experts_end))
        P_own, padded_own = P_b - E, z.padded_block - E
        out.append(phase(f"block_reduce({j})", {
            "sharded_grads": sharded, "unsharded_params": root_kept, "all_gather": prefetch,
            "unsharded_grads": (r if no_sync else b) * P_own, "activations": rope,
            "reduce_scatter": r * E,
            "temporaries": undone - (r * P_own if no_sync else 0.0) + b * lm_side
            + r * padded_own + ar_done},
            {"activations": saved_upto(j - 1)}))
        if z.layout_phases:  # the gradients handed over and freed, the shard allocated
            out.append(phase(f"block_reduce_output({j})", {
                "sharded_grads": sharded, "unsharded_params": root_kept,
                "all_gather": prefetch, "activations": rope, "reduce_scatter": r * E,
                "temporaries": undone - (r * P_own if no_sync else 0.0) + b * lm_side
                + r * padded_own + r * (z.shard_block - z.expert_shard) + ar_done},
                {"activations": saved_upto(j - 1)}))
    # The embedding's backward, last before the root's post-backward: the root is still gathered,
    # the last block's reduce-scatter input still alive; the embedding gradient joins the LM
    # head's (tied weights: plus their sum, the accumulated .grad). Under tensor parallelism
    # backward makes the whole vocabulary's gradient on every rank (`RankView`) and cuts the
    # rank's shard out of it, a copy: both are alive at that moment.
    # In no-sync mode the earlier micro-steps' rows (`kept_embed`) are freed before the cut.
    cut = b * local_embed if z.embed_grad > local_embed else 0.0
    embed = (b * z.embed_grad * (2.0 if spec.tie_word_embeddings else 1.0)
             + max(cut, kept_embed))
    out.append(phase("embedding_backward", {
        "sharded_grads": states["sharded_grads"] or FP32 * L * z.shard_block,
        "unsharded_params": root_kept, "reduce_scatter": r * z.padded_block,
        "activations": rope, "temporaries": (r * P_r if no_sync else 0.0) + b * lm_side + embed
        + held_ar * L * z.shard_block},
        {"activations": 16.0}))
    out.append(phase("root_reduce", {
        "sharded_grads": states["sharded_grads"] or FP32 * L * z.shard_block,
        "unsharded_grads": (r if no_sync else b) * P_r, "activations": rope,
        "temporaries": r * z.padded_root + held_ar * L * z.shard_block}, {"activations": 16.0}))
    if z.layout_phases:  # the LM head's gradients outlive the hand-over (measured)
        out.append(phase("root_reduce_output", {
            "sharded_grads": states["sharded_grads"] or FP32 * L * z.shard_block,
            "unsharded_grads": b * lm_side, "activations": rope,
            "temporaries": (r * lm_side if no_sync else 0.0) + r * z.padded_root
            + r * z.shard_root + held_ar * L * z.shard_block},
            {"activations": 16.0}))
    return out


def _experts_reduce(phase: Callable[..., _Phase], j: int, model: ModelSpec, z: _Sizes,
                    recipe: TrainingRecipe, *, sharded: float, root_kept: float, undone: float,
                    lm_side: float, ar_done: float, rope: float, saved: float,
                    expert_elements: float, experts_end: float) -> _Phase:
    """The post-backward of block j's routed experts under ep > 1 (their own FSDP unit, pp =
    1): their bf16 gradients (`expert_elements` on this rank) and the r-byte reduce-scatter
    input being filled from them; the experts resharded (only the rest of the block, and the
    root, gathered), the rest of the block's unit prefetched for block j - 1, no earlier
    reduce-scatter input left; per token the blocks below's saves and what the experts'
    backward leaves alive (`experts_end`: `experts_backward_bytes`) less its grouped input, the
    gradient of the expert-width input and one of the two gradients of the grouped input,
    summed into the other (R·(2h + f_e) elements). `model` is the MoE model.
    Why: FSDPMemTracker timelines of Mixtral-8x7B at ep 2 (`perfmodel.bench.memory_moe`),
    whose memory peaks there and inside the experts' backward, not at the block's own
    post-backward. Checked by: tests/test_moe_step.py (the MoE grids against the tracker)."""
    moe = model.moe
    if moe is None:
        raise ValueError(f"{model.name} is not a mixture-of-experts model")
    b, r = z.b, z.r
    E = z.expert_padded
    left = (moe.experts_per_token * z.token_factor
            * (2 * model.hidden_size + moe.expert_intermediate_size) * b)
    dense = z.padded_block - E
    return phase(f"experts_reduce({j})", {
        "sharded_grads": sharded,   # the experts' new shard is allocated after this copy-in
        "unsharded_params": root_kept + z.g * dense,
        "all_gather": z.g * dense * min(max(recipe.prefetch_depth, 1), j),
        "activations": rope, "unsharded_grads": b * expert_elements,
        "temporaries": undone + b * lm_side + r * E + ar_done},
        {"activations": saved, "temporaries": experts_end - left})


def _plus(per_token: dict[str, float], key: str, extra: float) -> dict[str, float]:
    """`per_token` with `extra` added to `key` (the same dict when extra is 0)."""
    return {**per_token, key: per_token.get(key, 0.0) + extra} if extra else per_token


def _op_sac_backward(spec: ModelSpec, seq_len: int, b: float, recipe: TrainingRecipe,
                     config: MemoryConfig, share: float, saved_below: float) -> dict[str, float]:
    """Per-token bytes at the widest moment of an op-level-checkpointed block's backward, as
    the layouts' tracker runs measure it: the blocks below keep what the policy saved, this
    block is the recomputed block (the cached tensors are moved into the recomputed graph;
    those backward does not read, such as the down projection's output, are freed) plus its
    checkpoint input (and, under sequence parallelism, the o projection's reduce-scatter
    output, the residual stream) and the MLP's gradients (`_block_working_set`)."""
    h, f = spec.hidden_size, spec.intermediate_size
    none = block_saved_none(spec, seq_len, b, recipe.attention, config, share=share)
    grads = b * h + (2 * b * f if spec.gated_mlp else b * f)
    residual = b * h * share if share < 1 else 0.0
    return {"activations": saved_below + b * h * share, "temporaries": none + grads + residual}


def _tp_block_moments(spec: ModelSpec, seq_len: int, b: float, recipe: TrainingRecipe,
                      config: MemoryConfig, z: _Sizes, j: int, whole: bool,
                      saved_upto: Callable[[int], float],
                      ) -> list[tuple[str, float, dict[str, float]]]:
    """Two moments of block j's backward that tensor parallelism makes wider than the MLP's
    elementwise backward (`_block_working_set`): with the MLP width divided by tp and the hidden
    width whole, hidden-width tensors dominate. Each is (phase name, bytes of weight gradients
    alive, per-token bytes by component); none without tp > 1 or for other block layouts.

    * block_norm_backward(j): the MLP norm's backward, when RMSNorm runs as torch composes it
      (`MemoryConfig.rms_norm_fp32_saves`): its saved fp32 input and statistics, five fp32
      hidden-width rows of its backward (the upcast gradient, the mean's expanded gradient,
      the power's three products), the residual's gradient, with the block's attention half
      still saved (or recomputed) and the MLP's weight gradients made; on this rank's share of
      the tokens.
    * block_recompute_end(j), recomputed blocks (whole, or op-level: the projection's output is
      cached, its collective is not): the end of the recomputed forward, the
      whole-width partial output of the down projection and the copy its collective makes (the
      all-reduce's output, or the reduce-scatter's contiguous input and its output under
      sequence parallelism), beside every recomputed activation (under sequence parallelism also
      the two norm outputs before their all-gathers) and the block output's gradient.
    Checked by: tests/test_memory_layouts.py (tracker rows with tp > 1 and full or no
    checkpointing, small vocabularies where these moments bind)."""
    if not z.loss_parallel or spec.norms_per_block != 2:
        return []
    h, q, kv, f, a = (spec.hidden_size, spec.q_dim, spec.kv_dim, spec.intermediate_size,
                      spec.num_heads)
    share, sp = z.share, z.share < 1
    mode = recipe.checkpoint.mode
    recomputed = whole or mode in ("full", "op-sac")
    norm = norm_saved_bytes(spec, b, config)
    attn_half = share * norm + b * h + b * (2 * q + 2 * kv) + FP32 * a
    if recipe.attention == "eager":
        attn_half += b * a * seq_len
    kept = b * h * share if recomputed else 0.0
    if mode == "op-sac" and not whole and sp:
        kept += b * h * share                       # the o projection's saved reduce-scatter
    grad_in = b * h * share
    out = []
    if spec.norm == "rms" and config.rms_norm_fp32_saves:
        working = share * (FP32 * h + FP32) + grad_in + 5 * FP32 * h * share
        mlp_weights = b * h * f * (3 if spec.gated_mlp else 2)
        if recomputed:
            per_token = {"activations": saved_upto(j - 1) + kept,
                         "temporaries": attn_half + working}
        else:
            per_token = {"activations": saved_upto(j - 1) + attn_half, "temporaries": working}
        out.append((f"block_norm_backward({j})", mlp_weights, per_token))
    if recomputed:
        none = block_saved_none(spec, seq_len, b, recipe.attention, config, share=share)
        # down output, the residual stream between the halves, the incoming gradient, and the
        # collective's copy: all-reduce output, or reduce-scatter input + output (and the o
        # projection's), the sharded norm outputs and the gradient all-gathered before the
        # recompute (it needs no saved tensor, so it runs first)
        extra = b * h + b * h * share + grad_in
        extra += (2 * b * h + 4 * b * h * share) if sp else b * h
        out.append((f"block_recompute_end({j})", 0.0, {
            "activations": saved_upto(j - 1) + b * h * share, "temporaries": none + extra}))
    return out


def _tp_final_norm_backward(spec: ModelSpec, b: float, config: MemoryConfig, z: _Sizes,
                            saved_all: float) -> dict[str, float] | None:
    """Per-token bytes of the final norm's backward under tensor parallelism, RMSNorm as torch
    composes it (`_tp_block_moments`): every block's saved tensors, the norm's fp32 input and
    statistics, five fp32 hidden-width rows of its backward, token ids and labels; None when
    the moment does not exist."""
    if not (z.loss_parallel and spec.norm == "rms" and config.rms_norm_fp32_saves):
        return None
    h = spec.hidden_size
    return {"activations": saved_all + 16.0 + z.share * (FP32 * h + FP32),
            "temporaries": 5 * FP32 * h * z.share}


def _component_bytes(p: _Phase, tokens: int) -> dict[str, float]:
    out = {c: p.fixed.get(c, 0.0) + tokens * p.per_token.get(c, 0.0) for c in COMPONENTS}
    return out


# ---- public API ------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class RankView:
    """What one rank of a parallel layout holds and processes (pp = 1).

    Claim: a rank's memory is the FSDP2 memory of the tensor-parallel shard of the model
    (`perfmodel.costs.features.local_model`: query and key/value heads, MLP width and
    vocabulary divided by tp, hidden width and norm weights whole) sharded over dp_shard · cp
    ranks, on S/cp tokens of each of its m sequences, with three tensor-parallel corrections:
    under sequence parallelism the norm/residual region (norm inputs and statistics, the block
    input a full checkpoint keeps) holds 1/tp of the tokens while every linear still saves its
    whole, all-gathered input; the logits stay vocabulary-sharded (loss parallelism) at the cost
    of one more fp32 row in the loss; the embedding's gradient is made for the whole vocabulary.
    Why: torchtitan's plan (`perfmodel.bench.parallel`) makes q/k/v, gate and up
    ColwiseParallel (the output width split, the input replicated), o and down RowwiseParallel
    (the input width split), the embedding RowwiseParallel over the vocabulary and the LM head
    ColwiseParallel; FSDP2 then shards each rank's local tensor on dim 0 over the dp_shard · cp
    mesh (HSDP replicas hold the same shard: dp_replicate does not divide anything). The embedding's
    backward on replicated ids and gradients produces a replicated (vocab x hidden) gradient of
    which the rank's shard is a view. Context parallelism splits every sequence over cp ranks.
    Checked by: tests/test_memory_layouts.py (model vs FSDPMemTracker on the shipped layout
    grid and the held-out layouts, live tracker runs at tp 2 and HSDP 2 x 2, and the sharding
    arithmetic). Context parallelism has no CPU ground truth (torch's ring attention runs on CUDA
    only): its S/cp is the model's prior.
    """

    model: ModelSpec
    """The tensor-parallel shard of the model this rank holds."""
    num_shards: int
    """FSDP2 ranks each parameter is sharded over: dp_shard · cp."""
    seq_len: int
    """Tokens of each sequence this rank processes: S / cp."""
    tp: int = 1
    """Tensor-parallel degree."""
    sequence_parallel: bool = False
    """Norms and residuals on 1/tp of the tokens (only meaningful with tp > 1)."""
    embedding_grad_elements: int = 0
    """Elements of the embedding gradient backward makes: the whole vocabulary x hidden."""
    dp_replicate: int = 1
    """HSDP replicas: they divide nothing, but FSDP2 all-reduces each unit's reduce-scatter
    output across them and keeps that buffer until the end of backward (`_phases`)."""
    ep: int = 1
    """Expert-parallel degree (MoE): this rank gathers E/ep routed experts per MoE layer."""
    layout_phases: bool = False
    """Price the moments measured with the layouts' tracker runs (issue 23) that the FSDP
    model's phases leave out: after each unit's post-backward hands its gradients to the
    reduce-scatter and allocates the output shard (binds for shard groups of fewer than four
    ranks), and an op-level-checkpointed block's backward as the recomputed block (its cached
    tensors moved into the recomputed graph, not kept twice). The default FSDP layout keeps
    today's phases and numbers, so this is on for the other layouts only (tp, cp,
    dp_replicate or pp > 1)."""

    @property
    def sequence_share(self) -> float:
        """Fraction of each sequence in the norm/residual region of this rank."""
        return 1.0 / self.tp if self.sequence_parallel and self.tp > 1 else 1.0


def rank_view(model: ModelSpec, num_gpus: int, seq_len: int,
              recipe: TrainingRecipe) -> RankView:
    """What one of `num_gpus` ranks holds under the recipe's parallel layout (`RankView`); the
    default layout is the whole model sharded over every GPU. UserInputError for a layout the
    GPUs or the model cannot take, and for pipeline layouts (per-stage memory is issue 24's)."""
    layout = recipe.parallel
    if layout == ParallelLayout():
        return RankView(model=model, num_shards=num_gpus, seq_len=seq_len,
                        embedding_grad_elements=model.embedding_params)
    layout = layout.resolve(num_gpus)
    if layout.pp > 1:
        raise UserInputError("the per-stage memory of pipeline layouts (pp > 1) is not modelled "
                             "by this function",
                             hint="use perfmodel.sim.pipeline's stage memory for pp > 1.")
    layout.check_model(num_layers=model.num_layers, num_heads=model.num_heads,
                       num_kv_heads=model.num_kv_heads,
                       intermediate_size=model.intermediate_size, seq_len=seq_len,
                       num_experts=model.num_experts)
    return RankView(model=local_model(model, layout.tp), num_shards=layout.fsdp_degree,
                    seq_len=seq_len // layout.cp, tp=layout.tp,
                    sequence_parallel=layout.sequence_parallel and layout.tp > 1,
                    embedding_grad_elements=model.embedding_params,
                    layout_phases=not layout.is_default, dp_replicate=layout.dp_replicate,
                    ep=layout.ep)


def memory_breakdown(model: ModelSpec, *, num_gpus: int, seq_len: int, micro_batch: int,
                     ac: str | None = None, recipe: TrainingRecipe | None = None,
                     accum_steps: int = 1, accum_mode: str | None = None,
                     outer_states: bool = False,
                     config: MemoryConfig = DEFAULT_CONFIG) -> MemoryBreakdown:
    """Predicted per-GPU memory at the peak phase of FSDP2 training with `num_gpus`-way sharding,
    trained as `recipe` says (default torchtitan; `ac` / `accum_mode` override it) with
    `accum_steps` micro-steps per optimizer step; `outer_states` adds DiLoCo's outer state."""
    _positive("num_gpus", num_gpus)
    _positive("seq_len", seq_len)
    _positive("micro_batch", micro_batch)
    _positive("accum_steps", accum_steps)
    recipe = resolve_memory_recipe(recipe, ac, accum_mode)
    return _breakdown(model, num_gpus, seq_len, micro_batch, recipe, accum_steps, outer_states,
                      config)


@_memoised
def _breakdown(model: ModelSpec, num_gpus: int, seq_len: int, micro_batch: int,
               recipe: TrainingRecipe, accum_steps: int, outer_states: bool,
               config: MemoryConfig) -> MemoryBreakdown:
    """`memory_breakdown` on validated arguments and a resolved recipe (memoised)."""
    if recipe.parallel.pp > 1:   # the worst pipeline rank
        return pipeline_memory(model, num_gpus=num_gpus, seq_len=seq_len,
                               micro_batch=micro_batch, recipe=recipe, accum_steps=accum_steps,
                               outer_states=outer_states, config=config).worst
    view = rank_view(model, num_gpus, seq_len, recipe)
    model, num_gpus, seq_len = view.model, view.num_shards, view.seq_len
    z = _sizes(view, recipe, config)
    tokens = micro_batch * seq_len
    phases = _phases(model, seq_len, z, recipe, accum_steps, config, outer_states)
    totals = [sum(_component_bytes(p, tokens).values()) for p in phases]
    peak = phases[int(np.argmax(totals))]
    parts = {f"{c}_bytes": int(v) for c, v in _component_bytes(peak, tokens).items()}
    tracked = sum(parts.values())
    breakdown = MemoryBreakdown(
        num_gpus=num_gpus, seq_len=seq_len, micro_batch=micro_batch, accum_steps=accum_steps,
        ac=recipe.ac, accum_mode=recipe.accum_mode, phase=peak.name, **parts,
        reserve_bytes=config.reserve_bytes + int(config.reserve_fraction * tracked))
    logger.debug("%s G=%d S=%d m=%d k=%d %s: peak %.3f GiB at %s", model.name, num_gpus, seq_len,
                 micro_batch, accum_steps, recipe.summary(), breakdown.peak_bytes / GIB, peak.name)
    return breakdown


def memory_coefficients(model: ModelSpec, *, num_gpus: int, seq_len: int, ac: str | None = None,
                        recipe: TrainingRecipe | None = None, accum_steps: int = 1,
                        accum_mode: str | None = None, outer_states: bool = False,
                        config: MemoryConfig = DEFAULT_CONFIG) -> MemoryCoefficients:
    """The peak as a max of affine functions of m: the cheap path for sweeps and the planner."""
    _positive("num_gpus", num_gpus)
    _positive("seq_len", seq_len)
    _positive("accum_steps", accum_steps)
    recipe = resolve_memory_recipe(recipe, ac, accum_mode)
    return _coefficients(model, num_gpus, seq_len, recipe, accum_steps, outer_states, config)


@_memoised
def _coefficients(model: ModelSpec, num_gpus: int, seq_len: int, recipe: TrainingRecipe,
                  accum_steps: int, outer_states: bool,
                  config: MemoryConfig) -> MemoryCoefficients:
    """`memory_coefficients` on validated arguments and a resolved recipe (memoised)."""
    if recipe.parallel.pp > 1:   # every moment of every pipeline rank
        return _pipeline_coefficients(model, num_gpus, seq_len, recipe, accum_steps, config,
                                      outer_states)
    view = rank_view(model, num_gpus, seq_len, recipe)
    model, seq_len = view.model, view.seq_len
    z = _sizes(view, recipe, config)
    phases = _phases(model, seq_len, z, recipe, accum_steps, config, outer_states)
    fixed = tuple(float(sum(_component_bytes(p, 0).values())) for p in phases)
    per_seq = tuple(float(sum(p.per_token.values())) * seq_len for p in phases)
    return _coefficients_of(fixed, per_seq, config)


def _coefficients_of(fixed: tuple[float, ...], per_seq: tuple[float, ...],
                     config: MemoryConfig) -> MemoryCoefficients:
    """The coefficients of the phases (fixed_i, per_seq_i), less every phase another phase
    dominates (fixed_j >= fixed_i and per_seq_j >= per_seq_i).

    Claim: `peak_bytes(m)` and `max_micro_batch` are unchanged, to the bit, for every m >= 0.
    Why: for m >= 0, fl(fixed_j + fl(m·per_seq_j)) >= fl(fixed_i + fl(m·per_seq_i)) (IEEE
    rounding is monotone), so the maximum over the phases takes the same value without i; and
    i's micro-batch limit floor((budget - fixed_i)/per_seq_i) is at least j's whenever j's is
    >= 1 (the only case where the minimum is not clamped to 0). A pipeline walk has thousands of
    moments, almost all dominated; the kept ones are what a sweep over m evaluates.
    Non-finite values are kept as they are (no comparison is trusted).
    Checked by: tests/test_layout_speed.py (peaks and largest micro-batches with and without the
    reduction, on pipeline and FSDP recipes)."""
    if all(math.isfinite(v) for v in (*fixed, *per_seq)):
        order = sorted(range(len(fixed)), key=lambda i: (-fixed[i], -per_seq[i], i))
        keep, best = [], -math.inf
        for i in order:
            if per_seq[i] > best:   # no phase before it (fixed at least its) has this slope
                keep.append(i)
                best = per_seq[i]
        keep.sort()
        fixed = tuple(fixed[i] for i in keep)
        per_seq = tuple(per_seq[i] for i in keep)
    return MemoryCoefficients(fixed_bytes=fixed, per_sequence_bytes=per_seq,
                              reserve_bytes=config.reserve_bytes,
                              reserve_fraction=config.reserve_fraction)


def max_micro_batch(model: ModelSpec, *, gpu_memory_bytes: int, num_gpus: int, seq_len: int,
                    ac: str | None = None, recipe: TrainingRecipe | None = None,
                    accum_steps: int = 1, accum_mode: str | None = None,
                    outer_states: bool = False, config: MemoryConfig = DEFAULT_CONFIG) -> int:
    """Largest micro-batch m >= 0 whose predicted peak at `accum_steps` micro-steps fits in
    `gpu_memory_bytes` (0: not even m = 1 fits). No upper cap.

    The closed form from `memory_coefficients` is confirmed against `memory_breakdown`
    (peak(m) <= memory < peak(m + 1)), walking in the monotone direction if they ever disagree.
    """
    _positive("gpu_memory_bytes", gpu_memory_bytes)
    kw: dict[str, Any] = {"num_gpus": num_gpus, "seq_len": seq_len, "ac": ac, "recipe": recipe,
                          "accum_steps": accum_steps, "accum_mode": accum_mode,
                          "outer_states": outer_states, "config": config}
    m = memory_coefficients(model, **kw).max_micro_batch(gpu_memory_bytes)

    def fits(n: int) -> bool:
        return n == 0 or memory_breakdown(model, micro_batch=n, **kw).peak_bytes <= gpu_memory_bytes

    while m > 0 and not fits(m):
        m -= 1
    while fits(m + 1):
        m += 1
    return m


# ---- pipeline ranks (pp > 1) ---------------------------------------------------------------------
# The model of a pipeline rank's memory is documented (claim, why, test) on `pipeline_memory`.

@dataclass(frozen=True, slots=True)
class _Unit:
    """One FSDP unit of a stage (torchtitan's wrapping under PP: the embedding, each block, the
    final norm with the LM head)."""

    order: tuple[int, ...]   # parameter sizes (elements) in registration order
    shard: float             # padded elements per FSDP rank
    padded: float            # all-gather / reduce-scatter buffer elements (FSDP ranks x shard)
    # computed once (the schedule walk reads them at every moment)
    params: float = field(init=False)
    tensors: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", float(sum(self.order)))
        object.__setattr__(self, "tensors", len(self.order))

    def post_backward_bytes(self, b: float, r: float, first: bool) -> float:
        """Gradient bytes alive at the unit's post-backward in a pipeline backward (no
        reduce-scatter until the step's last one): every b-byte gradient, folded one parameter
        at a time into the r-byte accumulated gradient (FSDP2's accumulate / to_accumulated
        _grad_if_needed); on the unit's first backward of the step each gradient is copied to
        the reduce dtype before its b-byte original is freed, so the peak is the largest over
        the parameters p of the copies up to p plus the originals from p on."""
        if not first or r == b:
            return b * self.params
        peak, done, rest = 0.0, 0.0, self.params
        for n in self.order:
            peak = max(peak, r * (done + n) + b * rest)
            done, rest = done + n, rest - n
        return peak


@dataclass(frozen=True, slots=True)
class _Stage:
    """What one global stage holds and saves, per token of a micro-batch."""

    index: int
    first_block: int
    blocks: int
    first: bool
    last: bool
    units: tuple[_Unit, ...]      # forward order
    saved_upto: tuple[float, ...]  # bytes per token saved by local blocks 0..j
    work: tuple[float, ...]        # backward working set of local block j, per token
    held: float                   # bytes per token one micro-batch holds from F to B
    recompute_end: tuple[float, ...] = ()  # per token, the end of block j's recompute (0: none)
    # MoE stages (0 / empty for dense ones), per token: the widest moment of a forward inside
    # an MoE block (saves of the micro-batch so far included), per block what a whole MoE
    # block holds at its recompute's combine all-to-all (0: not wider than its recompute end,
    # or not recomputed) and at the end of its experts' backward
    forward_peak: float = 0.0
    recompute_dispatch: tuple[float, ...] = ()
    experts_end: tuple[float, ...] = ()
    # sums over the units, computed once (the schedule walk reads them at every moment)
    params: float = field(init=False)
    padded: float = field(init=False)
    shard: float = field(init=False)
    ends: tuple[int, ...] = field(init=False)   # `_block_ends`

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", sum(u.params for u in self.units))
        object.__setattr__(self, "padded", sum(u.padded for u in self.units))
        object.__setattr__(self, "shard", sum(u.shard for u in self.units))
        object.__setattr__(self, "ends", tuple(_block_ends(self)))


@dataclass(frozen=True, kw_only=True, slots=True)
class RankMemory:
    """The predicted peak of one pipeline rank and what the rank holds."""

    rank: int
    """Pipeline rank (rank 0 holds the embedding)."""
    stages: tuple[int, ...]
    """Global stages the rank runs (loop placement: rank, rank + pp, ...)."""
    blocks: tuple[tuple[int, int], ...]
    """Per stage, its global blocks [first, last + 1)."""
    num_stages: int
    """Stages of the whole pipeline (pp · virtual stages)."""
    in_flight: tuple[int, ...]
    """Per stage, the most micro-batches held between their forward and their backward."""
    breakdown: MemoryBreakdown
    """The rank's peak by component; `phase` names the moment (stage, micro-batch, block)."""

    def describe(self) -> str:
        """e.g. 'pipeline rank 0: stage 0 (blocks 0-6, embedding)'."""
        parts = []
        for stage, (lo, hi) in zip(self.stages, self.blocks, strict=True):
            ends = ", embedding" if stage == 0 else ""
            ends += ", LM head" if stage == self.num_stages - 1 else ""
            parts.append(f"stage {stage} (blocks {lo}-{hi - 1}{ends})")
        return f"pipeline rank {self.rank}: " + ", ".join(parts)


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineMemory:
    """Per pipeline rank the predicted peak; the worst rank sets the memory the job needs."""

    layout: ParallelLayout
    """The resolved layout."""
    ranks: tuple[RankMemory, ...]
    """One entry per pipeline rank, in rank order."""

    @property
    def worst_rank(self) -> int:
        """The pipeline rank with the highest predicted peak (the lowest such rank on a tie)."""
        peaks = [r.breakdown.peak_bytes for r in self.ranks]
        return peaks.index(max(peaks))

    @property
    def worst(self) -> MemoryBreakdown:
        """The worst rank's breakdown."""
        return self.ranks[self.worst_rank].breakdown


def _block_order(spec: ModelSpec) -> list[tuple[int, int]]:
    """(dim0, numel) of one block's parameters in registration order (the bench model's
    `Block`: norms, then q, k, v, o with their biases, then the MLP's up, gate and down; q/k
    norms and attention sinks, which it does not build, after the attention)."""
    h, q, kv, f = spec.hidden_size, spec.q_dim, spec.kv_dim, spec.intermediate_size
    norm = [(h, h)] * (2 if spec.norm == "layer" else 1)

    def linear(out: int, inp: int, bias: bool) -> list[tuple[int, int]]:
        return [(out, out * inp)] + ([(out, out)] if bias else [])

    order = norm * spec.norms_per_block
    order += (linear(q, h, spec.qkv_bias) + linear(kv, h, spec.qkv_bias)
              + linear(kv, h, spec.qkv_bias) + linear(h, q, spec.out_bias))
    if spec.qk_norm == "head":
        order += [(spec.d, spec.d)] * 2
    elif spec.qk_norm == "full":
        order += [(q, q), (kv, kv)]
    if spec.attention_sinks:
        order.append((spec.num_heads, spec.num_heads))
    order += linear(f, h, spec.mlp_bias) * (2 if spec.gated_mlp else 1) + \
        linear(h, f, spec.mlp_bias)
    return order


def _stage_units(spec: ModelSpec, world: int, blocks: int, first: bool, last: bool,
                 first_block: int = 0, ep: int = 1) -> tuple[_Unit, ...]:
    """The FSDP units of a stage of `blocks` blocks from global block `first_block`: the
    embedding (first stage), one unit per block, the final norm with the LM head (last stage).
    An MoE layer's unit is `_moe_layer_params`' dense part padded per tensor as FSDP2 pads it,
    plus its E/ep routed experts, of which the rank keeps the exact 1/world (as `_moe_sizes`);
    under ep > 1 the experts are their own FSDP unit inside the block's (module doc), whose
    gradients are converted and kept as the block's are, so one `_Unit` prices both."""
    h, V = spec.hidden_size, spec.vocab_size
    norm = [(h, h)] * (2 if spec.norm == "layer" else 1)
    embed = [(V, V * h)] + ([(spec.position_embeddings, spec.position_embeddings * h)]
                            if spec.position_embeddings else [])
    # Tied weights cannot be shared across stages: the last stage holds its own LM head.
    head = [*norm, (V, V * h)] + ([(V, V)] if spec.lm_head_bias else [])

    def unit(params: list[tuple[int, int]]) -> _Unit:
        shard = _shard(params, world)
        return _Unit(tuple(n for _, n in params), shard, world * shard)

    dense = unit(_block_order(spec))
    moe_unit = dense
    if spec.moe is not None:
        _, moe_dense, experts = _moe_layer_params(spec)
        tensors = len(spec.mlp_linears)   # the stacked gate, up and down of the local experts
        part = _shard(moe_dense, world)
        local = (int(experts) // ep // tensors,) * tensors
        moe_unit = _Unit(tuple(n for _, n in moe_dense) + local, part + experts / world,
                         world * part + experts / ep)
    blocks_units = tuple(moe_unit if spec.is_moe_layer(i) else dense
                         for i in range(first_block, first_block + blocks))
    return ((unit(embed),) if first else ()) + blocks_units + ((unit(head),) if last else ())


def _pipeline_stages(spec: ModelSpec, world: int, seq_len: int, recipe: TrainingRecipe,
                     config: MemoryConfig, b: float, boundary: float, *, share: float = 1.0,
                     loss_parallel: bool = False, ep: int = 1,
                     token_factor: float = 1.0) -> list[_Stage]:
    """`share`, `loss_parallel`: the in-stage `RankView`'s sequence-parallel share of the
    norm/residual region and vocabulary-sharded loss (tp > 1; the pipeline ground truth has
    tp = 1, where both are inert). `ep`, `token_factor`: an MoE model's expert parallelism
    and routed-token factor (`perfmodel.spec.recipe.moe_token_factor`); an MoE layer saves and
    works as its activations' dense twin (`_moe_layer_activation_spec`) plus, unless
    checkpointed whole, `moe_layer_saved_bytes`, the pp = 1 model's terms of one layer."""
    layout = recipe.parallel
    cuts = pipeline.stage_blocks(spec.num_layers, layout.pp, layout.virtual_stages)
    policy = recipe.checkpoint
    # A norm that keeps its input as it is (LayerNorm; RMSNorm when its fp32 upcast is the input
    # itself) keeps, when recomputed, the block input the checkpoint already holds. Of op-sac's
    # saves, the down projection's output is consumed by the recompute and freed (no backward
    # node keeps it), and the SDPA output is the cached one the recomputed graph reuses, not a
    # second copy. (`_block_working_set`, the FSDP model's, counts all three; FSDPMemTracker
    # timelines of pipeline stages show them once or not at all.)
    norm_keeps_input = spec.norm == "layer" or b >= FP32
    duplicate_input = b * spec.hidden_size if norm_keeps_input else 0.0
    moe_layer = spec.moe is not None and any(spec.is_moe_layer(i)
                                             for i in range(spec.num_layers))
    dense_layer = not all(spec.is_moe_layer(i) for i in range(spec.num_layers))
    saved: dict[tuple[bool, bool], float] = {}
    work: dict[tuple[bool, bool], float] = {}
    recompute_end: dict[bool, float] = {}
    forward_extra: dict[tuple[bool, bool], float] = {}
    recompute_dispatch: dict[bool, float] = {}
    experts_end: dict[bool, float] = {}
    for kind in ((True,) if moe_layer else ()) + ((False,) if dense_layer else ()):
        first_of_kind = next(i for i in range(spec.num_layers) if spec.is_moe_layer(i) == kind)
        act = _moe_layer_activation_spec(spec, first_of_kind, token_factor)
        # an MoE layer saves its routing terms unless checkpointed whole (as `_phases`)
        extra = moe_layer_saved_bytes(spec, b, token_factor) if kind else 0.0
        for w in (False, True):
            whole = w or policy.mode == "full"
            saved[kind, w] = block_saved(act, seq_len, b, recipe, config, whole=w,
                                         share=share) + (0.0 if whole else extra)
            work[kind, w] = _block_working_set(act, seq_len, b, recipe, config, whole=w,
                                               share=share)
        work[kind, True] -= duplicate_input
        recompute_end[kind] = recompute_end_bytes(act, seq_len, b, recipe, config, share=share,
                                                  moe=spec.moe if kind else None,
                                                  token_factor=token_factor) - duplicate_input
        if policy.mode == "op-sac":
            work[kind, False] -= duplicate_input + b * act.q_dim + (
                b * act.hidden_size if act.gated_mlp else 0.0)
        for w in (False, True):   # a dense layer's forward peak is its end
            forward_extra[kind, w] = moe_forward_peak_bytes(
                spec, b, token_factor, ep, whole=w or policy.mode == "full") if kind else 0.0
        recompute_dispatch[kind] = (moe_recompute_dispatch_bytes(spec, b, token_factor, ep)
                                    if kind else 0.0)
        experts_end[kind] = (experts_backward_bytes(act, spec, seq_len, b, recipe,
                                                    token_factor, config, share=share)
                             - duplicate_input) if kind else 0.0
    _, held_logits, _ = logits_bytes_per_token(spec, b, recipe, loss_parallel=loss_parallel)
    # The last stage's output (the logits) stays referenced for its backward; a fused loss
    # takes the hidden states and the LM head's weight instead of logits.
    logits_out = 0.0 if recipe.loss == "fused" else b * spec.vocab_size
    out = []
    first_block = 0
    for s, n in enumerate(cuts):
        kinds = [(spec.is_moe_layer(i), policy.checkpointed(i))
                 for i in range(first_block, first_block + n)]
        first, last = s == 0, s == len(cuts) - 1
        # A checkpointed block keeps its input, and so does a LayerNorm (an RMSNorm keeps its
        # fp32 upcast, the input itself when that is already fp32); a later stage's first
        # block's input is the receive buffer, counted apart.
        keeps_input = kinds[0][1] or policy.mode == "op-sac" or norm_keeps_input
        shared = b * spec.hidden_size if not first and keeps_input else 0.0
        upto = tuple(x - shared for x in itertools.accumulate(saved[kind] for kind in kinds))
        held = upto[-1] + (share * norm_saved_bytes(spec, b, config) + b * spec.hidden_size
                           + logits_out + held_logits if last else boundary)
        forward_peak = max((upto[j] + forward_extra[kind] for j, kind in enumerate(kinds)
                            if kind[0]), default=0.0)
        out.append(_Stage(index=s, first_block=first_block, blocks=n, first=first, last=last,
                          units=_stage_units(spec, world, n, first, last, first_block, ep),
                          saved_upto=upto, work=tuple(work[kind] for kind in kinds), held=held,
                          recompute_end=tuple(recompute_end[moe] if whole else 0.0
                                              for moe, whole in kinds),
                          forward_peak=forward_peak,
                          recompute_dispatch=tuple(
                              recompute_end[moe] + recompute_dispatch[moe]
                              if whole and recompute_dispatch[moe] else 0.0
                              for moe, whole in kinds),
                          experts_end=tuple(experts_end[moe] for moe, _ in kinds)))
        first_block += n
    return out


def _rank_phases(stages: list[_Stage], rank: int, spec: ModelSpec, seq_len: int,
                 recipe: TrainingRecipe, k: int, z: _Sizes, boundary: float, outer: bool,
                 config: MemoryConfig, totals: bool = False, skip_repeats: bool = True
                 ) -> tuple[list[Any], dict[int, int]]:
    """Every candidate peak moment of pipeline rank `rank` over one step (section comment).

    `skip_repeats`: an action met again in a state already walked is skipped whole and a
    state's sums are computed once. Claim: the same phases, in the same order, as without
    (False: every action walked and every state summed afresh). Why: a moment is kept once per
    (its key, the state), its key is fixed by the action's stage, block and whether it is the
    stage's first backward, and an action's moments all see one state; a state's sums read
    nothing but the state, which names the stage of a stale output. Checked by:
    tests/test_layout_speed.py (both ways on every schedule, equal).

    `totals`: each moment as (fixed bytes, bytes per token) only, the sums of its components
    (what `_pipeline_coefficients` needs) instead of a `_Phase`. Claim: the same two numbers
    `sum(_component_bytes(phase, 0).values())` and `sum(phase.per_token.values())` give for
    finite per-token terms. Why: the components are added in the same order (COMPONENTS; the
    per-token ones in the order the phase's dict holds them) from the same terms, absent ones as
    0.0 as `_component_bytes` has them, and 0 x a finite per-token term adds a zero that changes
    no sum; building a dict per moment was most of a pipeline table's time. Checked by:
    tests/test_layout_speed.py (coefficients equal the phases' sums)."""
    layout = recipe.parallel
    b, r = z.b, z.r
    local = [stages[s] for s in pipeline.stage_of_rank(rank, layout.pp, layout.virtual_stages)]
    by_index = {st.index: st for st in local}
    shard = sum(st.shard for st in local)
    tensors = sum(u.tensors for st in local for u in st.units)
    states = {"sharded_params": z.m * shard,
              "optimizer_states": ADAM_STATE_BYTES * shard + FP32 * tensors,
              "outer_states": OUTER_STATE_BYTES * shard if outer else 0.0}
    # Held the whole step: token ids / labels of all k micro-batches, the receive buffers.
    persistent = 8.0 * k * (any(st.first for st in local) + any(st.last for st in local))
    persistent += k * boundary * sum((not st.first) + (not st.last) for st in local)
    rope = 2.0 * seq_len * spec.d * b * len(local)
    fwd_logits, _, bwd_logits = logits_bytes_per_token(spec, b, recipe)
    loss_transient = fwd_logits - logits_bytes_per_token(spec, b, recipe)[1] - (
        0.0 if recipe.loss == "fused" else b * spec.vocab_size)
    w_down = b * spec.hidden_size * spec.intermediate_size
    norm_backward = norm_backward_bytes(spec, b, config)

    # The input gradient a backward sends stays referenced by the schedule's send ops: in 1F1B
    # until the next backward's (a local variable of torch's loop), in GPipe until the next
    # backward's receive ops replace them (so only the last one, after the last backward); the
    # interleaved runtime keeps only the posted work, which holds nothing.
    keeps_dx = layout.pp_schedule == "1f1b"
    dx_at_reduce = layout.pp_schedule in ("1f1b", "gpipe")

    def output_bytes(st: _Stage) -> float:
        """Per token: a stage's output (the logits on the last stage)."""
        if st.last:
            return 0.0 if recipe.loss == "fused" else b * spec.vocab_size
        return boundary

    held = dict.fromkeys(by_index, 0)
    peak_held = dict.fromkeys(by_index, 0)
    gathered: set[int] = set()
    accumulated: set[int] = set()
    reduced: set[int] = set()
    phases: list[Any] = []   # _Phase, or (fixed, per token) with `totals`
    seen: set[Any] = set()
    last_forward: tuple[int, int] | None = None   # still referenced by the schedule's loop
    stale = False                                  # ... after its micro-batch's backward

    # What every moment of the current state shares (its key and its sums), computed at its
    # first moment and dropped (`snapshot.clear()`) wherever the walk changes the state: a
    # backward action adds a dozen moments in one state. The same sums, in the same order, as
    # computing them at each moment.
    # A state is numbered the first time it is seen (a moment's dedup key is its own key and
    # that number).
    snapshot: list[tuple[int, dict[str, float], float, float | None, float, list[float]]] = []
    state_ids: dict[Any, int] = {}

    # A state's sums by its key (1F1B's steady state returns to a few states thousands of
    # times).
    known: dict[Any, tuple[int, dict[str, float], float, float | None, float, list[float]]] = {}

    def state() -> tuple[int, dict[str, float], float, float | None, float, list[float]]:
        if not snapshot:
            # the stale output's stage is part of the state: its size (a boundary activation,
            # or the logits on the last stage) is in every moment's sum
            stale_stage = last_forward[0] if stale and last_forward is not None else None
            now = (tuple(sorted(held.items())), frozenset(gathered), frozenset(accumulated),
                   frozenset(reduced), stale_stage)
            if skip_repeats and now in known:
                snapshot.append(known[now])
                return snapshot[0]
            base = {"unsharded_params": b * sum(by_index[s].padded for s in gathered),
                    "sharded_grads": FP32 * sum(by_index[s].shard for s in reduced),
                    "activations": rope}
            state_fixed = {**states, **base}
            state_fixed["temporaries"] = r * sum(by_index[s].params for s in accumulated)
            snapshot.append((
                state_ids.setdefault(now, len(state_ids)), state_fixed,
                sum(n * by_index[s].held for s, n in held.items()),
                output_bytes(by_index[stale_stage]) if stale_stage is not None else None,
                # the previous backward's input gradient, referenced by its send ops
                boundary * sum(1 for s in accumulated if keeps_dx and not by_index[s].first),
                [state_fixed.get(c, 0.0) for c in COMPONENTS] if totals else []))
            known[now] = snapshot[0]
        return snapshot[0]

    def add(name: str, key: Any, fixed: dict[str, float], per_token: dict[str, float],
            minus_held: float = 0.0) -> None:
        """One moment: states, gathered / accumulated / reduced stages and held micro-batches
        plus the moment's own terms."""
        now, state_fixed, held_sum, stale_output, dx, state_list = state()
        full_key = (key, now)
        if full_key in seen:
            return
        seen.add(full_key)
        held_bytes = held_sum - minus_held
        if stale_output is not None:
            held_bytes += stale_output
        if totals:
            values = state_list.copy()
            for c, v in fixed.items():
                i = _COMPONENT_INDEX[c]
                values[i] = values[i] + v
            activations, temporaries = persistent + held_bytes, dx
            others: dict[str, float] = {}
            for c, v in per_token.items():
                if c == "activations":
                    activations = activations + v
                elif c == "temporaries":
                    temporaries = temporaries + v
                else:
                    others[c] = others.get(c, 0.0) + v
            phases.append((sum(values), sum([activations, temporaries, *others.values()])))
            return
        per = {"activations": persistent + held_bytes, "temporaries": dx}
        tot_fixed = state_fixed.copy()
        for c, v in fixed.items():
            tot_fixed[c] = tot_fixed.get(c, 0.0) + v
        for c, v in per_token.items():
            per[c] = per.get(c, 0.0) + v
        phases.append(_Phase(name, tot_fixed, per))

    def _end_backward(s: int, i: int) -> None:
        """After stage `s`'s backward of micro-batch `i`: one micro-batch fewer held, the
        stage's gradients accumulated, and after its last micro-batch the reduce-scatter."""
        nonlocal stale
        held[s] -= 1
        accumulated.add(s)
        stale = stale or last_forward == (s, i)
        snapshot.clear()
        if i == k - 1:
            st = by_index[s]
            where = f"stage {s}, micro-batch {i}"
            # REDUCE_GRAD: the units reduce-scatter in forward order. The first one's parameters
            # are resharded, its reduce-scatter input is filled from its accumulated gradients,
            # which are then freed but for the last parameter's: over more than one rank torch
            # 2.13's foreach_reduce still references it from a loop variable when it allocates
            # the reduce-scatter output.
            u = st.units[0]
            kept = u.order[-1] if u.padded > u.shard else 0
            dx_last = {"temporaries": boundary} if (
                dx_at_reduce and not keeps_dx and not st.first) else {}
            add(f"reduce({where})", ("R", s),
                {"reduce_scatter": r * u.padded, "unsharded_params": -b * u.padded}, dx_last)
            add(f"reduce_output({where})", ("RO", s),
                {"reduce_scatter": r * u.padded + r * u.shard, "unsharded_params": -b * u.padded,
                 "temporaries": -r * (u.params - kept)}, dx_last)
            gathered.discard(s)
            accumulated.discard(s)
            reduced.add(s)
            snapshot.clear()

    for action in pipeline.rank_order(layout.pp_schedule, layout.pp, layout.virtual_stages, k,
                                      rank):
        st = by_index[action.stage]
        s, i = action.stage, action.micro
        where = f"stage {s}, micro-batch {i}"
        if action.pass_ == "F":
            last_forward, stale = (s, i), False
            gathering = s not in gathered
            gathered.add(s)
            held[s] += 1
            peak_held[s] = max(peak_held[s], held[s])
            snapshot.clear()
            # as for a backward action below: a forward met again in a state already walked
            # adds nothing
            action_key = ("F", s, gathering, state()[0])
            if skip_repeats and action_key in seen:
                continue
            seen.add(action_key)
            add(f"forward_end({where})", ("F", s, gathering),
                {"all_gather": b * st.units[-1].padded if gathering else 0.0},
                {"temporaries": loss_transient if st.last else 0.0})
            if st.forward_peak:
                # inside an MoE block's forward: this micro-batch's saves so far and the
                # dispatch's rows (`moe_dispatch_peak_bytes`)
                add(f"moe_forward({where})", ("MF", s), {},
                    {"activations": st.forward_peak},
                    minus_held=st.held)
            continue
        first_bwd = s not in accumulated
        # Every moment of a backward action is keyed by (its tag, s, its block, first_bwd) and
        # the state, which the action's moments share: an action met again in a state already
        # walked (1F1B's steady state returns to one) adds only moments `seen` would drop, so
        # it is skipped whole — the same phases, in the same order.
        action_key = ("B", s, first_bwd, state()[0])
        if skip_repeats and action_key in seen:
            _end_backward(s, i)
            continue
        seen.add(action_key)
        block_units = _block_units(st)
        # The stage output stays referenced through its backward (the boundary activation, or
        # on the last stage the logits); the rest of the micro-batch is freed block by block.
        output = output_bytes(st)
        n = st.blocks
        if st.last:
            add(f"loss_backward({where})", ("L", s, first_bwd), {}, {"temporaries": bwd_logits})
            # the LM head's post-backward: the loss is freed, the blocks' saves are not
            add(f"head_reduce({where})", ("H", s, first_bwd),
                {"unsharded_grads": st.units[-1].post_backward_bytes(b, r, first_bwd)},
                {"activations": st.saved_upto[n - 1] + output,
                 "temporaries": b * spec.hidden_size}, minus_held=st.held)
        for j in reversed(st.ends):
            block_unit = block_units[j]
            block = block_unit.params
            # first backward: the units above j accumulated so far (else all, in the base)
            upper = ((st.units[-1].params if st.last else 0.0)
                     + sum(u.params for u in block_units[j + 1:]) if first_bwd else 0.0)
            # a non-last stage's output gradient is its receive buffer, already counted
            work = st.work[j] - (b * spec.hidden_size if j == n - 1 and not st.last else 0.0)
            name = f"{where}, block {st.first_block + j}"
            add(f"block_backward({name})", ("BB", s, j, first_bwd),
                {"temporaries": r * upper + w_down},
                {"activations": st.saved_upto[j] + output, "temporaries": work},
                minus_held=st.held)
            # a block recomputed whole: at the end of its recomputed forward and, in an MoE
            # layer, at that recompute's combine all-to-all (`moe_recompute_dispatch_bytes`);
            # no weight gradient of it yet, its output gradient as in its backward
            for moment, tag, held_then in (
                    ("block_recompute_end", "BRE", st.recompute_end[j]),
                    ("moe_recompute_dispatch", "BRD", st.recompute_dispatch[j])):
                if held_then:
                    end = held_then - (b * spec.hidden_size
                                       if j == n - 1 and not st.last else 0.0)
                    add(f"{moment}({name})", (tag, s, j, first_bwd), {"temporaries": r * upper},
                        {"activations": st.saved_upto[j] + output, "temporaries": end},
                        minus_held=st.held)
            if st.experts_end[j]:
                # the routed experts' backward done: their weight gradients (the stacked
                # expert tensors that end an MoE layer's unit), the gradients and the saves
                # then alive (`experts_backward_bytes`)
                end = st.experts_end[j] - (b * spec.hidden_size
                                           if j == n - 1 and not st.last else 0.0)
                experts = sum(block_unit.order[-len(spec.mlp_linears):])
                add(f"experts_backward({name})", ("XB", s, j, first_bwd),
                    {"unsharded_grads": b * experts, "temporaries": r * upper},
                    {"activations": (st.saved_upto[j - 1] if j else 0.0) + output,
                     "temporaries": end},
                    minus_held=st.held)
            # the block's first norm back-propagated last: every gradient of the block exists
            add(f"block_end({name})", ("BE", s, j, first_bwd),
                {"unsharded_grads": b * block, "temporaries": r * upper},
                {"activations": (st.saved_upto[j - 1] if j else 0.0) + output,
                 "temporaries": norm_backward},
                minus_held=st.held)
            add(f"block_reduce({name})", ("BR", s, j, first_bwd),
                {"unsharded_grads": block_unit.post_backward_bytes(b, r, first_bwd),
                 "temporaries": r * upper},
                {"activations": (st.saved_upto[j - 1] if j else 0.0) + output},
                minus_held=st.held)
        if st.first:
            embed = st.units[0].params
            add(f"embedding_backward({where})", ("E", s, first_bwd),
                {"unsharded_grads": st.units[0].post_backward_bytes(b, r, first_bwd),
                 "temporaries": r * (st.params - embed) if first_bwd else 0.0},
                {"temporaries": boundary}, minus_held=st.held)
        _end_backward(s, i)

    add("optimizer_step", ("O",), {}, {})
    return phases, peak_held


def _block_units(st: _Stage) -> tuple[_Unit, ...]:
    """The stage's blocks' units, in block order."""
    return st.units[1 if st.first else 0:][:st.blocks]


def _block_ends(st: _Stage) -> list[int]:
    """The local blocks whose backward moments bound the stage's: every term is affine in the
    block index among blocks of one kind (unit and saves), so the first two and last two blocks
    and the first and last block of each kind."""
    n = st.blocks
    ends = {0, 1, n - 2, n - 1}
    units = _block_units(st)
    kinds: dict[Any, list[int]] = {}
    for j in range(n):
        kinds.setdefault((units[j], st.work[j]), []).append(j)
    for indices in kinds.values():
        ends |= {indices[0], indices[-1]}
    return sorted(ends & set(range(n)))


def _pipeline_view(model: ModelSpec, num_gpus: int, seq_len: int, recipe: TrainingRecipe,
                   config: MemoryConfig) -> tuple[ModelSpec, int, int, ParallelLayout, _Sizes,
                                                  float]:
    """(in-stage model shard, FSDP ranks, tokens per sequence, resolved layout, element sizes,
    bytes per token of a stage-boundary tensor). The in-stage part is `rank_view`'s, on the
    GPUs of one pipeline rank; a boundary tensor is the hidden width in the param dtype, on
    1/tp of the tokens under sequence parallelism."""
    layout = recipe.parallel.resolve(num_gpus)
    layout.check_model(num_layers=model.num_layers, num_heads=model.num_heads,
                       num_kv_heads=model.num_kv_heads,
                       intermediate_size=model.intermediate_size, seq_len=seq_len,
                       num_experts=model.num_experts)
    inner = replace(recipe, parallel=replace(layout, pp=1, virtual_stages=1, pp_schedule="1f1b"))
    view = rank_view(model, num_gpus // layout.pp, seq_len, inner)
    spec, world, tokens = view.model, view.num_shards, view.seq_len
    z = _sizes(view, recipe, config)
    sp = layout.tp if layout.tp > 1 and layout.sequence_parallel else 1
    return spec, world, tokens, layout, z, z.b * spec.hidden_size / sp


@_memoised
def _pipeline_setup(model: ModelSpec, num_gpus: int, seq_len: int, recipe: TrainingRecipe,
                    accum_steps: int, config: MemoryConfig
                    ) -> tuple[ModelSpec, int, int, ParallelLayout, _Sizes, float, TrainingRecipe,
                               list[_Stage]]:
    """What every rank's walk shares: (in-stage model, FSDP ranks, tokens per sequence, resolved
    layout, element sizes, boundary bytes per token, recipe with the resolved layout, stages)."""
    spec, world, tokens_per_seq, layout, z, boundary = _pipeline_view(model, num_gpus, seq_len,
                                                                      recipe, config)
    pipeline.check_schedule(layout.pp_schedule, layout.pp, layout.virtual_stages, accum_steps)
    recipe = replace(recipe, parallel=layout)
    stages = _pipeline_stages(spec, world, tokens_per_seq, recipe, config, z.b, boundary,
                              share=z.share, loss_parallel=z.loss_parallel, ep=layout.ep,
                              token_factor=z.token_factor)
    return spec, world, tokens_per_seq, layout, z, boundary, recipe, stages


def _pipeline_ranks(model: ModelSpec, num_gpus: int, seq_len: int, recipe: TrainingRecipe,
                    accum_steps: int, config: MemoryConfig, outer_states: bool
                    ) -> tuple[ParallelLayout, int, int, list[tuple[list[Any], dict[int, int],
                                                                    list[_Stage]]]]:
    spec, world, tokens_per_seq, layout, z, boundary, recipe, stages = _pipeline_setup(
        model, num_gpus, seq_len, recipe, accum_steps, config)
    out = []
    for rank in range(layout.pp):
        phases, held = _rank_phases(stages, rank, spec, tokens_per_seq, recipe, accum_steps, z,
                                    boundary, outer_states, config)
        local = [stages[s] for s in pipeline.stage_of_rank(rank, layout.pp,
                                                           layout.virtual_stages)]
        out.append((phases, held, local))
    return layout, world, tokens_per_seq, out


def pipeline_memory(model: ModelSpec, *, num_gpus: int, seq_len: int, micro_batch: int,
                    recipe: TrainingRecipe | None = None, accum_steps: int = 1,
                    ac: str | None = None, outer_states: bool = False,
                    config: MemoryConfig = DEFAULT_CONFIG) -> PipelineMemory:
    """Predicted peak of every pipeline rank of the recipe's layout on `num_gpus` GPUs, with
    k = `accum_steps` micro-batches of `micro_batch` sequences per step (the schedule's
    micro-batches); pp = 1 is the FSDP model's one rank (`memory_breakdown`).

    Claim: a pipeline rank's peak is the largest of the moments of its schedule, walked along the
    actions it executes (`perfmodel.spec.pipeline.rank_order`), each a sum of the tensors alive:
      * all step long: master shards and AdamW moments of the rank's stages (FSDP2 over
        dp_shard · cp on `rank_view`'s in-stage shard), the step's token ids (first stage) and
        labels (last stage), torch's receive buffers (one activation buffer per micro-batch on
        every stage but the first, one gradient buffer on every stage but the last; a boundary
        tensor is m·S·h in the param dtype, on 1/tp of the tokens under sequence parallelism),
        each stage module's RoPE tables;
      * from a stage's first forward to its REDUCE_GRAD: its unsharded parameters (torchtitan's
        apply_fsdp passes reshard_after_forward=False under PP, torch's runtime sets
        reshard_after_backward(False)); from its first backward: its gradients accumulated in the
        reduce dtype (requires_gradient_sync(False) on every backward);
      * per micro-batch between its forward and its backward (the schedule's in-flight count:
        GPipe k, 1F1B pp - rank, interleaved more): the stage's blocks' saves (`block_saved`,
        the policy by global block index; a later stage's first block shares its input with
        the receive buffer when it keeps it), the stage output (the boundary activation; on the
        last stage the final norm's saves, the logits and the loss's log-softmax);
      * the moment's transients: the loss's fp32 logits copy and its fp32 gradients, a block's
        backward working set (`_block_working_set` less what torch does not hold twice), the
        end of a block's backward (all its gradients with its first norm's working set,
        `norm_backward_bytes`), a unit's post-backward (its first converts the gradients to the
        reduce dtype one parameter at a time), the LM head's and the embedding's, the last
        forward's output still referenced after its backward, the input gradient 1F1B's send
        ops hold, and REDUCE_GRAD (the first unit resharded, its reduce-scatter input filled
        from the accumulated gradients; over more than one rank its last gradient is still
        referenced when the output is allocated).
    Why: this is what torch 2.13's pipeline runtime and FSDP2 allocate, read from their code and
    from FSDPMemTracker timelines of every action (`perfmodel.bench.pipeline_memory`).
    MoE stages (the module doc's "MoE pipeline stages"): each block is priced by its global
    index (a dense or an MoE layer's unit, saves and working set), and a block recomputed whole
    adds the end of its recomputed forward (`recompute_end_bytes`).
    Checked by: tests/test_memory_pipeline.py (catalogs/profiles/data/memory-tracker-pipeline.csv
    and its 20 held-out configurations: MAPE <= 3 %, no row beyond 8 %; the in-flight counts
    torch's runtime held; a live tracker run; the per-micro-batch arithmetic) and
    tests/test_memory_moe_pipeline.py (the MoE stage grid and its held-out draw, same goal)."""
    _positive("num_gpus", num_gpus)
    _positive("seq_len", seq_len)
    _positive("micro_batch", micro_batch)
    _positive("accum_steps", accum_steps)
    recipe = resolve_memory_recipe(recipe, ac)
    return _pipeline_memory(model, num_gpus, seq_len, micro_batch, recipe, accum_steps,
                            outer_states, config)


@_memoised
def _pipeline_memory(model: ModelSpec, num_gpus: int, seq_len: int, micro_batch: int,
                     recipe: TrainingRecipe, accum_steps: int, outer_states: bool,
                     config: MemoryConfig) -> PipelineMemory:
    """`pipeline_memory` on validated arguments and a resolved recipe (memoised)."""
    if recipe.parallel.pp == 1:
        layout = recipe.parallel.resolve(num_gpus)
        single = memory_breakdown(model, num_gpus=num_gpus, seq_len=seq_len,
                                  micro_batch=micro_batch, recipe=recipe,
                                  accum_steps=accum_steps, outer_states=outer_states,
                                  config=config)
        return PipelineMemory(layout=layout, ranks=(RankMemory(
            rank=0, stages=(0,), blocks=((0, model.num_layers),), num_stages=1, in_flight=(1,),
            breakdown=single),))
    layout = recipe.parallel.resolve(num_gpus)
    points = pipeline.closed_form_accums(layout.pp_schedule, layout.pp, layout.virtual_stages,
                                         accum_steps)
    peaks = None
    if points is not None:
        peaks = _extended_rank_peaks(
            [_rank_peaks(model, num_gpus, seq_len, micro_batch, recipe, k, outer_states, config)
             for k in points], points, accum_steps)
    if peaks is None:
        pipeline.check_exact_accum(accum_steps, layout.pp_schedule, "pipeline memory")
        peaks = _rank_peaks(model, num_gpus, seq_len, micro_batch, recipe, accum_steps,
                            outer_states, config)
    world, tokens_per_seq, ranks = peaks
    out = []
    for rank, peak in enumerate(ranks):
        parts = {f"{c}_bytes": int(v) for c, v in peak.parts.items()}
        tracked = sum(parts.values())
        breakdown = MemoryBreakdown(
            num_gpus=world, seq_len=tokens_per_seq, micro_batch=micro_batch,
            accum_steps=accum_steps, ac=recipe.ac, accum_mode="no_sync", phase=peak.phase,
            **parts, reserve_bytes=config.reserve_bytes + int(config.reserve_fraction * tracked))
        out.append(RankMemory(
            rank=rank, stages=peak.stages, blocks=peak.blocks,
            num_stages=layout.pp * layout.virtual_stages, in_flight=peak.in_flight,
            breakdown=breakdown))
    result = PipelineMemory(layout=layout, ranks=tuple(out))
    logger.debug("%s %s S=%d m=%d k=%d: worst %s, %.3f GiB at %s", model.name, layout.describe(),
                 seq_len, micro_batch, accum_steps, result.ranks[result.worst_rank].describe(),
                 result.worst.peak_bytes / GIB, result.worst.phase)
    return result


@dataclass(frozen=True, slots=True)
class _RankPeak:
    """One pipeline rank's peak moment, before the breakdown rounds it to bytes."""

    phase: str
    parts: dict[str, float]          # bytes per component (COMPONENTS) at the peak
    in_flight: tuple[int, ...]       # per local stage, the most micro-batches held
    stages: tuple[int, ...]
    blocks: tuple[tuple[int, int], ...]


def _rank_peaks(model: ModelSpec, num_gpus: int, seq_len: int, micro_batch: int,
                recipe: TrainingRecipe, accum_steps: int, outer_states: bool,
                config: MemoryConfig) -> tuple[int, int, list[_RankPeak]]:
    """(FSDP ranks, tokens per sequence, each pipeline rank's peak) from the walk at k =
    `accum_steps`."""
    _, world, tokens_per_seq, ranks = _pipeline_ranks(model, num_gpus, seq_len, recipe,
                                                      accum_steps, config, outer_states)
    tokens = micro_batch * tokens_per_seq
    out = []
    for phases, held, local in ranks:
        totals = [sum(_component_bytes(p, tokens).values()) for p in phases]
        peak = phases[int(np.argmax(totals))]
        out.append(_RankPeak(
            phase=peak.name, parts=_component_bytes(peak, tokens),
            in_flight=tuple(held[st.index] for st in local),
            stages=tuple(st.index for st in local),
            blocks=tuple((st.first_block, st.first_block + st.blocks) for st in local)))
    return world, tokens_per_seq, out


def _extended_rank_peaks(walks: Sequence[tuple[int, int, list[_RankPeak]]],
                         points: tuple[int, ...], accum_steps: int
                         ) -> tuple[int, int, list[_RankPeak]] | None:
    """Each rank's peak at k = `accum_steps` from its walks at the `points`
    (`perfmodel.spec.pipeline.closed_form_accums`), or None where a rank's peak moment, a
    component or an in-flight count is not on one line (the caller walks k itself)."""
    world, tokens_per_seq, _ = walks[-1]
    out = []
    for peaks in zip(*(ranks for _, _, ranks in walks), strict=True):
        phase = _extended_phase([p.phase for p in peaks], points, accum_steps)
        if phase is None:
            return None
        parts: dict[str, float] = {}
        for component in peaks[-1].parts:
            values = [p.parts[component] for p in peaks]
            if not pipeline.on_line(values, points):
                return None
            parts[component] = pipeline.extend_line(values, points, accum_steps)
        in_flight = []
        for counts in zip(*(p.in_flight for p in peaks), strict=True):
            grown, rest = divmod((accum_steps - points[-1]) * (counts[-1] - counts[-2]),
                                 points[-1] - points[-2])
            if rest or not pipeline.on_line(counts, points):
                return None
            in_flight.append(counts[-1] + grown)
        out.append(replace(peaks[-1], phase=phase, parts=parts, in_flight=tuple(in_flight)))
    logger.info("pipeline memory at k = %d: walked at k = %s, the rest in closed form",
                accum_steps, ", ".join(map(str, points)))
    return world, tokens_per_seq, out


def _pipeline_coefficients(model: ModelSpec, num_gpus: int, seq_len: int,
                           recipe: TrainingRecipe, accum_steps: int, config: MemoryConfig,
                           outer_states: bool) -> MemoryCoefficients:
    """Every moment of every pipeline rank as an affine function of the micro-batch: their
    maximum is the worst rank's peak. Past `perfmodel.spec.pipeline.closed_form_accums`' points
    each rank's moments are extended in k from its walks there where those list the same
    moments on one line (1F1B and interleaved 1F1B: `perfmodel.sim.layouts._AccumLine`'s
    claim; GPipe's kept moments too, checked), else k is walked."""
    layout = recipe.parallel.resolve(num_gpus)
    points = pipeline.closed_form_accums(layout.pp_schedule, layout.pp, layout.virtual_stages,
                                         accum_steps)
    if points is not None:
        # rank by rank: a rank's moments all move by the same bytes per micro-batch, so which of
        # them another dominates does not change with k; across ranks it does (the end ranks'
        # token ids and labels grow faster)
        ranks: list[MemoryCoefficients] = []
        for rank in range(layout.pp):
            walks = [_rank_coefficients(model, num_gpus, seq_len, recipe, k, outer_states,
                                        config, rank) for k in points]
            extended = _extended_coefficients(walks, points, accum_steps)
            if extended is None:   # off its line: the other ranks need not be walked
                break
            ranks.append(extended)
        else:
            fixed = tuple(f for r in ranks for f in r.fixed_bytes)
            per_seq = tuple(v for r in ranks for v in r.per_sequence_bytes)
            logger.info("pipeline memory coefficients at k = %d: walked at k = %s, the rest in "
                        "closed form", accum_steps, ", ".join(map(str, points)))
            return _coefficients_of(fixed, per_seq, config)
    pipeline.check_exact_accum(accum_steps, layout.pp_schedule, "pipeline memory")
    found = _pipeline_walk(model, num_gpus, seq_len, recipe, accum_steps, config, outer_states)
    if found is None:   # without a memory to exceed the walk always completes
        raise RuntimeError("pipeline memory walk stopped without a memory bound")
    return found


_MICRO_BATCH = re.compile(r"micro-batch (\d+)")


def _extended_phase(phases: Sequence[str], points: Sequence[int], accum_steps: int) -> str | None:
    """The peak moment's name at k = `accum_steps` from its names at `points`: the same moment
    at the same micro-batch (an early one), or at the same distance from the last micro-batch
    (a late one, e.g. the last backward); None when the walks peak at different moments."""
    if len(set(phases)) == 1:
        return phases[0]
    found = [_MICRO_BATCH.search(p) for p in phases]
    if any(f is None for f in found):
        return None
    tails = {k - int(f.group(1)) for k, f in zip(points, found, strict=True) if f is not None}
    shapes = {_MICRO_BATCH.sub("micro-batch #", p) for p in phases}
    if len(tails) != 1 or len(shapes) != 1:
        return None
    return _MICRO_BATCH.sub(f"micro-batch {accum_steps - tails.pop()}", phases[-1], count=1)


def _extended_coefficients(sets: Sequence[MemoryCoefficients | None],
                           points: tuple[int, ...],
                           accum_steps: int) -> MemoryCoefficients | None:
    """The coefficient set at k = `accum_steps` from those at the `points`, moment by
    moment (None: the walks list different moments, or one is off its line)."""
    if any(c is None for c in sets):
        return None
    walks = [c for c in sets if c is not None]
    if len({len(c.fixed_bytes) for c in walks}) != 1:
        return None
    columns = []
    for name in ("fixed_bytes", "per_sequence_bytes"):
        extended = []
        for values in zip(*(getattr(c, name) for c in walks), strict=True):
            if not pipeline.on_line(values, points):
                return None
            extended.append(pipeline.extend_line(values, points, accum_steps))
        columns.append(tuple(extended))
    return replace(walks[-1], fixed_bytes=columns[0], per_sequence_bytes=columns[1])


def _pipeline_walk(model: ModelSpec, num_gpus: int, seq_len: int,
                   recipe: TrainingRecipe, accum_steps: int, config: MemoryConfig,
                   outer_states: bool, over_bytes: int | None = None
                   ) -> MemoryCoefficients | None:
    """Every moment of every pipeline rank as an affine function of the micro-batch: their
    maximum is the worst rank's peak. With `over_bytes`, None as soon as one rank's moments
    prove that micro-batch 1 does not fit in `over_bytes` (`coefficients_unless_over`); the
    ranks are walked 0, last, then the others (the end stages hold the most), and the moments
    are concatenated in rank order whatever the walk order."""
    pp = recipe.parallel.resolve(num_gpus).pp
    by_rank: dict[int, MemoryCoefficients] = {}
    for rank in dict.fromkeys([0, pp - 1, *range(1, pp - 1)]):
        mine = _rank_coefficients(model, num_gpus, seq_len, recipe, accum_steps, outer_states,
                                  config, rank)
        if mine is None:
            # a non-finite per-token term: 0 x it is not a zero; add it as the phases do
            _, _, tokens_per_seq, ranks = _pipeline_ranks(model, num_gpus, seq_len, recipe,
                                                          accum_steps, config, outer_states)
            phases = [p for rank_phases, _, _ in ranks for p in rank_phases]
            fixed = tuple(float(sum(_component_bytes(p, 0).values())) for p in phases)
            per_seq = tuple(float(sum(p.per_token.values())) * tokens_per_seq for p in phases)
            return _coefficients_of(fixed, per_seq, config)
        by_rank[rank] = mine
        if over_bytes is not None and (mine.max_micro_batch(over_bytes) == 0
                                       and mine.peak_bytes(1) > over_bytes):
            return None
    # the ranks' reduced moments in rank order: the moments a reduction of all of them keeps
    # are among them (a moment dominated within its rank is dominated overall), and the
    # reduction keeps the same ones whatever the order it is given (sorted by value, index)
    fixed = tuple(f for rank in range(pp) for f in by_rank[rank].fixed_bytes)
    per_seq = tuple(v for rank in range(pp) for v in by_rank[rank].per_sequence_bytes)
    return _coefficients_of(fixed, per_seq, config)


@_memoised
def _rank_coefficients(model: ModelSpec, num_gpus: int, seq_len: int, recipe: TrainingRecipe,
                       accum_steps: int, outer_states: bool, config: MemoryConfig,
                       rank: int) -> MemoryCoefficients | None:
    """The (reduced) coefficients of one pipeline rank's moments, from its totals walk; None
    when a per-token term is not finite (then the phases must be summed as dicts)."""
    spec, _, tokens_per_seq, _, z, boundary, resolved, stages = _pipeline_setup(
        model, num_gpus, seq_len, recipe, accum_steps, config)
    sums, _ = _rank_phases(stages, rank, spec, tokens_per_seq, resolved, accum_steps, z,
                           boundary, outer_states, config, totals=True)
    if not all(math.isfinite(per) for _, per in sums):
        return None
    return _coefficients_of(tuple(float(f) for f, _ in sums),
                            tuple(float(per) * tokens_per_seq for _, per in sums), config)


def pipeline_rank_fits(model: ModelSpec, *, gpu_memory_bytes: int, num_gpus: int,
                       seq_len: int, recipe: TrainingRecipe, accum_steps: int,
                       micro_batch: int, config: MemoryConfig = DEFAULT_CONFIG) -> bool:
    """Whether the worst pipeline rank's peak at (k = accum_steps, m = micro_batch) fits
    `gpu_memory_bytes`: `memory_coefficients(...).peak_bytes(m) <= gpu_memory_bytes`, walking
    the ranks one at a time (0, last, the others) and stopping at the first that does not fit.

    Claim: the same answer as the full coefficients. Why: the peak is g(T) with T the largest
    moment over all ranks and g (floors, the reserve) non-decreasing, so g(max_r T_r) <= memory
    exactly when every g(T_r) <= memory; the ranks' walks are remembered for the next probe.
    Checked by: tests/test_layout_speed.py."""
    recipe = resolve_memory_recipe(recipe, None, None)
    key = (model, num_gpus, seq_len, recipe, accum_steps, False, config)
    known = _coefficients.get(key)
    if known is None:
        pp = recipe.parallel.resolve(num_gpus).pp
        for rank in dict.fromkeys([0, pp - 1, *range(1, pp - 1)]):
            mine = _rank_coefficients(*key, rank)
            if mine is None:    # sum as dicts (memory_coefficients)
                known = _coefficients(*key)
                break
            if mine.peak_bytes(micro_batch) > gpu_memory_bytes:
                return False
        else:
            return True
    return bool(known.peak_bytes(micro_batch) <= gpu_memory_bytes)


def coefficients_unless_over(model: ModelSpec, *, gpu_memory_bytes: int, num_gpus: int,
                             seq_len: int, recipe: TrainingRecipe, accum_steps: int = 1,
                             outer_states: bool = False,
                             config: MemoryConfig = DEFAULT_CONFIG) -> MemoryCoefficients | None:
    """`memory_coefficients`, or None when micro-batch 1 does not fit `gpu_memory_bytes`, found
    (for a pipeline) without walking every rank.

    Claim: None only where `max_micro_batch` (and `_PeakByAccum.max_micro_batch`) would say 0;
    otherwise the coefficients `memory_coefficients` returns, to the bit (and remembered as its).
    Why: a pipeline's peak is the maximum over the moments of every rank, so a rank whose own
    closed form is 0 (its smallest micro-batch limit < 1, so the minimum over all ranks is too)
    and whose own peak at m = 1 exceeds the memory (the maximum over all ranks is at least it)
    makes the search return 0 whatever the other ranks hold: the closed form starts at 0 and
    the walk up stops at m = 1. A layout table proves most pipeline layouts of a large model
    too big this way after one or two ranks instead of all of them.
    Checked by: tests/test_layout_speed.py (None exactly where the largest micro-batch is 0,
    coefficients equal otherwise)."""
    _positive("gpu_memory_bytes", gpu_memory_bytes)
    _positive("num_gpus", num_gpus)
    _positive("seq_len", seq_len)
    _positive("accum_steps", accum_steps)
    recipe = resolve_memory_recipe(recipe, None, None)
    key = (model, num_gpus, seq_len, recipe, accum_steps, outer_states, config)
    known = _coefficients.get(key)
    if known is not None or recipe.parallel.pp == 1:
        return known if known is not None else _coefficients(*key)
    found = _pipeline_walk(model, num_gpus, seq_len, recipe, accum_steps, config, outer_states,
                           over_bytes=gpu_memory_bytes)
    if found is not None:
        _coefficients.put(key, found)
    return found
