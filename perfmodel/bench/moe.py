"""A real mixture-of-experts transformer in plain torch, with expert parallelism (issue 26).

Claim: `MoeTransformer` is the bench transformer (`perfmodel.bench.model`: the same attention,
norms, embedding, LM head and loss) with the MLP of every layer in `MoeSpec.moe_layers` replaced
by an MoE block, and its parameter count equals `ModelSpec.total_params`; trained under expert
parallelism (`ep` ranks hold E/ep experts each) it computes the same loss as on one rank.
Why: it is the torch side of the MoE ground truths (`perfmodel.bench.memory_moe`: the memory
FSDPMemTracker sees; `perfmodel.bench.moe_record`: the collectives a gloo step issues).
Checked by: tests/test_bench_moe.py (parameter count, a dense loop-over-experts reference,
token dropping at capacity, ep = 2 on gloo against ep = 1 with the same weights).

The MoE block (torchtitan's token-choice MoE, torchtitan/models/common/moe.py, read to learn):

* router: `Linear(h, E)` (bias when `router_bias`), softmax over the E logits in fp32, top-k,
  the k weights renormalised to sum to 1 (Mixtral, Qwen3-MoE `norm_topk_prob`);
* routed experts (`GroupedExperts`): three stacked parameters `w1` (E, h, f_e) gate, `w3`
  (E, h, f_e) up, `w2` (E, f_e, h) down, gated like the dense MLP (SwiGLU), computed with `bmm`
  over the experts' fixed-size slot groups;
* shared experts (optional): one gated MLP of width num_shared_experts x shared_intermediate_size
  every token passes through, times sigmoid(Linear(h, 1)) when `shared_expert_gate` (Qwen2-MoE).

FIXED-CAPACITY routing: every expert receives exactly C = ceil(T k / E x capacity_factor) slots
(T tokens of the micro-batch on this rank). Assignments are ranked choice-major (every token's
first choice before any second choice, then token order, GShard's priority); an assignment
whose position in its expert's queue is >= C is dropped (its contribution is zero), and unused
slots carry a zero row. This is not how torchtitan routes (it sends every token, with
data-dependent all-to-all splits), but the splits of a dropless all-to-all are data-dependent
and FakeTensorMode cannot fake data-dependent shapes: with fixed capacity every shape, and so
every buffer the memory tracker counts, is a function of (T, k, E, capacity_factor) only.

Expert parallelism over the `ep` dimension of the sparse mesh (`moe_meshes`): rank r of an EP
group holds experts [r E/ep, (r+1) E/ep). The (E C, h) dispatched slots are split into ep equal
chunks (chunk j: the slots of rank j's experts) and exchanged with one
`all_to_all_single_autograd` (functional collective, so the fake process group and
`perfmodel.bench.layout_record.CollectiveRecorder` see it; its backward is the reverse
all-to-all); the local experts run on (E/ep, ep C, h) and a second all-to-all returns the
results (combine). With ep = 1 no all-to-all is issued.

FSDP2 (`shard_moe_with_recipe`, torchtitan's apply_fsdp): dense parameters over the whole
`dp_shard` mesh (all ranks); with ep > 1 each layer's routed experts are their own FSDP unit
over the `efsdp` dimension (the ranks left when EP takes its share: world / ep; torchtitan's
current name, `dp_shard_mod_ep` in its older releases) and the block over dp_shard; with ep = 1
the experts stay in the block's unit. Expert weights are sharded on dim 1 (h, or f_e of w2)
when world > E (torchtitan: efsdp x ep > E, to avoid padded shards), else on dim 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from perfmodel.bench.model import (
    Attention,
    Block,
    Mlp,
    Transformer,
    _activation,
    _check_buildable,
    _norm,
)
from perfmodel.spec.arch import ModelSpec, MoeSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.recipe import CheckpointPolicy, TrainingRecipe

SPARSE_DIMS = ("efsdp", "ep")
"""Mesh dimensions of the routed experts, outermost first (ep innermost, as torchtitan)."""
DENSE_DIM = "dp_shard"
"""The mesh dimension of every other parameter (all ranks)."""


def expert_capacity(tokens: int, moe: MoeSpec, capacity_factor: float) -> int:
    """C: slots per expert for `tokens` routed tokens, ceil(T k / E x capacity_factor)."""
    return max(1, math.ceil(tokens * moe.experts_per_token / moe.num_experts * capacity_factor))


def expert_shard_dim(world_size: int, moe: MoeSpec) -> int:
    """The dimension FSDP2 shards the stacked expert weights on: 1 when the world exceeds the
    experts (torchtitan: efsdp x ep > E, no padded expert shards), else 0."""
    return 1 if world_size > moe.num_experts else 0


def check_moe_buildable(spec: ModelSpec, ep: int, capacity_factor: float,
                        world_size: int | None = None) -> None:
    """UserInputError naming what this module cannot build for `spec` under `ep` experts'
    ranks and `capacity_factor` (on `world_size` ranks, when given: FSDP2 shards dim 1 only
    evenly, so a dim-1 expert shard needs h and f_e divisible by the experts' FSDP ranks)."""
    if spec.moe is None:
        raise UserInputError(f"{spec.name} is a dense model (no MoE layers)",
                             hint="use perfmodel.bench.model for a dense model.")
    moe = spec.moe
    problems = []
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1 or moe.num_experts % ep:
        problems.append(f"ep {ep!r} must be a positive divisor of the {moe.num_experts} experts")
    if not (isinstance(capacity_factor, float | int) and math.isfinite(capacity_factor)
            and capacity_factor > 0):
        problems.append(f"capacity_factor {capacity_factor!r} must be a finite number > 0")
    if world_size is not None and not problems:
        if world_size % ep:
            problems.append(f"ep {ep} must divide the world size {world_size}")
        elif expert_shard_dim(world_size, moe) == 1:
            ranks = world_size // ep if ep > 1 else world_size
            if spec.hidden_size % ranks or moe.expert_intermediate_size % ranks:
                problems.append(
                    f"the experts are sharded on dim 1 over {ranks} ranks (world {world_size} > "
                    f"{moe.num_experts} experts) and FSDP2 shards dim 1 only evenly: "
                    f"{ranks} must divide h {spec.hidden_size} and f_e "
                    f"{moe.expert_intermediate_size}")
    if moe.expert_bias:
        problems.append("expert biases (gpt-oss) are not built")
    if not spec.gated_mlp:
        problems.append("the experts are built gated (SwiGLU) only")
    if spec.mla is not None:
        problems.append("multi-head latent attention (DeepSeek) is not built")
    if spec.qk_norm not in ("none", "head"):
        problems.append(f"qk_norm {spec.qk_norm!r} (only per-head q/k norms are built)")
    if problems:
        raise UserInputError(f"{spec.name}: the torch MoE bench model cannot build: "
                             + "; ".join(problems),
                             hint="use a gated MoE model without MLA or expert biases, ep "
                                  "dividing num_experts and capacity_factor > 0.")


def check_moe_recipe(recipe: TrainingRecipe) -> None:
    """UserInputError for a checkpointing mode this module does not train: op-level selective
    checkpointing (`op-sac`). The project's op-level policy (`perfmodel.bench.recipe_wrap`)
    does not save all-to-all outputs as torchtitan's does, and with ep > 1 the replay of a
    block whose experts are a nested FSDP2 unit fails in torch 2.13 (the unit's hooks run
    different profiler ops in forward and in the recompute)."""
    if CheckpointPolicy.parse(recipe.ac).mode == "op-sac":
        raise UserInputError(f"the MoE bench model does not train ac {recipe.ac!r} (op-level "
                             "selective checkpointing)",
                             hint="use ac none, full, layer:N or attn.")


class QkNormAttention(Attention):
    """Attention with a per-head RMSNorm on queries and keys before RoPE (Qwen3); the dense
    attention's forward (`perfmodel.bench.model.Attention`) applies them."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec)
        self.q_norm = nn.RMSNorm(spec.d)
        self.k_norm = nn.RMSNorm(spec.d)


class GroupedExperts(nn.Module):
    """E_local routed experts as three stacked weights; `forward` on (E_local, slots, h)."""

    def __init__(self, spec: ModelSpec, num_local: int) -> None:
        super().__init__()
        moe = spec.moe
        if moe is None:
            raise UserInputError(f"{spec.name}: no MoE layers", hint="give a MoE model.")
        h, f = spec.hidden_size, moe.expert_intermediate_size
        self.w1 = nn.Parameter(torch.empty(num_local, h, f))
        """Gate projections (E_local, h, f_e)."""
        self.w3 = nn.Parameter(torch.empty(num_local, h, f))
        """Up projections (E_local, h, f_e)."""
        self.w2 = nn.Parameter(torch.empty(num_local, f, h))
        """Down projections (E_local, f_e, h)."""
        self.act = _activation(spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.act(torch.bmm(x, self.w1)) * torch.bmm(x, self.w3)
        return torch.bmm(hidden, self.w2)


class MoeBlock(nn.Module):
    """Router, fixed-capacity dispatch, (expert-parallel) grouped experts, combine, shared
    experts (module docstring)."""

    def __init__(self, spec: ModelSpec, *, capacity_factor: float) -> None:
        super().__init__()
        moe = spec.moe
        if moe is None:
            raise UserInputError(f"{spec.name}: no MoE layers", hint="give a MoE model.")
        self.moe = moe
        self.capacity_factor = float(capacity_factor)
        self.router = nn.Linear(spec.hidden_size, moe.num_experts, bias=moe.router_bias)
        self.experts = GroupedExperts(spec, moe.num_experts)
        self.shared: Mlp | None = None
        self.shared_gate: nn.Linear | None = None
        if moe.num_shared_experts:
            width = moe.num_shared_experts * moe.shared_intermediate_size
            self.shared = Mlp(replace(spec, intermediate_size=width, mlp_bias=False))
            if moe.shared_expert_gate:
                self.shared_gate = nn.Linear(spec.hidden_size, 1, bias=False)
        self.ep = 1
        """Ranks of this block's expert-parallel group (set by `shard_experts`)."""
        self.ep_group: Any = None
        """The EP process group (None when ep = 1)."""

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(slot of each assignment in [0, E C], E C meaning dropped; token of each slot in
        [0, T], T meaning empty; weight of each assignment), assignments choice-major."""
        tokens, moe = x.shape[0], self.moe
        experts, k = moe.num_experts, moe.experts_per_token
        capacity = expert_capacity(tokens, moe, self.capacity_factor)
        scores = torch.softmax(self.router(x).float(), dim=-1)
        weights, chosen = torch.topk(scores, k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        chosen = chosen.t().reshape(-1)                       # (k T,), choice-major
        onehot = F.one_hot(chosen, experts).to(torch.int32)
        position = (torch.cumsum(onehot, dim=0, dtype=torch.int32) * onehot).sum(dim=-1) - 1
        kept = position < capacity
        dropped = torch.full_like(chosen, experts * capacity)
        slot = torch.where(kept, chosen * capacity + position, dropped)
        token = torch.arange(tokens, device=x.device).repeat(k)
        slot_token = torch.full((experts * capacity + 1,), tokens, dtype=torch.long,
                                device=x.device)
        slot_token = slot_token.scatter(0, slot, token)[:-1]
        return slot, slot_token, weights.t().reshape(-1)

    def _expert_parallel(self, slots: torch.Tensor) -> torch.Tensor:
        """(E C, h) slots of this rank's tokens -> the experts' outputs for them."""
        experts, ep = self.moe.num_experts, self.ep
        local = experts // ep
        if ep == 1:
            alone: torch.Tensor = self.experts(slots.view(experts, -1, slots.shape[-1]))
            return alone.reshape(slots.shape)
        # lazy: functional collectives, only under expert parallelism
        from torch.distributed._functional_collectives import all_to_all_single_autograd

        h = slots.shape[-1]
        received = all_to_all_single_autograd(slots.contiguous(), None, None, self.ep_group)
        grouped = received.view(ep, local, -1, h).transpose(0, 1).reshape(local, -1, h)
        out = self.experts(grouped)
        back = out.view(local, ep, -1, h).transpose(0, 1).reshape(slots.shape)
        combined: torch.Tensor = all_to_all_single_autograd(back, None, None, self.ep_group)
        return combined

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        slot, slot_token, weight = self.route(flat)
        zero = flat.new_zeros(1, shape[-1])
        slots = torch.cat([flat, zero]).index_select(0, slot_token)   # (E C, h)
        out = torch.cat([self._expert_parallel(slots), zero])           # (E C + 1, h)
        k = self.moe.experts_per_token
        per_choice = out.index_select(0, slot) * weight.unsqueeze(-1).to(out.dtype)
        routed = per_choice.view(k, flat.shape[0], -1).sum(dim=0)
        if self.shared is not None:
            shared = self.shared(flat)
            if self.shared_gate is not None:
                shared = torch.sigmoid(self.shared_gate(flat)) * shared
            routed = routed + shared
        return routed.view(shape)


class MoeTransformer(Transformer):
    """`Transformer` with MoE blocks in `spec.moe.moe_layers` (and q/k norms for Qwen3)."""

    def __init__(self, spec: ModelSpec, *, capacity_factor: float = 1.0) -> None:
        check_moe_buildable(spec, 1, capacity_factor)
        dense = replace(spec, moe=None, qk_norm="none")
        _check_buildable(dense)
        nn.Module.__init__(self)
        self.spec = spec
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(Block(dense) for _ in range(spec.num_layers))
        for i, block in enumerate(self.layers):
            if spec.qk_norm == "head":
                block.attn = QkNormAttention(dense)
            if spec.is_moe_layer(i):
                block.mlp = MoeBlock(spec, capacity_factor=capacity_factor)
        self.final_norm = _norm(spec)
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=spec.lm_head_bias)
        if spec.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        self._rope = None


def moe_blocks(model: nn.Module) -> Iterator[tuple[int, MoeBlock]]:
    """(layer index, MoE block) of every MoE layer (through checkpoint wrappers)."""
    for i, layer in enumerate(getattr(model, "layers")):  # noqa: B009  (nn.Module typing)
        for module in layer.modules():
            if isinstance(module, MoeBlock):
                yield i, module
                break


def build_moe_model(spec: ModelSpec, *, capacity_factor: float = 1.0,
                    dtype: torch.dtype = torch.float32, seed: int = 0) -> MoeTransformer:
    """`spec` with all E experts per layer, seeded small-normal weights (as `build_model`), in
    `dtype`; `shard_experts` then keeps a rank's E/ep."""
    torch.manual_seed(seed)
    model = MoeTransformer(spec, capacity_factor=capacity_factor)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            elif param.dim() >= 2:
                param.normal_(0.0, 0.02)
    if any(p.dtype != dtype for p in model.parameters()):
        model = model.to(dtype=dtype)
    return model


def moe_meshes(world_size: int, ep: int) -> tuple[Any, Any]:
    """(dense 1-D `dp_shard` mesh of every rank, sparse (efsdp, ep) mesh), ep innermost; create
    them after the process group and before any fake mode."""
    # lazy: torch.distributed, only where a process group exists
    from torch.distributed.device_mesh import init_device_mesh

    if world_size % ep:
        raise UserInputError(f"ep {ep} does not divide the world size {world_size}",
                             hint="use an ep that divides the number of ranks.")
    dense = init_device_mesh("cpu", (world_size,), mesh_dim_names=(DENSE_DIM,))
    sparse = init_device_mesh("cpu", (world_size // ep, ep), mesh_dim_names=SPARSE_DIMS)
    return dense, sparse


def shard_experts(model: MoeTransformer, sparse_mesh: Any) -> MoeTransformer:
    """Keep this rank's E/ep experts of every MoE layer (its coordinate on the `ep` dimension)
    and give the blocks their EP group; in place."""
    ep = sparse_mesh["ep"].size()
    rank = sparse_mesh["ep"].get_local_rank()
    group = sparse_mesh.get_group("ep") if ep > 1 else None
    for _, block in moe_blocks(model):
        local = block.moe.num_experts // ep
        experts = block.experts
        for name in ("w1", "w2", "w3"):
            full = getattr(experts, name)
            with torch.no_grad():
                part = full[rank * local:(rank + 1) * local].clone()
            setattr(experts, name, nn.Parameter(part))
        block.ep, block.ep_group = ep, group
    return model


def shard_moe_with_recipe(model: MoeTransformer, recipe: TrainingRecipe, *, dense_mesh: Any,
                          sparse_mesh: Any) -> MoeTransformer:
    """The recipe's checkpointing, then FSDP2 as the module docstring says (experts on efsdp
    when ep > 1, every other unit on dp_shard), with the recipe's mixed precision; in place."""
    # lazy: torch's FSDP2, only when wrapping
    from torch.distributed.fsdp import fully_shard

    # lazy: the recipe wrapper's checkpointing and mixed precision (one home)
    from perfmodel.bench.recipe_wrap import apply_activation_checkpointing, mixed_precision

    check_moe_recipe(recipe)
    moe_layers = dict(moe_blocks(model))
    apply_activation_checkpointing(model, recipe.ac)
    mp = mixed_precision(recipe)
    layers = list(getattr(model, "layers"))  # noqa: B009  (nn.Module typing)
    for i, layer in enumerate(layers):
        last = i == len(layers) - 1
        reshard = (recipe.reshard_last_block_after_forward if last
                   else recipe.reshard_blocks_after_forward)
        shard_layer(layer, moe_layers.get(i), dense_mesh=dense_mesh, sparse_mesh=sparse_mesh,
                    reshard_after_forward=reshard, mp_policy=mp)
    fully_shard(model, mesh=dense_mesh, reshard_after_forward=recipe.reshard_root_after_forward,
                mp_policy=mp)
    return model


def shard_layer(layer: nn.Module, block: MoeBlock | None, *, dense_mesh: Any, sparse_mesh: Any,
                reshard_after_forward: bool, mp_policy: Any) -> nn.Module:
    """FSDP2 of one layer as the module docstring says (and torchtitan's apply_fsdp, per model
    part under pipeline parallelism too): with an MoE `block` and ep > 1 its routed experts
    first, their own unit over the `efsdp` dimension, then the layer over the dense mesh (with
    ep = 1 the experts stay in the layer's unit, on dim 1 when the world exceeds the experts);
    in place."""
    # lazy: torch's FSDP2, only when wrapping
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard

    placement: Callable[[nn.Parameter], Any] | None = None
    if block is not None:
        dim = expert_shard_dim(dense_mesh.size(), block.moe)
        expert_params = set(block.experts.parameters())
        if sparse_mesh["ep"].size() > 1:
            fully_shard(block.experts, mesh=sparse_mesh["efsdp"],
                        reshard_after_forward=reshard_after_forward, mp_policy=mp_policy,
                        shard_placement_fn=_placement_of(expert_params, Shard(dim)))
        elif dim == 1:
            placement = _placement_of(expert_params, Shard(1))
    fully_shard(layer, mesh=dense_mesh, reshard_after_forward=reshard_after_forward,
                mp_policy=mp_policy, shard_placement_fn=placement)
    return layer


def _placement_of(params: set[Any], placement: Any) -> Callable[[nn.Parameter], Any]:
    """A `shard_placement_fn`: `placement` for `params`, FSDP2's default for the others."""
    def place(param: nn.Parameter) -> Any:
        return placement if param in params else None
    return place


def dense_reference(block: MoeBlock, x: torch.Tensor) -> torch.Tensor:
    """The MoE block's output by a plain loop over tokens and their top-k experts (every
    assignment kept: the reference for a capacity that drops nothing), on one rank."""
    flat = x.reshape(-1, x.shape[-1])
    scores = torch.softmax(block.router(flat).float(), dim=-1)
    weights, chosen = torch.topk(scores, block.moe.experts_per_token, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    rows = []
    ex = block.experts
    for t in range(flat.shape[0]):
        acc = torch.zeros_like(flat[t])
        for w, e in zip(weights[t], chosen[t], strict=True):
            hidden = ex.act(flat[t] @ ex.w1[e]) * (flat[t] @ ex.w3[e])
            acc = acc + w.to(flat.dtype) * (hidden @ ex.w2[e])
        rows.append(acc)
    out = torch.stack(rows)
    if block.shared is not None:
        shared = block.shared(flat)
        if block.shared_gate is not None:
            shared = torch.sigmoid(block.shared_gate(flat)) * shared
        out = out + shared
    return out.view(x.shape)
