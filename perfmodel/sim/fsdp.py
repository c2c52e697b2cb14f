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
  on the compute stream after the last reduce_scatter;
* parallel layouts (`inline_collectives`): tensor- and context-parallel collectives run on the
  compute stream after their unit's compute, a unit's post-backward ones before its
  reduce_scatter (the root's after the embedding's backward), HSDP's all-reduce of each reduced
  shard right after its reduce_scatter; `tests/test_layout_order.py` records TP (with and
  without sequence parallelism), FSDP2 x TP and HSDP steps on gloo and compares every stream.
* mixture of experts under expert parallelism (ep > 1): each MoE layer's token dispatch and
  combine all-to-alls over the EP group in forward, their mirrors (combine's gradient, then
  dispatch's) in backward; they run inline, after the block's compute: the experts' GEMMs
  need the dispatched tokens and the rest of the block the combined ones, and nothing else of
  the micro-step is independent of them (torchtitan's eager EP), so nothing hides them. The
  routed experts form their own FSDP unit inside each block (torchtitan wraps
  `moe.experts` separately when ep > 1), all-gathered and reduce-scattered over the
  fsdp_degree/ep ranks holding the same experts, right after the block's dense part on the
  same stream. Blocks carry the layers' mean (`perfmodel.spec.arch`): a model whose MoE
  layers are a share s of its layers gets s times each all-to-all per block. Checked by
  tests/test_moe_step.py (order of a block's collectives; payloads and times). `step_plan`'s
  `moe_layers` types the blocks instead (dense ones without all-to-alls, the experts' FSDP unit
  as tasks of its own): tests/test_moe_order.py compares that plan, stream by stream, with a
  recorded 2-rank gloo EP step (`perfmodel.bench.moe_order`).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from perfmodel.costs.comm import all_to_all_payload_bytes
from perfmodel.costs.features import RankShard, local_model
from perfmodel.costs.model import CostModel
from perfmodel.costs.precision import (
    block_linear_params,
    gathered_bytes,
    recipe_cost_model,
    root_linear_params,
)
from perfmodel.sim.graph import Schedule, TaskGraph
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.formulas import dtype_bytes
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import CommGroup, ParallelLayout, place_group
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe, moe_token_factor

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
    forward_inline_s: tuple[float, ...] = ()
    """Tensor- and context-parallel collectives of the unit's forward, in issue order
    (`inline_collectives`), run on the compute stream after its forward compute."""
    backward_inline_s: tuple[float, ...] = ()
    """The same for its backward (after what its checkpointing recomputes), followed by those of
    FSDP2's post-backward of the unit (sequence parallelism: the all-reduce of its replicated
    norm weights' partial gradients), which run only in micro-steps that reduce."""
    replicate_s: float = 0.0
    """HSDP: the all-reduce of the unit's gradient shard across the replicas, after its
    reduce_scatter (0 without replication)."""
    expert_all_gather_s: float = 0.0
    """A typed MoE block under ep > 1 (`step_plan`'s `moe_layers`): the all_gather of its
    routed experts' own FSDP unit over the expert FSDP group, after the block's (0 otherwise;
    the planner's mean blocks fold it into `all_gather_s`)."""
    expert_reduce_scatter_s: float = 0.0
    """The same unit's reduce_scatter, before the block's."""

    def __post_init__(self) -> None:
        for key in (*COST_FIELDS, "replicate_s", "expert_all_gather_s",
                    "expert_reduce_scatter_s"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"unit {self.name!r}: {key} must be finite and >= 0, got {value}")
        for key in ("forward_inline_s", "backward_inline_s"):
            if not all(math.isfinite(v) and v >= 0 for v in getattr(self, key)):
                raise ValueError(f"unit {self.name!r}: {key} must be finite and >= 0, "
                                 f"got {getattr(self, key)}")


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
    prologue_s: tuple[float, ...] = ()
    """Inline collectives of the embedding's forward, before the first block (tensor
    parallelism: the embedding's all-reduce or reduce-scatter)."""
    epilogue_s: tuple[float, ...] = ()
    """Inline collectives of the embedding's backward, after the first block's backward."""
    optimizer_inline_s: tuple[float, ...] = ()
    """Collectives inside the optimizer step, before its update (tensor parallelism without
    FSDP: the replicated norm weights' partial gradients, all-reduced once per norm)."""
    block_norms: int = 2
    """Normalisation layers per block (sequence parallelism all-reduces their gradients)."""
    moe_layers: tuple[int, ...] | None = None
    """Blocks typed as MoE layers (`step_plan`); None: every block is the model's mean block
    (what `step_costs` builds)."""

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
                         accum_steps=accum_steps, block_norms=self.block_norms,
                         moe_layers=self.moe_layers)

    def duration_s(self, spec: TaskSpec) -> float:
        """Duration of one planned task."""
        if spec.cost in ("prologue_s", "epilogue_s", "optimizer_inline_s"):
            return float(getattr(self, spec.cost)[spec.index])
        if spec.unit is None:
            return self.optimizer_s
        value = getattr(self.units[spec.unit], spec.cost)
        return float(value[spec.index] if spec.index >= 0 else value)


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
    index: int = -1
    """Position in a tuple-valued cost (an inline collective); -1 for scalar costs."""
    group: str = ""
    """The parallel group of a collective (tp, cp, ep, fsdp, expert_fsdp, dp_replicate); empty
    for compute."""
    payload: str = ""
    """What an inline collective moves (`Inline`: activation, logits, kv, loss_rows,
    norm_weight); empty for other tasks."""


def _spec(name: str, stream: str, kind: str, unit: int | None, cost: str,
          deps: tuple[int, ...], micro_step: int = 0, index: int = -1,
          group: str = "", payload: str = "") -> TaskSpec:
    return TaskSpec(name=name, stream=stream, kind=kind, unit=unit, cost=cost, deps=deps,
                    micro_step=micro_step, index=index, group=group, payload=payload)


# ---- inline (tensor- and context-parallel) collectives --------------------------------------

Inline = tuple[tuple[str, str, str], ...]
"""(op, group, payload) of each inline collective, in issue order; payload names what is moved:
activation (micro-batch x local sequence x hidden), logits, kv (the rank's K and V over the full
sequence), loss_rows (one fp32 value per token), norm_weight (one replicated norm's weight)."""


def applies_fsdp(layout: ParallelLayout) -> bool:
    """Whether FSDP2 wraps the model: torchtitan applies it unless dp_shard, cp and dp_replicate
    are all 1 (pure tensor parallelism). A plan reads the recipe as given, so an inferred
    dp_shard (-1) is planned as sharded; give dp_shard 1 for pure TP."""
    return not (layout.dp_shard == 1 and layout.cp == 1 and layout.dp_replicate == 1)


@lru_cache(maxsize=128)
def inline_collectives(recipe: TrainingRecipe, where: str, block_norms: int = 2,
                       num_norms: int = 0, moe_layer: bool = True) -> Inline:
    """The collectives a layout runs inline on the compute stream at `where`, in issue order:

    * block_forward, root_forward, embed_forward: a forward's (the embedding is part of the root
      unit but runs before the first block);
    * block_backward, root_backward, embed_backward: a backward's, a block's after what its
      checkpointing recomputes (block_backward_whole: a block checkpointed whole under layer:N);
    * block_post_backward, root_post_backward: FSDP2's post-backward of the unit, in the
      micro-steps that reduce its gradients (the root's after the whole backward);
    * optimizer: inside the optimizer step;

    `block_norms` normalisation layers per block, `num_norms` in the whole model; `moe_layer`
    False: a block typed dense in a model with MoE layers (no all-to-alls; True: an MoE layer,
    or the mean block of an MoE model, which carries them).

    Claim (torchtitan's Llama TP plan as `perfmodel.bench.parallel` applies it; DTensor, FSDP2
    and fused AdamW of torch 2.13):
      * tp > 1 with sequence parallelism: each block half gathers its sequence-sharded input
        (all_gather) and reduce-scatters its row-parallel output: block forward AG, RS, AG, RS;
        backward: AG, RS (MLP: its output gradient gathered, its input gradient
        reduce-scattered), then the same for attention; the embedding reduce-scatters its output
        (its backward gathers the gradient) and the final norm's output is gathered before the
        LM head; the loss runs loss-parallel (three all-reduces of one fp32 value per token over
        tp), the LM head's input gradient is reduce-scattered; the norm weights are replicated
        with partial gradients: all-reduced over tp once per norm in FSDP2's post-backward of
        their unit (the root's final norm in its post-backward callback, after the embedding's
        backward), or, without FSDP (dp_shard = cp = dp_replicate = 1), once per norm inside
        the (fused AdamW) optimizer step;
      * tp > 1 without sequence parallelism: one all-reduce per row-parallel output in forward
        (o, down; the embedding's output too), one per column-parallel input gradient in
        backward (gate, up, then q, k, v: DTensor reduces each separately; the LM head's too),
        and the logits gathered for the loss;
      * activation checkpointing recomputes a block's forward collectives when its backward
        first unpacks a saved tensor (the down projection's input; under sequence parallelism
        after the MLP output gradient's all-gather, which needs none): all of them for a block
        checkpointed whole (full, layer:N), those whose output the op-level policy does not
        save under op-sac (it saves reduce-scatters: `perfmodel.bench.recipe_wrap.
        selective_policy`, torchtitan's list), the attention core's (context parallelism's K/V
        gather) under attn;
      * cp > 1: attention gathers K and V over cp in forward and reduce-scatters their gradients
        in backward (the all-gather rotation of torch's context parallelism; no CPU ground truth:
        its collectives are a prior).
    Why: these are the DTensor redistributions the plan's placements imply, and FSDP2 reduces a
    partial gradient before reduce-scattering it.
    Checked by: tests/test_layout_order.py, which records every collective of real gloo steps
    (TP with and without sequence parallelism, FSDP x TP, HSDP; checkpointing none, op-sac and
    full; accumulation in both modes) and compares order, group, size and dtype with this plan.
    """
    layout = recipe.parallel
    tp, cp = layout.tp > 1, layout.cp > 1
    sp = tp and layout.sequence_parallel
    fsdp = applies_fsdp(layout)
    out: list[tuple[str, str, str]] = []
    if where == "block_forward":
        if sp:
            out += [("all_gather", "tp", "activation")]
        if cp:
            out += [("all_gather", "cp", "kv")]
        if tp:
            out += [("reduce_scatter" if sp else "all_reduce", "tp", "activation")]
            out += [("all_gather", "tp", "activation")] if sp else []
            out += [("reduce_scatter" if sp else "all_reduce", "tp", "activation")]
        if layout.ep > 1 and moe_layer:   # MoE: tokens to their experts' ranks and back
            out += [("all_to_all", "ep", "dispatch"), ("all_to_all", "ep", "combine")]
    elif where in ("block_backward", "block_backward_whole"):
        if sp:  # the MLP output's gradient is gathered before anything saved is unpacked
            out += [("all_gather", "tp", "activation")]
        # the recompute runs when backward first unpacks a saved tensor (the down projection's)
        out += recomputed_collectives(recipe, where == "block_backward_whole", block_norms,
                                      moe_layer=moe_layer)
        if layout.ep > 1 and moe_layer:   # the recompute's MoE ones, the combine's gradient,
            # then (after the experts' backward) the dispatch's
            out += recomputed_collectives(recipe, where == "block_backward_whole",
                                          block_norms, experts=True)
            out += [("all_to_all", "ep", "combine"), ("all_to_all", "ep", "dispatch")]
        if sp:
            out += [("reduce_scatter", "tp", "activation")]
        elif tp:
            out += [("all_reduce", "tp", "activation")] * 2      # gate, up input gradients
        if cp:
            out += [("reduce_scatter", "cp", "kv")]
        if sp:
            out += [("all_gather", "tp", "activation"), ("reduce_scatter", "tp", "activation")]
        elif tp:
            out += [("all_reduce", "tp", "activation")] * 3      # q, k, v input gradients
    elif where == "block_post_backward" and sp and fsdp:
        out += [("all_reduce", "tp", "norm_weight")] * block_norms
    elif where == "root_forward" and tp:
        out += ([("all_gather", "tp", "activation")] + [("all_reduce", "tp", "loss_rows")] * 3
                if sp else [("all_gather", "tp", "logits")])
    elif where == "root_backward" and tp:
        out += [("reduce_scatter" if sp else "all_reduce", "tp", "activation")]
    elif where == "root_post_backward" and sp and fsdp:
        out += [("all_reduce", "tp", "norm_weight")]
    elif where == "embed_forward" and tp:
        out += [("reduce_scatter" if sp else "all_reduce", "tp", "activation")]
    elif where == "embed_backward" and sp:
        out += [("all_gather", "tp", "activation")]
    elif where == "optimizer" and sp and not fsdp:
        out += [("all_reduce", "tp", "norm_weight")] * num_norms
    return tuple(out)


def recomputed_collectives(recipe: TrainingRecipe, whole: bool, block_norms: int = 2, *,
                           experts: bool = False, moe_layer: bool = True) -> Inline:
    """The forward collectives a block's backward re-issues for its recompute
    (`inline_collectives`' claim): all of them for a block checkpointed whole (`whole`, or
    every block under full), those the op-level policy does not save under op-sac (every one
    but the reduce-scatters and the all-to-alls: torchtitan's save list keeps their outputs),
    context parallelism's K/V gather under attn, none without checkpointing. `experts`: only
    the MoE all-to-alls (re-issued first, with the rest of the recompute: the MoE sits at the
    block's end); otherwise every other one. `moe_layer`: as `inline_collectives`'."""
    forward = tuple(c for c in inline_collectives(recipe, "block_forward", block_norms,
                                                  moe_layer=moe_layer)
                    if (c[0] == "all_to_all") == experts)
    mode = recipe.checkpoint.mode
    if whole or mode == "full":
        return forward
    if mode == "op-sac":
        return tuple(c for c in forward if c[0] not in ("reduce_scatter", "all_to_all"))
    if mode == "attn":
        return tuple(c for c in forward if c[1] == "cp")
    return ()


INLINE_PLACES = ("block_forward", "block_backward", "block_backward_whole", "block_post_backward",
                 "root_forward", "root_backward", "root_post_backward", "embed_forward",
                 "embed_backward", "optimizer")
"""Every `where` of `inline_collectives`."""


def inline_payload_bytes(model: ModelSpec, recipe: TrainingRecipe, *, seq_len: int,
                         micro_batch: Any) -> dict[str, Any]:
    """Bytes each payload kind of `inline_collectives` moves (the unsharded side: an
    all-gather's output, a reduce-scatter's input), for a micro-batch of `micro_batch` sequences
    per data-parallel rank (an int or an array): activation and logits in the recipe's
    param_dtype over the rank's tokens (micro_batch x seq_len / cp), kv the rank's K and V over
    the whole sequence, loss_rows one fp32 value per token (the loss is computed in fp32), a
    norm_weight one norm's weight in param_dtype; dispatch and combine what one rank sends in
    one MoE all-to-all (`perfmodel.costs.comm.all_to_all_payload_bytes`, times the capacity
    factor or the load imbalance of `moe_token_factor`: the busiest rank's share decides)."""
    layout = recipe.parallel
    param_bytes = dtype_bytes(recipe.param_dtype)
    local = local_model(model, layout.tp)
    tokens = np.asarray(micro_batch, dtype=float) * (seq_len / layout.cp)
    dispatch = (0.0 if model.moe is None else moe_token_factor(recipe, layout.ep)
                * all_to_all_payload_bytes(tokens, model.moe.experts_per_token,
                                           model.hidden_size, param_bytes, layout.ep))
    return {
        "dispatch": dispatch, "combine": dispatch,
        "activation": tokens * model.hidden_size * param_bytes,
        "logits": tokens * model.vocab_size * param_bytes,
        "kv": np.asarray(micro_batch, dtype=float) * seq_len * 2 * local.kv_dim * param_bytes,
        "loss_rows": tokens * 4.0,
        "norm_weight": np.asarray(float(model.norm_params * param_bytes)),
    }


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
              accum_steps: int = 1, block_norms: int = 2,
              moe_layers: tuple[int, ...] | None = None) -> tuple[TaskSpec, ...]:
    """The tasks of one FSDP step (k micro-steps + optimizer) in add order (module docstring);
    cached: the plan is immutable and depends only on these arguments (`block_norms`: the
    normalisation layers per block, whose gradients sequence parallelism all-reduces).

    `moe_layers` types the blocks. None (what `step_costs` times): every block is the model's
    mean block, carrying the MoE all-to-alls under ep > 1 and one FSDP unit holding its share
    of the experts. A tuple of block indices: those blocks are MoE layers and the others dense
    (no all-to-all); under ep > 1 each MoE block's routed experts are their own FSDP unit
    (torchtitan wraps `moe.experts` apart), group `expert_fsdp`: its all_gather issued right
    after the block's (same consumer), its reduce_scatter right before the block's (the experts'
    backward ends inside the block's). The typed plan is the collective order of record for a
    real model's layers: tests/test_moe_order.py compares it with a recorded gloo EP step."""
    if num_units < 1:
        raise ValueError(f"an FSDP step needs at least one unit, got {num_units}")
    if accum_steps < 1:
        raise ValueError(f"accum_steps must be >= 1, got {accum_steps}")
    num_blocks = num_units - 1 if has_root else num_units
    if moe_layers is not None and any(not 0 <= b < num_blocks for b in moe_layers):
        raise ValueError(f"moe_layers {list(moe_layers)} must be block indices in "
                         f"[0, {num_blocks})")
    tasks: list[TaskSpec] = []
    sync: int | None = None
    for micro in range(accum_steps):
        final = micro == accum_steps - 1
        reduce = final or recipe.accum_mode == "reduce_scatter"
        label = f" m{micro}" if accum_steps > 1 else ""
        sync = _plan_microstep(tasks, num_units, has_root, recipe, sync=sync, reduce=reduce,
                               label=label, micro=micro, block_norms=block_norms,
                               moe_layers=moe_layers)
    # collectives inside the optimizer step (replicated weights' partial gradients without FSDP)
    for i, (op, group, kind) in enumerate(inline_collectives(
            recipe, "optimizer", block_norms, model_norms(num_units, has_root, block_norms))):
        tasks.append(_spec(f"optimizer {op} {group}", COMPUTE_STREAM, op, None,
                           "optimizer_inline_s", () if sync is None or i else (sync,),
                           accum_steps - 1, index=i, group=group, payload=kind))
    tasks.append(_spec("optimizer", COMPUTE_STREAM, "optimizer", None, "optimizer_s",
                       () if sync is None else (sync,), accum_steps - 1))
    return tuple(tasks)


def model_norms(num_units: int, has_root: bool, block_norms: int) -> int:
    """Normalisation layers of a model of `num_units` FSDP units (the root holds the final
    norm)."""
    blocks = num_units - 1 if has_root else num_units
    return blocks * block_norms + (1 if has_root else 0)


def _plan_microstep(tasks: list[TaskSpec], num_units: int, has_root: bool,
                    recipe: TrainingRecipe, *, sync: int | None, reduce: bool, label: str,
                    micro: int, block_norms: int = 2,
                    moe_layers: tuple[int, ...] | None = None) -> int:
    """Append one micro-step to `tasks`; returns the index of the task the next one waits for
    (`moe_layers`: `step_plan`'s)."""
    slots = _slots(num_units, has_root)
    gathers = _gathers(num_units, has_root, recipe)
    depth = recipe.prefetch_depth
    root = num_units - 1 if has_root else None
    replicate = recipe.parallel.dp_replicate > 1
    policy = recipe.checkpoint
    typed = moe_layers is not None
    moe_blocks = frozenset(moe_layers or ())

    def moe_layer(unit: int | None) -> bool:
        """Whether a unit's inline collectives include the MoE ones (every block when untyped;
        the root's places have none either way)."""
        return not typed or unit in moe_blocks

    # a typed MoE block's experts are an FSDP unit of their own under ep > 1 (step_plan doc)
    own_experts = typed and recipe.parallel.ep > 1

    def add(spec: TaskSpec) -> int:
        tasks.append(replace(spec, micro_step=micro))
        return len(tasks) - 1

    def inline(where: str, unit: int | None, cost: str, prefix: str, offset: int = 0) -> None:
        """The layout's inline collectives at `where`, after the compute stream's last task;
        `offset`: their first index in the unit's cost tuple."""
        for i, (op, group, kind) in enumerate(inline_collectives(
                recipe, where, block_norms, moe_layer=moe_layer(unit))):
            add(_spec(f"{prefix} {op} {group}{label}", COMPUTE_STREAM, op, unit, cost, (),
                      index=offset + i, group=group, payload=kind))

    def backward_where(unit: int) -> str:
        if unit == root:
            return "root_backward"
        whole = policy.mode == "layer" and policy.checkpointed(unit)
        return "block_backward_whole" if whole else "block_backward"

    def reduce_scatter(unit: int, after: int) -> int:
        if own_experts and unit in moe_blocks:
            add(_spec(f"RS {{unit}} experts{label}", COMM_STREAM, "reduce_scatter", unit,
                      "expert_reduce_scatter_s", (after,), group="expert_fsdp"))
        last = add(_spec(f"RS {{unit}}{label}", COMM_STREAM, "reduce_scatter", unit,
                         "reduce_scatter_s", (after,), group="fsdp"))
        if replicate:  # HSDP: the shard is all-reduced across the replicas right after
            last = add(_spec(f"AR {{unit}} replicas{label}", COMM_STREAM, "all_reduce", unit,
                             "replicate_s", (last,), group="dp_replicate"))
        return last

    slot_end: list[int] = []   # the last compute-stream task of each slot
    ready: dict[int, list[int]] = {}  # consumer slot -> its all_gathers
    g = 0
    for s, (u, back) in enumerate(slots):
        # Gathers whose consumer is at most `depth` slots ahead are issued at slot s's pre-hook.
        while g < len(gathers) and max(gathers[g][2] - depth, 0) <= s:
            gu, gback, consumer = gathers[g]
            after = slot_end[s - 1] if s >= 1 else sync  # slot c - d - 1 freed its buffer
            ready.setdefault(consumer, []).append(add(_spec(
                f"AG {{unit}}{' bwd' if gback else ''}{label}", COMM_STREAM, "all_gather", gu,
                "all_gather_s", () if after is None else (after,), group="fsdp")))
            if own_experts and gu in moe_blocks:
                ready[consumer].append(add(_spec(
                    f"AG {{unit}} experts{' bwd' if gback else ''}{label}", COMM_STREAM,
                    "all_gather", gu, "expert_all_gather_s",
                    () if after is None else (after,), group="expert_fsdp")))
            g += 1
        if s == 0 and root is not None and inline_collectives(recipe, "embed_forward"):
            # the embedding (in the root unit) runs before the first block, once the root is in
            for i, (op, group, kind) in enumerate(inline_collectives(recipe, "embed_forward")):
                add(_spec(f"embed {op} {group}{label}", COMPUTE_STREAM, op, None, "prologue_s",
                          tuple(ready.get(0, ())[:1]) + ((sync,) if sync is not None else ())
                          if i == 0 else (), index=i, group=group, payload=kind))
        # The compute stream orders slots; the first slot also waits for the previous micro-step.
        deps = tuple(ready.get(s, ())) + ((sync,) if s == 0 and sync is not None else ())
        add(_spec(f"{'B' if back else 'F'} {{unit}}{label}", COMPUTE_STREAM,
                  "backward" if back else "forward", u, "backward_s" if back else "forward_s",
                  deps))
        if not back:
            inline("root_forward" if u == root else "block_forward", u, "forward_inline_s", "F")
        else:
            where = backward_where(u)
            inline(where, u, "backward_inline_s", "B")
            if reduce and u != root:  # FSDP2's post-backward, before the unit's reduce-scatter
                inline("block_post_backward", u, "backward_inline_s", "post",
                       len(inline_collectives(recipe, where, block_norms,
                                              moe_layer=moe_layer(u))))
        unit_end = len(tasks) - 1
        if back and s == len(slots) - 1 and root is not None:
            # the embedding's backward follows the first block's; the root's post-backward runs
            # in FSDP2's callback after the whole backward
            for i, (op, group, kind) in enumerate(inline_collectives(recipe, "embed_backward")):
                add(_spec(f"embed bwd {op} {group}{label}", COMPUTE_STREAM, op, None,
                          "epilogue_s", (), index=i, group=group, payload=kind))
            if reduce:
                inline("root_post_backward", root, "backward_inline_s", "post",
                       len(inline_collectives(recipe, "root_backward", block_norms)))
        slot_end.append(len(tasks) - 1)
        if reduce and back and u != root:
            reduce_scatter(u, unit_end)
    if reduce and root is not None:  # FSDP2's post-backward callback, after the whole backward
        return reduce_scatter(root, slot_end[-1])
    return len(tasks) - 1 if reduce else slot_end[-1]


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


def _moe_scale(model: ModelSpec, seq_len: int, recipe: TrainingRecipe, ep: int) -> float:
    """The MoE block-time multiplier (`perfmodel.costs.compute.moe_compute_scale`) of the
    recipe's routing factors."""
    if model.moe is None:
        # dense: 1.0 by moe_compute_scale's definition; returning here keeps perfmodel.costs.compute
        # (pandas, scipy, sklearn for its fitting half: seconds of imports) out of a prediction
        return 1.0
    from perfmodel.costs.compute import moe_compute_scale  # lazy: see the comment above

    return moe_compute_scale(model, seq_len, token_factor=moe_token_factor(recipe, ep),
                             grouped_gemm_efficiency=recipe.moe_grouped_gemm_efficiency)


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
    """The recipe the durations are for (its layout resolved against the island)."""
    overlap_slowdown: float
    """The profile's compute-communication contention factor (1.0 if it has none)."""
    inline: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """Durations of the layout's inline collectives per place (`inline_collectives`)."""
    block_replicate_s: float = 0.0
    """HSDP: the all-reduce of a block's gradient shard across the replicas."""
    root_replicate_s: float = 0.0
    """HSDP: the same for the root unit."""


def _layout_of(recipe: TrainingRecipe, model: ModelSpec, island: IslandSpec,
               seq_len: int) -> ParallelLayout:
    """The recipe's layout resolved against the island (UserInputError naming the rule a layout
    breaks). Costs keep the recipe as given: a plan depends on which groups exist, not on how
    many ranks an inferred dp_shard resolves to, so islands of different sizes share one."""
    layout = recipe.parallel.resolve(island.num_gpus)
    layout.check_model(num_layers=model.num_layers, num_heads=model.num_heads,
                       num_kv_heads=model.num_kv_heads,
                       intermediate_size=model.intermediate_size, seq_len=seq_len,
                       num_experts=model.num_experts)
    return layout


def unit_durations(model: ModelSpec, profile: CostModel, island: IslandSpec, *, seq_len: int,
                   micro_batch: Any, recipe: TrainingRecipe | None = None,
                   ac: str | None = None) -> UnitDurations:
    """Task durations from a profile; `micro_batch` may be an int or a numpy array. `ac`
    overrides the recipe's checkpointing mode."""
    recipe = resolve_recipe(recipe, ac)
    layout = _layout_of(recipe, model, island, seq_len)
    if layout.pp > 1:
        raise UserInputError("pipeline parallelism (pp > 1) is not an FSDP step",
                             hint="simulate pipelines with perfmodel.sim.pipeline (the API "
                                  "and CLI route pp > 1 there).")
    if layout.world_size != layout.dp_shard or layout.ep > 1:
        return layout_unit_durations(model, profile, island, seq_len=seq_len,
                                     micro_batch=micro_batch, recipe=recipe, layout=layout)
    profile = recipe_cost_model(profile, recipe, island.gpu)   # fp8 / compile: a prior
    # recompute_factor (profile): recompute runs at its own speed relative to forward
    rf = profile.recompute_factor
    frac = recompute_fraction(model, seq_len, recipe.ac) * rf
    whole_frac = recompute_fraction(model, seq_len, recipe.ac, whole=True) * rf
    units = model.fsdp_units(seq_len)
    block_params, root_params = units[0].params, units[-1].params
    grad_bytes = dtype_bytes(recipe.reduce_dtype)
    slowdown = profile.overlap_slowdown
    check_slowdown(slowdown)
    moe_scale = _moe_scale(model, seq_len, recipe, layout.ep)

    def compute(phase: str, unit: str) -> Any:
        time_s = profile.compute_time_s(phase, model, seq_len, micro_batch, unit=unit)
        return time_s * moe_scale if unit == "block" else time_s

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
        block_all_gather_s=comm("all_gather", gathered_bytes(
            block_params, block_linear_params(model), recipe)),
        block_reduce_scatter_s=comm("reduce_scatter", block_params * grad_bytes),
        root_all_gather_s=comm("all_gather", gathered_bytes(
            root_params, root_linear_params(model, recipe), recipe)),
        root_reduce_scatter_s=comm("reduce_scatter", root_params * grad_bytes),
        recipe=recipe, overlap_slowdown=float(slowdown))


def layout_unit_durations(model: ModelSpec, profile: CostModel, island: IslandSpec, *,
                          seq_len: int, micro_batch: Any, recipe: TrainingRecipe,
                          layout: ParallelLayout) -> UnitDurations:
    """`unit_durations` of a parallel layout: each rank computes its shard (`RankShard`), FSDP
    gathers and reduces the tensor-parallel shard over dp_shard · cp ranks, inline collectives
    run on the tp and cp groups, HSDP all-reduces each gradient shard across the replicas; every
    group's collectives are timed on the links it spans (`perfmodel.spec.layout`); `layout` is
    the recipe's, resolved against the island."""
    shard = RankShard(tp=layout.tp, cp=layout.cp, sequence_parallel=layout.sequence_parallel)
    local = local_model(model, layout.tp)
    profile = recipe_cost_model(profile, recipe, island.gpu)   # fp8 / compile: a prior
    rf = profile.recompute_factor
    frac = recompute_fraction(local, seq_len, recipe.ac) * rf
    whole_frac = recompute_fraction(local, seq_len, recipe.ac, whole=True) * rf
    grad_bytes = dtype_bytes(recipe.reduce_dtype)
    slowdown = profile.overlap_slowdown
    check_slowdown(slowdown)
    def place(dimension: str, size: int, stride: int) -> CommGroup:
        return place_group(dimension, size=size, stride=stride,
                           gpus_per_node=island.gpus_per_node, intra_link=island.intra_link,
                           inter_link=island.inter_link, nics_per_node=island.nics_per_node)

    # FSDP2 shards over dp_shard x cp, whose ranks are consecutive blocks of tp
    fsdp = place("fsdp", layout.fsdp_degree, layout.tp)
    groups = {d: place(d, layout.size(d), layout.stride(d)) for d in ("tp", "cp", "dp_replicate")}

    moe_scale = _moe_scale(model, seq_len, recipe, layout.ep)
    groups["ep"], expert_fsdp = layout.ep_groups(
        gpus_per_node=island.gpus_per_node, intra_link=island.intra_link,
        inter_link=island.inter_link, nics_per_node=island.nics_per_node)

    dispatch = (profile.tp_dispatch_s.get("sequence_parallel" if layout.sequence_parallel
                                          else "no_sequence_parallel", {})
                if layout.tp > 1 else {})

    def compute(phase: str, unit: str) -> Any:
        time_s = profile.compute_time_s(phase, model, seq_len, micro_batch, unit=unit,
                                        shard=shard)
        # DTensor's host work on the rank's thread (a CPU profile's; none on a GPU)
        return (time_s * moe_scale if unit == "block" else time_s) \
            + dispatch.get(f"{unit}_{phase}", 0.0)

    def fsdp_comm(op: str, payload_bytes: float, group: CommGroup = fsdp) -> float:
        if group.size == 1:
            return 0.0
        copy_s = profile.fsdp_copy_s_per_byte * payload_bytes * (1.0 + 1.0 / group.size)
        return float(profile.group_comm_time_s(op, group, payload_bytes)) + copy_s

    def block_fsdp_comm(op: str, element_bytes: float) -> float:
        """A block's FSDP collective: one unit, or under ep > 1 the dense part over the FSDP
        group then the rank's E/ep experts over the expert FSDP group (module doc)."""
        experts = local.expert_block_params
        if layout.ep == 1 or not experts:   # no experts (a dense block type): one unit
            return fsdp_comm(op, block_params * element_bytes)
        return (fsdp_comm(op, (block_params - experts) * element_bytes)
                + fsdp_comm(op, experts / layout.ep * element_bytes, expert_fsdp))


    def timed(op: str, group: str, payload: Any, compute_s: Any) -> Any:
        if op == "all_to_all":   # s all-to-alls per block (module doc)
            return local.moe_layer_share * profile.all_to_all_time_s(groups[group], payload)
        # tp / cp collectives wait on the compute stream: the profile's inline coefficients
        return profile.group_comm_time_s(op, groups[group], payload, inline=True,
                                         compute_s=compute_s)

    payloads = inline_payload_bytes(model, recipe, seq_len=seq_len, micro_batch=micro_batch)
    norms = model.num_layers * model.norms_per_block + 1
    # each pass's compute once: the inline waits and the unit durations below both read it
    block_fwd, block_bwd = compute("forward", "block"), compute("backward", "block")
    root_fwd, root_bwd = compute("forward", "root"), compute("backward", "root")
    backward_s = block_bwd + frac * block_fwd          # with what checkpointing recomputes
    whole_backward_s = block_bwd + whole_frac * block_fwd
    place_compute = inline_place_compute_s(
        block_forward_s=block_fwd, block_backward_s=backward_s,
        whole_backward_s=whole_backward_s, root_forward_s=root_fwd, root_backward_s=root_bwd)
    inline = {}
    for where in INLINE_PLACES:
        entries = inline_collectives(recipe, where, model.norms_per_block, norms)
        synced = sum(group in ("tp", "cp") for _, group, _ in entries)
        # the place's compute splits between its tp / cp collectives: each waits on the skew
        # of the compute since the one before (module doc of perfmodel.costs.comm)
        share = place_compute.get(where, 0.0) / synced if synced else 0.0
        inline[where] = tuple(timed(op, group, payloads[kind], share)
                              for op, group, kind in entries)
    if layout.async_tp:
        for where in ("block_forward", "block_backward", "block_backward_whole"):
            inline[where] = async_tp_exposed_s(local, seq_len, recipe, where, inline[where],
                                               block_fwd, block_bwd,
                                               block_norms=model.norms_per_block)
    units = local.fsdp_units(seq_len)
    block_params, root_params = units[0].params, units[-1].params
    # bytes per gathered block element: param_dtype's, or the float8 / param_dtype mix of
    # fp8_all_gather (spread evenly over the dense and expert parts under ep > 1)
    gathered_element_bytes = (gathered_bytes(block_params, block_linear_params(local), recipe)
                              / block_params if recipe.fp8_all_gather
                              else dtype_bytes(recipe.param_dtype))

    def replicate(params: float) -> float:
        payload = params / layout.fsdp_degree * grad_bytes
        return float(profile.group_comm_time_s("all_reduce", groups["dp_replicate"], payload))

    return UnitDurations(
        block_forward_s=block_fwd, block_backward_s=backward_s,
        whole_backward_s=whole_backward_s, root_forward_s=root_fwd, root_backward_s=root_bwd,
        optimizer_s=profile.compute_time_s("optimizer", model, seq_len, micro_batch,
                                           unit="model", num_shards=layout.fsdp_degree,
                                           shard=shard),
        block_all_gather_s=block_fsdp_comm("all_gather", gathered_element_bytes),
        block_reduce_scatter_s=block_fsdp_comm("reduce_scatter", grad_bytes),
        root_all_gather_s=fsdp_comm("all_gather", gathered_bytes(
            root_params, root_linear_params(local, recipe), recipe)),
        root_reduce_scatter_s=fsdp_comm("reduce_scatter", root_params * grad_bytes),
        recipe=recipe, overlap_slowdown=float(slowdown), inline=inline,
        block_replicate_s=replicate(block_params), root_replicate_s=replicate(root_params))


def inline_place_compute_s(*, block_forward_s: Any, block_backward_s: Any,
                           whole_backward_s: Any, root_forward_s: Any,
                           root_backward_s: Any) -> dict[str, Any]:
    """The compute each place of `inline_collectives` runs between the ranks' synchronisations,
    which its tp / cp collectives split (`CommModel.group_time_s`' compute_s).

    Claim: a block's forward compute is split by its forward collectives, its backward (with
    what its checkpointing recomputes: `block_backward_s`, or `whole_backward_s` for a block
    checkpointed whole, the unit durations' own) by its backward ones, the root's forward
    (final norm, LM head, loss) and backward by theirs; the embedding's lookup, FSDP2's
    post-backward and the optimizer's norm-weight reductions follow no compute worth counting
    (0).
    Why: on every layout the plan issues a tp collective at each end of a block half (and the
    root's), so every second of a pass's compute ends at one of them: the sum over a pass's
    collectives is the pass's compute, however it splits.
    Checked by tests/test_comm_inline.py (the inline waits of a step add wait_per_compute times
    its compute).
    """
    return {"block_forward": block_forward_s, "block_backward": block_backward_s,
            "block_backward_whole": whole_backward_s, "root_forward": root_forward_s,
            "root_backward": root_backward_s}


def async_tp_exposed_s(local: ModelSpec, seq_len: int, recipe: TrainingRecipe, where: str,
                       comm_s: Sequence[Any], forward_s: Any, backward_s: Any, *,
                       block_norms: int = 2) -> tuple[Any, ...]:
    """The exposed part of each sequence-parallel collective of a block under async TP.

    Claim: torch's async TP (micro-pipelined all-gather-matmul and matmul-reduce-scatter, CUDA
    only; no CPU ground truth, so a prior) splits each collective and the matmuls it feeds or
    drains into tp chunks and overlaps chunk i's communication with chunk i-1's matmul. With
    communication c and matmul m per collective, the pair then takes c/tp + (tp-1)·max(c, m)/tp
    + m/tp, so the communication it adds beyond the matmul is c/tp when c <= m and
    c - (tp-1)/tp · m otherwise (continuous at c = m). Each collective's matmul share is its
    linears' FLOPs over the block's forward FLOPs times the pass's compute time (`forward_s`, or
    `backward_s` in backward): forward AG -> q, k, v; RS <- o; AG -> gate, up; RS <- down;
    backward the mirror (MLP pair first); a collective the backward re-issues for its recompute
    (`recomputed_collectives`) overlaps the recomputed forward matmul it fed in forward.
    Collectives of other groups (cp, the norm all-reduces) stay as they are.
    Checked by tests/test_layout.py (c/tp when the matmul hides it, never above inline).
    """
    attn, mlp = local.attn_linears, local.mlp_linears
    total = local.block_forward_flops_per_token(seq_len) / 2.0
    shares = [sum(i * o for i, o in attn[:-1]) / total, attn[-1][0] * attn[-1][1] / total,
              sum(i * o for i, o in mlp[:-1]) / total, mlp[-1][0] * mlp[-1][1] / total]

    def overlapped(entries: Inline, pass_shares: list[float]) -> list[float | None]:
        """The matmul share each entry overlaps (None: not an overlapped SP collective)."""
        out: list[float | None] = []
        pair = 0
        for op, group, _ in entries:
            if group == "tp" and op in ("all_gather", "reduce_scatter") and pair < 4:
                out.append(pass_shares[pair])
                pair += 1
            else:
                out.append(None)
        return out

    forward = inline_collectives(recipe, "block_forward", block_norms)
    roles: list[tuple[float | None, Any]]
    if where == "block_forward":
        roles = [(share, forward_s) for share in overlapped(forward, shares)]
    else:
        collectives = inline_collectives(recipe, where, block_norms)
        redo = recomputed_collectives(recipe, where == "block_backward_whole", block_norms)
        fwd_roles = dict(zip(range(len(forward)), overlapped(forward, shares), strict=True))
        # the recomputed entries sit right after the first backward all-gather (recorded order)
        start = 1 if recipe.parallel.sequence_parallel else 0
        redo_roles, f = [], 0
        for entry in redo:
            while forward[f] != entry:
                f += 1
            redo_roles.append((fwd_roles[f], forward_s))
            f += 1
        own = [c for i, c in enumerate(collectives) if not start <= i < start + len(redo)]
        own_roles = [(share, backward_s) for share in overlapped(tuple(own), shares[::-1])]
        roles = own_roles[:start] + redo_roles + own_roles[start:]
    tp = recipe.parallel.tp
    exposed: list[Any] = []
    for (share, pass_s), c in zip(roles, comm_s, strict=True):
        if share is None:
            exposed.append(c)
            continue
        m = share * np.asarray(pass_s, dtype=float)
        c_arr = np.asarray(c, dtype=float)
        value = np.where(c_arr <= m, c_arr / tp, c_arr - (tp - 1) / tp * m)
        exposed.append(value if value.ndim else float(value))
    return tuple(exposed)


def step_costs(model: ModelSpec, profile: CostModel, island: IslandSpec, *, seq_len: int,
               micro_batch: int, recipe: TrainingRecipe | None = None,
               ac: str | None = None) -> StepCosts:
    """The StepCosts of one island and micro-batch under `recipe` (default torchtitan)."""
    d = unit_durations(model, profile, island, seq_len=seq_len, micro_batch=micro_batch,
                       recipe=recipe, ac=ac)
    layered = d.recipe.checkpoint.mode == "layer"

    def scalars(where: str) -> tuple[float, ...]:
        return tuple(float(v) for v in d.inline.get(where, ()))

    def whole(i: int) -> bool:
        return layered and d.recipe.checkpoint.checkpointed(i)

    blocks = tuple(
        UnitCosts(name=f"block{i}", forward_s=float(d.block_forward_s),
                  backward_s=float(d.whole_backward_s if whole(i) else d.block_backward_s),
                  all_gather_s=d.block_all_gather_s, reduce_scatter_s=d.block_reduce_scatter_s,
                  forward_inline_s=scalars("block_forward"),
                  backward_inline_s=scalars("block_backward_whole" if whole(i)
                                            else "block_backward")
                  + scalars("block_post_backward"), replicate_s=d.block_replicate_s)
        for i in range(model.num_layers))
    root = UnitCosts(name="root", forward_s=float(d.root_forward_s),
                     backward_s=float(d.root_backward_s), all_gather_s=d.root_all_gather_s,
                     reduce_scatter_s=d.root_reduce_scatter_s,
                     forward_inline_s=scalars("root_forward"),
                     backward_inline_s=scalars("root_backward") + scalars("root_post_backward"),
                     replicate_s=d.root_replicate_s)
    return StepCosts(units=(*blocks, root), optimizer_s=float(d.optimizer_s), recipe=d.recipe,
                     overlap_slowdown=d.overlap_slowdown, prologue_s=scalars("embed_forward"),
                     epilogue_s=scalars("embed_backward"),
                     optimizer_inline_s=scalars("optimizer"), block_norms=model.norms_per_block)


def total_compute_s(costs: StepCosts, accum_steps: int) -> float:
    """Compute stream work of a step of k micro-steps (without contention)."""
    return accum_steps * costs.compute_s + costs.optimizer_s


def total_comm_s(costs: StepCosts, accum_steps: int) -> float:
    """Communication stream work of a step of k micro-steps."""
    return sum(costs.duration_s(t) for t in costs.plan(accum_steps) if t.stream == COMM_STREAM)
