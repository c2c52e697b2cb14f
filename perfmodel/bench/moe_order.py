"""The recorded collective order of an expert-parallel MoE step (issue 26): the cases and the
dataset's format (no torch here; `perfmodel.bench.moe_record` records them).

Claim: catalogs/profiles/data/moe-orders.csv lists, in issue order, every collective rank 0 of a
real gloo job issues in one training step (after a warm-up step) of
`perfmodel.bench.moe.MoeTransformer` (`MOE_ORDER_SPEC`) under expert parallelism ep = 2 (on 2
ranks, and on 4 ranks where the experts are also FSDP-sharded over 2): per MoE
layer the dispatch and combine all-to-alls (`group` "ep") in forward and their reverses in
backward (and again in the recompute of a fully checkpointed block), FSDP2's all-gathers and
reduce-scatters of the dense units (`group` "dp_shard", units block{i} and root) and of the
experts' own units (`group` "efsdp", unit block{i}.experts), with phase, micro-step, dtype and
element counts; both ranks issue the same sequence (checked when recording).
Why: the performance model's EP plan (all-to-all per MoE layer, expert FSDP) is compared with
it: the simulator's typed plan (`perfmodel.sim.fsdp.step_plan` with the model's `moe_layers`;
`MoeRun.layout_run` is the same step as a layout) lists, per stream, the same collectives in
the same order, each in the same micro-step, phase, unit, group and dtype and moving the same
bytes (`perfmodel.bench.layout_order.simulated_collectives` against `by_stream(records, ep)`).
Where the two legitimately differ, the comparison says how: (1) streams are compared apart
(as for dense layouts): the simulator runs the all-to-alls inline on the compute stream and
FSDP2's collectives on the communication stream, so their interleaving is the schedule's, not
the CPU's issue order (the experts' all-gather is recorded after the dispatch, when FSDP2
reaches the experts' pre-forward; the plan issues it with the block's, prefetched); (2) an
all-to-all's size is what the rank sends to the other ranks (the recorded buffer times
(ep - 1)/ep; the capacity C = ceil(T k / E x factor) of every case here is exact, so no
rounding); (3) an expert FSDP group of one rank (ep = world) issues nothing, and its planned
zero-duration tasks are left out; (4) the planner's step costs keep the mean block (each
block s = MoE layers / layers times the all-to-alls): the order test types the blocks.
Checked by: tests/test_moe_order.py (the file is what the recording command writes: a live
re-record of a case compared row by row; every case against the simulator, and plans with a
wrong MoE layer, ep or expert unit shown to differ).

The dataset has the columns of layout-orders.csv (`perfmodel.bench.layout_order.COLUMNS`) plus
`ep` and `capacity_factor` after `seq_len`; `perfmodel.bench.layout_order.read_orders` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from perfmodel.bench.layout_order import COLUMNS as LAYOUT_ORDER_COLUMNS
from perfmodel.bench.layout_order import LayoutRun
from perfmodel.spec.arch import ModelSpec, MoeSpec
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe

MOE_ORDER_SPEC = ModelSpec(
    name="moe-order-2", family="mixtral", hidden_size=32, num_layers=2, num_heads=4,
    num_kv_heads=2, intermediate_size=64, vocab_size=128,
    moe=MoeSpec(num_experts=4, experts_per_token=2, expert_intermediate_size=48,
                moe_layers=(1,)))
"""A 2-block model whose second block is an MoE layer (4 experts, top-2): a dense block and an
MoE block in one step, at shapes every case divides."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeRun:
    """One recorded training step of an expert-parallel MoE model."""

    recipe: TrainingRecipe
    """Mixed precision, checkpointing, accumulation (FSDP2 over all ranks)."""
    ep: int
    """Expert-parallel degree (divides the world size and the experts)."""
    capacity_factor: float = 1.0
    """Fixed-capacity routing's factor (`perfmodel.bench.moe`)."""
    accum_steps: int = 1
    """Micro-steps k."""
    micro_batch: int = 2
    """Sequences per rank per micro-step."""
    seq_len: int = 16
    """Tokens per sequence."""

    def layout_run(self) -> LayoutRun:
        """The same step as the simulator plans it: `ep` on the recipe's layout (dp_shard the
        ranks), the fixed capacity as the recipe's `moe_capacity_factor`."""
        recipe = replace(self.recipe, parallel=ParallelLayout(ep=self.ep),
                         moe_capacity_factor=self.capacity_factor)
        return LayoutRun(recipe=recipe, accum_steps=self.accum_steps,
                         micro_batch=self.micro_batch, seq_len=self.seq_len)


def _run(ep: int, accum_steps: int = 1, **overrides: str) -> MoeRun:
    return MoeRun(recipe=replace(DEFAULT_RECIPE.with_overrides(**overrides)), ep=ep,
                  accum_steps=accum_steps)


RECORDED_MOE_CASES: dict[str, tuple[int, MoeRun]] = {
    # 2 ranks, ep 2: experts split 2 + 2, each expert unit on a one-rank efsdp group
    "ep2": (2, _run(2, ac="none")),
    "ep2-full-k2": (2, _run(2, 2, ac="full")),
    "ep2-no-sync-k2": (2, _run(2, 2, ac="none", accum_mode="no_sync")),
    # 4 ranks, ep 2: each expert unit FSDP-sharded over a two-rank efsdp group
    "ep2-efsdp2": (4, _run(2, ac="none")),
}
"""name -> (ranks, run) of every case in catalogs/profiles/data/moe-orders.csv."""

COLUMNS = (*LAYOUT_ORDER_COLUMNS[:LAYOUT_ORDER_COLUMNS.index("seq")], "ep", "capacity_factor",
           *LAYOUT_ORDER_COLUMNS[LAYOUT_ORDER_COLUMNS.index("seq"):])
"""layout-orders.csv's columns with `ep` and `capacity_factor`."""
