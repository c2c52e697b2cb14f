"""The recorded step of a pipeline of MoE stages (FSDP2 + expert parallelism inside each stage):
the cases and the dataset's format (no torch here; `perfmodel.bench.pp_moe_record` records
them).

Claim: catalogs/profiles/data/pp-moe-order.csv lists, per rank and in issue order, every
collective and point-to-point operation each of the 4 ranks of a real gloo job (torchrun)
issues in one training step (after a warm-up step) of `perfmodel.bench.moe.MoeTransformer`
(`PP_MOE_SPEC`: block 0 dense, block 1 an MoE layer) split into pp = 2 stages
(torch.distributed.pipelining, ScheduleGPipe and Schedule1F1B) on a (pp 2, dp_shard 2) mesh,
with expert parallelism ep = 2 borrowing the dp_shard ranks of each stage (the experts' FSDP
group, efsdp = dp_shard / ep, is one rank) and FSDP2 applied per stage as torchtitan does
under PP (each block its own unit, an MoE layer's routed experts a unit of their own over
efsdp, the stage module the root unit; no resharding after forward). Each row gives op
(all_gather, reduce_scatter, all_to_all, send, recv), the group (dp_shard, efsdp, ep, pp), the
pass that issued it (`stage`, `action` F / B / REDUCE (torch's `perform_reduce_grad`, after the
stage's last backward) / OPTIMIZER, `micro`), the FSDP unit or block, dtype and element
counts.
Why: the pipeline simulator (`perfmodel.sim.pipeline`) is compared with it:
`pipeline_collectives` lists, per rank and stream, the same collectives in the same order with
the same group, bytes and dtype (tests/test_pp_moe_order.py).
The same cases recorded on torch's fake process group (`source` fake: one process plays each
rank in turn; a rank's order does not depend on timing, as `perfmodel.bench.pipeline_order`
says) must equal the gloo rows, and extend them to pp 2 x dp_shard 4 (8 ranks), where the MoE
layer's experts are FSDP-sharded over efsdp = 2 ranks (their all-gather after the block's,
their reduce-scatter after the block's in `perform_reduce_grad`).
Checked by: tests/test_pp_moe_order.py (the shipped file against the simulator for every
case, fake against gloo, and a live re-record of one case against the shipped rows).

Generating command:
`python -m perfmodel.bench.pp_moe_record -o catalogs/profiles/data/pp-moe-order.csv`
(launches torchrun with 4 gloo ranks; appends; a rerun records only the cases not yet there).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from perfmodel.bench.moe_order import MOE_ORDER_SPEC
from perfmodel.spec.errors import DatasetError, UserInputError
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe

PP_MOE_SPEC = MOE_ORDER_SPEC
"""2 blocks, the second an MoE layer (4 experts, top-2): with pp 2 the first stage holds the
embedding and a dense block, the second an MoE block and the LM head."""
PP_MOE_WORLD = 4
"""Ranks of the recorded gloo job: pp 2 x dp_shard 2."""
PP_MOE_RECIPE = DEFAULT_RECIPE.with_overrides(ac="none")
"""torchtitan's recipe (bf16 parameters, fp32 reduction) without checkpointing."""
SOURCES = ("gloo", "fake")
"""How a case is recorded (`PpMoeCase.source`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PpMoeCase:
    """One recorded pipeline step."""

    schedule: str
    """gpipe or 1f1b."""
    micro_batches: int
    """Micro-batches k per step."""
    pp: int = 2
    """Pipeline ranks."""
    dp_shard: int = 2
    """FSDP ranks per stage (ep borrows them)."""
    ep: int = 2
    """Expert-parallel degree."""
    micro_batch: int = 2
    """Sequences per micro-batch."""
    seq_len: int = 16
    """Tokens per sequence."""
    capacity_factor: float = 1.0
    """Fixed-capacity routing's factor (`perfmodel.bench.moe`)."""
    source: str = "gloo"
    """gloo (real processes under torchrun) or fake (torch's fake process group: one process
    plays each rank in turn, every collective and transfer a no-op of the real shapes)."""

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise UserInputError(f"unknown recording source {self.source!r}",
                                 hint=f"use one of {', '.join(SOURCES)}.")

    @property
    def world_size(self) -> int:
        return self.pp * self.dp_shard

    @property
    def name(self) -> str:
        prefix = "fake-" if self.source == "fake" else ""
        suffix = f"-dp{self.dp_shard}" if self.dp_shard != 2 else ""
        return f"{prefix}{self.schedule}-k{self.micro_batches}{suffix}"

    def recipe(self) -> TrainingRecipe:
        """The recipe the simulator plans the case with: `PP_MOE_RECIPE` on this layout."""
        layout = ParallelLayout(pp=self.pp, dp_shard=self.dp_shard, ep=self.ep,
                                pp_schedule=self.schedule)
        return replace(PP_MOE_RECIPE, parallel=layout,
                       moe_capacity_factor=self.capacity_factor)


_GLOO = tuple(PpMoeCase(schedule=s, micro_batches=k) for s in ("gpipe", "1f1b") for k in (2, 4))
RECORDED_PP_MOE_CASES: dict[str, PpMoeCase] = {c.name: c for c in (
    *_GLOO, *(replace(c, source="fake") for c in _GLOO),
    *(PpMoeCase(schedule=s, micro_batches=k, dp_shard=4, source="fake")
      for s, k in (("gpipe", 2), ("1f1b", 4))))}
"""name -> case of every case in catalogs/profiles/data/pp-moe-order.csv: on 4 real gloo
processes (torchrun) pp 2 x dp_shard 2, ep 2 (efsdp 1), GPipe and 1F1B, k 2 and 4; the same
on the fake process group (the two must agree: tests/test_pp_moe_order.py), and pp 2 x
dp_shard 4 with ep 2 on the fake group only (8 ranks: the experts' units FSDP-sharded over
efsdp 2, which 4 ranks cannot show)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PpMoeRecord:
    """One collective or point-to-point operation a rank issued, in its order."""

    case: str
    """`PpMoeCase.name`."""
    rank: int
    """Global rank (pp outermost: rank // dp_shard is the pipeline rank)."""
    seq: int
    """Position in the rank's sequence (0-based)."""
    op: str
    """all_gather, reduce_scatter, all_to_all, all_reduce, send or recv."""
    group: str
    """Mesh dimension: dp_shard (dense FSDP units), efsdp (the experts' units), ep, pp."""
    stage: int
    """Global stage of the pass that issued it (-1: none, e.g. the optimizer)."""
    action: str
    """F, B (a pass of micro-batch `micro`), REDUCE (`perform_reduce_grad`, after the stage's
    last backward), OPTIMIZER, or P2P_F / P2P_B for a transfer torch posts between passes
    (its `micro` is the transfer's)."""
    micro: int
    """Micro-batch (-1 for REDUCE and OPTIMIZER)."""
    unit: str
    """FSDP unit of an FSDP collective (root, block{i}, block{i}.experts), else the block
    whose module was active (root outside blocks)."""
    peer: int
    """Other end of a send / recv (-1 otherwise)."""
    dtype: str
    """Element type (fp32, bf16, ...)."""
    in_numel: int
    """Elements this rank contributes (sends)."""
    out_numel: int
    """Elements this rank receives."""
    element_bytes: int
    """Bytes per element."""

    @property
    def payload_bytes(self) -> int:
        """The unsharded side (all-gather output, reduce-scatter input); a transfer's tensor;
        an all-to-all's whole buffer."""
        return max(self.in_numel, self.out_numel) * self.element_bytes


CASE_COLUMNS = ("source", "schedule", "micro_batches", "pp", "dp_shard", "ep", "micro_batch",
                "seq_len", "capacity_factor")
COLUMNS = ("case", *CASE_COLUMNS, *(f.name for f in fields(PpMoeRecord) if f.name != "case"),
           "torch_version")
"""One row per operation of every rank's recorded step."""
_INT = ("rank", "seq", "stage", "micro", "peer", "in_numel", "out_numel", "element_bytes")


def case_fields(case: PpMoeCase) -> dict[str, Any]:
    """The case's columns of a row."""
    return {"case": case.name, "source": case.source, "schedule": case.schedule,
            "micro_batches": case.micro_batches,
            "pp": case.pp, "dp_shard": case.dp_shard, "ep": case.ep,
            "micro_batch": case.micro_batch, "seq_len": case.seq_len,
            "capacity_factor": case.capacity_factor}


def read_pp_moe_orders(path: str | Path) -> dict[str, dict[int, list[PpMoeRecord]]]:
    """case -> rank -> records in issue order, from the dataset (no torch needed)."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{p}: no such file",
                           hint="record it with `python -m perfmodel.bench.pp_moe_record -o "
                                f"{p}`.")
    out: dict[str, dict[int, list[PpMoeRecord]]] = {}
    names = {f.name for f in fields(PpMoeRecord)}
    with p.open(newline="") as fh:
        for raw in csv.DictReader(fh):
            values: dict[str, Any] = {k: (int(v) if k in _INT else v) for k, v in raw.items()
                                      if k in names}
            record = PpMoeRecord(**values)
            out.setdefault(record.case, {}).setdefault(record.rank, []).append(record)
    for ranks in out.values():
        for rank, rows in ranks.items():
            rows.sort(key=lambda r: r.seq)
            if [r.seq for r in rows] != list(range(len(rows))):
                raise DatasetError(f"{p}: rank {rank} of case {rows[0].case} has gaps in seq",
                                   hint="record the case again (delete its rows first).")
    return out
