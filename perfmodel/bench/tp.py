"""Tensor parallelism and HSDP on the bench model, as torchtitan applies them to Llama.

`apply_tensor_parallel(model, tp_mesh, sequence_parallel=...)` applies torchtitan's Llama plan
(`torchtitan/models/llama3/infra/parallelize.py::apply_tp`, read, not copied) to
`perfmodel.bench.model.Transformer`, whose modules are named differently:

* token embedding `embed`: RowwiseParallel (the vocabulary sharded over tp), its output
  Shard(1) under sequence parallelism, Replicate without;
* q/k/v, gate and up projections: ColwiseParallel; o and down projections: RowwiseParallel
  (output Shard(1) under sequence parallelism: a reduce-scatter instead of an all-reduce);
* under sequence parallelism the norms (`attn_norm`, `mlp_norm`, `final_norm`) run
  SequenceParallel and the attention and MLP inputs are all-gathered by PrepareModuleInput
  (Shard(1) -> Replicate); without it the norms stay plain modules (replicated weights, full
  sequence on every tp rank);
* LM head `lm_head`: ColwiseParallel with loss parallelism (logits stay vocabulary-sharded,
  the cross-entropy runs under `loss_parallel()`, torchtitan's default).

`layout_mesh(layout)` builds the device mesh (dp_replicate, dp_shard, tp) of a layout in
torchtitan's order; `fsdp_mesh` is what `fully_shard` gets (2-D for HSDP). `fake_tracking()` is
the two private-torch workarounds a tracker run under FakeTensorMode needs when DTensors are
built inside the fake mode (/tmp spike of issue 23, REPORT section 1): `DeviceMesh._concatenate`
(FSDP2 on a tp-sharded parameter) run outside the fake mode, and DTensor's sharding propagation
kept in a private fake mode, so its global-shape temporaries are not counted as memory. A real
run never allocates them; `tests/test_memory_layouts.py` pins both against real gloo tensors.

Context parallelism (ring attention, CUDA only) and pipeline stages are not built here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from torch import nn

from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.layout import ParallelLayout

MESH_DIMS = ("dp_replicate", "dp_shard", "tp")
"""The bench's mesh dimensions, outermost first (torchtitan's order without pp and cp)."""


def check_layout_buildable(spec: ModelSpec, layout: ParallelLayout) -> None:
    """UserInputError naming what torch's tensor-parallel plan (or this bench) cannot build."""
    if layout.cp > 1 or layout.pp > 1:
        raise UserInputError(
            f"the memory bench builds dp_replicate x dp_shard x tp layouts, not cp {layout.cp} "
            f"/ pp {layout.pp} (torch's ring attention runs on CUDA only; pipeline stages are "
            "issue 24's)", hint="use cp 1 and pp 1 for a tracked layout.")
    if layout.tp == 1:
        return
    tp = layout.tp
    rules = [(spec.num_heads % tp == 0, f"tp {tp} divides the {spec.num_heads} query heads"),
             (spec.num_kv_heads % tp == 0,
              f"tp {tp} divides the {spec.num_kv_heads} key/value heads (torch's ColwiseParallel "
              "does not replicate heads)"),
             (spec.intermediate_size % tp == 0,
              f"tp {tp} divides the MLP width {spec.intermediate_size}"),
             (spec.vocab_size % tp == 0, f"tp {tp} divides the vocabulary {spec.vocab_size}"),
             (not spec.tie_word_embeddings,
              "the embedding and the LM head are separate weights (torchtitan's plan shards "
              "them differently; tied weights are not supported)"),
             (spec.norms_per_block == 2, "each block has two pre-norms (the Llama layout)"),
             (not layout.async_tp, "synchronous TP (async TP runs on CUDA only)")]
    broken = [rule for ok, rule in rules if not ok]
    if broken:
        raise UserInputError(f"{spec.name}: cannot build tp {tp}: needs " + "; ".join(broken),
                             hint="use a tp that divides heads, key/value heads, MLP width and "
                                  "vocabulary of an untied Llama-layout model.")


def layout_mesh(layout: ParallelLayout) -> Any:
    """The (dp_replicate, dp_shard, tp) DeviceMesh of a resolved layout (process group first)."""
    # lazy: torch.distributed, only where a process group exists
    from torch.distributed.device_mesh import init_device_mesh

    sizes = (layout.dp_replicate, layout.size("dp_shard"), layout.tp)
    return init_device_mesh("cpu", sizes, mesh_dim_names=MESH_DIMS)


def fsdp_mesh(mesh: Any, layout: ParallelLayout) -> Any:
    """What `fully_shard` shards over: (dp_replicate, dp_shard) for HSDP, dp_shard otherwise."""
    return mesh["dp_replicate", "dp_shard"] if layout.dp_replicate > 1 else mesh["dp_shard"]


def tp_plan(sequence_parallel: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(root plan, per-block plan) of torchtitan's Llama TP with loss parallelism, on the bench
    model's module names."""
    # lazy: torch.distributed, only where a process group exists
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    sp_out = Shard(1) if sequence_parallel else Replicate()
    root: dict[str, Any] = {
        "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=sp_out),
        "lm_head": ColwiseParallel(input_layouts=sp_out, output_layouts=Shard(-1),
                                   use_local_output=False),
    }
    block: dict[str, Any] = {
        "attn.q_proj": ColwiseParallel(), "attn.k_proj": ColwiseParallel(),
        "attn.v_proj": ColwiseParallel(), "attn.o_proj": RowwiseParallel(output_layouts=sp_out),
        "mlp.gate": ColwiseParallel(), "mlp.up": ColwiseParallel(),
        "mlp.down": RowwiseParallel(output_layouts=sp_out),
    }
    if sequence_parallel:
        root["final_norm"] = SequenceParallel()
        block |= {
            "attn_norm": SequenceParallel(), "mlp_norm": SequenceParallel(),
            # the block passes (x, cos, sin): only x is a sequence-sharded activation
            "attn": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                       desired_input_layouts=(Replicate(), None, None)),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                      desired_input_layouts=(Replicate(),)),
        }
    return root, block


def apply_tensor_parallel(model: nn.Module, tp_mesh: Any, *, sequence_parallel: bool) -> None:
    """Parallelize the bench `Transformer` over `tp_mesh` in place (module docstring)."""
    # lazy: torch.distributed, only where a process group exists
    from torch.distributed.tensor.parallel import parallelize_module

    root, block = tp_plan(sequence_parallel)
    layers = model.layers
    if not isinstance(layers, nn.ModuleList):
        raise TypeError("the bench model keeps its blocks in a ModuleList")
    parallelize_module(model, tp_mesh, root)
    for layer in layers:
        if getattr(layer.mlp, "gate", None) is None:
            block.pop("mlp.gate", None)  # a plain MLP (up/down only)
        parallelize_module(layer, tp_mesh, block)


def step_context(layout: ParallelLayout) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """What each micro-step's forward and backward run inside: `loss_parallel()` under tp."""
    if layout.tp == 1:
        return contextlib.nullcontext
    # lazy: torch.distributed, only where a process group exists
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel


@contextlib.contextmanager
def fake_tracking() -> Iterator[None]:
    """The two workarounds a FakeTensorMode tracker run of a DTensor layout needs (module
    docstring); restored on exit."""
    # lazy: private torch internals, patched only for the duration of one run
    import torch.distributed.tensor._sharding_prop as sharding_prop
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh

    concatenate = DeviceMesh.__dict__["_concatenate"]
    detect = sharding_prop.detect_fake_mode  # type: ignore[attr-defined]  # private torch

    def outside_fake(meshes: Any) -> Any:
        with unset_fake_temporarily():
            return concatenate.__func__(meshes)

    DeviceMesh._concatenate = staticmethod(outside_fake)  # type: ignore[assignment]
    sharding_prop.detect_fake_mode = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    try:
        yield
    finally:
        DeviceMesh._concatenate = concatenate  # type: ignore[method-assign]
        sharding_prop.detect_fake_mode = detect  # type: ignore[attr-defined]


def local_param_bytes(model: nn.Module) -> int:
    """Bytes of the parameters this rank holds (DTensor local shards)."""
    total = 0
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        total += local.numel() * local.element_size()
    return total

