"""Parallel layouts on real torch: the device mesh of a `ParallelLayout` and torchtitan's Llama
tensor-parallel plan applied to `perfmodel.bench.model.Transformer` (one home for both: the
collective recorder, the step benchmark and any tracker use these functions).

* `layout_mesh(layout)`: a DeviceMesh with torchtitan's dimension order (dp_replicate outermost,
  then dp_shard, cp, tp innermost, so consecutive ranks form a tp group, as
  `perfmodel.spec.layout` places them); dimensions of size 1 are left out.
* `apply_tensor_parallel(model, tp_mesh, sequence_parallel=...)`: DTensor `parallelize_module`
  with the plan of torchtitan's `apply_tp` (torchtitan/models/llama3/infra/parallelize.py, read
  at commit 018740b; written here for this model's module names, not copied):

  - with sequence parallelism (torchtitan's only TP mode): the embedding row-parallel with its
    output sharded on the sequence (Shard(1)); every norm `SequenceParallel`; attention and MLP
    inputs gathered by `PrepareModuleInput` (Shard(1) -> Replicate); q/k/v/gate/up
    column-parallel; o/down row-parallel with a Shard(1) output (reduce-scatter); the LM head
    column-parallel from a Shard(1) input with vocabulary-sharded logits (Shard(-1)) and the
    loss computed under `loss_parallel()` (torchtitan's default);
  - without sequence parallelism (Megatron's original TP): the embedding row-parallel with a
    replicated output (all-reduce), q/k/v/gate/up column-parallel, o/down row-parallel with a
    replicated output (all-reduce), norms plain (replicated) modules, the LM head
    column-parallel with its logits gathered (Replicate) for a plain loss, or, with
    `loss_parallel=True` (the memory bench), vocabulary-sharded for `loss_parallel()`.

  Which collectives this plan issues, in which order, is what `perfmodel.sim.fsdp.
  inline_collectives` claims; tests/test_layout_order.py records them on gloo and compares.
* `data_mesh(layout, mesh)`: what FSDP2 shards over: dp_shard (FSDP), the (dp_replicate,
  dp_shard) 2-D mesh (HSDP), or nothing (pure TP: torchtitan applies no FSDP then).
  `perfmodel.bench.recipe_wrap.parallelize_with_recipe` applies TP, then the recipe's activation
  checkpointing and FSDP2 on it, in torchtitan's order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.layout import ParallelLayout

MESH_ORDER = ("dp_replicate", "dp_shard", "cp", "tp")
"""Mesh dimensions from outermost to innermost (torchtitan's order; pp is not benchmarked)."""


def uses_loss_parallel(layout: ParallelLayout) -> bool:
    """Whether the loss runs vocabulary-parallel (`loss_parallel()`): under tensor parallelism
    with sequence parallelism, as torchtitan's plan; without it the logits are gathered."""
    return layout.tp > 1 and layout.sequence_parallel


def check_benchmarkable(spec: ModelSpec, layout: ParallelLayout) -> None:
    """UserInputError naming what the torch benchmark cannot train under `layout` (the layout's
    own rules are `ParallelLayout.check_model`; these are the benchmark's)."""
    problems = []
    if layout.pp > 1 or layout.cp > 1:
        problems.append(("pipeline or context parallelism (pp, cp > 1)",
                         "benchmark layouts with pp = 1 and cp = 1 (torch's context "
                         "parallelism runs on CUDA only)."))
    if layout.async_tp:
        problems.append(("async TP", "set async_tp false (torch's async TP runs on CUDA only)."))
    if layout.dp_shard == 1 and layout.dp_replicate > 1:
        problems.append((f"plain DDP replicas (dp_replicate {layout.dp_replicate} with dp_shard "
                         "1)", "use dp_shard > 1 (HSDP) or dp_replicate 1."))
    if layout.tp > 1:
        if spec.tie_word_embeddings:
            problems.append(("tensor parallelism with tied embeddings (the embedding is sharded "
                             "by rows, the LM head by columns)", "use an untied model."))
        if spec.norms_per_block != 2 or spec.num_kv_heads % layout.tp:
            problems.append((f"tensor parallelism on {spec.name} ({spec.norms_per_block} norms "
                             f"per block, {spec.num_kv_heads} key/value heads)",
                             "benchmark TP on a pre-norm block (2 norms) whose key/value heads "
                             "tp divides (torchtitan's plan)."))
    if problems:
        what, hint = problems[0]
        degrees = ", ".join(f"{d} {getattr(layout, d)}" for d in MESH_ORDER[::-1])
        raise UserInputError(f"the torch benchmark does not train {what} ({degrees})",
                             hint=hint)


def layout_mesh(layout: ParallelLayout, device_type: str = "cpu") -> Any:
    """The DeviceMesh of a resolved `layout` over the default process group (its world size
    must be the layout's), named by the dimensions of size > 1 (`MESH_ORDER`); None for one
    rank."""
    # lazy: torch, the optional [bench] extra
    from torch.distributed.device_mesh import init_device_mesh

    dims = [(d, layout.size(d)) for d in MESH_ORDER if layout.size(d) > 1]
    if not dims:
        return None
    return init_device_mesh(device_type, tuple(s for _, s in dims),
                            mesh_dim_names=tuple(d for d, _ in dims))


def data_mesh(layout: ParallelLayout, mesh: Any) -> Any:
    """The mesh FSDP2 shards over: dp_shard (FSDP) or (dp_replicate, dp_shard) (HSDP); None when
    the layout has no data parallelism (pure TP: no FSDP)."""
    if mesh is None or layout.size("dp_shard") == 1:
        return None
    if layout.dp_replicate > 1:
        return mesh["dp_replicate", "dp_shard"]
    if mesh.ndim == 1:
        return mesh
    return mesh["dp_shard"]


def apply_tensor_parallel(model: Any, tp_mesh: Any, *, sequence_parallel: bool,
                          loss_parallel: bool | None = None) -> Any:
    """torchtitan's Llama TP plan (module docstring) on `model` in place; returns it.
    `loss_parallel` (default: `sequence_parallel`, as `uses_loss_parallel`) keeps the LM head's
    logits vocabulary-sharded (Shard(-1)) for a loss under `loss_parallel()`; the memory bench
    (`perfmodel.bench.memory_layouts`) sets it without sequence parallelism too (torchtitan's
    default loss, independent of its sequence-parallel norms)."""
    if loss_parallel is None:
        loss_parallel = sequence_parallel
    # lazy: torch, the optional [bench] extra
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    if sequence_parallel:
        root_plan: dict[str, Any] = {
            "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "final_norm": SequenceParallel(),
            "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                       use_local_output=False),
        }
        # the attention module takes (x, cos, sin): only x is a sequence-sharded activation
        block_plan: dict[str, Any] = {
            "attn_norm": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                       desired_input_layouts=(Replicate(), None, None)),
            "mlp_norm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                      desired_input_layouts=(Replicate(),)),
            "attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
            "mlp.down": RowwiseParallel(output_layouts=Shard(1)),
        }
    else:
        root_plan = {
            "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
            "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
            if loss_parallel else ColwiseParallel(output_layouts=Replicate()),
        }
        block_plan = {"attn.o_proj": RowwiseParallel(), "mlp.down": RowwiseParallel()}
    for name in ("attn.q_proj", "attn.k_proj", "attn.v_proj", "mlp.gate", "mlp.up"):
        block_plan[name] = ColwiseParallel()
    parallelize_module(model, tp_mesh, root_plan)
    for block in model.layers:
        plan = {k: v for k, v in block_plan.items() if k != "mlp.gate" or block.mlp.gated}
        parallelize_module(block, tp_mesh, plan)
    return model


@contextlib.contextmanager
def loss_context(layout: ParallelLayout, vocab_parallel: bool | None = None) -> Iterator[None]:
    """`loss_parallel()` when the layout's loss is vocabulary-parallel (`vocab_parallel`,
    default `uses_loss_parallel(layout)`), else nothing."""
    if not (uses_loss_parallel(layout) if vocab_parallel is None else vocab_parallel):
        yield
        return
    # lazy: torch, the optional [bench] extra
    from torch.distributed.tensor.parallel import loss_parallel

    with loss_parallel():
        yield
