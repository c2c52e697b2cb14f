"""Per-rank memory of mixture-of-experts training under expert parallelism: issue 26's ground
truth.

Claim: each row is the peak FSDPMemTracker reports on rank 0 for one optimizer step (after the
AdamW state exists) of `perfmodel.bench.moe.MoeTransformer` trained as the row says: EP over
`ep` ranks, FSDP2 of the experts over efsdp = world / ep ranks and of everything else over all
`world_size` ranks, the recipe's mixed precision (bf16 compute over fp32 master weights, fp32
reduction), checkpointing (`ac`) and accumulation (`accum_steps`, `accum_mode`).
Why: the performance model's MoE memory (`perfmodel.costs.memory`) is checked against it
(issue 26: MAPE <= 3 %, worst <= 8 % on this grid and the held-out configurations).
Checked by: tests/test_memory_moe.py (columns, a tiny case run live, the draws' disjointness).

Ground truth (`ground_truth` column): `fsdp-mem-tracker/fake`, FSDPMemTracker under
FakeTensorMode with the fake process group, rank 0; the device meshes are created before the
fake mode (`perfmodel.bench.moe.moe_meshes`), as `perfmodel.bench.memory` does for dense FSDP.
Routing has a FIXED capacity (`perfmodel.bench.moe`: data-dependent all-to-all splits cannot be
faked), so every buffer is a function of the row's columns. The buffers of one MoE layer's
forward, with T = micro_batch x seq_len tokens on the rank, C = `expert_capacity` (column), E
experts, k experts per token, E_l = E / ep local experts, f_e the expert width, h the hidden
size, in the compute dtype (bf16) unless said:

* router logits (T, E) bf16 and their softmax (T, E) fp32 (saved for backward), top-k weights
  and indices (T, k) fp32 / int64, renormalised weights (T, k) fp32;
* routing bookkeeping (no gradient): a (k T, E) int32 one-hot and its int32 cumulative sum,
  slot and slot-token indices (k T and E C + 1, int64);
* dispatch: the (T + 1, h) input with a zero row, the (E C, h) dispatched slots (gathered);
  under ep > 1 the all-to-all output (E C, h) (E_l x ep C slots received) and its
  (E_l, ep C, h) expert-major copy;
* expert activations on (E_l, ep C) slots (ep C = C when ep = 1): the bmm input (saved), gate
  and up outputs (E_l, ep C, f_e) each, SiLU(gate) (saved), their product (saved for the down
  bmm), the down output (E_l, ep C, h);
* combine: the output back in slot order (E C, h) (an all-to-all output under ep > 1), with a
  zero row (E C + 1, h), the (k T, h) per-assignment rows (saved for the weight's gradient)
  times the weights, summed over k into (T, h);
* shared experts (when num_shared_experts > 0): a gated MLP of width num_shared_experts x
  shared_intermediate_size on all T tokens, times a sigmoid gate (T, 1) when shared_expert_gate.

Attention, norms, embedding, LM head and loss are the dense bench model's
(`perfmodel.bench.model`; Qwen3's per-head q/k RMSNorms add their (T, a d) and (T, a_kv d)
outputs when `qk_norm` is "head").

`grid_cases()` is the shipped grid (`memory-tracker-moe.csv`), `heldout_cases()` the held-out
configurations (`memory-tracker-moe-heldout.csv`), drawn by `random.Random(HELDOUT_SEED)` from a
space disjoint from the grid's (other world sizes, sequence lengths, micro-batches and capacity
factors) before any error was looked at. Generating command:
`python -m scripts.make_memory_moe --grid|--heldout -o FILE [--jobs N]` (resumable).
The `model` column is the config.json the spec was read from (`perfmodel.spec.hf_config`) with
`num_hidden_layers` of the row (fewer layers than the checkpoint, every layer an MoE layer, at
full width: the tracker's cost grows with the layer count).
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfmodel.bench.common import resolve_dtype
from perfmodel.bench.memory import CATEGORIES, MemoryCase, shape_columns
from perfmodel.bench.memory_layouts import COLUMNS as LAYOUT_COLUMNS_ALL
from perfmodel.bench.memory_layouts import GROUND_TRUTHS
from perfmodel.bench.memory_layouts import KEY_COLUMNS as LAYOUT_KEY_COLUMNS
from perfmodel.bench.memory_runner import run_tracked_cases
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.hf_config import load_hf_config
from perfmodel.spec.paths import REPO_ROOT
from perfmodel.spec.recipe import DEFAULT_RECIPE

logger = logging.getLogger(__name__)

MOE_COLUMNS = ("ep", "num_experts", "experts_per_token", "expert_intermediate_size",
               "num_shared_experts", "shared_intermediate_size", "shared_expert_gate", "qk_norm",
               "capacity_factor", "expert_capacity")
"""The MoE columns a row adds to those of memory-tracker-layouts.csv."""
COLUMNS = (*LAYOUT_COLUMNS_ALL[:LAYOUT_COLUMNS_ALL.index("ground_truth")], *MOE_COLUMNS,
           *LAYOUT_COLUMNS_ALL[LAYOUT_COLUMNS_ALL.index("ground_truth"):])
KEY_COLUMNS = (*LAYOUT_KEY_COLUMNS, "num_hidden_layers", "ep", "capacity_factor")
GROUND_TRUTH = {"fsdp-mem-tracker/fake": GROUND_TRUTHS["fsdp-mem-tracker/fake"]}
"""The `ground_truth` column's one value and what it means (the layouts' fake-tensor one)."""
_ = CATEGORIES  # the breakdown columns are memory.CATEGORIES' (through the layouts' COLUMNS)


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeMemoryCase:
    """One tracked MoE configuration."""

    case: MemoryCase
    """Model (an MoE `ModelSpec`), world size, S, m, k, recipe (ac, accumulation), steps."""
    ep: int
    """Expert-parallel degree: ranks sharing one layer's experts (divides E and the world)."""
    capacity_factor: float
    """Slots per expert over the balanced share T k / E (fixed-capacity routing)."""

    def __post_init__(self) -> None:
        # lazy: the module's own check, with torch
        from perfmodel.bench.moe import check_moe_buildable, check_moe_recipe

        check_moe_buildable(self.case.spec, self.ep, self.capacity_factor,
                            self.case.world_size)
        check_moe_recipe(self.case.recipe)


def case_key(case: MoeMemoryCase) -> dict[str, Any]:
    """The CSV resume key (and the case columns) of a row."""
    c = case.case
    return {**c.key("fake"), "dp_replicate": 1, "dp_shard": c.world_size, "tp": 1, "cp": 1,
            "sequence_parallel": False, "num_hidden_layers": c.spec.num_layers, "ep": case.ep,
            "capacity_factor": case.capacity_factor}


def moe_columns(case: MoeMemoryCase) -> dict[str, Any]:
    """The MoE shape columns of a row."""
    return expert_columns(case.case.spec, case.ep, case.capacity_factor,
                          case.case.micro_batch * case.case.seq_len)


def expert_columns(spec: ModelSpec, ep: int, capacity_factor: float,
                   tokens: int) -> dict[str, Any]:
    """The MoE columns (`MOE_COLUMNS`) of a row of `spec` under `ep` with `capacity_factor`,
    `tokens` routed per micro-batch on the rank (the expert capacity follows from them)."""
    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.moe import expert_capacity

    moe = spec.moe
    if moe is None:  # refused by the cases' checks
        raise UserInputError("not an MoE model", hint="give an MoE model.")
    return {"ep": ep, "num_experts": moe.num_experts,
            "experts_per_token": moe.experts_per_token,
            "expert_intermediate_size": moe.expert_intermediate_size,
            "num_shared_experts": moe.num_shared_experts,
            "shared_intermediate_size": moe.shared_intermediate_size,
            "shared_expert_gate": moe.shared_expert_gate, "qk_norm": spec.qk_norm,
            "capacity_factor": capacity_factor,
            "expert_capacity": expert_capacity(tokens, moe, capacity_factor)}


def run_moe_case(case: MoeMemoryCase) -> dict[str, Any]:
    """Track one case under FakeTensorMode with the fake process group; its row."""
    # lazy: torch, the optional [bench] extra
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.memory import tracked_steps
    from perfmodel.bench.moe import (
        build_moe_model,
        moe_meshes,
        shard_experts,
        shard_moe_with_recipe,
    )
    from perfmodel.bench.recipe_wrap import make_optimizer
    from perfmodel.bench.tp import local_param_bytes

    c = case.case
    start_s = time.perf_counter()
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=c.world_size, store=FakeStore())
    try:
        dense, sparse = moe_meshes(c.world_size, case.ep)  # before fake mode
        with FakeTensorMode():
            model = build_moe_model(c.spec, capacity_factor=case.capacity_factor,
                                    dtype=resolve_dtype(c.recipe.master_dtype))
            shard_experts(model, sparse)
            shard_moe_with_recipe(model, c.recipe, dense_mesh=dense, sparse_mesh=sparse)
            optimizer = make_optimizer(model, c.recipe)
            tokens = torch.randint(0, c.spec.vocab_size, (c.micro_batch, c.seq_len))
            columns = tracked_steps(model, optimizer, tokens, c, steps=c.steps)
            param_bytes = local_param_bytes(model)
    finally:
        dist.destroy_process_group()
    return {**shape_columns(c.config_id, c.spec), **case_key(case), **moe_columns(case),
            "ground_truth": "fsdp-mem-tracker/fake", **columns,
            "local_param_bytes": param_bytes, "wall_s": time.perf_counter() - start_s,
            "torch_version": torch.__version__}


# ---- the shipped grid and the held-out configurations --------------------------------------

CONFIGS = {"mixtral-8x7b": "tests/data/configs/mixtral_8x7b/config.json",
           "qwen3-30b-a3b": "tests/data/configs/qwen3_30b_a3b/config.json"}
"""The two MoE shapes at real width (sources: tests/data/configs/README.md): Mixtral-8x7B (E 8,
k 2, f_e 14336, h 4096) and Qwen3-30B-A3B (E 128, k 8, f_e 768, h 2048, per-head q/k norms)."""
HELDOUT_CONFIGS = {"qwen1.5-moe-a2.7b": "tests/data/configs/qwen1_5_moe_a2_7b/config.json"}
"""A third shape for the held-out draw only: Qwen1.5-MoE-A2.7B (E 60, k 4, f_e 1408, a gated
shared expert of width 5632, q/k/v biases)."""
LAYERS = 4
"""Layers built of each shape (every one an MoE layer; the row's num_hidden_layers)."""

GRID_EP = (1, 2, 4, 8)
GRID_WORLDS = (8, 16)
GRID_SEQ_LENS = (4096,)
GRID_MICRO_BATCHES = (1, 2)
GRID_AC = ("none", "full")
GRID_CAPACITY_FACTORS = (1.0, 1.25)
GRID_CASES = 32
"""Rows of the shipped grid: a seeded draw stratified over (model, ep)."""

HELDOUT_SEED = 26
"""Seed of the held-out draw (fixed before any row was measured)."""
HELDOUT_EP = (2, 4)
HELDOUT_WORLDS = (4, 12)
HELDOUT_SEQ_LENS = (2048, 8192)
HELDOUT_MICRO_BATCHES = (1, 3)
HELDOUT_CAPACITY_FACTORS = (1.5,)
HELDOUT_CASES = 12


def load_spec(config: str, layers: int = LAYERS) -> ModelSpec:
    """The MoE spec of a repository config.json, cut to `layers` MoE layers at full width."""
    spec = load_hf_config(REPO_ROOT / config)
    if spec.moe is None:
        raise UserInputError(f"{config} is not an MoE config", hint="give an MoE config.json.")
    return replace(spec, num_layers=layers,
                   moe=replace(spec.moe, moe_layers=tuple(range(layers))))


def _case(config: str, spec: ModelSpec, world: int, ep: int, seq_len: int, m: int, ac: str,
          capacity_factor: float, steps: int) -> MoeMemoryCase:
    recipe = DEFAULT_RECIPE.with_overrides(ac=ac)
    return MoeMemoryCase(case=MemoryCase(config_id=config, spec=spec, world_size=world,
                                         seq_len=seq_len, micro_batch=m, accum_steps=1,
                                         steps=steps, recipe=recipe),
                         ep=ep, capacity_factor=capacity_factor)


def grid_cases(n: int = GRID_CASES, *, seed: int = 0, steps: int = 1) -> list[MoeMemoryCase]:
    """`n` grid cases: the grid space (`GRID_*`, both `CONFIGS`) shuffled by
    `random.Random(seed)`, then drawn round-robin over the (model, ep) cells."""
    specs = {path: load_spec(path) for path in CONFIGS.values()}
    cells: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    combos = list(itertools.product(CONFIGS.values(), GRID_EP, GRID_WORLDS, GRID_SEQ_LENS,
                                    GRID_MICRO_BATCHES, GRID_AC, GRID_CAPACITY_FACTORS))
    random.Random(seed).shuffle(combos)
    for combo in combos:
        cells.setdefault((combo[0], combo[1]), []).append(combo)
    picked: list[tuple[Any, ...]] = []
    while len(picked) < n and any(cells.values()):
        for key in sorted(cells):
            if cells[key] and len(picked) < n:
                picked.append(cells[key].pop())
    return [_case(path, specs[path], world, ep, s, m, ac, cf, steps)
            for path, ep, world, s, m, ac, cf in picked]


def _buildable(spec: ModelSpec, world: int, ep: int) -> bool:
    # lazy: the module's own check, with torch
    from perfmodel.bench.moe import check_moe_buildable

    try:
        check_moe_buildable(spec, ep, 1.0, world)
    except UserInputError:
        return False
    return True


def heldout_cases(n: int = HELDOUT_CASES, steps: int = 1) -> list[MoeMemoryCase]:
    """`n` held-out cases: the held-out space (`HELDOUT_*`, the grid's and the held-out shapes,
    attention checkpointing too), which shares no world size, sequence length or capacity
    factor with the grid's, shuffled by `random.Random(HELDOUT_SEED)`; the first `n` that
    `perfmodel.bench.moe.check_moe_buildable` accepts. (A first draw, `rng.sample` of the
    unfiltered space, held Mixtral on 12 ranks, whose dim-1 expert shards FSDP2 refuses; it was
    replaced by this one after 4 of its rows were tracked and before any was compared.)"""
    configs = (*CONFIGS.values(), *HELDOUT_CONFIGS.values())
    specs = {path: load_spec(path) for path in configs}
    space = list(itertools.product(
        configs, HELDOUT_EP, HELDOUT_WORLDS, HELDOUT_SEQ_LENS, HELDOUT_MICRO_BATCHES,
        ("none", "full", "attn"), HELDOUT_CAPACITY_FACTORS))
    random.Random(HELDOUT_SEED).shuffle(space)
    picked = [c for c in space if _buildable(specs[c[0]], c[2], c[1])][:n]
    return [_case(path, specs[path], world, ep, s, m, ac, cf, steps)
            for path, ep, world, s, m, ac, cf in picked]


# ---- runner ------------------------------------------------------------------------------

def run_moe_cases(cases: Sequence[MoeMemoryCase], out_path: str | Path, *, jobs: int = 1,
                  limit: int | None = None,
                  draw: dict[str, Any] | None = None) -> dict[str, int]:
    """Track every case not yet in `out_path` (resume), each in a fresh process (its own fake
    process group: `perfmodel.bench.memory_runner` says why) over `jobs` processes; the parent
    appends each finished row."""
    return run_tracked_cases(cases, out_path, worker=run_moe_case, key=case_key,
                             steps=lambda c: c.case.steps, columns=COLUMNS,
                             key_columns=KEY_COLUMNS, benchmark="memory-moe",
                             ground_truth=GROUND_TRUTH, on_row=_log_row, jobs=jobs,
                             limit=limit, draw=draw)


def _log_row(row: dict[str, Any]) -> None:
    logger.info("%s L=%s world %s ep %s S=%s m=%s ac=%s cf=%s: peak %.2f GiB (%.1f s)",
                row["model"], row["num_hidden_layers"], row["world_size"], row["ep"],
                row["seq_len"], row["micro_batch"], row["ac"], row["capacity_factor"],
                row["peak_bytes"] / 2**30, row["wall_s"])
