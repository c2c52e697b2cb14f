"""Collective orders of parallel layouts: what a real torch step issues against what the
simulator plans (no torch here; `perfmodel.bench.layout_record` records them).

Claim: for tensor parallelism with and without sequence parallelism (torchtitan's Llama plan,
`perfmodel.bench.parallel`), FSDP2 x TP on a 2 x 2 mesh and HSDP on a 2 x 2 mesh, under every
checkpointing mode of the recorded cases and both accumulation modes, each stream of the
simulator's plan (`perfmodel.sim.fsdp.step_plan`) lists the collectives a real torch step issues
in the same order, each in the same micro-step, phase, unit, group and dtype and moving the same
bytes: the compute stream the tensor-parallel ones (`inline_collectives`, priced inline), the
communication stream FSDP2's all-gathers and reduce-scatters and HSDP's all-reduces.
Why per stream: the simulator issues a prefetched all-gather when the communication stream may
start it (a GPU's CPU runs ahead of its kernels), torch dispatches it when the CPU reaches the
module; the order within each stream is what both decide alike.
Checked by: tests/test_layout_order.py (the recorded dataset `RECORDED_CASES`,
catalogs/profiles/data/layout-orders.csv, against `simulated_collectives`, and a live re-record
of a small case).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfmodel.costs.features import local_model
from perfmodel.sim.fsdp import (
    COMM_STREAM,
    COMPUTE_STREAM,
    applies_fsdp,
    inline_payload_bytes,
    step_plan,
)
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.formulas import dtype_bytes
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe


@dataclass(frozen=True, kw_only=True, slots=True)
class Collective:
    """One collective a rank issued."""

    op: str
    """all_gather, reduce_scatter, all_reduce, all_to_all, broadcast, barrier or p2p."""
    group: str
    """Mesh dimension of the process group (tp, cp, dp_shard, dp_replicate) or its name."""
    phase: str
    """forward, backward, optimizer or other (outside every module and the optimizer)."""
    unit: str
    """block{i} or root (embedding, final norm, LM head, loss: the root FSDP unit); an FSDP2
    collective: the FSDP unit it gathers or reduces."""
    dtype: str
    """Element type (fp32, bf16, ...)."""
    in_numel: int
    """Elements this rank contributes."""
    out_numel: int
    """Elements this rank receives."""
    element_bytes: int
    """Bytes per element."""
    micro_step: int
    """Micro-step (0-based) it was issued in; the optimizer's: the last."""

    @property
    def payload_bytes(self) -> int:
        """The unsharded side: an all-gather's output, a reduce-scatter's input, an
        all-reduce's buffer (the size `perfmodel.costs.comm` prices a collective by)."""
        return max(self.in_numel, self.out_numel) * self.element_bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class LayoutRun:
    """One recorded training step of a parallel layout."""

    recipe: TrainingRecipe
    """Recipe with its `parallel` layout (dp_shard -1: what the job's ranks leave)."""
    accum_steps: int = 1
    """Micro-steps k."""
    micro_batch: int = 1
    """Sequences per data-parallel rank per micro-step."""
    seq_len: int = 16
    """Tokens per sequence."""


# ---- the simulator's side ----------------------------------------------------------------------

Key = tuple[int, str, str, str, str, str, int]
"""What a recorded collective and a planned one must share: (micro_step, phase, unit, op,
group, dtype, payload_bytes)."""
_COMPUTE_GROUPS = ("tp", "cp", "ep")
_SIM_GROUP = {"fsdp": "dp_shard", "expert_fsdp": "efsdp"}
"""The recorder's mesh-dimension names of the plan's FSDP groups (`perfmodel.bench.moe`:
the experts' FSDP dimension is torchtitan's `efsdp`)."""


def key_of(record: Collective, ep: int = 1) -> Key:
    """The compared fields of a recorded collective. An all-to-all's payload is what the rank
    sends to the other ep - 1 ranks of its group, the simulator's measure
    (`perfmodel.costs.comm.all_to_all_payload_bytes`): the recorded buffer, which holds the
    rank's own slice too, times (ep - 1) / ep."""
    payload = record.payload_bytes
    if record.op == "all_to_all":
        payload = payload * (ep - 1) // ep
    return (record.micro_step, record.phase, record.unit, record.op, record.group, record.dtype,
            payload)


def stream_of(record: Collective) -> str:
    """The simulator's stream of a recorded collective: tensor, context and expert parallelism
    run on the compute stream, FSDP2 (the experts' own units too) and HSDP on the
    communication stream."""
    return COMPUTE_STREAM if record.group in _COMPUTE_GROUPS else COMM_STREAM


def by_stream(records: Sequence[Collective], ep: int = 1) -> dict[str, list[Key]]:
    """Recorded collectives split by stream, each in issue order (`ep`: `key_of`'s)."""
    out: dict[str, list[Key]] = {COMPUTE_STREAM: [], COMM_STREAM: []}
    for record in records:
        out[stream_of(record)].append(key_of(record, ep))
    return out


def unit_fsdp_params(spec: ModelSpec, layout: ParallelLayout,
                     seq_len: int) -> list[tuple[int, int]]:
    """(parameters of the unit's FSDP unit, of its experts' own unit on this rank) of each block
    then the root, as the typed plan gathers them: a dense model's from `fsdp_units` (the
    tensor-parallel shard); an MoE model's per layer (`ModelSpec.layer_params`), where under
    ep > 1 an MoE layer's routed experts leave the block's unit for their own, E/ep of them per
    rank (`perfmodel.sim.fsdp.step_plan`)."""
    units = local_model(spec, layout.tp).fsdp_units(seq_len)
    if spec.moe is None:
        return [(u.params, 0) for u in units]
    experts = spec.moe.num_experts * spec.expert_params
    out = []
    for i in range(spec.num_layers):
        own = experts if spec.is_moe_layer(i) and layout.ep > 1 else 0
        out.append((spec.layer_params(i) - own, own // layout.ep))
    return [*out, (units[-1].params, 0)]


def simulated_collectives(spec: ModelSpec, run: LayoutRun,
                          world_size: int) -> dict[str, list[Key]]:
    """The collectives of the simulator's plan for `run` on `world_size` ranks, by stream in
    plan order, as `key_of` describes a recorded one. The plan reads the recipe as given, as
    `perfmodel.sim.fsdp.step_costs` does (a layout without FSDP has no FSDP collectives, an
    expert FSDP group of one rank none for the experts' units: their zero-duration placeholders
    are left out); sizes use the layout resolved on the ranks. An MoE model's plan types its
    blocks (`step_plan`'s `moe_layers`: the model's MoE layers), as a real model's layers are."""
    recipe = run.recipe
    layout = recipe.parallel.resolve(world_size)
    num_units = spec.num_layers + 1
    plan = step_plan(num_units, recipe=recipe, accum_steps=run.accum_steps,
                     block_norms=spec.norms_per_block,
                     moe_layers=None if spec.moe is None else spec.moe.moe_layers)
    payloads = inline_payload_bytes(spec, recipe, seq_len=run.seq_len,
                                    micro_batch=run.micro_batch)
    params_of = unit_fsdp_params(spec, layout, run.seq_len)
    names = [f"block{i}" for i in range(spec.num_layers)] + ["root"]
    param, grad = recipe.param_dtype, recipe.reduce_dtype
    where_of = {"forward_inline_s": "forward", "prologue_s": "forward",
                "backward_inline_s": "backward", "epilogue_s": "backward",
                "optimizer_inline_s": "optimizer"}
    out: dict[str, list[Key]] = {COMPUTE_STREAM: [], COMM_STREAM: []}
    for task in plan:
        unit = names[task.unit] if task.unit is not None else "root"
        if task.stream == COMPUTE_STREAM and task.cost in where_of:
            dtype = "fp32" if task.payload == "loss_rows" else param
            out[COMPUTE_STREAM].append((task.micro_step, where_of[task.cost], unit, task.kind,
                                        task.group, dtype, int(payloads[task.payload])))
        elif task.stream == COMM_STREAM and applies_fsdp(recipe.parallel) and task.unit is not None:
            params = params_of[task.unit][0]
            if task.group == "expert_fsdp":
                if layout.expert_fsdp_degree == 1:
                    continue
                unit, params = f"{unit}.experts", params_of[task.unit][1]
            if task.kind == "all_gather":
                phase, dtype, size = ("backward" if "bwd" in task.name else "forward", param,
                                      params * dtype_bytes(param))
            elif task.kind == "reduce_scatter":
                phase, dtype, size = "backward", grad, params * dtype_bytes(grad)
            else:  # HSDP: the reduced shard all-reduced across the replicas
                phase, dtype, size = ("backward", grad,
                                      params // layout.fsdp_degree * dtype_bytes(grad))
            out[COMM_STREAM].append((task.micro_step, phase, unit, task.kind,
                                     _SIM_GROUP.get(task.group, task.group), dtype, int(size)))
    return out


# ---- the recorded cases --------------------------------------------------------------------

ORDER_SPEC = ModelSpec(name="layout-order-2", hidden_size=32, num_layers=2, num_heads=4,
                       num_kv_heads=2, intermediate_size=64, vocab_size=128)
"""A 2-block Llama (GQA, SwiGLU, untied) at the smallest shapes every layout divides."""
_FP32 = DEFAULT_RECIPE.with_overrides(param_dtype="fp32", reduce_dtype="fp32")


def _run(base: TrainingRecipe, layout: ParallelLayout, accum_steps: int = 1,
         **overrides: Any) -> LayoutRun:
    return LayoutRun(recipe=replace(base.with_overrides(**overrides), parallel=layout),
                     accum_steps=accum_steps)


RECORDED_CASES: dict[str, tuple[int, LayoutRun]] = {
    # 2 ranks: pure tensor parallelism (no FSDP, as torchtitan when every dp degree is 1)
    "tp": (2, _run(_FP32, ParallelLayout(dp_shard=1, tp=2, sequence_parallel=False), ac="none")),
    "tp-op-sac": (2, _run(_FP32, ParallelLayout(dp_shard=1, tp=2, sequence_parallel=False))),
    "tp-sp": (2, _run(_FP32, ParallelLayout(dp_shard=1, tp=2), 2, ac="none")),
    "tp-sp-full": (2, _run(_FP32, ParallelLayout(dp_shard=1, tp=2), ac="full")),
    "tp-sp-attn": (2, _run(_FP32, ParallelLayout(dp_shard=1, tp=2), ac="attn")),
    # 4 ranks: FSDP2 x TP on a (dp_shard 2, tp 2) mesh, torchtitan's recipe (bf16 gathers,
    # fp32 reduction, op-sac) and variants
    "fsdp-tp": (4, _run(DEFAULT_RECIPE, ParallelLayout(tp=2, sequence_parallel=False))),
    "fsdp-tp-sp": (4, _run(DEFAULT_RECIPE, ParallelLayout(tp=2))),
    "fsdp-tp-sp-no-sync": (4, _run(_FP32, ParallelLayout(tp=2), 2, ac="none",
                                   accum_mode="no_sync")),
    "fsdp-tp-sp-layer2": (4, _run(_FP32, ParallelLayout(tp=2), 2, ac="layer:2")),
    # 4 ranks: HSDP on a (dp_replicate 2, dp_shard 2) mesh
    "hsdp": (4, _run(DEFAULT_RECIPE, ParallelLayout(dp_replicate=2), 2)),
    "hsdp-no-sync": (4, _run(_FP32, ParallelLayout(dp_replicate=2), 2, ac="none",
                             accum_mode="no_sync")),
}
"""name -> (ranks, run) of every case in catalogs/profiles/data/layout-orders.csv; the layout
names dp_shard 1 where the run has no FSDP (a resolved dp_shard, as the benchmark trains it)."""

COLUMNS = ("case", "world_size", "recipe", "accum_steps", "micro_batch", "seq_len", "seq",
           *(f for f in Collective.__dataclass_fields__), "torch_version")
"""The dataset: one row per collective of rank 0's recorded step (every rank's sequence is
checked identical when recording), in issue order (`seq`)."""


def read_orders(path: str | Path) -> dict[str, list[Collective]]:
    """Recorded collectives by case from a layout-orders CSV (`perfmodel.bench.layout_record`)."""
    # lazy: pandas is heavy and only reading the dataset needs it
    import pandas as pd

    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    out: dict[str, list[Collective]] = {}
    for case, rows in frame.groupby("case", sort=False):
        rows = rows.sort_values("seq", key=lambda c: c.astype(int))
        out[str(case)] = [Collective(
            op=r["op"], group=r["group"], phase=r["phase"], unit=r["unit"], dtype=r["dtype"],
            in_numel=int(r["in_numel"]), out_numel=int(r["out_numel"]),
            element_bytes=int(r["element_bytes"]), micro_step=int(r["micro_step"]))
            for _, r in rows.iterrows()]
    return out
