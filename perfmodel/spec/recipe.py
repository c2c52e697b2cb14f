"""The training recipe: how a job trains, consumed by every part of the model (DESIGN §2).

One `TrainingRecipe` is read by the memory model, the FSDP and DiLoCo graph builders, the fast
path, the island tables and the torch benchmark workers (which train exactly that recipe), so the
project describes one training job instead of three.

Two named recipes ship (`RECIPES`):

* ``torchtitan`` (the default): what torchtitan's Llama recipes do with FSDP2 in torch 2.13 —
  bf16 parameters, fp32 gradient reduction (`MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)`), every block and then the root wrapped by `fully_shard`, the root and the
  last block kept unsharded after forward (FSDP2 and torchtitan both do this: the backward needs
  them immediately), reduce-scatter on every micro-step of gradient accumulation, op-level
  selective activation checkpointing, SDPA/flash attention, an unfused loss, AdamW with fp32
  states.
* ``paper``: the ShardMeter paper's assumptions (no-sync accumulation, every unit resharded after
  forward and gathered again for backward, materialised attention scores).

Names of choices are plain strings so that recipes round-trip through YAML and CLI flags; every
field is validated in `__post_init__` and a bad value raises `UserInputError` with a "To fix:"
hint naming the allowed values.
"""

from __future__ import annotations

import difflib
import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from perfmodel.spec.errors import UserInputError
from perfmodel.spec.inputs import LIMITS, short_repr
from perfmodel.spec.layout import ParallelLayout, with_layout_fields

logger = logging.getLogger(__name__)

DTYPES = ("fp32", "bf16", "fp16")
"""Floating-point dtypes a parameter copy or a gradient reduction may use."""
PSEUDO_GRADIENT_DTYPES = ("fp32", "bf16", "int8", "fp4")
"""Dtypes a DiLoCo pseudo-gradient may be exchanged in (int8/fp4: quantised with a scale)."""
ACCUM_MODES = ("reduce_scatter", "no_sync")
"""Gradient accumulation: reduce-scatter every micro-step (torchtitan) or only the last
(no-sync)."""
AC_MODES = ("none", "full", "op-sac", "attn", "layer:N")
"""Activation checkpointing modes (`CheckpointPolicy`): none; full (every block's forward
recomputed); op-sac (torchtitan's per-op selective AC); attn (Megatron / Korthikanti selective:
the attention core recomputed); layer:N (every N-th block checkpointed whole, as torchtitan's
layer SAC and fms-fsdp do; N a positive integer)."""
AC_ALIASES = {"selective": "op-sac"}
"""Names accepted on input for a canonical mode. `selective` meant torchtitan's per-op policy in
the memory model and the torch workers, and the attention core in the time model, until the two
were made one (CHANGELOG.md); it now reads as the torchtitan recipe's default, op-sac."""
ATTENTION_KERNELS = ("sdpa", "eager")
"""sdpa: flash / memory-efficient SDPA (no S×S scores stored); eager: materialised softmax."""
LOSS_MODES = ("unfused", "chunked", "fused")
"""Cross-entropy over the logits: whole (unfused), in chunks of the sequence, or a fused kernel."""
OPTIMIZERS = ("adamw",)
"""Inner optimizer; AdamW keeps two fp32 moments per parameter."""
OUTER_OPTIMIZERS = ("nesterov",)
"""DiLoCo outer optimizer: SGD with Nesterov momentum on an fp32 global copy."""
FRAGMENT_PATTERNS = ("contiguous", "strided")
"""Streaming DiLoCo fragments: consecutive blocks, or every F-th block (the published variant)."""
COMPUTE_DTYPES = ("bf16", "fp8-tensorwise", "fp8-rowwise", "mxfp8")
"""Dtype of the transformer blocks' linear-layer matmuls: bf16, or torchao's float8 training
recipes (tensorwise and rowwise dynamic scaling; mxfp8: 1x32-block scales, Blackwell only).
Attention (SDPA) and the LM head stay bf16 (`perfmodel.profiles.precision`)."""


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise UserInputError(f"TrainingRecipe.{name} is {value!r}",
                             hint=f"set {name} to one of {', '.join(choices)}.")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum \
            or value > LIMITS["flag_int"].maximum:
        raise UserInputError(f"TrainingRecipe.{name} is {short_repr(value)}",
                             hint=f"set {name} to an integer >= {minimum} (and at most 2^53).")


def _check_float(name: str, value: Any, *, low: float, high: float) -> None:
    ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if not ok or not low <= float(value) <= high:
        raise UserInputError(f"TrainingRecipe.{name} is {value!r}",
                             hint=f"set {name} to a finite number in [{low}, {high}].")


def canonical_ac(value: Any, *, where: str = "TrainingRecipe.ac") -> str:
    """The canonical name of a checkpointing mode (aliases resolved, with a one-line notice);
    UserInputError naming `where` for anything else."""
    policy = CheckpointPolicy.parse(value, where=where)
    return policy.name


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointPolicy:
    """Which activations a block keeps for backward and which forward ops it recomputes: the one
    definition that the time model (`ModelSpec.recompute_flops_per_token`), the memory model
    (`perfmodel.costs.memory`) and the torch workers (`perfmodel.bench.recipe_wrap`) all read.

    Claim, per mode (a block's forward runs its linears in the order q, k, v, o, then gate, up,
    down — or up, down without a gate):
      * none: everything saved, nothing recomputed;
      * full: the block input saved, the whole forward recomputed in backward;
      * op-sac: torchtitan's per-op policy — the attention kernel's outputs and the 1st, 3rd, 5th,
        ... linear of the block saved (q, v, gate, down), the 2nd, 4th, ... recomputed (k, o,
        up; without a gate: k, o, down) with every elementwise op;
      * attn: only the attention core (QKᵀ, softmax, AV) recomputed;
      * layer:N: the blocks whose 1-based index is a multiple of N checkpointed as full, the
        others not checkpointed.
    Why: these are the policies torchtitan (`_apply_op_sac`, layer SAC with `ac_freq`), Megatron
    (selective recompute) and fms-fsdp run; a mode is data, so the three consumers cannot
    disagree on what it means.
    Checked by: tests/test_checkpoint_policy.py counts recomputed FLOPs with PyTorch's
    FlopCounterMode on real checkpointed steps of every mode against
    `ModelSpec.recompute_flops_per_token`, and tests/test_bench_memory.py compares the memory
    model with FSDPMemTracker for every mode.
    """

    mode: str
    """none, full, op-sac, attn or layer."""
    every: int = 1
    """layer mode: checkpoint every N-th block (1 elsewhere)."""

    def __post_init__(self) -> None:
        if self.mode not in ("none", "full", "op-sac", "attn", "layer"):
            raise UserInputError(f"CheckpointPolicy.mode is {self.mode!r}",
                                 hint=f"use one of {', '.join(AC_MODES)}.")
        _check_int("ac layer interval", self.every, 1)
        if self.mode != "layer" and self.every != 1:
            raise UserInputError(f"CheckpointPolicy.every is {self.every} for mode {self.mode}",
                                 hint="only layer:N takes an interval.")

    @property
    def name(self) -> str:
        """The canonical string (`layer:2`, `op-sac`, ...), as recipes, flags and outputs show."""
        return f"layer:{self.every}" if self.mode == "layer" else self.mode

    @classmethod
    def parse(cls, value: Any, *, where: str = "TrainingRecipe.ac") -> CheckpointPolicy:
        """A policy from its name (or an alias, with a one-line notice)."""
        if isinstance(value, CheckpointPolicy):
            return value
        if not isinstance(value, str):
            raise UserInputError(f"{where} is {value!r}",
                                 hint=f"set it to one of {', '.join(AC_MODES)}.")
        text = value.strip()
        if text in AC_ALIASES:
            _alias_notice(text)
            text = AC_ALIASES[text]
        if text.startswith("layer:"):
            interval = text.partition(":")[2]
            if not interval.isdigit() or int(interval) < 1:
                raise UserInputError(f"{where} is {value!r}: the layer interval must be a "
                                     "positive integer",
                                     hint="write layer:N with N >= 1, e.g. layer:2.")
            return cls(mode="layer", every=int(interval))
        if text not in AC_MODES or text == "layer:N":
            close = difflib.get_close_matches(text, [*AC_MODES, *AC_ALIASES], n=1)
            raise UserInputError(f"{where} is {value!r}",
                                 hint=("did you mean " + repr(close[0]) + "? " if close else "")
                                 + f"use one of {', '.join(AC_MODES)}.")
        return cls(mode=text)

    def checkpointed(self, block_index: int) -> bool:
        """Whether block `block_index` (0-based) is checkpointed whole (full and layer modes)."""
        if self.mode == "full":
            return True
        return self.mode == "layer" and (block_index + 1) % self.every == 0

    def checkpointed_blocks(self, num_layers: int) -> int:
        """Blocks checkpointed whole."""
        if self.mode == "full":
            return num_layers
        return num_layers // self.every if self.mode == "layer" else 0


_NOTICED: set[str] = set()


def _alias_notice(alias: str) -> None:
    if alias not in _NOTICED:
        _NOTICED.add(alias)
        logger.warning("activation checkpointing %r is read as %r (renamed; see CHANGELOG.md)",
                       alias, AC_ALIASES[alias])


@dataclass(frozen=True, kw_only=True, slots=True)
class OuterRecipe:
    """DiLoCo / Streaming DiLoCo settings of a recipe (ignored by plain FSDP training)."""

    optimizer: str = "nesterov"
    """Outer optimizer; Nesterov SGD keeps an fp32 global copy and an fp32 momentum per
    parameter (8 B/param, sharded over the island like the inner states)."""
    learning_rate: float = 0.7
    """Outer learning rate (DiLoCo: 0.7)."""
    momentum: float = 0.9
    """Outer Nesterov momentum (DiLoCo: 0.9)."""
    pseudo_gradient_dtype: str = "fp32"
    """Dtype the pseudo-gradient is exchanged in across islands."""
    inner_steps: int = 100
    """H: inner steps per outer step."""
    num_fragments: int = 1
    """F: Streaming DiLoCo fragments (1 = plain DiLoCo: one blocking exchange every H steps)."""
    fragment_pattern: str = "contiguous"
    """How blocks are assigned to fragments."""
    delay_steps: int = 0
    """τ: inner steps an exchange may take before the step that applies it (0 = blocking)."""
    overlap_backward: bool = True
    """Whether a fragment's exchange may start during the backward pass that produces its last
    gradient (the published Streaming DiLoCo simulations), or only after the step ends."""

    def __post_init__(self) -> None:
        _check_choice("outer.optimizer", self.optimizer, OUTER_OPTIMIZERS)
        _check_choice("outer.pseudo_gradient_dtype", self.pseudo_gradient_dtype,
                      PSEUDO_GRADIENT_DTYPES)
        _check_choice("outer.fragment_pattern", self.fragment_pattern, FRAGMENT_PATTERNS)
        _check_float("outer.learning_rate", self.learning_rate, low=0.0, high=10.0)
        _check_float("outer.momentum", self.momentum, low=0.0, high=1.0)
        _check_int("outer.inner_steps", self.inner_steps, 1)
        _check_int("outer.num_fragments", self.num_fragments, 1)
        _check_int("outer.delay_steps", self.delay_steps, 0)
        if not isinstance(self.overlap_backward, bool):
            raise UserInputError("TrainingRecipe.outer.overlap_backward is "
                                 f"{self.overlap_backward!r}",
                                 hint="set overlap_backward to true or false.")


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingRecipe:
    """How one island trains: FSDP2 wrapping, precision, accumulation, checkpointing, kernels,
    loss and optimizer, plus the DiLoCo outer settings. Defaults follow torchtitan."""

    name: str = "torchtitan"
    """Label printed with every prediction."""
    param_dtype: str = "bf16"
    """Dtype of the all-gathered (compute) parameters: `MixedPrecisionPolicy.param_dtype`."""
    reduce_dtype: str = "fp32"
    """Dtype gradients are reduce-scattered in: `MixedPrecisionPolicy.reduce_dtype`."""
    master_dtype: str = "fp32"
    """Dtype of the sharded parameters the optimizer updates."""
    reshard_root_after_forward: bool = False
    """FSDP2 never reshards the root module after forward (its parameters are needed first in
    backward), so the root is gathered once per micro-step."""
    reshard_last_block_after_forward: bool = False
    """torchtitan passes reshard_after_forward=False for the last block: backward needs it next."""
    reshard_blocks_after_forward: bool = True
    """Every other block is resharded after forward and all-gathered again for backward."""
    prefetch_depth: int = 1
    """FSDP units all-gathered ahead of compute (FSDP2's implicit prefetch: one)."""
    accum_mode: str = "reduce_scatter"
    """Gradient accumulation: `reduce_scatter` every micro-step (torchtitan; sharded fp32
    gradients accumulate) or `no_sync` (set_requires_gradient_sync(False) until the last
    micro-step; unsharded gradients of every unit stay resident)."""
    ac: str = "op-sac"
    """Activation checkpointing mode, a `CheckpointPolicy` name (op-sac: torchtitan's default;
    `selective` is read as op-sac)."""
    attention: str = "sdpa"
    """Attention kernel."""
    loss: str = "unfused"
    """How the cross-entropy loss is computed over the logits."""
    loss_chunks: int = 8
    """Number of sequence chunks when `loss` is `chunked`."""
    optimizer: str = "adamw"
    """Inner optimizer."""
    outer: OuterRecipe = field(default_factory=OuterRecipe)
    """DiLoCo / Streaming DiLoCo settings."""
    parallel: ParallelLayout = field(default_factory=ParallelLayout)
    """How the island's GPUs split the job (`perfmodel.spec.layout`): tensor, pipeline, context
    parallelism and HSDP replicas; the default is FSDP over every GPU."""
    moe_capacity_factor: float | None = None
    """Mixture-of-experts routing: None = dropless (every token reaches its k experts, torchtitan's
    default); a number c = fixed capacity, each expert takes c·T·k/E token slots (tokens beyond
    it are dropped, empty slots padded), so expert compute and all-to-all payload scale by c."""
    moe_load_imbalance: float = 1.0
    """Dropless MoE under expert parallelism: tokens the busiest EP rank receives over the mean
    (>= 1). A stated prior, not a measurement: 1.0 assumes a perfectly balanced router (an
    auxiliary-loss or bias-balanced router approaches it); it scales the experts' compute and
    the all-to-all payload, since the slowest rank decides."""
    moe_grouped_gemm_efficiency: float = 1.0
    """Throughput of the experts' grouped GEMMs relative to a dense GEMM of the same FLOPs
    (0 < x <= 1). A stated prior: 1.0 assumes none lost (no ground truth measures it yet)."""
    compute_dtype: str = "bf16"
    """Dtype of the block linears' matmuls (COMPUTE_DTYPES): bf16, or a torchao float8 recipe
    (a prior until a GPU measures it; GPUs without an FP8 rate refuse it)."""
    fp8_all_gather: bool = False
    """torchao's `enable_fsdp_float8_all_gather`: FSDP2 all-gathers the block linears' weights in
    float8 (1 byte each instead of param_dtype's); only with an fp8 compute_dtype."""
    compile: bool = False
    """Whether the model runs under torch.compile (a sourced prior speed effect on the
    elementwise part of compute: `perfmodel.profiles.precision`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UserInputError(f"TrainingRecipe.name is {self.name!r}",
                                 hint="give a non-empty name.")
        for name in ("param_dtype", "reduce_dtype", "master_dtype"):
            _check_choice(name, getattr(self, name), DTYPES)
        for name in ("reshard_root_after_forward", "reshard_last_block_after_forward",
                     "reshard_blocks_after_forward"):
            if not isinstance(getattr(self, name), bool):
                raise UserInputError(f"TrainingRecipe.{name} is {getattr(self, name)!r}",
                                     hint=f"set {name} to true or false.")
        _check_int("prefetch_depth", self.prefetch_depth, 0)
        _check_choice("accum_mode", self.accum_mode, ACCUM_MODES)
        object.__setattr__(self, "ac", canonical_ac(self.ac))
        _check_choice("attention", self.attention, ATTENTION_KERNELS)
        _check_choice("loss", self.loss, LOSS_MODES)
        _check_int("loss_chunks", self.loss_chunks, 1)
        _check_choice("optimizer", self.optimizer, OPTIMIZERS)
        if not isinstance(self.outer, OuterRecipe):
            raise UserInputError(f"TrainingRecipe.outer is {self.outer!r}",
                                 hint="pass an OuterRecipe (or a mapping in a recipe file).")
        if not isinstance(self.parallel, ParallelLayout):
            raise UserInputError(f"TrainingRecipe.parallel is {self.parallel!r}",
                                 hint="pass a ParallelLayout (or a mapping in a recipe file).")
        _check_moe_fields(self)
        _check_choice("compute_dtype", self.compute_dtype, COMPUTE_DTYPES)
        for name in ("fp8_all_gather", "compile"):
            if not isinstance(getattr(self, name), bool):
                raise UserInputError(f"TrainingRecipe.{name} is {getattr(self, name)!r}",
                                     hint=f"set {name} to true or false.")
        if self.fp8_all_gather and self.compute_dtype == "bf16":
            raise UserInputError("TrainingRecipe.fp8_all_gather is true with compute_dtype bf16",
                                 hint="pass --compute-dtype fp8-tensorwise (or set "
                                      "compute_dtype: fp8-tensorwise, fp8-rowwise or mxfp8), "
                                      "or drop --fp8-all-gather / set fp8_all_gather: false.")

    def with_overrides(self, **overrides: Any) -> TrainingRecipe:
        """A copy with fields replaced; keys of `OuterRecipe` go to `outer`, keys of
        `ParallelLayout` to `parallel`. None values are skipped (so unset CLI flags keep the
        recipe's value)."""
        # A name of both (`optimizer`) is the top-level field; the outer one is set nested.
        own = {f.name for f in fields(TrainingRecipe)}
        outer_names = {f.name for f in fields(OuterRecipe)} - own
        layout_names = {f.name for f in fields(ParallelLayout)} - own
        given = {k: v for k, v in overrides.items() if v is not None}
        outer = {k: v for k, v in given.items() if k in outer_names}
        layout = {k: v for k, v in given.items() if k in layout_names}
        top = {k: v for k, v in given.items() if k not in outer_names | layout_names}
        unknown = set(top) - own
        if unknown:
            raise UserInputError(f"unknown recipe field(s): {', '.join(sorted(unknown))}",
                                 hint="use fields of TrainingRecipe: "
                                      f"{', '.join(recipe_field_names())}.")
        recipe = replace(self, **top) if top else self
        if outer:
            recipe = replace(recipe, outer=replace(recipe.outer, **outer))
        if layout:
            recipe = replace(recipe, parallel=with_layout_fields(recipe.parallel, **layout))
        return recipe

    @property
    def checkpoint(self) -> CheckpointPolicy:
        """The checkpointing policy `ac` names."""
        return CheckpointPolicy.parse(self.ac)

    def to_dict(self) -> dict[str, Any]:
        """Plain mapping (YAML/JSON friendly) of every field, `outer` nested."""
        return asdict(self)

    def summary(self) -> str:
        """One line naming the choices that change predictions, for terminal output."""
        return (f"{self.name}: params {self.param_dtype}, reduce {self.reduce_dtype}, "
                f"accum {self.accum_mode}, ac {self.ac}, attention {self.attention}, "
                f"loss {self.loss}, reshard root/last block after forward "
                f"{self.reshard_root_after_forward}/{self.reshard_last_block_after_forward}"
                + (f", compute {self.compute_dtype}" if self.compute_dtype != "bf16" else "")
                + (", fp8 all-gather" if self.fp8_all_gather else "")
                + (", torch.compile" if self.compile else ""))


def _check_moe_fields(recipe: TrainingRecipe) -> None:
    """UserInputError naming a mixture-of-experts recipe field out of its range."""
    if recipe.moe_capacity_factor is not None:
        _check_float("moe_capacity_factor", recipe.moe_capacity_factor, low=0.01, high=64.0)
    _check_float("moe_load_imbalance", recipe.moe_load_imbalance, low=1.0, high=64.0)
    _check_float("moe_grouped_gemm_efficiency", recipe.moe_grouped_gemm_efficiency, low=0.01,
                 high=1.0)


def moe_token_factor(recipe: TrainingRecipe, ep: int) -> float:
    """Routed-expert token slots the slowest rank processes over the mean T·k/E per expert: the
    capacity factor under fixed capacity; dropless, the load imbalance when experts are spread
    over ep > 1 ranks (one rank holding every expert computes every routed token whatever the
    split), else 1."""
    if recipe.moe_capacity_factor is not None:
        return float(recipe.moe_capacity_factor)
    return float(recipe.moe_load_imbalance) if ep > 1 else 1.0


def recipe_field_names() -> tuple[str, ...]:
    """Names accepted by `recipe_from_mapping` (top level; `outer` takes OuterRecipe's names)."""
    return tuple(f.name for f in fields(TrainingRecipe))


PAPER_RECIPE = TrainingRecipe(
    name="paper", accum_mode="no_sync", reshard_root_after_forward=True,
    reshard_last_block_after_forward=True, attention="eager", ac="none")
"""The ShardMeter paper's assumptions, kept as a named recipe for comparison."""

RECIPES: dict[str, TrainingRecipe] = {"torchtitan": TrainingRecipe(), "paper": PAPER_RECIPE}
"""Named recipes; `torchtitan` is the default."""

DEFAULT_RECIPE = RECIPES["torchtitan"]


def named_recipe(name: str) -> TrainingRecipe:
    """The named recipe, with a did-you-mean error for unknown names."""

    if name in RECIPES:
        return RECIPES[name]
    close = difflib.get_close_matches(name, list(RECIPES), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise UserInputError(f"unknown recipe {name!r}",
                         hint=f"{hint}use one of {', '.join(RECIPES)}.")


def recipe_from_mapping(data: Mapping[str, Any], *, source: str = "<recipe>") -> TrainingRecipe:
    """Build a recipe from a YAML/JSON mapping: optional `base` (a named recipe) plus overrides.

    Raises `UserInputError` naming `source` and the field for unknown keys or bad values."""
    if not isinstance(data, Mapping):
        raise UserInputError(f"{source}: recipe must be a mapping, got {type(data).__name__}",
                             hint="write the recipe as key: value pairs.")
    data = dict(data)
    name = data.pop("base", "torchtitan")
    try:
        base = named_recipe(name if isinstance(name, str) else repr(name))
    except UserInputError as exc:
        raise UserInputError(f"{source}: field 'base' = {name!r}: {exc.message}",
                             hint=exc.hint) from None
    parallel = data.pop("parallel", None)
    if parallel is not None:
        if not isinstance(parallel, Mapping):
            raise UserInputError(f"{source}: recipe.parallel must be a mapping",
                                 hint="nest the layout's keys (tp, pp, cp, dp_replicate, ...).")
        unknown = set(parallel) - {f.name for f in fields(ParallelLayout)}
        if unknown:
            raise UserInputError(f"{source}: unknown recipe.parallel field(s) {sorted(unknown)}",
                                 hint=f"use {', '.join(f.name for f in fields(ParallelLayout))}.")
        try:
            data["parallel"] = with_layout_fields(base.parallel, **parallel)
        except UserInputError as exc:
            raise UserInputError(f"{source}: {exc.message}", hint=exc.hint) from None
    outer = data.pop("outer", None) or {}
    if not isinstance(outer, Mapping):
        raise UserInputError(f"{source}: field 'outer' = {outer!r}: recipe.outer must be a "
                             "mapping", hint="nest outer keys.")
    unknown_outer = set(outer) - {f.name for f in fields(OuterRecipe)}
    if unknown_outer:
        raise UserInputError(f"{source}: unknown recipe.outer field(s) {sorted(unknown_outer)}",
                             hint=f"use {', '.join(f.name for f in fields(OuterRecipe))}.")
    # moe_capacity_factor's null is its value (dropless), as every named recipe has it
    empty = [k for k, v in data.items() if v is None and k != "moe_capacity_factor"] + [
        f"outer.{k}" for k, v in outer.items() if v is None]
    if empty:  # `ac:` without a value is null in YAML: refused, not read as "keep the default"
        raise UserInputError(f"{source}: field {empty[0]!r} has no value (null)",
                             hint=f"give {empty[0]} a value, or drop the line.")
    try:
        return base.with_overrides(**data, **outer)
    except UserInputError as exc:
        raise UserInputError(f"{source}: {exc.message}", hint=exc.hint) from None
