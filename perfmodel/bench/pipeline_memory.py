"""Stage memory of pipeline-parallel training, tracked in PyTorch: the ground truth of
`perfmodel.costs.memory.pipeline_memory` (`python -m scripts.bench_pipeline_memory`).

Method (the spike's method (c), written for the project's model): one pipeline rank of a job of
pp · dp_shard ranks runs torch's own schedule (`torch.distributed.pipelining`: ScheduleGPipe,
Schedule1F1B or ScheduleInterleaved1F1B) against the fake process group (`FakeStore`) under
`FakeTensorMode`, so an 8B- or 70B-wide stage costs no real memory:

* the stage modules are `StageModule`s: the project's blocks (`perfmodel.bench.model.Block`) of
  the stage's global blocks (`perfmodel.spec.pipeline.stage_blocks`), the embedding on stage 0
  and the final norm with the LM head on the last stage (never tied across stages);
  activation checkpointing by global block index (`recipe_wrap.apply_activation_checkpointing`);
* FSDP2 as torchtitan wraps a model part under PP (`apply_fsdp`, policy "default"): the
  embedding, each block and [final norm, LM head] are units with reshard_after_forward=False
  (torchtitan: "For PP, by default do not reshard after forward to avoid per-microbatch
  all-gathers"), then the stage module, over the dp_shard mesh (1 rank included: FSDP then only
  applies the recipe's mixed precision), `MixedPrecisionPolicy` from the recipe;
* `PipelineStage` with static shapes (micro-batch example tensors, boundary activations with
  requires_grad so that gradients are sent back), the warm-up shape vote bypassed (it calls
  `.item()` on a received tensor, impossible on fake tensors): every stage is set to STATIC;
* the loss is the project model's (`cross_entropy` of the fp32 logits), `return_outputs=False`;
* fused AdamW, its state created by one zero-gradient step before tracking (as `bench memory`);
* `FSDPMemTracker` over every local stage module (`_StagesTracker`: the stock tracker takes one
  root, interleaved ranks have several), keeping only the global peak; before every forward of
  a stage its root statistics are dropped (the tracker refuses a root module that runs forward
  several times in one iteration, as every multi-micro-batch schedule does).

Two optimizer steps run inside the tracker; the row keeps the second step's peak (the first
allocates the schedule's receive buffers, kept afterwards) by category, the most micro-batches
each stage's runtime held between forward and backward (`len(stage.fwd_cache)` after every
forward), and the receive buffers' bytes. Rows are appended one at a time; a rerun skips the
rows already in the file (`perfmodel.bench.common.CsvLog`).

MoE stages (`perfmodel.bench.moe` blocks, the MoE layers by global block index, so a
dense-then-MoE model's dense layers sit where the model puts them): expert parallelism inside a
stage over `ep` ranks borrowed from the pipeline rank's dp_shard, as torchtitan applies EP and
FSDP per model part under PP: a (pp, efsdp, ep) mesh beside the (pp, dp_shard) one, both made
before the fake mode; `perfmodel.bench.moe.shard_experts` keeps the rank's E/ep experts and
`perfmodel.bench.moe.shard_layer` makes them their own FSDP unit over efsdp = dp_shard / ep
(ep > 1; reshard_after_forward=False like every unit here). Routing has a fixed capacity
(`perfmodel.bench.moe`). Those rows carry the expert columns of
`perfmodel.bench.memory_moe` (`MOE_PIPELINE_COLUMNS`): the grid `moe_grid_cases`
(memory-tracker-moe-pipeline.csv) and the held-out draw `moe_heldout_cases`
(memory-tracker-moe-pipeline-heldout.csv), written by `python -m scripts.bench_pipeline_memory
--moe-grid|--moe-heldout -o FILE`. Every shipped row's layers are all MoE layers (the datasets'
`spec_of_row` reads them so); the dense-then-MoE placement is checked live
(tests/test_memory_moe_pipeline.py).

Tensor parallelism inside a stage is not run here (the project's block is not wrapped with
`parallelize_module`): rows have tp = 1. What the fake process group does not show: a real
backend keeps a sent tensor alive until its send completes (NCCL/gloo `Work`), up to one
boundary tensor per outstanding send (spike finding 7).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from copy import deepcopy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from perfmodel.bench.common import CsvLog, resolve_dtype
from perfmodel.bench.environment import append_environment, environment_record
from perfmodel.bench.memory import CATEGORIES, shape_columns
from perfmodel.bench.model import Block, _check_buildable, _norm, rope_tables
from perfmodel.bench.recipe_wrap import apply_activation_checkpointing, mixed_precision
from perfmodel.spec import pipeline
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.recipe import TrainingRecipe

logger = logging.getLogger(__name__)

SCHEDULE_CLASSES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B"}
"""`ParallelLayout.pp_schedule` -> torch's schedule name (`get_schedule_class`)."""
GROUND_TRUTH = "fake-pg-fsdpmemtracker"
"""The `ground_truth` column of rows tracked by `run_case`: torch's schedule for one rank, fake
process group, FakeTensorMode, FSDPMemTracker."""

CASE_COLUMNS = ("pp", "virtual_stages", "pp_schedule", "dp_shard", "tp", "rank", "seq_len",
                "micro_batch", "accum_steps", "ac", "recipe", "param_dtype", "reduce_dtype",
                "attention", "ground_truth")
KEY_COLUMNS = ("model", "num_hidden_layers", *CASE_COLUMNS)
COLUMNS = ("model", "family", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
           "tie_word_embeddings", *CASE_COLUMNS, "stages", "stage_blocks", "in_flight",
           "recv_buffer_bytes", "peak_bytes", *CATEGORIES.values(), "step1_peak_bytes",
           "wall_s", "torch_version")
"""`stages`: the rank's global stages ('0+2'); `stage_blocks`: their block counts ('4+4');
`in_flight`: per stage the most micro-batches torch's runtime held between forward and backward
(`len(stage.fwd_cache)`); `recv_buffer_bytes`: the schedule's receive buffers on this rank;
`peak_bytes` and the category columns: the tracker's peak of the second step;
`step1_peak_bytes`: of the first."""
MOE_COLUMNS = ("ep", "num_experts", "experts_per_token", "expert_intermediate_size",
               "num_shared_experts", "shared_intermediate_size", "shared_expert_gate", "qk_norm",
               "capacity_factor", "expert_capacity")
"""The expert columns of an MoE stage row (`perfmodel.bench.memory_moe.MOE_COLUMNS`' meaning)."""
MOE_KEY_COLUMNS = (*KEY_COLUMNS, "ep", "capacity_factor")
MOE_PIPELINE_COLUMNS = (*COLUMNS[:COLUMNS.index("ground_truth")], *MOE_COLUMNS,
                        *COLUMNS[COLUMNS.index("ground_truth"):])
"""The columns of memory-tracker-moe-pipeline*.csv: the dense pipeline rows' plus the expert
ones."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineMemoryCase:
    """One pipeline rank of one configuration."""

    config_id: str
    """Dataset `model` column."""
    spec: ModelSpec
    """Architecture (its num_layers are the pipeline's blocks)."""
    seq_len: int
    """S: tokens per sequence."""
    micro_batch: int
    """m: sequences per micro-batch."""
    accum_steps: int
    """k: micro-batches per optimizer step (the schedule's n_microbatches)."""
    recipe: TrainingRecipe
    """Dtypes, checkpointing, and the layout: pp, virtual_stages, pp_schedule, dp_shard (given,
    >= 1)."""
    rank: int
    """The pipeline rank tracked."""
    ep: int = 1
    """Expert-parallel degree inside a stage (MoE): ranks of the stage's dp_shard sharing one
    layer's experts; the experts are FSDP-sharded over dp_shard / ep."""
    capacity_factor: float = 1.0
    """Slots per expert over the balanced share T k / E (`perfmodel.bench.moe`, fixed capacity)."""

    def __post_init__(self) -> None:
        for name in ("seq_len", "micro_batch", "accum_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserInputError(f"{name} must be a positive integer, got {value!r}",
                                     hint=f"pass {name} >= 1.")
        layout = self.recipe.parallel
        if layout.dp_shard < 1:
            raise UserInputError("the pipeline memory bench needs an explicit dp_shard",
                                 hint="give dp_shard >= 1 in the case's layout.")
        if (layout.tp, layout.cp, layout.dp_replicate) != (1, 1, 1):
            raise UserInputError(
                f"the pipeline memory bench runs pp x dp_shard only, got {layout.describe()}",
                hint="use tp = cp = dp_replicate = 1 (the project's block is not tensor- or "
                     "context-parallelised in torch).")
        if layout.pp < 2:
            raise UserInputError("the pipeline memory bench needs pp >= 2",
                                 hint="use `shardmeter bench memory` for pp = 1.")
        if not 0 <= self.rank < layout.pp:
            raise UserInputError(f"pipeline rank {self.rank} of pp {layout.pp}",
                                 hint=f"give a rank in 0..{layout.pp - 1}.")
        if self.recipe.attention != "sdpa" or self.recipe.loss != "unfused":
            raise UserInputError("the pipeline memory bench runs SDPA and the unfused loss",
                                 hint="use attention sdpa and loss unfused.")
        pipeline.check_schedule(layout.pp_schedule, layout.pp, layout.virtual_stages,
                                self.accum_steps)
        pipeline.stage_blocks(self.spec.num_layers, layout.pp, layout.virtual_stages)
        if self.spec.moe is not None:
            # lazy: the MoE bench model's checks, with torch
            from perfmodel.bench.moe import check_moe_buildable, check_moe_recipe

            check_moe_buildable(self.spec, self.ep, self.capacity_factor, layout.dp_shard)
            check_moe_recipe(self.recipe)
        elif self.ep != 1:
            raise UserInputError(f"ep {self.ep} given for the dense model {self.spec.name}",
                                 hint="use ep 1, or an MoE model.")

    @property
    def is_moe(self) -> bool:
        """Whether the stages hold MoE blocks (the row then has the expert columns)."""
        return self.spec.moe is not None

    @property
    def world_size(self) -> int:
        """Ranks of the simulated job: pp · dp_shard."""
        return self.recipe.parallel.pp * self.recipe.parallel.dp_shard

    def key(self) -> dict[str, Any]:
        """The CSV resume key of this case."""
        r, layout = self.recipe, self.recipe.parallel
        return {"model": self.config_id, "num_hidden_layers": self.spec.num_layers,
                "pp": layout.pp, "virtual_stages": layout.virtual_stages,
                "pp_schedule": layout.pp_schedule, "dp_shard": layout.dp_shard, "tp": layout.tp,
                "rank": self.rank, "seq_len": self.seq_len, "micro_batch": self.micro_batch,
                "accum_steps": self.accum_steps, "ac": r.ac, "recipe": r.name,
                "param_dtype": r.param_dtype, "reduce_dtype": r.reduce_dtype,
                "attention": r.attention, "ground_truth": GROUND_TRUTH,
                **({"ep": self.ep, "capacity_factor": self.capacity_factor}
                   if self.is_moe else {})}


class StageModule(nn.Module):
    """One pipeline stage of `perfmodel.bench.model.Transformer` (or of
    `perfmodel.bench.moe.MoeTransformer`: the MoE layers by global block index, from
    `first_block`): the embedding (stage 0), the stage's blocks, the final norm and LM head
    (last stage). Input: token ids (stage 0) or the hidden states; output: hidden states, or
    the logits on the last stage."""

    def __init__(self, spec: ModelSpec, blocks: int, *, first: bool, last: bool,
                 first_block: int = 0, capacity_factor: float = 1.0) -> None:
        super().__init__()
        self.spec = spec
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size) if first else None
        if spec.moe is None:
            _check_buildable(spec)
            self.layers = nn.ModuleList(Block(spec) for _ in range(blocks))
        else:
            self.layers = _moe_layers(spec, range(first_block, first_block + blocks),
                                      capacity_factor)
        self.final_norm = _norm(spec) if last else None
        self.lm_head = (nn.Linear(spec.hidden_size, spec.vocab_size, bias=spec.lm_head_bias)
                        if last else None)
        self._rope: tuple[int, torch.Tensor, torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) if self.embed is not None else x
        if self._rope is None or self._rope[0] != h.shape[1]:
            cos, sin = rope_tables(h.shape[1], self.spec.d, device=h.device, dtype=h.dtype)
            self._rope = (h.shape[1], cos, sin)
        cos, sin = self._rope[1], self._rope[2]
        for layer in self.layers:
            h = layer(h, cos, sin)
        if self.lm_head is not None and self.final_norm is not None:
            h = self.lm_head(self.final_norm(h))
        return h


def _moe_layers(spec: ModelSpec, indices: range, capacity_factor: float) -> nn.ModuleList:
    """The blocks of global indices `indices` of `perfmodel.bench.moe.MoeTransformer`: the dense
    block with per-head q/k norms when the model has them, the MLP an MoE block in the MoE
    layers."""
    # lazy: the MoE bench model, with torch
    from perfmodel.bench.moe import MoeBlock, QkNormAttention, check_moe_buildable

    check_moe_buildable(spec, 1, capacity_factor)
    dense = replace(spec, moe=None, qk_norm="none")
    _check_buildable(dense)
    layers = nn.ModuleList(Block(dense) for _ in indices)
    for i, block in zip(indices, layers, strict=True):
        if spec.qk_norm == "head":
            block.attn = QkNormAttention(dense)
        if spec.is_moe_layer(i):
            block.mlp = MoeBlock(spec, capacity_factor=capacity_factor)
    return layers


def build_stage(spec: ModelSpec, stage: int, num_stages: int, blocks: int, *,
                dtype: torch.dtype = torch.float32, seed: int = 0, first_block: int = 0,
                capacity_factor: float = 1.0) -> StageModule:
    """A `StageModule` in `dtype` with the seeded small-normal initialisation of `build_model`
    (an MoE stage holds all E experts per layer; `perfmodel.bench.moe.shard_experts` then keeps
    the rank's E/ep)."""
    torch.manual_seed(seed + stage)
    module = StageModule(spec, blocks, first=stage == 0, last=stage == num_stages - 1,
                         first_block=first_block, capacity_factor=capacity_factor)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            elif param.dim() >= 2:
                param.normal_(0.0, 0.02)
    if any(p.dtype != dtype for p in module.parameters()):
        module = module.to(dtype=dtype)
    return module


def shard_stage(module: StageModule, recipe: TrainingRecipe, *, first_block: int,
                mesh: Any, sparse_mesh: Any = None) -> StageModule:
    """The recipe's checkpointing, then FSDP2 as torchtitan wraps a model part under PP (module
    doc): every unit with reshard_after_forward=False. An MoE stage's layers are wrapped by
    `perfmodel.bench.moe.shard_layer` (the experts their own unit over `sparse_mesh`'s efsdp
    dimension when ep > 1), after `perfmodel.bench.moe.shard_experts` kept the rank's experts."""
    # lazy: torch.distributed's FSDP, loaded with the bench only
    from torch.distributed.fsdp import fully_shard

    # lazy: the MoE bench model, with torch
    from perfmodel.bench.moe import MoeBlock, shard_layer

    apply_activation_checkpointing(module, recipe.ac, first_block=first_block)
    kw: dict[str, Any] = {"mesh": mesh, "mp_policy": mixed_precision(recipe),
                          "reshard_after_forward": False}
    if module.embed is not None:
        fully_shard(module.embed, **kw)
    for block in module.layers:
        moe = next((m for m in block.modules() if isinstance(m, MoeBlock)), None)
        if moe is not None:
            shard_layer(block, moe, dense_mesh=mesh, sparse_mesh=sparse_mesh,
                        reshard_after_forward=False, mp_policy=kw["mp_policy"])
        else:
            fully_shard(block, **kw)
    if module.final_norm is not None and module.lm_head is not None:
        fully_shard([module.final_norm, module.lm_head], **kw)
    fully_shard(module, mesh=mesh, mp_policy=kw["mp_policy"])
    return module


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The project model's loss: mean cross-entropy of the fp32 logits."""
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), target.view(-1))


def _stages_tracker(modules: list[nn.Module], optimizer: Any) -> Any:
    """FSDPMemTracker over several root modules (the stock one takes one), keeping only the
    global peak (as `perfmodel.bench.memory._global_peak_tracker`, same private fields of
    torch 2.13)."""
    # lazy: torch's private memory tracker, loaded with the bench only
    from torch.distributed._tools.fsdp2_mem_tracker import (
        FSDPMemTracker,
        _FSDPRefType,
        _FSDPState,
    )
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.utils.weak import WeakIdKeyDictionary

    class StagesTracker(FSDPMemTracker):  # type: ignore[no-untyped-call]  # untyped torch
        def __init__(self) -> None:
            MemTracker.__init__(self)
            # every FSDP unit of every local stage: the hooks walk `_root_mod.modules()`
            self._root_mod = nn.ModuleList(modules)  # type: ignore[assignment]  # hooks only
            self._optm = optimizer
            self._fsdp_mod_to_saved_methods = WeakIdKeyDictionary()
            self._fsdp_state = _FSDPState.PRE_FW
            self._ref_class = _FSDPRefType

        def _update_peak_stats(self, peak_state: Any) -> None:
            for dev, snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < snap["Total"]:
                    self._peak_mem[dev] = snap["Total"]
                    self._peak_mem_snap[dev] = deepcopy(snap)

    return StagesTracker()


def _reset_peak(tracker: Any) -> None:
    """Restart the tracker's global peak from the current state (private fields, torch 2.13)."""
    tracker._peak_mem_snap = tracker.get_tracker_snapshot("current")
    tracker._peak_mem = {dev: snap["Total"] for dev, snap in tracker._peak_mem_snap.items()}


def _peak_columns(tracker: Any) -> dict[str, int]:
    peaks = tracker.get_tracker_snapshot("peak")
    snapshot = peaks[max(peaks, key=lambda d: peaks[d]["Total"])]
    by_name = {getattr(k, "value", k): int(v) for k, v in snapshot.items()}
    out = {"peak_bytes": int(snapshot["Total"])}
    out.update({column: by_name.get(name, 0) for name, column in CATEGORIES.items()})
    return out


def _recv_buffer_bytes(stages: list[Any]) -> int:
    total = 0
    for stage in stages:
        for infos in (*stage.args_recv_info.values(), *stage.grad_recv_info.values()):
            for info in infos:
                buffer = getattr(info, "buffer", None)
                if isinstance(buffer, torch.Tensor):
                    total += buffer.numel() * buffer.element_size()
    return total


def run_case(case: PipelineMemoryCase) -> dict[str, Any]:
    """Track one pipeline rank (module doc); returns its dataset row."""
    # lazy: torch.distributed's fake process group and pipelining, loaded with the bench only
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining._utils import InferenceMode
    from torch.distributed.pipelining.schedules import get_schedule_class
    from torch.testing._internal.distributed.fake_pg import FakeStore

    # lazy: the recipe's optimizer and the MoE model's expert split, with torch
    from perfmodel.bench.moe import SPARSE_DIMS, shard_experts
    from perfmodel.bench.recipe_wrap import init_optimizer_state, make_optimizer

    layout, spec = case.recipe.parallel, case.spec
    cuts = pipeline.stage_blocks(spec.num_layers, layout.pp, layout.virtual_stages)
    num_stages = len(cuts)
    local = pipeline.stage_of_rank(case.rank, layout.pp, layout.virtual_stages)
    firsts = [sum(cuts[:s]) for s in range(num_stages)]
    m, S, k = case.micro_batch, case.seq_len, case.accum_steps
    act_dtype = resolve_dtype(case.recipe.param_dtype)
    start_s = time.perf_counter()
    if dist.is_initialized():
        dist.destroy_process_group()
    # global rank of (pipeline rank, dp_shard rank 0) on the mesh (pp, dp_shard)
    dist.init_process_group("fake", rank=case.rank * layout.dp_shard,
                            world_size=case.world_size, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (layout.pp, layout.dp_shard),
                                mesh_dim_names=("pp", "dp_shard"))
        # MoE: the experts' (efsdp, ep) mesh inside each pipeline rank's dp_shard ranks, ep
        # innermost (`perfmodel.bench.moe.moe_meshes`), made before the fake mode too
        sparse = (init_device_mesh("cpu", (layout.pp, layout.dp_shard // case.ep, case.ep),
                                   mesh_dim_names=("pp", *SPARSE_DIMS))
                  if case.is_moe else None)
        with FakeTensorMode():
            modules = []
            for s in local:
                module = build_stage(spec, s, num_stages, cuts[s], first_block=firsts[s],
                                     capacity_factor=case.capacity_factor,
                                     dtype=resolve_dtype(case.recipe.master_dtype))
                if sparse is not None:
                    shard_experts(module, sparse)  # type: ignore[arg-type]  # has .layers
                modules.append(shard_stage(module, case.recipe, first_block=firsts[s],
                                           mesh=mesh["dp_shard"], sparse_mesh=sparse))
            optimizer = make_optimizer(nn.ModuleList(modules), case.recipe)
            init_optimizer_state(nn.ModuleList(modules), optimizer)
            stages = []
            for s, module in zip(local, modules, strict=True):
                hidden = (m, S, spec.hidden_size)
                inp = (torch.empty(m, S, dtype=torch.long) if s == 0
                       else torch.empty(hidden, dtype=act_dtype, requires_grad=True))
                out = (torch.empty(m, S, spec.vocab_size, dtype=act_dtype)
                       if s == num_stages - 1
                       else torch.empty(hidden, dtype=act_dtype, requires_grad=True))
                stages.append(PipelineStage(module, s, num_stages, torch.device("cpu"),
                                            input_args=(inp,), output_args=(out,),
                                            group=mesh.get_group("pp")))
            schedule_cls = get_schedule_class(SCHEDULE_CLASSES[layout.pp_schedule])
            schedule = schedule_cls(stages if layout.virtual_stages > 1 else stages[0],
                                    n_microbatches=k, loss_fn=loss_fn)

            def static_shapes(stage_list: Any, *args: Any, **kwargs: Any) -> None:
                # the shape vote `.item()`s a received tensor: impossible on fake tensors
                for stage in stage_list:
                    stage._inference_mode = InferenceMode.STATIC

            schedule._warmup_p2p = static_shapes
            tokens = torch.randint(0, spec.vocab_size, (k * m, S))
            labels = torch.randint(0, spec.vocab_size, (k * m, S))
            has_first, has_last = 0 in local, num_stages - 1 in local
            tracker = _stages_tracker(list(modules), optimizer)
            tracker.track_inputs(tuple(t for t, on in ((tokens, has_first),
                                                       (labels, has_last)) if on))
            held = dict.fromkeys(local, 0)
            for stage in stages:
                forward = stage.forward_one_chunk

                def tracked_forward(*args: Any, _forward: Any = forward, _stage: Any = stage,
                                    **kwargs: Any) -> Any:
                    # forget the stage root's stats: the tracker refuses a root module that
                    # runs forward several times in one iteration
                    tracker.memory_tracking.pop(_stage.submod, None)
                    result = _forward(*args, **kwargs)
                    held[_stage.stage_index] = max(held[_stage.stage_index],
                                                   len(_stage.fwd_cache))
                    return result

                setattr(stage, "forward_one_chunk", tracked_forward)  # noqa: B010  (method)
            peaks = []
            with tracker:
                for _ in range(2):
                    _reset_peak(tracker)
                    for s in held:
                        held[s] = 0
                    schedule.step(*((tokens,) if has_first else ()),
                                  target=labels if has_last else None, return_outputs=False)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    peaks.append(_peak_columns(tracker))
            recv = _recv_buffer_bytes(stages)
    finally:
        dist.destroy_process_group()
    experts: dict[str, Any] = {}
    if case.is_moe:
        # lazy: the MoE dataset's columns (one home)
        from perfmodel.bench.memory_moe import expert_columns

        experts = expert_columns(spec, case.ep, case.capacity_factor, m * S)
    return {**shape_columns(case.config_id, spec), **case.key(), **experts,
            "stages": "+".join(str(s) for s in local),
            "stage_blocks": "+".join(str(cuts[s]) for s in local),
            "in_flight": "+".join(str(held[s]) for s in local), "recv_buffer_bytes": recv,
            **peaks[1], "step1_peak_bytes": peaks[0]["peak_bytes"],
            "wall_s": time.perf_counter() - start_s, "torch_version": torch.__version__}


def run_cases(cases: Iterable[PipelineMemoryCase], out_path: str | Path, *,
              limit: int | None = None, extra: dict[str, Any] | None = None) -> dict[str, int]:
    """Track every case not yet in `out_path`, one row each (resumable); counts."""
    cases = list(cases)
    moe = {c.is_moe for c in cases}
    if len(moe) > 1:
        raise UserInputError("dense and MoE pipeline cases go to different files",
                             hint="run the MoE cases into their own CSV.")
    log = (CsvLog(out_path, MOE_PIPELINE_COLUMNS, MOE_KEY_COLUMNS) if True in moe
           else CsvLog(out_path, COLUMNS, KEY_COLUMNS))
    done = log.done_keys()
    append_environment(out_path, environment_record(
        device="fake", threads=torch.get_num_threads(),
        extra={"benchmark": "memory-moe-pipeline" if True in moe else "memory-pipeline",
               "ground_truth": GROUND_TRUTH,
               "tracked_steps": 2, **(extra or {})}))
    counts = {"measured": 0, "skipped": 0}
    for case in cases:
        if log.key_of(case.key()) in done:
            counts["skipped"] += 1
            continue
        if limit is not None and counts["measured"] >= limit:
            break
        row = run_case(case)
        log.append([row])
        counts["measured"] += 1
        logger.info("%s %s k=%d rank %d: peak %.3f GiB (%.1f s)", case.config_id,
                    case.recipe.parallel.describe(), case.accum_steps, case.rank,
                    row["peak_bytes"] / 2**30, row["wall_s"])
    return counts


def with_layers(spec: ModelSpec, num_layers: int) -> ModelSpec:
    """`spec` cut to `num_layers` blocks (a real model's widths, a tractable depth)."""
    return replace(spec, name=f"{spec.name} [{num_layers} blocks]", num_layers=num_layers,
                   published_params=None)


# ---- the shipped grid and the held-out draw ----------------------------------------------------

GRID_MODELS = {"llama-3-8b": 8, "llama-3.1-70b": 8, "qwen2.5-7b": 10, "phi-1.5": 12}
"""Catalog models at their real widths, cut to these many blocks (1 to 6 blocks per stage):
GQA, a 70B-wide block and a 128k vocabulary, q/k/v biases with uneven stages (10 blocks), and
LayerNorm parallel blocks with every bias."""
GRID_SCHEDULES = (("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2))
"""(schedule, virtual stages)."""
GRID_PP = (2, 4, 8)
GRID_DP_SHARD = (1, 2, 8)
GRID_SEQ_LENS = (2048, 4096)
GRID_MICRO_BATCHES = (1, 2)
GRID_AC = ("none", "op-sac", "full")
GRID_CONFIGS = 24
"""Configurations drawn (each tracked on several pipeline ranks, `grid_ranks`)."""
HEAVY_WIDTH = 8192
MAX_HEAVY_CONFIGS = 6
"""At most this many grid configurations of blocks this wide (70B: the slowest to track)."""


def _micro_batch_counts(schedule: str, pp: int) -> tuple[int, ...]:
    """k per step the grid tries: GPipe 2 and pp; 1F1B pp and 2·pp (it needs k >= pp);
    interleaved pp and 2·pp (multiples of pp satisfy torch's rule)."""
    return tuple(sorted({2, pp})) if schedule == "gpipe" else (pp, 2 * pp)


def grid_ranks(pp: int) -> tuple[int, ...]:
    """Pipeline ranks tracked per configuration: every rank up to pp 4; at pp 8 the first, the
    second, a middle and the last."""
    return tuple(range(pp)) if pp <= 4 else (0, 1, pp // 2, pp - 1)


def _case(name: str, layers: int, schedule: str, v: int, pp: int, dp: int, k: int, m: int,
          seq_len: int, ac: str, rank: int, recipe: TrainingRecipe) -> PipelineMemoryCase:
    # lazy: the catalog, read only when cases are built
    from perfmodel.spec.catalog import get_model

    return PipelineMemoryCase(
        config_id=name, spec=with_layers(get_model(name), layers), seq_len=seq_len,
        micro_batch=m, accum_steps=k, rank=rank,
        recipe=recipe.with_overrides(ac=ac, pp=pp, virtual_stages=v, pp_schedule=schedule,
                                     dp_shard=dp))


def grid_cases(*, configs: int = GRID_CONFIGS, seed: int = 0) -> list[PipelineMemoryCase]:
    """The shipped grid: `configs` configurations drawn without replacement from every valid
    (model, schedule, pp, dp_shard, k, m, S, AC) with `random.Random(seed)`, round-robin over
    the (schedule, AC) cells so that each appears about equally often; interleaved at pp 2 and
    4 only (pp · V stages must not exceed the blocks); each on the ranks of `grid_ranks`."""
    # lazy: only the generator draws
    import itertools
    import random

    # lazy: the default recipe, read only when cases are built
    from perfmodel.spec.recipe import DEFAULT_RECIPE

    combos = [(name, layers, schedule, v, pp, dp, k, m, s, ac)
              for (name, layers), (schedule, v), pp, dp, m, s, ac in itertools.product(
                  GRID_MODELS.items(), GRID_SCHEDULES, GRID_PP, GRID_DP_SHARD,
                  GRID_MICRO_BATCHES, GRID_SEQ_LENS, GRID_AC)
              for k in _micro_batch_counts(schedule, pp) if pp * v <= layers]
    rng = random.Random(seed)
    rng.shuffle(combos)
    cells: dict[tuple[str, str], list[Any]] = {}
    for combo in combos:
        cells.setdefault((combo[2], combo[9]), []).append(combo)
    # lazy: the catalog, read only when cases are built
    from perfmodel.spec.catalog import get_model

    picked: list[Any] = []
    heavy = 0
    while len(picked) < configs and any(cells.values()):
        for cell in cells.values():
            while cell and len(picked) < configs:
                combo = cell.pop()
                if get_model(combo[0]).hidden_size >= HEAVY_WIDTH:
                    if heavy >= MAX_HEAVY_CONFIGS:
                        continue
                    heavy += 1
                picked.append(combo)
                break
    return [_case(name, layers, schedule, v, pp, dp, k, m, s, ac, rank, DEFAULT_RECIPE)
            for name, layers, schedule, v, pp, dp, k, m, s, ac in picked
            for rank in grid_ranks(pp)]


HELDOUT_MODELS = ("yi-6b", "gemma-2b", "mistral-7b-v0.1", "llama-3.2-1b", "chinchilla-10b",
                  "smollm-360m", "llama-3.1-405b")
"""Models the grid never uses: fewer kv heads, tied embeddings (each end stage then holds its
own copy), multi-query attention with a 256k vocabulary, multi-head attention, and a 405B-wide
block."""
HELDOUT_CONFIGS = 20
HELDOUT_SEED = 24
"""The held-out draw's seed (issue 24), fixed before any error was looked at."""


def heldout_cases(*, seed: int = HELDOUT_SEED,
                  configs: int = HELDOUT_CONFIGS) -> list[PipelineMemoryCase]:
    """`configs` configurations outside the grid, one pipeline rank each, drawn with
    `random.Random(seed)`: a held-out model, blocks 6 to 16 (405B-wide: 2 to 6), pp in
    {2, 3, 4, 6} (uneven stages), a schedule (interleaved with 2 or 3 virtual stages),
    dp_shard in {1, 4}, k from the schedule's valid counts up to 3·pp, m in {1, 2, 4},
    S in {1024, 3072}, AC in {none, op-sac, full, attn, layer:2}, and a rank."""
    # lazy: only the generator draws
    import random

    # lazy: the default recipe, read only when cases are built
    from perfmodel.spec.recipe import DEFAULT_RECIPE

    rng = random.Random(seed)
    out: list[PipelineMemoryCase] = []
    while len(out) < configs:
        name = rng.choice(HELDOUT_MODELS)
        layers = rng.randint(2, 6) if name == "llama-3.1-405b" else rng.randint(6, 16)
        pp = rng.choice((2, 3, 4, 6))
        schedule = rng.choice(("gpipe", "1f1b", "interleaved-1f1b"))
        v = rng.choice((2, 3)) if schedule == "interleaved-1f1b" else 1
        dp = rng.choice((1, 4))
        counts = [k for k in range(1, 3 * pp + 1) if _valid_k(schedule, pp, v, k)]
        k = rng.choice(counts)
        m = rng.choice((1, 2, 4))
        seq_len = rng.choice((1024, 3072))
        ac = rng.choice(("none", "op-sac", "full", "attn", "layer:2"))
        rank = rng.randrange(pp)
        if pp * v > layers:
            continue
        out.append(_case(name, layers, schedule, v, pp, dp, k, m, seq_len, ac, rank,
                         DEFAULT_RECIPE))
    return out


def _valid_k(schedule: str, pp: int, v: int, k: int) -> bool:
    try:
        pipeline.check_schedule(schedule, pp, v, k)
    except UserInputError:
        return False
    return True


# ---- MoE stages: the shipped grid and the held-out draw ----------------------------------------

MOE_GRID_SCHEDULES = (("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2))
"""(schedule, virtual stages) of the MoE grid."""
MOE_GRID_PP = (2, 4)
MOE_GRID_EP = (1, 2, 4, 8)
MOE_GRID_DP_SHARD = 8
"""Each pipeline rank's dp_shard ranks in the MoE grid (ep 1 to 8 all divide it)."""
MOE_GRID_SEQ_LEN = 2048
MOE_GRID_MICRO_BATCHES = (1, 2)
MOE_GRID_AC = ("none", "full")
MOE_GRID_CAPACITY_FACTOR = 1.0
MOE_BLOCKS_PER_STAGE = 2
"""Grid stages hold this many blocks each (layers = pp x virtual stages x 2)."""
MOE_GRID_CONFIGS = 36
"""Configurations drawn for the MoE grid, each tracked on the first and the last pipeline rank."""


def _moe_case(config: str, spec: ModelSpec, schedule: str, v: int, pp: int, dp: int, ep: int,
              k: int, m: int, seq_len: int, ac: str, capacity_factor: float,
              rank: int) -> PipelineMemoryCase:
    # lazy: the default recipe, read only when cases are built
    from perfmodel.spec.recipe import DEFAULT_RECIPE

    return PipelineMemoryCase(
        config_id=config, spec=spec, seq_len=seq_len, micro_batch=m, accum_steps=k, rank=rank,
        ep=ep, capacity_factor=capacity_factor,
        recipe=DEFAULT_RECIPE.with_overrides(ac=ac, pp=pp, virtual_stages=v,
                                             pp_schedule=schedule, dp_shard=dp, ep=ep))


def moe_grid_cases(*, configs: int = MOE_GRID_CONFIGS,
                   seed: int = 0) -> list[PipelineMemoryCase]:
    """The shipped MoE grid (memory-tracker-moe-pipeline.csv): the two MoE shapes of
    `perfmodel.bench.memory_moe.CONFIGS` at real width, every layer an MoE layer, two blocks per
    stage; every (shape, schedule, pp, ep, k in {pp, 2 pp}, m, AC) at dp_shard 8, S 2048 and
    capacity factor 1, shuffled by `random.Random(seed)` and drawn round-robin over the
    (shape, ep, schedule) cells; each configuration on its first and last pipeline rank."""
    # lazy: only the generator draws
    import itertools
    import random

    # lazy: the MoE shapes (one home)
    from perfmodel.bench.memory_moe import CONFIGS, load_spec

    combos = [(path, schedule, v, pp, ep, k, m, ac)
              for path, (schedule, v), pp, ep, m, ac in itertools.product(
                  CONFIGS.values(), MOE_GRID_SCHEDULES, MOE_GRID_PP, MOE_GRID_EP,
                  MOE_GRID_MICRO_BATCHES, MOE_GRID_AC)
              for k in (pp, 2 * pp)]
    random.Random(seed).shuffle(combos)
    cells: dict[tuple[str, int, str], list[Any]] = {}
    for combo in combos:
        cells.setdefault((combo[0], combo[4], combo[1]), []).append(combo)
    picked: list[Any] = []
    while len(picked) < configs and any(cells.values()):
        for key in sorted(cells):
            if cells[key] and len(picked) < configs:
                picked.append(cells[key].pop())
    out = []
    for path, schedule, v, pp, ep, k, m, ac in picked:
        spec = load_spec(path, pp * v * MOE_BLOCKS_PER_STAGE)
        out += [_moe_case(path, spec, schedule, v, pp, MOE_GRID_DP_SHARD, ep, k, m,
                          MOE_GRID_SEQ_LEN, ac, MOE_GRID_CAPACITY_FACTOR, rank)
                for rank in (0, pp - 1)]
    return out


MOE_HELDOUT_SEED = 2426
"""The MoE held-out draw's seed, fixed before any row was tracked."""
MOE_HELDOUT_CONFIGS = 16
MOE_HELDOUT_DP_SHARD = (4, 16)
MOE_HELDOUT_SEQ_LENS = (1024, 3072)
MOE_HELDOUT_MICRO_BATCHES = (1, 3)
MOE_HELDOUT_CAPACITY_FACTORS = (1.25, 1.5)


def moe_heldout_cases(*, seed: int = MOE_HELDOUT_SEED,
                      configs: int = MOE_HELDOUT_CONFIGS) -> list[PipelineMemoryCase]:
    """`configs` MoE configurations outside the grid (memory-tracker-moe-pipeline-heldout.csv),
    one pipeline rank each, drawn with `random.Random(seed)`: the grid's shapes and the held-out
    one (`perfmodel.bench.memory_moe.HELDOUT_CONFIGS`), pp in {2, 3, 4}, a schedule
    (interleaved with 2 virtual stages), 1 to 3 blocks per stage (uneven stages too), dp_shard
    in {4, 16} (never the grid's 8), an ep dividing it and the experts, k from the schedule's
    valid counts up to 3 pp, m in {1, 3}, S in {1024, 3072}, AC none or full, capacity factor
    1.25 or 1.5, and a rank; a draw the MoE bench model cannot build is drawn again."""
    # lazy: only the generator draws
    import random

    # lazy: the MoE shapes (one home) and the MoE model's checks, with torch
    from perfmodel.bench.memory_moe import CONFIGS, HELDOUT_CONFIGS, load_spec
    from perfmodel.bench.moe import check_moe_buildable

    paths = (*CONFIGS.values(), *HELDOUT_CONFIGS.values())
    rng = random.Random(seed)
    out: list[PipelineMemoryCase] = []
    while len(out) < configs:
        path = rng.choice(paths)
        pp = rng.choice((2, 3, 4))
        schedule = rng.choice(("gpipe", "1f1b", "interleaved-1f1b"))
        v = 2 if schedule == "interleaved-1f1b" else 1
        layers = rng.randint(pp * v, 3 * pp * v)
        dp = rng.choice(MOE_HELDOUT_DP_SHARD)
        ep = rng.choice((1, 2, 4))
        k = rng.choice([n for n in range(1, 3 * pp + 1) if _valid_k(schedule, pp, v, n)])
        m = rng.choice(MOE_HELDOUT_MICRO_BATCHES)
        seq_len = rng.choice(MOE_HELDOUT_SEQ_LENS)
        ac = rng.choice(MOE_GRID_AC)
        cf = rng.choice(MOE_HELDOUT_CAPACITY_FACTORS)
        rank = rng.randrange(pp)
        spec = load_spec(path, layers)
        try:
            check_moe_buildable(spec, ep, cf, dp)
        except UserInputError:
            continue
        out.append(_moe_case(path, spec, schedule, v, pp, dp, ep, k, m, seq_len, ac, cf, rank))
    return out
