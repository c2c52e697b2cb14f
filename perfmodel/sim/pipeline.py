"""The step graph of a pipeline-parallel layout (pp > 1): stages, schedules and their bubbles,
point-to-point transfers, FSDP / TP inside each stage (DESIGN §2 "Parallel layouts").

Ranks. Every data-parallel, tensor- and context-parallel replica of a pipeline rank runs the same
work, so the graph holds one representative GPU per pipeline rank r (trace process `pp r`), each
with three streams: `compute` (its stages' forward and backward passes and the tensor-parallel
collectives inline on them, as `perfmodel.sim.fsdp` runs them), `comm` (FSDP all-gathers,
reduce-scatters and HSDP all-reduces) and `p2p` (the sends to the neighbouring stages).

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
    forward, so each block's all-gather runs once per step, before the block's first forward
    (prefetched in order while earlier blocks compute), and its gradients are reduce-scattered
    once, right after the block's last backward (torch.distributed.pipelining turns gradient
    sync on for the last micro-batch only), then all-reduced across HSDP replicas; the stage's
    first forward and last backward are therefore split into its blocks; each rank's optimizer
    step follows its reduce-scatters; the step ends when the last rank's optimizer does.
  * contention (the profile's overlap slowdown) slows a rank's compute while its FSDP
    collectives run, as in the FSDP graph; the point-to-point transfers do not count: one
    micro-batch's activations are small next to a stage's collectives, and they sit on their
    own trace track (`pp r p2p`) so that each rank has a single communication stream, the case
    the contention rule is exact for;
  * stage durations: n blocks of the part-1 per-rank block costs (`fsdp.layout_unit_durations`:
    tp/cp shard compute, inline collectives, group-placed FSDP collectives), the root unit's
    forward and backward (embedding, final norm, LM head, loss) on the last stage and its inline
    collectives split as in the FSDP graph (embedding ones on stage 0); under layer:N the blocks
    checkpointed whole pay their whole recompute.
Why this and not a closed form: uneven stages (the last one carries the LM head), the p2p
latency and the FSDP collectives make the bubble depend on which stage is slowest and where; the
graph takes the real dependency structure, and its worst stage is reported by name.

Affine form: for k >= pp (1F1B) the per-rank orders repeat a steady (F, B) pattern, so T(k) =
fixed + k·per_micro_batch once the pipeline is full; `pipeline_decomposition` takes the two from
the graph at k = k0 and k0 + step (k0 the smallest k the schedule accepts at or above pp, step its
granularity) and tests/test_pipeline.py checks T(k) against the graph for k up to 8·pp: exact to
rounding where the slowest stage paces the steady state for every k >= k0, which holds for
GPipe, 1F1B and interleaved 1F1B on the tested layouts; where it does not (a p2p link slower
than a stage's compute can leave a transient), the test's tolerance names it.
Checked by: tests/test_pipeline.py (graph order == rank_order per rank; bubble of uniform stages
== (pp - 1)·(F + B) for GPipe and 1F1B without communication; fast path == graph; affine form;
worst stage; 405B at pp 16).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from perfmodel.costs.features import RankShard
from perfmodel.costs.model import CostModel
from perfmodel.sim.fsdp import (
    StepResult,
    _layout_of,
    check_slowdown,
    layout_unit_durations,
    resolve_recipe,
)
from perfmodel.sim.graph import COMPUTE_KINDS, Schedule, TaskGraph, contention_delay
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

STREAMS = ("compute", "comm", "p2p")
"""Streams of one pipeline rank."""

STAGE_COSTS = ("forward_s", "backward_s", "forward_inline_s", "backward_inline_s",
               "all_gather_s", "reduce_scatter_s", "replicate_s")
"""Per-stage durations (each a float, or an (N,) array in the fast path)."""


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
    """(STAGE_COSTS name, stage, parts), ('p2p_s', -1, 1) or ('optimizer_s', rank, 1): the
    duration is the named one divided by `parts` (a block of a stage split by blocks)."""
    deps: tuple[int, ...]
    """Earlier tasks this one waits for (besides its stream predecessor)."""

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
    `blocks` (per stage; None: one part per stage) splits each stage's first forward and last
    backward into its blocks: FSDP gathers a block's parameters just before the block's first
    forward (prefetching the next while one computes) and reduce-scatters a block's gradients
    once its last backward is done, so only one block's collective is exposed at each end."""
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

    gathers: dict[int, list[int]] = {}          # stage -> its per-block all-gathers
    for r in range(pp):
        for s in stage_of_rank(r, pp, v):
            gathers[s] = [add(PipeTask(name=f"AG stage {s} part {j}", rank=r, stream="comm",
                                       kind="all_gather", cost=("all_gather_s", s, parts[s]),
                                       deps=())) for j in range(parts[s])]
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
                    for j in range(n):
                        add(PipeTask(name=f"{label} block {j}", rank=r, stream="compute",
                                     kind="forward", cost=(cost, a.stage, n),
                                     deps=tuple(deps if j == 0 else ()) + (gathers[a.stage][j],)))
                elif not forward and a.micro == micro_batches - 1:
                    for j in range(n):             # the last backward reduces block by block
                        part = add(PipeTask(name=f"{label} block {n - 1 - j}", rank=r,
                                            stream="compute", kind="backward",
                                            cost=(cost, a.stage, n),
                                            deps=tuple(deps if j == 0 else ())))
                        rs = add(PipeTask(name=f"RS stage {a.stage} part {j}", rank=r,
                                          stream="comm", kind="reduce_scatter",
                                          cost=("reduce_scatter_s", a.stage, n), deps=(part,)))
                        if replicate:
                            rs = add(PipeTask(name=f"AR stage {a.stage} part {j} replicas",
                                              rank=r, stream="comm", kind="all_reduce",
                                              cost=("replicate_s", a.stage, n), deps=(rs,)))
                        reduced[r].append(rs)
                else:
                    add(PipeTask(name=label, rank=r, stream="compute",
                                 kind="forward" if forward else "backward",
                                 cost=(cost, a.stage, 1), deps=tuple(deps)))
                done = add(PipeTask(name=f"{label} tp/cp", rank=r, stream="compute",
                                    kind="all_reduce",
                                    cost=("forward_inline_s" if forward else "backward_inline_s",
                                          a.stage, 1), deps=()))
                to = a.stage + 1 if forward else a.stage - 1
                if 0 <= to < stages:
                    sent[(to, a.pass_, a.micro)] = add(PipeTask(
                        name=f"send {'act' if forward else 'grad'} {a.stage}->{to} m{a.micro}",
                        rank=r, stream="p2p", kind="send_recv", cost=("p2p_s", -1, 1),
                        deps=(done,)))
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
    name, index, parts = cost
    if name == "p2p_s":
        return costs.p2p_s
    if name == "optimizer_s":
        return costs.optimizer_s[index]
    value = getattr(costs.stages[index], name)
    return value / parts if parts != 1 else value


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
    d = layout_unit_durations(model, profile, island, seq_len=seq_len, micro_batch=micro_batch,
                              recipe=recipe, layout=layout)
    check_slowdown(profile.overlap_slowdown)
    cuts = stage_blocks(model.num_layers, layout.pp, layout.virtual_stages)
    policy = recipe.checkpoint
    inline = {k: sum(v) if v else 0.0 for k, v in d.inline.items()}
    stages: list[StageCosts] = []
    first = 0
    for s, n in enumerate(cuts):
        last_stage, first_stage = s == len(cuts) - 1, s == 0
        whole = sum(1 for i in range(first, first + n) if policy.mode == "layer"
                    and policy.checkpointed(i))
        backward = (d.whole_backward_s * (n if policy.mode == "full" else whole)
                    + d.block_backward_s * (0 if policy.mode == "full" else n - whole))
        forward = n * d.block_forward_s
        f_inline = n * inline.get("block_forward", 0.0)
        b_inline = (whole * inline.get("block_backward_whole", 0.0)
                    + (n - whole) * inline.get("block_backward", 0.0))
        gather = n * d.block_all_gather_s
        scatter = n * d.block_reduce_scatter_s
        replicate = n * d.block_replicate_s
        if first_stage:
            f_inline = f_inline + inline.get("embed_forward", 0.0)
            b_inline = b_inline + inline.get("embed_backward", 0.0)
        if last_stage:   # final norm, LM head and loss (the root unit's compute)
            forward = forward + d.root_forward_s
            backward = backward + d.root_backward_s
            f_inline = f_inline + inline.get("root_forward", 0.0)
            b_inline = b_inline + inline.get("root_backward", 0.0)
        if first_stage or last_stage:  # the root's parameters live on the end stages
            share = _root_share(model, first_stage=first_stage, last_stage=last_stage)
            gather = gather + share * d.root_all_gather_s
            scatter = scatter + share * d.root_reduce_scatter_s
            replicate = replicate + share * d.root_replicate_s
        stages.append(StageCosts(stage=s, first_block=first, num_blocks=n, forward_s=forward,
                                 backward_s=backward, forward_inline_s=f_inline,
                                 backward_inline_s=b_inline, all_gather_s=gather,
                                 reduce_scatter_s=scatter, replicate_s=replicate))
        first += n
    return PipelineCosts(stages=tuple(stages),
                         p2p_s=_p2p_s(model, profile, island, layout, seq_len, micro_batch,
                                      recipe),
                         optimizer_s=_optimizer_s(model, profile, layout, seq_len, micro_batch,
                                                  cuts),
                         layout=layout, overlap_slowdown=float(profile.overlap_slowdown))


def _root_share(model: ModelSpec, *, first_stage: bool, last_stage: bool) -> float:
    """The part of the root unit's parameters an end stage holds: the embedding on the first,
    the final norm and LM head on the last (a tied head: its copy of the embedding)."""
    root = model.root_params
    embedding = model.embedding_params
    head = root - embedding if not model.tie_word_embeddings else root
    held = (embedding if first_stage else 0) + (head if last_stage else 0)
    return min(1.0, held / root) if root else 0.0


def _p2p_s(model: ModelSpec, profile: CostModel, island: IslandSpec, layout: ParallelLayout,
           seq_len: int, micro_batch: Any, recipe: TrainingRecipe) -> Any:
    """One boundary transfer: each tp/cp rank sends its part of the micro-batch's hidden states
    to the same rank of the next stage, on the link the pp dimension's neighbours span."""
    sp = layout.tp > 1 and layout.sequence_parallel
    payload = (np.asarray(micro_batch, dtype=float) * (seq_len / layout.cp) * model.hidden_size
               * dtype_bytes(recipe.param_dtype) / (layout.tp if sp else 1))
    pair = place_group("pp", size=2, stride=layout.stride("pp"),
                       gpus_per_node=island.gpus_per_node, intra_link=island.intra_link,
                       inter_link=island.inter_link, nics_per_node=island.nics_per_node)
    return profile.group_comm_time_s("send_recv", pair, payload)


def _optimizer_s(model: ModelSpec, profile: CostModel, layout: ParallelLayout, seq_len: int,
                 micro_batch: Any, cuts: Sequence[int]) -> tuple[Any, ...]:
    """Per pipeline rank: the optimizer over its blocks' and end stages' parameter shards."""
    shard = RankShard(tp=layout.tp, cp=layout.cp, sequence_parallel=layout.sequence_parallel)

    def opt(unit: str) -> Any:
        return profile.compute_time_s("optimizer", model, seq_len, micro_batch, unit=unit,
                                      num_shards=layout.fsdp_degree, shard=shard)

    block, root = opt("block"), opt("root")
    out = []
    for r in range(layout.pp):
        mine = stage_of_rank(r, layout.pp, layout.virtual_stages)
        share = sum(_root_share(model, first_stage=s == 0, last_stage=s == len(cuts) - 1)
                    for s in mine if s in (0, len(cuts) - 1))
        out.append(sum(cuts[s] for s in mine) * block + share * root)
    return tuple(out)


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
                          step_time_s=schedule.makespan_s, worst_rank=rank,
                          worst_stage=costs.worst_label(), bubble_s=max(0.0, idle - exposed),
                          compute_busy_s=schedule.busy_s(comm=False, island=island),
                          comm_busy_s=schedule.busy_s(comm=True, island=island),
                          exposed_comm_s=exposed, compute_idle_s=idle)


# ---- fast path ---------------------------------------------------------------------------------

def affine_points(layout: ParallelLayout) -> tuple[int, int]:
    """(k0, k1): the two micro-batch counts the affine form is read from (module doc): pp and
    pp + 1, or pp and 2·pp for interleaved 1F1B (k a multiple of pp)."""
    k0 = layout.pp
    return k0, k0 + _accum_multiple(layout)


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
    comm_so_far: dict[int, list[int]] = {}
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
        mine = comm_so_far.setdefault(t.rank, [])
        overlaps.append(tuple(j for j in mine if not anc >> j & 1) if compute else ())
        if not compute and t.stream != "p2p":   # transfers do not contend (module doc)
            mine.append(i)
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
    sources = [np.asarray(v, dtype=float) for v in (
        costs.p2p_s, *costs.optimizer_s, *(getattr(st, name) for st in costs.stages
                                           for name in STAGE_COSTS))]
    # (a task's duration is one of these, or one divided by its number of parts >= 1)
    prune = slow != 1.0 and all(bool(np.all(np.isfinite(v)) and np.all(v >= 0.0))
                                for v in sources)
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
