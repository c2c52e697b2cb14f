"""Wrap a torch model and train one step exactly as a `TrainingRecipe` says (one home for it).

Every torch worker (the FSDP2 timing benchmark, the memory-tracker benchmark) calls these two
functions, so what is measured is the recipe the performance model predicts:

* `shard_with_recipe(model, recipe, *, mesh=None)`: the recipe's `CheckpointPolicy`
  (`apply_activation_checkpointing`: ``full`` / ``layer:N`` whole blocks, ``op-sac`` torchtitan's
  op-level policy, ``attn`` the attention core), then `fully_shard` per block
  (``reshard_after_forward`` from the recipe, the last block from
  ``reshard_last_block_after_forward``), then the root, all with
  `MixedPrecisionPolicy(param_dtype, reduce_dtype)`. Explicit prefetch when
  ``prefetch_depth > 1`` (FSDP2 prefetches one unit implicitly).
* `train_step(model, optimizer, tokens, *, accum_steps, recipe)`: k micro-steps in the recipe's
  accumulation mode (``reduce_scatter``: gradients reduce-scattered every micro-step;
  ``no_sync``: `set_requires_gradient_sync(False)` on all but the last), each loss scaled by 1/k,
  then `optimizer.step()` and `zero_grad(set_to_none=True)`.

* `parallelize_with_recipe(model, recipe, mesh)`: the recipe's parallel layout first
  (`perfmodel.bench.parallel`: torchtitan's tensor-parallel plan on the mesh's tp dimension),
  then `shard_with_recipe` over its data-parallel mesh (dp_shard, or (dp_replicate, dp_shard)
  for HSDP), or only the checkpointing when the layout has no data parallelism (pure TP).

The model is expected to be `perfmodel.bench.model.Transformer` (a `layers` ModuleList of
blocks whose forward takes ``(x, cos, sin)``), built in the recipe's master dtype. Under a
layout with vocabulary-parallel loss (`perfmodel.bench.parallel.uses_loss_parallel`) the
micro-steps run inside `loss_parallel()`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar, cast

import torch
from torch import nn

from perfmodel.bench.common import resolve_dtype
from perfmodel.bench.parallel import (
    apply_tensor_parallel,
    check_benchmarkable,
    data_mesh,
    loss_context,
)
from perfmodel.spec.recipe import CheckpointPolicy, TrainingRecipe

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def _matmul_ops() -> frozenset[Any]:
    # addmm is what aten.linear lowers to for biased 2-D/flattened inputs (Qwen's q/k/v bias);
    # torchtitan's models have no biases, so counting it with mm is the same policy for them.
    return frozenset({torch.ops.aten.mm.default, torch.ops.aten.addmm.default})


def _attention_ops() -> frozenset[Any]:
    names = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
             "_scaled_dot_product_fused_attention_overrideable")
    return frozenset(getattr(torch.ops.aten, n).default for n in names
                     if hasattr(torch.ops.aten, n))


def _comm_ops() -> frozenset[Any]:
    ops = set()
    functional = getattr(torch.ops, "_c10d_functional", None)
    if functional is not None and hasattr(functional, "reduce_scatter_tensor"):
        ops.add(functional.reduce_scatter_tensor.default)
    return frozenset(ops)


def selective_policy() -> Any:
    """A fresh op-level SAC policy like torchtitan's default: save the outputs of SDPA kernels,
    reduce-scatters, `aten.max` and every other matmul (the 1st, 3rd, ... of a block's forward);
    recompute everything else (norms, RoPE, activations, casts). The matmul counters are per
    block and per pass (forward / recompute), so the recompute makes the same choices."""
    # lazy: torch, the optional [bench] extra
    from torch.utils.checkpoint import CheckpointPolicy

    matmuls, always = _matmul_ops(), _attention_ops() | _comm_ops() | {torch.ops.aten.max.default}
    counts: defaultdict[str, int] = defaultdict(int)

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func in matmuls:
            counts[mode] += 1
            save = counts[mode] % 2 == 1
        else:
            save = func in always
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _selective_context() -> Any:
    # lazy: torch, the optional [bench] extra
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    # torch ships this function without annotations
    return create_selective_checkpoint_contexts(  # type: ignore[no-untyped-call]
        selective_policy())


def _blocks(model: nn.Module) -> nn.ModuleList:
    """`model.layers`, the transformer blocks (nn.Module attributes are typed Tensor | Module)."""
    return cast(nn.ModuleList, model.layers)


def apply_activation_checkpointing(model: ModuleT, ac: str, *, first_block: int = 0) -> ModuleT:
    """Apply the `CheckpointPolicy` named `ac` to the blocks of `model.layers`, in place: full
    and layer:N wrap whole blocks, op-sac wraps every block with the op-level policy (both with
    `checkpoint_wrapper` and early_stop off, as torchtitan runs them: every op not saved is
    recomputed, even one whose output backward does not need — a plain MLP's down projection),
    attn checkpoints each block's attention core (`Attention.checkpoint_core`).
    `first_block`: the global index of `model.layers[0]` (a pipeline stage's first block), so
    that layer:N counts blocks across the whole model."""
    # lazy: torch, the optional [bench] extra
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    policy = CheckpointPolicy.parse(ac)
    layers = _blocks(model)
    for i, block in enumerate(layers):
        if policy.checkpointed(first_block + i):
            layers[i] = checkpoint_wrapper(block, preserve_rng_state=False, early_stop=False)
        elif policy.mode == "op-sac":
            layers[i] = checkpoint_wrapper(block, preserve_rng_state=False, early_stop=False,
                                           context_fn=_selective_context)
        elif policy.mode == "attn":
            setattr(block.attn, "checkpoint_core", True)  # noqa: B010  (nn.Module typing)
    return model


def mixed_precision(recipe: TrainingRecipe) -> Any:
    """`MixedPrecisionPolicy(param_dtype, reduce_dtype)` of the recipe."""
    # lazy: torch, the optional [bench] extra
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=resolve_dtype(recipe.param_dtype),
                                reduce_dtype=resolve_dtype(recipe.reduce_dtype))


def shard_with_recipe(model: ModuleT, recipe: TrainingRecipe, *, mesh: Any = None) -> ModuleT:
    """AC per the recipe, `fully_shard` on every block then the root; returns the root module
    (the same object, now an `FSDPModule`). `mesh`: a 1-D DeviceMesh (None: the default group)."""
    # lazy: torch, the optional [bench] extra
    from torch.distributed.fsdp import fully_shard

    apply_activation_checkpointing(model, recipe.ac)
    mp = mixed_precision(recipe)
    blocks = list(_blocks(model))
    for i, block in enumerate(blocks):
        last = i == len(blocks) - 1
        reshard = (recipe.reshard_last_block_after_forward if last
                   else recipe.reshard_blocks_after_forward)
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
    fully_shard(model, mesh=mesh, reshard_after_forward=recipe.reshard_root_after_forward,
                mp_policy=mp)
    _explicit_prefetch(blocks, recipe.prefetch_depth)
    return model


def parallelize_with_recipe(model: ModuleT, recipe: TrainingRecipe, mesh: Any) -> ModuleT:
    """`model` trained as `recipe` on `mesh` (`perfmodel.bench.parallel.layout_mesh` of the
    recipe's resolved layout, None for one rank): tensor parallelism when tp > 1, then the
    checkpointing and FSDP2 / HSDP of `shard_with_recipe`, as torchtitan orders them; returns
    it."""
    layout = recipe.parallel
    check_benchmarkable(getattr(model, "spec"), layout)  # noqa: B009  (nn.Module typing)
    if layout.tp > 1:
        apply_tensor_parallel(model, mesh["tp"] if mesh.ndim > 1 else mesh,
                              sequence_parallel=layout.sequence_parallel)
    dp = data_mesh(layout, mesh)
    if dp is None:
        return apply_activation_checkpointing(model, recipe.ac)
    return shard_with_recipe(model, recipe, mesh=dp)


def _explicit_prefetch(blocks: Sequence[Any], depth: int) -> None:
    # FSDP2 already prefetches one unit ahead; deeper prefetch needs explicit lists.
    if depth <= 1:
        return
    for i, block in enumerate(blocks):
        block.set_modules_to_forward_prefetch(list(blocks[i + 1:i + 1 + depth]))
        block.set_modules_to_backward_prefetch(list(reversed(blocks[max(0, i - depth):i])))


def micro_step_syncs(accum_steps: int, accum_mode: str) -> list[bool]:
    """Whether each micro-step reduce-scatters its gradients, for k micro-steps."""
    if accum_steps < 1:
        raise ValueError(f"accum_steps must be >= 1, got {accum_steps}")
    if accum_mode == "reduce_scatter":
        return [True] * accum_steps
    if accum_mode == "no_sync":
        return [i == accum_steps - 1 for i in range(accum_steps)]
    raise ValueError(f"unknown accumulation mode {accum_mode!r}")


def train_step(model: Any, optimizer: torch.optim.Optimizer,
               tokens: torch.Tensor | Sequence[torch.Tensor], *, accum_steps: int,
               recipe: TrainingRecipe,
               before_micro_step: Callable[[], None] | None = None,
               context: Callable[[], AbstractContextManager[Any]] | None = None) -> torch.Tensor:
    """One optimizer step of `accum_steps` micro-steps in `recipe.accum_mode`; `tokens` is one
    batch reused by every micro-step or one batch per micro-step. `before_micro_step` runs before
    each forward (the memory tracker resets its per-module stats there); `context` wraps each
    micro-step's forward and backward (default: `loss_context` of the recipe's layout, i.e.
    `loss_parallel()` when its loss is vocabulary-parallel). Returns the summed
    (1/k-scaled) loss, detached (no host sync, so it also works under FakeTensorMode)."""
    batches = [tokens] * accum_steps if isinstance(tokens, torch.Tensor) else list(tokens)
    if len(batches) != accum_steps:
        raise ValueError(f"got {len(batches)} batches for {accum_steps} micro-steps")
    total = None
    sharded = hasattr(model, "set_requires_gradient_sync")  # FSDP2; pure TP has no FSDP
    for sync, batch in zip(micro_step_syncs(accum_steps, recipe.accum_mode), batches, strict=True):
        if before_micro_step is not None:
            before_micro_step()
        if sharded:
            model.set_requires_gradient_sync(sync)
        with context() if context is not None else loss_context(recipe.parallel):
            loss = model(batch) / accum_steps
            loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if total is None:  # unreachable: micro_step_syncs rejects accum_steps < 1
        raise ValueError("no micro-step ran")
    result: torch.Tensor = total
    return result


def make_optimizer(model: nn.Module, recipe: TrainingRecipe, *, lr: float = 1e-4) -> Any:
    """The recipe's inner optimizer over `model`'s (sharded) parameters (AdamW)."""
    if recipe.optimizer != "adamw":
        raise ValueError(f"unsupported optimizer {recipe.optimizer!r}")
    # fused=True: torchtitan's default AdamW implementation (one kernel per parameter group, no
    # multi-tensor temporaries); torch has fused AdamW kernels for CUDA and CPU.
    return torch.optim.AdamW(parameter_groups(model), lr=lr, fused=True)


def parameter_groups(model: nn.Module) -> list[dict[str, Any]]:
    """One parameter group per kind of parameter tensor: plain tensors, and DTensors per device
    mesh. A fused kernel runs per group and refuses to mix kinds, which a tensor-parallel model
    without sequence parallelism and without FSDP has (plain norm weights beside sharded
    linears); a model of one kind (every FSDP2 model) keeps one group, as before."""
    groups: dict[Any, list[nn.Parameter]] = {}
    for param in model.parameters():
        mesh = getattr(param, "device_mesh", None)
        groups.setdefault(None if mesh is None else id(mesh), []).append(param)
    return [{"params": params} for params in groups.values()]


def init_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Create the optimizer's lazy state with one step on zero gradients (a no-op update for
    AdamW), so that a later tracked step sees the steady state. Under FakeTensorMode the lazy
    state creation of the first real step is also where the tracker would count DTensor
    propagation temporaries that a real run never allocates."""
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
