"""Tensor parallelism and HSDP of the memory bench: meshes, checks and fake-mode workarounds.

The tensor-parallel plan itself has one home, `perfmodel.bench.parallel.apply_tensor_parallel`
(torchtitan's Llama plan on `perfmodel.bench.model.Transformer`: ColwiseParallel q/k/v, gate and
up, RowwiseParallel o and down, the embedding RowwiseParallel over the vocabulary, the LM head
ColwiseParallel; under sequence parallelism SequenceParallel norms and PrepareModuleInput). The
memory bench calls it with `loss_parallel=True` with and without sequence parallelism (the
logits stay vocabulary-sharded and the loss runs under `loss_parallel()`, torchtitan's default
loss), which is what `perfmodel.costs.memory.RankView` prices.

`layout_mesh(layout)` builds the 3-D device mesh (dp_replicate, dp_shard, tp) of a layout in
torchtitan's order, keeping dimensions of size 1 (unlike `perfmodel.bench.parallel.layout_mesh`):
a pure tensor-parallel layout is still wrapped by `fully_shard` over its one-rank dp_shard mesh,
which is how the recipe's mixed-precision policy reaches the model. `fsdp_mesh` is what
`fully_shard` gets (2-D for HSDP). `fake_tracking()` is the two private-torch workarounds a
tracker run under FakeTensorMode needs when DTensors are built inside the fake mode (/tmp spike
of issue 23, REPORT section 1): `DeviceMesh._concatenate` (FSDP2 on a tp-sharded parameter) run
outside the fake mode, and DTensor's sharding propagation kept in a private fake mode, so its
global-shape temporaries are not counted as memory. A real run never allocates them;
`tests/test_memory_layouts.py` pins both against real gloo tensors.

Context parallelism (ring attention, CUDA only) and pipeline stages are not built here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from torch import nn

from perfmodel.bench.parallel import loss_context
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


def step_context(layout: ParallelLayout) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """What each micro-step's forward and backward run inside: `loss_parallel()` under tp (the
    memory bench keeps the loss vocabulary-parallel with and without sequence parallelism)."""
    if layout.tp == 1:
        return contextlib.nullcontext
    return lambda: loss_context(layout, vocab_parallel=True)


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

