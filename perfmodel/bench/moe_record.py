"""Record the collectives of a real expert-parallel MoE training step (gloo, CPU): issue 26.

Claim: `record_moe_cases` writes, for each `perfmodel.bench.moe_order.RECORDED_MOE_CASES`
case, the collectives rank 0 of a real gloo job issues in one step (after a warm-up step) in
issue order, and refuses a case whose ranks issued different sequences.
Why: the ground truth of the EP collective order (`perfmodel.bench.moe_order` says what it
contains).
Checked by: tests/test_moe_order.py (a live re-record of a case equals the shipped rows).

The recorder is `perfmodel.bench.layout_record.CollectiveRecorder` (one home) with two changes
to how a collective's `group` is named. On 2 ranks the dense FSDP mesh (dp_shard) and the EP
dimension both span the world, and DeviceMesh runs both on the world's process group, so member
ranks (the recorder's rule) and even the process group cannot tell them apart. So an FSDP2
collective (one issued while `attach_unit_names` has set its unit) is named by the mesh its unit
was sharded over (`shard_moe_with_recipe`: block{i}.experts on efsdp when ep > 1, every other
unit on dp_shard), and any other collective by its process group's name on the sparse mesh
(ep, efsdp); a group of neither falls back to the member-rank lookup.
Generating command: `python -m perfmodel.bench.moe_record -o catalogs/profiles/data/moe-orders.csv`
(appends; a rerun records only the cases not yet in the file).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch.distributed as dist

from perfmodel.bench.common import resolve_dtype
from perfmodel.bench.layout_order import Collective
from perfmodel.bench.layout_record import (
    CollectiveRecorder,
    gloo_collectives,
    record_main,
    record_to_csv,
    record_warm_step,
)
from perfmodel.bench.model import random_tokens
from perfmodel.bench.moe import (
    DENSE_DIM,
    SPARSE_DIMS,
    build_moe_model,
    moe_blocks,
    moe_meshes,
    shard_experts,
    shard_moe_with_recipe,
)
from perfmodel.bench.moe_order import COLUMNS, MOE_ORDER_SPEC, RECORDED_MOE_CASES
from perfmodel.bench.recipe_wrap import make_optimizer
from perfmodel.profiles.fsdp_compare import recipe_cell

logger = logging.getLogger(__name__)


class GroupNameRecorder(CollectiveRecorder):  # type: ignore[no-untyped-call]  # untyped torch
    """`CollectiveRecorder` naming each collective's group by its process-group name (module
    docstring); a group it does not know falls back to the member-rank lookup."""

    def __init__(self, names: dict[str, str], unit_groups: dict[str, str],
                 optimizer: Any = None) -> None:
        super().__init__({}, optimizer)
        self.names_by_group = dict(names)
        """{process-group name: mesh dimension} of the non-FSDP collectives."""
        self.unit_groups = dict(unit_groups)
        """{FSDP unit: mesh dimension it is sharded over} (default dp_shard)."""

    def _group(self, func: Any, bound: dict[str, Any]) -> str:
        if self.fsdp_unit is not None:
            return self.unit_groups.get(self.fsdp_unit, DENSE_DIM)
        name = None
        if "process_group" in bound:
            name = dist.ProcessGroup.unbox(bound["process_group"]).group_name
        elif "group_name" in bound:
            name = bound["group_name"]
        if name in self.names_by_group:
            return self.names_by_group[name]
        return super()._group(func, bound)


def group_names(sparse_mesh: Any) -> dict[str, str]:
    """{process-group name: mesh dimension} of the sparse mesh's dimensions."""
    return {sparse_mesh.get_group(dim).group_name: dim for dim in SPARSE_DIMS}


def _moe_job(rank: int, world_size: int, names: list[str]) -> list[list[Collective]]:
    """One rank: per named case, build and shard the MoE model, train a warm-up step, then
    record one step (`record_warm_step`)."""
    results = []
    for name in names:
        run = RECORDED_MOE_CASES[name][1]
        recipe = run.recipe
        dense, sparse = moe_meshes(world_size, run.ep)
        model = build_moe_model(MOE_ORDER_SPEC, capacity_factor=run.capacity_factor,
                                dtype=resolve_dtype(recipe.master_dtype), seed=0)
        shard_experts(model, sparse)
        shard_moe_with_recipe(model, recipe, dense_mesh=dense, sparse_mesh=sparse)
        optimizer = make_optimizer(model, recipe)
        tokens = random_tokens(MOE_ORDER_SPEC, run.micro_batch, run.seq_len, seed=rank)
        expert_units = {id(block.experts): f"block{i}.experts"
                        for i, block in moe_blocks(model) if run.ep > 1}
        results.append(record_warm_step(
            model, optimizer, tokens, recipe=recipe, accum_steps=run.accum_steps,
            extra_units=expert_units,
            make_recorder=partial(GroupNameRecorder, group_names(sparse),
                                  {unit: SPARSE_DIMS[0] for unit in expert_units.values()},
                                  optimizer)))
    return results


def record_moe_orders(names: Sequence[str], world_size: int) -> list[list[list[Collective]]]:
    """Every rank's collectives of one recorded step per named case, from one real
    `world_size`-rank gloo job: result[rank][case] in issue order."""
    return gloo_collectives(_moe_job, (list(names),), world_size)


def _case_fields(name: str) -> dict[str, Any]:
    world, run = RECORDED_MOE_CASES[name]
    return {"case": name, "world_size": world, "recipe": recipe_cell(run.recipe),
            "accum_steps": run.accum_steps, "micro_batch": run.micro_batch,
            "seq_len": run.seq_len, "ep": run.ep, "capacity_factor": run.capacity_factor}


def record_moe_cases(names: Sequence[str], out_path: str | Path) -> dict[str, int]:
    """Record the named cases (one gloo job per world size) into `out_path` (cases already in
    it are skipped); ValueError if the ranks of a case issued different sequences."""
    return record_to_csv(out_path, names, cases=RECORDED_MOE_CASES, columns=COLUMNS,
                         record=record_moe_orders,
                         case_fields=_case_fields, benchmark="moe-orders")


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m perfmodel.bench.moe_record -o catalogs/profiles/data/moe-orders.csv`"""
    record_main(argv, description="Record the collectives of real expert-parallel MoE steps "
                "(gloo, CPU).", cases=RECORDED_MOE_CASES,
                record_cases=record_moe_cases)


if __name__ == "__main__":
    main()
