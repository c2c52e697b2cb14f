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

import argparse
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from perfmodel.bench.common import CsvLog, resolve_dtype
from perfmodel.bench.environment import append_environment, environment_record
from perfmodel.bench.layout_order import Collective
from perfmodel.bench.layout_record import CollectiveRecorder, attach_unit_names
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
from perfmodel.bench.moe_order import COLUMNS, MOE_ORDER_SPEC, RECORDED_MOE_CASES, MoeRun
from perfmodel.bench.recipe_wrap import make_optimizer, train_step
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


def _train_and_record(rank: int, world_size: int, run: MoeRun) -> list[Collective]:
    recipe = run.recipe
    dense, sparse = moe_meshes(world_size, run.ep)
    model = build_moe_model(MOE_ORDER_SPEC, capacity_factor=run.capacity_factor,
                            dtype=resolve_dtype(recipe.master_dtype), seed=0)
    shard_experts(model, sparse)
    shard_moe_with_recipe(model, recipe, dense_mesh=dense, sparse_mesh=sparse)
    optimizer = make_optimizer(model, recipe)
    tokens = random_tokens(MOE_ORDER_SPEC, run.micro_batch, run.seq_len, seed=rank)
    train_step(model, optimizer, tokens, accum_steps=run.accum_steps, recipe=recipe)
    expert_units = {id(block.experts): f"block{i}.experts"
                    for i, block in moe_blocks(model) if run.ep > 1}
    recorder = GroupNameRecorder(group_names(sparse),
                                 {unit: SPARSE_DIMS[0] for unit in expert_units.values()},
                                 optimizer)
    attach_unit_names(model, recorder, expert_units)
    micro = [-1]

    def advance() -> None:
        micro[0] += 1
        recorder.micro_step = micro[0]

    with recorder:
        train_step(model, optimizer, tokens, accum_steps=run.accum_steps, recipe=recipe,
                   before_micro_step=advance)
    return recorder.records


def _worker(rank: int, world_size: int, store: str, names: list[str], out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world_size)
    try:
        results = [[asdict(r) for r in _train_and_record(rank, world_size,
                                                         RECORDED_MOE_CASES[n][1])]
                   for n in names]
        gathered: list[Any] = [None] * world_size
        dist.all_gather_object(gathered, results)
        if rank == 0:
            Path(out).write_text(json.dumps(gathered))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def record_moe_orders(names: Sequence[str], world_size: int) -> list[list[list[Collective]]]:
    """Every rank's collectives of one recorded step per named case, from one real
    `world_size`-rank gloo job: result[rank][case] in issue order."""
    # lazy: torch's process launcher, only for this job
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "records.json")
        mp.spawn(  # type: ignore[attr-defined,no-untyped-call]  # untyped torch API
            _worker, args=(world_size, os.path.join(tmp, "store"), list(names), out),
            nprocs=world_size, join=True)
        raw = json.loads(Path(out).read_text())
    return [[[Collective(**r) for r in case] for case in ranks] for ranks in raw]


def case_rows(name: str, records: Sequence[Collective]) -> list[dict[str, Any]]:
    """The dataset rows of one case's rank-0 records."""
    world, run = RECORDED_MOE_CASES[name]
    return [{"case": name, "world_size": world, "recipe": recipe_cell(run.recipe),
             "accum_steps": run.accum_steps, "micro_batch": run.micro_batch,
             "seq_len": run.seq_len, "ep": run.ep, "capacity_factor": run.capacity_factor,
             "seq": seq, **asdict(record), "torch_version": torch.__version__}
            for seq, record in enumerate(records)]


def record_moe_cases(names: Sequence[str], out_path: str | Path) -> dict[str, int]:
    """Record the named cases (one gloo job per world size) into `out_path` (cases already in
    it are skipped); ValueError if the ranks of a case issued different sequences."""
    log = CsvLog(out_path, COLUMNS, ("case", "seq"))
    done = {row["case"] for row in log.rows()}
    todo = [n for n in names if n not in done]
    append_environment(out_path, environment_record(
        device="cpu", threads=1, extra={"benchmark": "moe-orders", "backend": "gloo"}))
    for world in sorted({RECORDED_MOE_CASES[n][0] for n in todo}):
        cases = [n for n in todo if RECORDED_MOE_CASES[n][0] == world]
        recorded = record_moe_orders(cases, world)
        for i, name in enumerate(cases):
            ranks = [per_rank[i] for per_rank in recorded]
            if any(r != ranks[0] for r in ranks):
                raise ValueError(f"{name}: the {world} ranks issued different collectives")
            log.append(case_rows(name, ranks[0]))
            logger.info("%s: %d collectives on each of %d ranks", name, len(ranks[0]), world)
    return {"recorded": len(todo), "skipped": len(names) - len(todo)}


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m perfmodel.bench.moe_record -o catalogs/profiles/data/moe-orders.csv`"""
    parser = argparse.ArgumentParser(description="Record the collectives of real expert-"
                                     "parallel MoE steps (gloo, CPU).")
    parser.add_argument("-o", "--out", required=True, help="CSV (appended; rerun resumes)")
    parser.add_argument("--cases", default=",".join(RECORDED_MOE_CASES),
                        help="comma-separated case names (default: all)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    names = [n for n in args.cases.split(",") if n]
    unknown = [n for n in names if n not in RECORDED_MOE_CASES]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; known: {', '.join(RECORDED_MOE_CASES)}")
    counts = record_moe_cases(names, args.out)
    logger.info("%s: %d cases recorded, %d already there", args.out, counts["recorded"],
                counts["skipped"])


if __name__ == "__main__":
    main()
