"""The step graph of a pipeline-parallel layout (pp > 1): stages, schedules and their bubbles,
point-to-point transfers, FSDP / TP inside each stage (DESIGN §2 "Parallel layouts").

Ranks. Every data-parallel, tensor- and context-parallel replica of a pipeline rank runs the same
work, so the graph holds one representative GPU per pipeline rank r (trace process `pp r`), each
with three streams: `compute` (its stages' forward and backward passes and the tensor-, context-
and expert-parallel collectives inline on them, as `perfmodel.sim.fsdp` runs them), `comm` (FSDP
all-gathers, reduce-scatters and HSDP all-reduces) and `p2p` (the sends to the neighbouring
stages).

Claim, per optimizer step of k micro-batches:
  * compute order: rank r runs exactly `perfmodel.spec.pipeline.rank_order` (torch 2.13's executed
    order of ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B); the warm-up and cool-down
    bubbles are the waits this order imposes, explicit as idle compute in the graph and the
    trace;
  * F(s, m) waits for the forward transfer of micro-batch m from stage s - 1; B(s, m) waits for
    the backward transfer from stage s + 1 (the last stage's backward follows its own forward:
    the loss runs on it); a transfer of micro-batch m leaves on the sender's p2p stream after the
    pass that produced it, taking α + D/B on the link the boundary spans (`perfmodel.spec.layout`
    placement of the pp dimension), with D = micro-batch x local sequence x hidden in the
    parameter dtype, divided by tp under sequence parallelism (each TP rank sends its shard);
  * FSDP inside the stages as torchtitan runs it under PP: parameters are not resharded after
    forward, so each FSDP unit's all-gather runs once per step, in the stage's first forward:
    the stage's share of the root unit first (the embedding on the first stage, final norm and
    LM head on the last), then each block's before its first forward (prefetched in order while
    earlier blocks compute); the gradients are reduce-scattered once, after the stage's whole
    last backward (torch 2.13 runs every backward with gradient sync off and then
    `perform_reduce_grad`: every unit's post-backward, root first, then the blocks in order),
    each then all-reduced across HSDP replicas; each rank's optimizer step follows its
    reduce-scatters; the step ends when the last rank's optimizer does.
    Why: torch.distributed.pipelining's `backward_maybe_with_nosync` / `perform_reduce_grad`.
    Checked by: tests/test_pp_moe_order.py (a recorded 4-rank gloo run: the all-gathers in the
    first forward, the reduce-scatters after the last backward, root first; before it the model
    reduce-scattered each block right after its part of the last backward, which torch does
    not do);
  * mixture of experts (tp = 1, ep >= 1 borrowing dp_shard ranks inside each stage): each
    block carries its own kind by global index (`block_kinds`: `ModelSpec.is_moe_layer`, so
    first_k_dense and MoE frequency), costed as a block of a model of that kind only
    (`kind_model`): an MoE block's compute, its dispatch and combine all-to-alls inline on the
    compute stream over the stage's ep group (`ParallelLayout.ep_groups`), its dense part's
    FSDP collectives over the stage's FSDP group and its experts' over the expert FSDP group;
    a dense block none of the MoE costs. A stage's costs are the sums over its blocks, so an
    uneven split (dense blocks on one stage, MoE blocks on another) prices each stage as it is
    (the pp = 1 mean block would price them alike), and the worst stage is the right one;
    `pipeline_collectives` lists, per rank, every collective and transfer the plan issues,
    unit by unit, from the same rules.
    Why: torchtitan's EP inside a pipeline stage (the MoE layers of the stage's blocks, their
    experts sharded over efsdp = dp_shard / ep ranks).
    Checked by: tests/test_pp_moe_order.py (the simulator's collectives and transfers per rank
    and stream equal a recorded gloo run of a dense and an MoE stage under GPipe and 1F1B, in
    op, group, pass, unit, peer, dtype and bytes; a mean-block plan, a wrong MoE layer, ep 1
    and the wrong schedule differ) and tests/test_pipeline.py (per-kind stage costs; fast path
    == graph and the affine form with MoE stages);
  * contention (the profile's overlap slowdown) slows a rank's compute while its FSDP
    collectives run, as in the FSDP graph; the point-to-point transfers do not count: one
    micro-batch's activations are small next to a stage's collectives, and they sit on their
    own trace track (`pp r p2p`) so that each rank has a single communication stream, the case
    the contention rule is exact for;
  * stage durations: its n blocks' per-rank block costs, each of its kind
    (`fsdp.layout_unit_durations` of `kind_model`: tp/cp shard compute, inline collectives,
    group-placed FSDP collectives), the root unit's
    forward and backward (embedding, final norm, LM head, loss) on the last stage and its inline
    collectives split as in the FSDP graph (embedding ones on stage 0); under layer:N the blocks
    checkpointed whole pay their whole recompute.
Why this and not a closed form: uneven stages (the last one carries the LM head), the p2p
latency and the FSDP collectives make the bubble depend on which stage is slowest and where; the
graph takes the real dependency structure, and its worst stage is reported by name.

Affine form: for k >= pp (1F1B) the per-rank orders repeat a steady (F, B) pattern, so T(k) =
fixed + k·per_micro_batch once the pipeline is full; `pipeline_decomposition` takes the two from
the graph at k = pp and 2·pp (`affine_points`) and tests/test_pipeline.py checks T(k) against the
graph for k up to 8·pp: exact to rounding where the slowest stage paces the steady state and
every micro-batch adds the same time, which holds for GPipe, 1F1B and interleaved 1F1B on the
tested layouts; where it does not (a p2p link slower than a stage's compute can leave a
transient), the test's tolerance names it.
Many micro-batches: `simulate_pipeline_step` simulates the graph at four micro-batch counts a
turn of the pipeline apart past the steady point and extends the step in closed form to any
larger k on their line (a step of 100,000 micro-batches costs four small graphs); the memory
model does the same at consecutive counts (`perfmodel.spec.pipeline.closed_form_accums`; checked
by tests/test_pipeline_closed_form.py). The two-point affine form below is read a round of pp
micro-batches apart (`affine_points`): exact where every micro-batch adds the same time, and at
every multiple of pp where the step repeats every pp micro-batches instead (elsewhere within
that repetition's spread).
Checked by: tests/test_pipeline.py (graph order == rank_order per rank; bubble of uniform stages
== (pp - 1)·(F + B) for GPipe and 1F1B without communication; fast path == graph; affine form,
dense and MoE; per-kind stage costs; worst stage; 405B at pp 16), tests/test_pp_moe_order.py
(collectives and transfers per rank against a recorded gloo run).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from perfmodel.costs.features import RankShard, local_model
from perfmodel.costs.model import CostModel
from perfmodel.sim.fsdp import (
    StepResult,
    _layout_of,
    check_slowdown,
    inline_collectives,
    inline_payload_bytes,
    layout_unit_durations,
    resolve_recipe,
)
from perfmodel.sim.graph import COMPUTE_KINDS, Schedule, TaskGraph, contention_delay
from perfmodel.spec import pipeline
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.formulas import dtype_bytes
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import ParallelLayout, place_group
from perfmodel.spec.pipeline import (
    Action,
    check_schedule,
    rank_order,
    stage_blocks,
    stage_of_rank,
)
from perfmodel.spec.recipe import TrainingRecipe

logger = logging.getLogger(__name__)

STREAMS = ("compute", "comm", "p2p")
"""Streams of one pipeline rank."""

STAGE_COSTS = ("forward_s", "backward_s", "forward_inline_s", "backward_inline_s",
               "all_gather_s", "reduce_scatter_s", "replicate_s", "root_all_gather_s",
               "root_reduce_scatter_s", "root_replicate_s")
"""Per-stage durations (each a float, or an (N,) array in the fast path)."""
PART_TOTALS = {"block_forward_s": "forward_s", "block_all_gather_s": "all_gather_s",
               "block_reduce_scatter_s": "reduce_scatter_s",
               "block_replicate_s": "replicate_s"}
"""Per-block durations of a stage (`StageCosts.part_s`) and the stage total each splits."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StageCosts:
    """Durations of one pipeline stage on one of its ranks."""

    stage: int
    """Global stage index (0: the embedding side)."""
    first_block: int
    """Global index of the stage's first block."""
    num_blocks: int
    """Blocks the stage holds."""
    forward_s: Any
    """Compute of one micro-batch's forward through the stage."""
    backward_s: Any
    """Compute of its backward (recompute included)."""
    forward_inline_s: Any
    """Tensor/context-parallel collectives inline on the compute stream in forward."""
    backward_inline_s: Any
    """The same in backward."""
    all_gather_s: Any
    """FSDP all-gathers of the stage's units (once per step)."""
    reduce_scatter_s: Any
    """FSDP reduce-scatters of its gradients (once per step)."""
    replicate_s: Any
    """HSDP all-reduces of its gradient shards across the replicas (0 without HSDP)."""
    root_all_gather_s: Any = 0.0
    """The part of `all_gather_s` that gathers the stage's share of the root unit (the
    embedding on the first stage, final norm and LM head on the last; 0 elsewhere)."""
    root_reduce_scatter_s: Any = 0.0
    """The part of `reduce_scatter_s` that reduces it."""
    root_replicate_s: Any = 0.0
    """The part of `replicate_s` that all-reduces its shard across the replicas."""
    block_forward_s: tuple[Any, ...] = ()
    """Per block of the stage (in order): its forward, the last block's with the root unit's
    on the last stage (summing to `forward_s`); empty: `forward_s` split evenly."""
    block_all_gather_s: tuple[Any, ...] = ()
    """Per block: its FSDP all-gathers (the dense part over the FSDP group, an MoE block's
    experts over the expert FSDP group); empty: `all_gather_s` less the root's, split evenly."""
    block_reduce_scatter_s: tuple[Any, ...] = ()
    """Per block: its reduce-scatters (as `block_all_gather_s`)."""
    block_replicate_s: tuple[Any, ...] = ()
    """Per block: its HSDP all-reduces (as `block_all_gather_s`)."""

    def part_s(self, name: str, block: int) -> Any:
        """Block `block`'s share of a PART_COSTS duration (the per-block tuple, or the stage's
        total less the root's, split evenly over its blocks)."""
        parts = getattr(self, name)
        if parts:
            return parts[block]
        total = getattr(self, PART_TOTALS[name])
        root = getattr(self, f"root_{PART_TOTALS[name]}") if name != "block_forward_s" else 0.0
        return (total - root) / self.num_blocks

    @property
    def label(self) -> str:
        last = self.first_block + self.num_blocks - 1
        return f"stage {self.stage} (blocks {self.first_block}-{last})"


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineCosts:
    """Everything one pipeline step's graph needs."""

    stages: tuple[StageCosts, ...]
    """Every global stage, in order."""
    p2p_s: Any
    """One activation (or gradient) transfer across a stage boundary."""
    optimizer_s: tuple[Any, ...]
    """Per pipeline rank: its optimizer step over its stages' parameter shards."""
    layout: ParallelLayout
    """The resolved layout (pp, virtual stages, schedule)."""
    overlap_slowdown: float = 1.0
    """Compute slows by this factor while a collective of the same GPU is in flight."""

    @property
    def pp(self) -> int:
        return self.layout.pp

    @property
    def blocks(self) -> tuple[int, ...]:
        """Blocks per stage (the parts a stage's first forward and last backward split into)."""
        return tuple(s.num_blocks for s in self.stages)

    def rank_of(self, stage: int) -> int:
        return stage % self.layout.pp

    def stage_time_s(self, stage: int) -> Any:
        """Forward + backward of one micro-batch through a stage, inline collectives included."""
        s = self.stages[stage]
        return s.forward_s + s.backward_s + s.forward_inline_s + s.backward_inline_s

    def rank_time_s(self, rank: int) -> Any:
        """One micro-batch through every stage of a rank (what paces a full pipeline)."""
        return sum(self.stage_time_s(s) for s in stage_of_rank(rank, self.pp,
                                                                  self.layout.virtual_stages))

    @property
    def worst_rank(self) -> int:
        """The rank whose stages take longest per micro-batch (the pace of the pipeline)."""
        times = [float(np.max(self.rank_time_s(r))) for r in range(self.pp)]
        return int(np.argmax(times))

    def worst_label(self) -> str:
        rank = self.worst_rank
        stages = ", ".join(self.stages[s].label
                           for s in stage_of_rank(rank, self.pp, self.layout.virtual_stages))
        return f"pipeline rank {rank}: {stages}"


@dataclass(frozen=True, kw_only=True, slots=True)
class PipeTask:
    """One task of a planned pipeline step (what `add_pipeline` adds and the fast path
    compiles)."""

    name: str
    rank: int
    """Pipeline rank whose GPU runs it."""
    stream: str
    """One of STREAMS."""
    kind: str
    """forward, backward, all_reduce (inline collectives), all_gather, reduce_scatter,
    send_recv or optimizer."""
    cost: tuple[str, int, int]
    """(STAGE_COSTS name, stage, 1), (PART_TOTALS name, stage, block: that block's part),
    ('p2p_s', -1, 1) or ('optimizer_s', rank, 1)."""
    deps: tuple[int, ...]
    """Earlier tasks this one waits for (besides its stream predecessor)."""
    micro: int = -1
    """Micro-batch of a pass, its inline collectives or a transfer (-1: once per step)."""

    @property
    def island(self) -> str:
        """Trace process: `pp r` for the rank's GPU, `pp r p2p` for its sends (module doc:
        transfers do not contend with compute)."""
        return f"pp {self.rank}" + (" p2p" if self.stream == "p2p" else "")


@lru_cache(maxsize=128)
def pipeline_plan(layout: ParallelLayout, micro_batches: int, *, replicate: bool = False,
                  blocks: tuple[int, ...] | None = None) -> tuple[PipeTask, ...]:
    """The tasks of one pipeline step in an order that respects every dependency (module doc).

    The per-rank orders are merged round-robin: a rank adds its next action once the transfer
    it waits for has been added (the schedules are deadlock-free, tests/test_pipeline_spec.py).
    `blocks` (per stage; None: one part per stage) splits each stage's first forward into its
    blocks: FSDP gathers the stage's root-unit share (end stages) and then each block's
    parameters in order, the first block waiting for the root's and its own gather, every
    later block for its own (prefetched while earlier blocks compute). The stage's last
    backward runs whole; then (torch's `perform_reduce_grad`) every unit's reduce-scatter,
    root first, then the blocks in order, each followed by its HSDP all-reduce."""
    pp, v = layout.pp, layout.virtual_stages
    check_schedule(layout.pp_schedule, pp, v, micro_batches)
    stages = pp * v
    parts = blocks if blocks is not None else (1,) * stages
    orders = [list(rank_order(layout.pp_schedule, pp, v, micro_batches, r)) for r in range(pp)]
    tasks: list[PipeTask] = []
    sent: dict[tuple[int, str, int], int] = {}   # (receiving stage, pass, micro) -> transfer
    reduced: dict[int, list[int]] = {r: [] for r in range(pp)}

    def add(task: PipeTask) -> int:
        tasks.append(task)
        return len(tasks) - 1

    gathers: dict[int, list[int]] = {}          # stage -> its all-gathers (root first)
    ends = (0, stages - 1)                      # the stages holding a share of the root unit
    for r in range(pp):
        for s in stage_of_rank(r, pp, v):
            root = [add(PipeTask(name=f"AG stage {s} root", rank=r, stream="comm",
                                 kind="all_gather", cost=("root_all_gather_s", s, 1),
                                 deps=()))] if s in ends else []
            gathers[s] = root + [add(PipeTask(name=f"AG stage {s} block {j}", rank=r,
                                              stream="comm", kind="all_gather",
                                              cost=("block_all_gather_s", s, j), deps=()))
                                 for j in range(parts[s])]
    cursor = [0] * pp
    while any(cursor[r] < len(orders[r]) for r in range(pp)):
        moved = False
        for r in range(pp):
            while cursor[r] < len(orders[r]):
                a: Action = orders[r][cursor[r]]
                deps: list[int] = []
                if a.pass_ == "F":
                    if a.stage > 0:
                        key = (a.stage, "F", a.micro)
                        if key not in sent:
                            break
                        deps.append(sent[key])
                elif a.stage < stages - 1:
                    key = (a.stage, "B", a.micro)
                    if key not in sent:
                        break
                    deps.append(sent[key])
                forward = a.pass_ == "F"
                label = f"{'F' if forward else 'B'}{a.stage} m{a.micro}"
                cost = "forward_s" if forward else "backward_s"
                n = parts[a.stage]
                if forward and a.micro == 0:       # the first forward gathers block by block
                    first = len(gathers[a.stage]) - n   # the root's gather, if any, comes first
                    for j in range(n):
                        waits = gathers[a.stage][:first + 1] if j == 0 else \
                            [gathers[a.stage][first + j]]
                        add(PipeTask(name=f"{label} block {j}", rank=r, stream="compute",
                                     kind="forward", cost=("block_forward_s", a.stage, j),
                                     deps=tuple(deps if j == 0 else ()) + tuple(waits),
                                     micro=a.micro))
                elif not forward and a.micro == micro_batches - 1:
                    # the last backward runs whole; the reduce-scatters follow it (below)
                    add(PipeTask(name=label, rank=r, stream="compute", kind="backward",
                                 cost=(cost, a.stage, 1), deps=tuple(deps), micro=a.micro))
                else:
                    add(PipeTask(name=label, rank=r, stream="compute",
                                 kind="forward" if forward else "backward",
                                 cost=(cost, a.stage, 1), deps=tuple(deps), micro=a.micro))
                done = add(PipeTask(name=f"{label} inline", rank=r, stream="compute",
                                    kind="all_reduce",
                                    cost=("forward_inline_s" if forward else "backward_inline_s",
                                          a.stage, 1), deps=(), micro=a.micro))
                to = a.stage + 1 if forward else a.stage - 1
                if 0 <= to < stages:
                    sent[(to, a.pass_, a.micro)] = add(PipeTask(
                        name=f"send {'act' if forward else 'grad'} {a.stage}->{to} m{a.micro}",
                        rank=r, stream="p2p", kind="send_recv", cost=("p2p_s", -1, 1),
                        deps=(done,), micro=a.micro))
                if not forward and a.micro == micro_batches - 1:
                    # torch's perform_reduce_grad once the last backward (its inline
                    # collectives included) is done: every unit's reduce-scatter, root first,
                    # then the blocks in order, each with its HSDP all-reduce (module doc)
                    units: list[tuple[str, str, str, int]] = (
                        [("root", "root_reduce_scatter_s", "root_replicate_s", 1)]
                        if a.stage in ends else [])
                    units += [(f"block {j}", "block_reduce_scatter_s", "block_replicate_s", j)
                              for j in range(n)]
                    for unit, rs_cost, ar_cost, j in units:
                        rs = add(PipeTask(name=f"RS stage {a.stage} {unit}", rank=r,
                                          stream="comm", kind="reduce_scatter",
                                          cost=(rs_cost, a.stage, j), deps=(done,)))
                        if replicate:
                            rs = add(PipeTask(name=f"AR stage {a.stage} {unit} replicas",
                                              rank=r, stream="comm", kind="all_reduce",
                                              cost=(ar_cost, a.stage, j), deps=(rs,)))
                        reduced[r].append(rs)
                cursor[r] += 1
                moved = True
        if not moved:  # cannot happen for the schedules of spec.pipeline; guard against a bad one
            raise RuntimeError("pipeline orders deadlock: no rank can proceed")
    for r in range(pp):
        add(PipeTask(name="optimizer", rank=r, stream="compute", kind="optimizer",
                     cost=("optimizer_s", r, 1), deps=tuple(reduced[r])))
    return tuple(tasks)


def task_duration_s(costs: PipelineCosts, task: PipeTask) -> Any:
    """The duration of a planned task under `costs` (float or array)."""
    return _duration(costs, task.cost)


def _duration(costs: PipelineCosts, cost: tuple[str, int, int]) -> Any:
    name, index, part = cost
    if name == "p2p_s":
        return costs.p2p_s
    if name == "optimizer_s":
        return costs.optimizer_s[index]
    if name in PART_TOTALS:
        return costs.stages[index].part_s(name, part)
    return getattr(costs.stages[index], name)


# ---- durations ---------------------------------------------------------------------------------

def pipeline_costs(model: ModelSpec, profile: CostModel, island: IslandSpec, *, seq_len: int,
                   micro_batch: Any, recipe: TrainingRecipe | None = None,
                   ac: str | None = None) -> PipelineCosts:
    """Stage, transfer and optimizer durations of a pp > 1 layout on `island` (module doc)."""
    recipe = resolve_recipe(recipe, ac)
    layout = _layout_of(recipe, model, island, seq_len)
    if layout.pp < 2:
        raise UserInputError("a pipeline needs pp >= 2",
                             hint="simulate pp = 1 layouts with perfmodel.sim.fsdp.")
    check_slowdown(profile.overlap_slowdown)
    kinds = block_kinds(model)
    durations = {kind: layout_unit_durations(kind_model(model, kind), profile, island,
                                             seq_len=seq_len, micro_batch=micro_batch,
                                             recipe=recipe, layout=layout)
                 for kind in sorted(set(kinds))}
    root = durations[kinds[0]]        # the root unit's durations do not depend on the kind
    inline = {kind: {k: sum(v) if v else 0.0 for k, v in d.inline.items()}
              for kind, d in durations.items()}
    cuts = stage_blocks(model.num_layers, layout.pp, layout.virtual_stages)
    policy = recipe.checkpoint
    stages: list[StageCosts] = []
    first = 0
    for s, n in enumerate(cuts):
        last_stage, first_stage = s == len(cuts) - 1, s == 0
        forward: list[Any] = []
        backward: Any = 0.0
        f_inline: Any = 0.0
        b_inline: Any = 0.0
        gathers, scatters, replicas = [], [], []
        for i in range(first, first + n):
            d, inl = durations[kinds[i]], inline[kinds[i]]
            whole = policy.mode == "layer" and policy.checkpointed(i)
            forward.append(d.block_forward_s)
            backward = backward + (d.whole_backward_s if policy.mode == "full" or whole
                                   else d.block_backward_s)
            f_inline = f_inline + inl.get("block_forward", 0.0)
            b_inline = b_inline + inl.get("block_backward_whole" if whole else "block_backward",
                                          0.0)
            gathers.append(d.block_all_gather_s)
            scatters.append(d.block_reduce_scatter_s)
            replicas.append(d.block_replicate_s)
        if first_stage:
            f_inline = f_inline + inline[kinds[0]].get("embed_forward", 0.0)
            b_inline = b_inline + inline[kinds[0]].get("embed_backward", 0.0)
        if last_stage:   # final norm, LM head and loss (the root unit's compute)
            forward[-1] = forward[-1] + root.root_forward_s
            backward = backward + root.root_backward_s
            f_inline = f_inline + inline[kinds[0]].get("root_forward", 0.0)
            b_inline = b_inline + inline[kinds[0]].get("root_backward", 0.0)
        # the root's parameters live on the end stages
        share = (_root_share(model, first_stage=first_stage, last_stage=last_stage)
                 if first_stage or last_stage else 0.0)
        root_ag, root_rs, root_ar = (share * root.root_all_gather_s,
                                     share * root.root_reduce_scatter_s,
                                     share * root.root_replicate_s)
        stages.append(StageCosts(
            stage=s, first_block=first, num_blocks=n, forward_s=sum(forward),
            backward_s=backward, forward_inline_s=f_inline, backward_inline_s=b_inline,
            all_gather_s=sum(gathers) + root_ag, reduce_scatter_s=sum(scatters) + root_rs,
            replicate_s=sum(replicas) + root_ar, root_all_gather_s=root_ag,
            root_reduce_scatter_s=root_rs, root_replicate_s=root_ar,
            block_forward_s=tuple(forward), block_all_gather_s=tuple(gathers),
            block_reduce_scatter_s=tuple(scatters), block_replicate_s=tuple(replicas)))
        first += n
    return PipelineCosts(stages=tuple(stages),
                         p2p_s=_p2p_s(model, profile, island, layout, seq_len, micro_batch,
                                      recipe),
                         optimizer_s=_optimizer_s(model, profile, layout, seq_len, micro_batch,
                                                  cuts),
                         layout=layout, overlap_slowdown=float(profile.overlap_slowdown))


def block_kinds(model: ModelSpec) -> tuple[str, ...]:
    """The kind of each block, by global index: 'moe' for the model's MoE layers
    (`ModelSpec.is_moe_layer`: first_k_dense, MoE frequency), 'dense' for the others."""
    return tuple("moe" if model.is_moe_layer(i) else "dense" for i in range(model.num_layers))


def kind_model(model: ModelSpec, kind: str) -> ModelSpec:
    """A model whose every block is a block of `kind` of `model` (module doc): every layer an
    MoE layer ('moe'), or none ('dense'; a dense model is its own)."""
    if model.moe is None:
        return model
    if kind == "moe":
        return replace(model, moe=replace(model.moe, moe_layers=tuple(range(model.num_layers))))
    return replace(model, moe=None)


def _root_share(model: ModelSpec, *, first_stage: bool, last_stage: bool) -> float:
    """The part of the root unit's parameters an end stage holds (`_root_params`)."""
    root = model.root_params
    held = _root_params(model, first_stage=first_stage, last_stage=last_stage)
    return min(1.0, held / root) if root else 0.0


def _root_params(model: ModelSpec, *, first_stage: bool, last_stage: bool) -> int:
    """Parameters of the root unit an end stage holds: the embedding on the first, the final
    norm and LM head on the last (a tied head: its copy of the embedding)."""
    embedding = model.embedding_params
    head = model.root_params - embedding if not model.tie_word_embeddings else model.root_params
    return (embedding if first_stage else 0) + (head if last_stage else 0)


def _p2p_s(model: ModelSpec, profile: CostModel, island: IslandSpec, layout: ParallelLayout,
           seq_len: int, micro_batch: Any, recipe: TrainingRecipe) -> Any:
    """One boundary transfer: each tp/cp rank sends its part of the micro-batch's hidden states
    to the same rank of the next stage, on the link the pp dimension's neighbours span."""
    payload = _p2p_payload_bytes(model, layout, seq_len, micro_batch, recipe)
    pair = place_group("pp", size=2, stride=layout.stride("pp"),
                       gpus_per_node=island.gpus_per_node, intra_link=island.intra_link,
                       inter_link=island.inter_link, nics_per_node=island.nics_per_node)
    return profile.group_comm_time_s("send_recv", pair, payload)


def _p2p_payload_bytes(model: ModelSpec, layout: ParallelLayout, seq_len: int, micro_batch: Any,
                       recipe: TrainingRecipe) -> Any:
    """Bytes of one boundary transfer: a tp/cp rank's part of the micro-batch's hidden states
    in the parameter dtype (FSDP2 computes the stage in it)."""
    sp = layout.tp > 1 and layout.sequence_parallel
    return (np.asarray(micro_batch, dtype=float) * (seq_len / layout.cp) * model.hidden_size
            * dtype_bytes(recipe.param_dtype) / (layout.tp if sp else 1))


def _optimizer_s(model: ModelSpec, profile: CostModel, layout: ParallelLayout, seq_len: int,
                 micro_batch: Any, cuts: Sequence[int]) -> tuple[Any, ...]:
    """Per pipeline rank: the optimizer over its blocks' and end stages' parameter shards."""
    shard = RankShard(tp=layout.tp, cp=layout.cp, sequence_parallel=layout.sequence_parallel)

    def opt(spec: ModelSpec, unit: str) -> Any:
        return profile.compute_time_s("optimizer", spec, seq_len, micro_batch, unit=unit,
                                      num_shards=layout.fsdp_degree, shard=shard)

    kinds = block_kinds(model)
    block = {kind: opt(kind_model(model, kind), "block") for kind in set(kinds)}
    root = opt(model, "root")
    starts = [sum(cuts[:s]) for s in range(len(cuts))]
    out = []
    for r in range(layout.pp):
        mine = stage_of_rank(r, layout.pp, layout.virtual_stages)
        share = sum(_root_share(model, first_stage=s == 0, last_stage=s == len(cuts) - 1)
                    for s in mine if s in (0, len(cuts) - 1))
        out.append(sum(block[kinds[i]] for s in mine
                       for i in range(starts[s], starts[s] + cuts[s])) + share * root)
    return tuple(out)


# ---- the collectives the plan issues -----------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class PlannedCollective:
    """One collective or transfer of a planned pipeline step, as a rank issues it."""

    stream: str
    """compute (inline collectives), comm (FSDP / HSDP) or p2p (transfers)."""
    op: str
    """all_gather, reduce_scatter, all_reduce, all_to_all, send or recv."""
    group: str
    """tp, cp, ep, fsdp, expert_fsdp, dp_replicate or pp."""
    stage: int
    """The stage whose pass or unit issues it (a transfer: the sending stage for a send, the
    receiving one for a receive, as torch tags them)."""
    pass_: str
    """F, B (the pass of `micro`), or REDUCE (the reduce-scatters after the last backward)."""
    micro: int
    """Micro-batch (-1 for REDUCE)."""
    unit: str
    """root, block{i} or block{i}.experts (the FSDP unit, or the unit whose compute issues an
    inline collective); empty for a transfer."""
    peer: int
    """Pipeline rank at the other end of a transfer (-1 otherwise)."""
    dtype: str
    """Element type."""
    payload_bytes: float
    """Unsharded side of an FSDP collective; a transfer's tensor; what an all-to-all sends to
    the other ranks (`perfmodel.costs.comm.all_to_all_payload_bytes`)."""


def pipeline_collectives(model: ModelSpec, recipe: TrainingRecipe, *, num_gpus: int,
                         seq_len: int, micro_batch: int,
                         micro_batches: int) -> dict[int, list[PlannedCollective]]:
    """Per pipeline rank, the collectives and transfers of `pipeline_plan` in plan order (what
    `pipeline_costs` times, unit by unit): each pass's inline collectives (the embedding's,
    then the stage's blocks' in order, each by its kind (`block_kinds`: an MoE block's
    all-to-alls on the ep group, a dense block's none), then the root's; backward the
    reverse), each transfer (a receive right before the pass that consumes it), each FSDP
    gather (root share, then per block the dense part over the FSDP group and an MoE block's
    experts over the expert FSDP group) and reduce-scatter (same units) with its HSDP
    all-reduce. A group of one rank issues nothing and is left out. FSDP payloads are in the
    parameter dtype (gathers) and the reduce dtype (reductions): the fp8 all-gather's mix is
    not listed.
    Checked by: tests/test_pp_moe_order.py (a recorded gloo run, per rank and stream)."""
    layout = recipe.parallel.resolve(num_gpus)
    cuts = stage_blocks(model.num_layers, layout.pp, layout.virtual_stages)
    starts = [sum(cuts[:s]) for s in range(len(cuts))]
    last = len(cuts) - 1
    kinds = block_kinds(model)
    plan = pipeline_plan(layout, micro_batches, replicate=layout.dp_replicate > 1, blocks=cuts)
    payloads = inline_payload_bytes(model, recipe, seq_len=seq_len, micro_batch=micro_batch)
    param, grad = recipe.param_dtype, recipe.reduce_dtype
    norms = model.norms_per_block
    transfer = float(_p2p_payload_bytes(model, layout, seq_len, micro_batch, recipe))
    unit_params = {}
    for kind in set(kinds):
        local = local_model(kind_model(model, kind), layout.tp)
        block = local.fsdp_units(seq_len)[0].params
        experts = local.expert_block_params if layout.ep > 1 else 0
        unit_params[kind] = (block - experts, experts // layout.ep)

    def inline(stage: int, forward: bool, micro: int) -> list[PlannedCollective]:
        blocks = range(starts[stage], starts[stage] + cuts[stage])
        policy = recipe.checkpoint
        places: list[tuple[str, str, bool]] = []      # (where, unit, MoE layer)
        if forward:
            places += [("embed_forward", "root", False)] if stage == 0 else []
            places += [("block_forward", f"block{i}", kinds[i] == "moe") for i in blocks]
            places += [("root_forward", "root", False)] if stage == last else []
        else:
            places += [("root_backward", "root", False)] if stage == last else []
            places += [("block_backward_whole" if policy.mode == "layer"
                        and policy.checkpointed(i) else "block_backward", f"block{i}",
                        kinds[i] == "moe") for i in reversed(blocks)]
            places += [("embed_backward", "root", False)] if stage == 0 else []
        out = []
        for where, unit, moe in places:
            for op, group, kind in inline_collectives(recipe, where, norms, moe_layer=moe):
                out.append(PlannedCollective(
                    stream="compute", op=op, group=group, stage=stage,
                    pass_="F" if forward else "B", micro=micro, unit=unit, peer=-1,
                    dtype="fp32" if kind == "loss_rows" else param,
                    payload_bytes=float(payloads[kind])))
        return out

    def fsdp(op: str, stage: int, cost: tuple[str, int, int], pass_: str,
             micro: int) -> list[PlannedCollective]:
        """The FSDP (or HSDP: op all_reduce) collectives of one gather / reduce task."""
        name, _, j = cost
        units: list[tuple[str, str, int, int]] = []    # (unit, group, params, group size)
        if name.startswith("root_"):
            units.append(("root", "fsdp", _root_params(model, first_stage=stage == 0,
                                                        last_stage=stage == last),
                          layout.fsdp_degree))
        else:
            i = starts[stage] + j
            dense, experts = unit_params[kinds[i]]
            units.append((f"block{i}", "fsdp", dense, layout.fsdp_degree))
            if experts:
                units.append((f"block{i}.experts", "expert_fsdp", experts,
                              layout.expert_fsdp_degree))
        out = []
        for unit, group, params, size in units:
            if size == 1:
                continue
            dtype = param if op == "all_gather" else grad
            payload = float(params * dtype_bytes(dtype))
            if op == "all_reduce":      # HSDP: the reduced shard, across the replicas
                group, payload = "dp_replicate", payload / size
            out.append(PlannedCollective(stream="comm", op=op, group=group, stage=stage,
                                         pass_=pass_, micro=micro, unit=unit, peer=-1,
                                         dtype=dtype, payload_bytes=payload))
        return out

    out: dict[int, list[PlannedCollective]] = {r: [] for r in range(layout.pp)}
    for task in plan:
        stage = task.cost[1]
        mine = out[task.rank]
        if task.kind in ("forward", "backward"):
            for d in task.deps:
                sender = plan[d]
                if sender.kind == "send_recv":
                    to = stage
                    mine.append(PlannedCollective(
                        stream="p2p", op="recv", group="pp", stage=to,
                        pass_="F" if task.kind == "forward" else "B", micro=sender.micro,
                        unit="", peer=sender.rank, dtype=param, payload_bytes=transfer))
        elif task.kind == "send_recv":
            words = task.name.split()     # "send act 0->1 m3"
            sent_from, to = (int(x) for x in words[2].split("->"))
            mine.append(PlannedCollective(
                stream="p2p", op="send", group="pp", stage=sent_from,
                pass_="F" if words[1] == "act" else "B", micro=task.micro, unit="",
                peer=to % layout.pp, dtype=param, payload_bytes=transfer))
        elif task.stream == "compute" and task.kind == "all_reduce":
            mine += inline(stage, task.cost[0] == "forward_inline_s", task.micro)
        elif task.kind == "all_gather":
            mine += fsdp("all_gather", stage, task.cost, "F", 0)
        elif task.kind in ("reduce_scatter", "all_reduce"):
            mine += fsdp(task.kind, stage, task.cost, "REDUCE", -1)
    return out


# ---- the graph ---------------------------------------------------------------------------------

def add_pipeline(graph: TaskGraph, costs: PipelineCosts, *, micro_batches: int) -> list[int]:
    """Append one pipeline step to `graph` (islands `pp 0` ... `pp {pp-1}`); returns the
    optimizer task ids, one per rank."""
    ids: list[int] = []
    plan = pipeline_plan(costs.layout, micro_batches, replicate=costs.layout.dp_replicate > 1,
                         blocks=costs.blocks)
    for task in plan:
        ids.append(graph.add(task.name, island=task.island, stream=task.stream,
                             kind=task.kind, duration_s=float(task_duration_s(costs, task)),
                             deps=[ids[d] for d in task.deps]))
    if costs.overlap_slowdown != 1.0:
        for r in range(costs.pp):
            graph.set_overlap_slowdown(f"pp {r}", costs.overlap_slowdown)
    return [ids[i] for i, t in enumerate(plan) if t.kind == "optimizer"]


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineResult:
    """A simulated pipeline step."""

    schedule: Schedule
    """The whole graph's schedule (every rank)."""
    accum_steps: int
    """Micro-batches k of the step."""
    simulated_micro_batches: int
    """Micro-batches of `schedule` (k, or b + 3P where `simulate_pipeline_step` extends the
    step in closed form: the trace and critical path are that step's)."""
    step_time_s: float
    """Makespan: the last rank's optimizer end."""
    worst_rank: int
    """The rank whose stages pace the pipeline (`PipelineCosts.worst_rank`)."""
    worst_stage: str
    """Its stages and blocks, for outputs."""
    bubble_s: float
    """Time the worst rank's compute stream idles waiting for other stages: its idle time less
    its own exposed communication (inline tensor-parallel collectives, FSDP gathers and
    reduce-scatters it waits on), so that the bubble is the schedule's and the exposed
    communication is reported once, as `exposed_comm_s`."""
    compute_busy_s: float
    """Compute-stream busy time of the worst rank."""
    comm_busy_s: float
    """Its communication time (FSDP collectives, transfers, inline collectives)."""
    exposed_comm_s: float
    """Its communication not hidden under compute."""
    compute_idle_s: float
    """Its compute-stream idle time (bubble_s + exposed_comm_s, up to overlap of the two)."""


def step_result(result: PipelineResult) -> StepResult:
    """The pipeline step as the FSDP step's result type (busy and idle times of the worst rank),
    for what reads either."""
    return StepResult(schedule=result.schedule, accum_steps=result.accum_steps,
                      step_time_s=result.step_time_s, compute_busy_s=result.compute_busy_s,
                      comm_busy_s=result.comm_busy_s, exposed_comm_s=result.exposed_comm_s,
                      compute_idle_s=result.compute_idle_s)


def simulate_pipeline(costs: PipelineCosts, *, micro_batches: int) -> PipelineResult:
    """Build and simulate one pipeline step of k micro-batches."""
    graph = TaskGraph()
    add_pipeline(graph, costs, micro_batches=micro_batches)
    schedule = graph.simulate()
    rank = costs.worst_rank
    island = f"pp {rank}"
    idle = schedule.compute_idle_s(island)
    exposed = schedule.exposed_comm_s(island)
    return PipelineResult(schedule=schedule, accum_steps=micro_batches,
                          simulated_micro_batches=micro_batches,
                          step_time_s=schedule.makespan_s, worst_rank=rank,
                          worst_stage=costs.worst_label(), bubble_s=max(0.0, idle - exposed),
                          compute_busy_s=schedule.busy_s(comm=False, island=island),
                          comm_busy_s=schedule.busy_s(comm=True, island=island),
                          exposed_comm_s=exposed, compute_idle_s=idle)


def compute_paces(costs: PipelineCosts) -> bool:
    """Whether every pipeline rank computes longer per micro-batch than it sends: its stages'
    forward and backward passes (inline collectives included) against one transfer per stage
    boundary it sends across in each direction. Where a rank's transfers take longer, they pace
    the pipeline and the step can grow by increments that alternate with k (the module doc's
    transient), which `simulate_pipeline_step` does not extend."""
    pp = costs.pp
    p2p = float(np.max(costs.p2p_s))
    for rank in range(pp):
        local = [st for st in costs.stages if st.stage % pp == rank]
        last = len(costs.stages) - 1
        compute = sum(float(np.min(st.forward_s + st.backward_s + st.forward_inline_s
                                   + st.backward_inline_s)) for st in local)
        sends = p2p * sum((st.stage < last) + (st.stage > 0) for st in local)
        if sends >= compute:
            return False
    return True


EXTENDED_FIELDS = ("step_time_s", "bubble_s", "compute_busy_s", "comm_busy_s", "exposed_comm_s",
                   "compute_idle_s")
"""The PipelineResult times `simulate_pipeline_step` extends in closed form."""


def simulate_pipeline_step(costs: PipelineCosts, *, micro_batches: int) -> PipelineResult:
    """One pipeline step of k micro-batches: the graph itself up to b + 3P
    (`perfmodel.spec.pipeline.closed_form_accums`, timed: P a turn of the pipeline, b = k mod
    P past the steady point); beyond it, where every rank's compute paces the pipeline
    (`compute_paces`), the graph at the four points and the rest in closed form where their
    times lie on one line (to rounding); else the graph at k (UserInputError past
    `pipeline.EXACT_ACCUM_MAX`). The schedule (and trace) is then the one simulated at b + 3P;
    every time of the result is k's.
    Claim: exact to rounding (`closed_form_accums`' claim: past K every rank repeats whole
    periods of the same actions, and compute-paced periods take the same time). Checked by:
    tests/test_pipeline_closed_form.py (extended == the graph at k for GPipe, 1F1B and
    interleaved 1F1B; a transfer-paced pipeline, whose step is periodic in k, is simulated)."""
    layout = costs.layout
    points = pipeline.closed_form_accums(layout.pp_schedule, layout.pp, layout.virtual_stages,
                                         micro_batches, timed=True)
    if points is not None and compute_paces(costs):
        runs = [simulate_pipeline(costs, micro_batches=k) for k in points]
        series = {name: [getattr(r, name) for r in runs] for name in EXTENDED_FIELDS}
        if all(pipeline.on_line(v, points) for v in series.values()):
            logger.info("pipeline step of %d micro-batches: simulated at %s, the rest in closed "
                        "form (exact)", micro_batches, ", ".join(map(str, points)))
            extended: dict[str, Any] = {name: pipeline.extend_line(v, points, micro_batches)
                                        for name, v in series.items()}
            return replace(runs[-1], accum_steps=micro_batches, **extended)
    pipeline.check_exact_accum(micro_batches, layout.pp_schedule, "pipeline step")
    return simulate_pipeline(costs, micro_batches=micro_batches)


# ---- fast path ---------------------------------------------------------------------------------

def affine_points(layout: ParallelLayout) -> tuple[int, int]:
    """(k0, k1): the two micro-batch counts the affine form is read from (module doc): pp and
    2·pp, a round of pp micro-batches apart. Why a round and not the next admissible k (pp + 1
    under 1F1B and GPipe): a step whose increments repeat every pp micro-batches (max-plus
    cyclicity pp, `perfmodel.spec.pipeline.closed_form_accums`) grows by its mean slope over a
    round, so the form is exact at every k ≡ 0 (mod pp) and within the round's spread
    elsewhere, where the slope of one micro-batch drifts from the mean by a spread per round,
    unboundedly in k (tests/test_pipeline_closed_form.py); where every micro-batch adds the
    same time both are the same line, and interleaved 1F1B read its form a round apart already
    (its k are multiples of pp). A cyclicity that does not divide pp is not seen here (`predict`
    checks four points instead)."""
    k0 = layout.pp
    return k0, 2 * k0


@dataclass(frozen=True, kw_only=True, slots=True)
class CompiledPipeline:
    """A pipeline plan as a fixed DAG (indices into the plan)."""

    preds: tuple[tuple[int, ...], ...]
    costs: tuple[tuple[str, int, int], ...]
    is_compute: tuple[bool, ...]
    overlaps: tuple[tuple[int, ...], ...]
    """Per compute task: collectives of the same rank issued before it, not its ancestors."""
    sinks: tuple[int, ...]


def compile_pipeline(layout: ParallelLayout, micro_batches: int, *, replicate: bool = False,
                     blocks: tuple[int, ...] | None = None) -> CompiledPipeline:
    """Compile `pipeline_plan` into a fixed DAG, as `perfmodel.sim.fastpath` compiles FSDP.

    Claim: the DAG depends on the layout's pp, virtual stages and schedule only (with k, HSDP
    replication and the blocks per stage). Why: `pipeline_plan` reads no other field of the
    layout (durations come in later, from `PipelineCosts`), so layouts that differ in tp,
    dp_shard, cp or sequence parallelism share one compilation (a layout table compiles each
    shape once instead of once per layout). Checked by: tests/test_layout_speed.py."""
    shape = ParallelLayout(pp=layout.pp, virtual_stages=layout.virtual_stages,
                           pp_schedule=layout.pp_schedule)
    return _compile_shape(shape, micro_batches, replicate, blocks)


@lru_cache(maxsize=128)
def _compile_shape(layout: ParallelLayout, micro_batches: int, replicate: bool,
                   blocks: tuple[int, ...] | None) -> CompiledPipeline:
    plan = pipeline_plan(layout, micro_batches, replicate=replicate, blocks=blocks)
    last: dict[tuple[int, str], int] = {}
    preds: list[tuple[int, ...]] = []
    ancestors: list[int] = []
    overlaps: list[tuple[int, ...]] = []
    # A compute task may overlap the collectives of its rank that are not its ancestors. Tasks
    # of one stream chain (each depends on the stream's previous task), so a collective that is
    # an ancestor of one compute task is one of every later task of that stream: each compute
    # stream keeps only the collectives not yet among its ancestors (the same tuples, in the
    # same order, as scanning every collective of the rank, which was quadratic in the step).
    comm_so_far: dict[int, list[int]] = {}
    pending: dict[int, dict[str, list[int]]] = {}   # rank -> compute stream -> collectives
    for i, t in enumerate(plan):
        key = (t.rank, t.stream)
        pred = tuple(sorted(set(t.deps) | ({last[key]} if key in last else set())))
        last[key] = i
        anc = 0
        for p in pred:
            anc |= ancestors[p] | (1 << p)
        ancestors.append(anc)
        preds.append(pred)
        compute = t.kind in COMPUTE_KINDS
        if compute:
            streams = pending.setdefault(t.rank, {})
            mine = streams.get(t.stream)
            if mine is None:
                mine = comm_so_far.get(t.rank, [])
            mine = [j for j in mine if not anc >> j & 1]
            streams[t.stream] = mine
            overlaps.append(tuple(mine))
        else:
            overlaps.append(())
            if t.stream != "p2p":   # transfers do not contend (module doc)
                comm_so_far.setdefault(t.rank, []).append(i)
                for waiting in pending.get(t.rank, {}).values():
                    waiting.append(i)
    waited = {p for pred in preds for p in pred}
    return CompiledPipeline(preds=tuple(preds), costs=tuple(t.cost for t in plan),
                            is_compute=tuple(t.kind in COMPUTE_KINDS for t in plan),
                            overlaps=tuple(overlaps),
                            sinks=tuple(i for i in range(len(plan)) if i not in waited))


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineEvaluation:
    """Longest-path results of a compiled pipeline step, each an (N,) array."""

    makespan_s: np.ndarray
    """Step time."""
    compute_busy_s: np.ndarray
    """Compute-stream busy time per GPU, the mean over the pipeline ranks (contention
    included; the bubble is what it leaves idle)."""
    comm_busy_s: np.ndarray
    """Communication time per GPU (FSDP collectives, inline collectives and transfers), the mean
    over the pipeline ranks."""


def evaluate_pipeline(costs: PipelineCosts, micro_batches: int) -> PipelineEvaluation:
    """The compiled plan for every configuration in `costs` (durations may be (N,) arrays):
    max-plus over arrays, the simulator's arithmetic."""
    compiled = compile_pipeline(costs.layout, micro_batches,
                                replicate=costs.layout.dp_replicate > 1, blocks=costs.blocks)
    slow = float(costs.overlap_slowdown)
    extra_in, lost = np.asarray(slow - 1.0), np.asarray(1.0 - 1.0 / slow)
    probe = np.atleast_1d(np.asarray(costs.p2p_s, dtype=float))
    for st in costs.stages:
        probe = np.broadcast_arrays(probe, np.atleast_1d(np.asarray(st.forward_s,
                                                                    dtype=float)))[0]
    n = probe.shape[0]
    zero = np.zeros(n)
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    compute, comm = zero, zero
    # A collective that ended (every configuration) before a compute task started slows
    # neither it nor any later compute task of its rank: contention_delay clips the span to
    # [max(a, start), b], empty there, and adds max(0, min(x, 0)) = 0. Later compute tasks of the
    # rank start no earlier (they follow on its compute stream and no duration is negative), so
    # such a span is dropped once for the rest of the step. Only where every duration is finite
    # and >= 0 (else every span is applied as before).
    durations = [np.asarray(_duration(costs, c), dtype=float) for c in compiled.costs]
    prune = False
    if slow != 1.0:
        # (a task's duration is one of these; one array, one check: the per-source checks
        # were a tenth of a layout table's time)
        sources = np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in (
            costs.p2p_s, *costs.optimizer_s, *(getattr(st, name) for st in costs.stages
                                               for name in STAGE_COSTS),
            *(st.part_s(name, j) for st in costs.stages for name in PART_TOTALS
              for j in range(st.num_blocks)))])
        prune = bool(np.isfinite(sources).all() and (sources >= 0.0).all())
    finished: set[int] = set()
    for i, pred in enumerate(compiled.preds):
        start = zero if not pred else ends[pred[0]]
        for p in pred[1:]:
            start = np.maximum(start, ends[p])
        dur = durations[i]
        end = start + dur
        if compiled.is_compute[i]:
            if slow != 1.0 and compiled.overlaps[i]:
                spans = []
                for j in compiled.overlaps[i]:
                    if j in finished:
                        continue
                    if prune and bool((ends[j] <= start).all()):
                        finished.add(j)
                        continue
                    spans.append((starts[j], ends[j]))
                if spans:
                    end = contention_delay(start, end, spans, extra_in, lost)
            compute = compute + (end - start)
        else:
            comm = comm + dur
        starts.append(start)
        ends.append(end)
    out = zero
    for sink in compiled.sinks:
        out = np.maximum(out, ends[sink])
    return PipelineEvaluation(makespan_s=out, compute_busy_s=compute / costs.pp,
                              comm_busy_s=comm / costs.pp)


def pipeline_decomposition(costs: PipelineCosts) -> PipelineDecomposition:
    """T(k) = fixed + k·micro (and the compute and communication busy times alike) for
    admissible k >= k0 (module doc), from the graph at the two `affine_points`."""
    k0, k1 = affine_points(costs.layout)
    e0, e1 = evaluate_pipeline(costs, k0), evaluate_pipeline(costs, k1)

    def line(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        micro = (b - a) / (k1 - k0)
        return a - k0 * micro, micro

    fixed, micro = line(e0.makespan_s, e1.makespan_s)
    c_fixed, c_micro = line(e0.compute_busy_s, e1.compute_busy_s)
    x_fixed, x_micro = line(e0.comm_busy_s, e1.comm_busy_s)
    return PipelineDecomposition(step_fixed_s=fixed, microstep_s=micro,
                                 compute_fixed_s=c_fixed, compute_micro_s=c_micro,
                                 comm_fixed_s=x_fixed, comm_micro_s=x_micro, min_accum=k0,
                                 accum_multiple=_accum_multiple(costs.layout))


def _accum_multiple(layout: ParallelLayout) -> int:
    """k must be a multiple of this (interleaved 1F1B: of pp, where its rounds divide k)."""
    return layout.pp if layout.pp_schedule == "interleaved-1f1b" else 1


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineDecomposition:
    """The affine form of a pipeline step in k (each an (N,) array)."""

    step_fixed_s: np.ndarray
    microstep_s: np.ndarray
    compute_fixed_s: np.ndarray
    """Compute busy time per GPU: compute_fixed_s + k·compute_micro_s."""
    compute_micro_s: np.ndarray
    comm_fixed_s: np.ndarray
    """Communication time per GPU: comm_fixed_s + k·comm_micro_s."""
    comm_micro_s: np.ndarray
    min_accum: int
    """Smallest k the form holds for (and the schedule accepts)."""
    accum_multiple: int
    """k must be a multiple of this."""

    def step_time_s(self, accum_steps: Any) -> np.ndarray:
        result: np.ndarray = self.step_fixed_s + np.asarray(accum_steps) * self.microstep_s
        return result
