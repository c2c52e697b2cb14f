"""Per-rank memory of parallel layouts as PyTorch allocates it: the ground truth of issue 23.

Each case trains the bench model (`perfmodel.bench.model`) under a `ParallelLayout` (the case
recipe's `parallel`): tensor parallelism with torchtitan's Llama plan, with or without sequence
parallelism (`perfmodel.bench.parallel`, with a vocabulary-parallel loss; meshes and fake-mode
workarounds in `perfmodel.bench.tp`), then FSDP2 over dp_shard, or HSDP over
(dp_replicate, dp_shard), with the recipe's mixed precision, checkpointing and accumulation
(`perfmodel.bench.recipe_wrap`). A layout with dp_shard = 1 (pure tensor parallelism) is still
wrapped by `fully_shard` over its one-rank data-parallel mesh: that is how the recipe's
mixed-precision policy (bf16 compute over fp32 master weights) reaches the model, and a
one-rank shard group neither gathers nor scatters anything.

Ground truth (`ground_truth` column): PyTorch's FSDPMemTracker around the training steps under
FakeTensorMode with the fake process group (`fsdp-mem-tracker/fake`), on rank 0 of the layout's
2-D or 3-D device mesh, as `perfmodel.bench.memory` does for plain FSDP. The tracker runs every
layout built here, so no row needs the real-tensor fallback; `run_real_layout_case` runs the
same case on real tensors over gloo (one process per rank) and the tests compare the two, which
pins the two private-torch workarounds of `perfmodel.bench.tp.fake_tracking`.

`grid_cases()` is the shipped grid (`memory-tracker-layouts.csv`), `heldout_cases()` the 20
held-out configurations (`memory-tracker-layouts-heldout.csv`), drawn by `random.Random(seed)`
from a space disjoint from the grid's before any error was looked at. Generating command:
`python -m scripts.make_memory_layouts --grid|--heldout -o FILE [--jobs N]` (resumable).
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfmodel.bench.common import CsvLog, resolve_dtype
from perfmodel.bench.memory import (
    CASE_COLUMNS,
    CATEGORIES,
    SHAPE_COLUMNS,
    MemoryCase,
    shape_columns,
)
from perfmodel.bench.memory_runner import run_tracked_cases
from perfmodel.profiles.memory_validation import layout_kinds
from perfmodel.spec.arch import FAMILY_LAYOUT, ModelSpec
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import DEFAULT_RECIPE

logger = logging.getLogger(__name__)

LAYOUT_COLUMNS = ("dp_replicate", "dp_shard", "tp", "cp", "sequence_parallel")
"""The layout of a row (pp is 1 in these datasets: pipeline stages are issue 24's)."""
GROUND_TRUTHS = {
    "fsdp-mem-tracker/fake": "FSDPMemTracker peak under FakeTensorMode with the fake process "
                             "group (rank 0)",
    "fsdp-mem-tracker/real-gloo": "FSDPMemTracker peak on real tensors, one gloo process per "
                                  "rank (rank 0)",
}
"""Values of the `ground_truth` column and what each means."""
COLUMNS = (*SHAPE_COLUMNS, *CASE_COLUMNS, *LAYOUT_COLUMNS, "ground_truth", "peak_bytes",
           *CATEGORIES.values(), "local_param_bytes", "wall_s", "torch_version")
KEY_COLUMNS = ("model", *CASE_COLUMNS, *LAYOUT_COLUMNS)


def layout_of(case: MemoryCase) -> ParallelLayout:
    """The case's layout, resolved against its world size."""
    return case.recipe.parallel.resolve(case.world_size)


def case_key(case: MemoryCase, tensors: str = "fake") -> dict[str, Any]:
    """The CSV resume key of a layout case."""
    layout = layout_of(case)
    return {**case.key(tensors), "dp_replicate": layout.dp_replicate,
            "dp_shard": layout.size("dp_shard"), "tp": layout.tp, "cp": layout.cp,
            "sequence_parallel": layout.sequence_parallel if layout.tp > 1 else False}


def build_parallel_model(case: MemoryCase, layout: ParallelLayout, mesh: Any) -> Any:
    """The bench model of `case`, tensor-parallel (if tp > 1), wrapped by the recipe (AC, FSDP2
    or HSDP over `fsdp_mesh`); inside whatever tensor mode the caller runs."""
    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.model import build_model
    from perfmodel.bench.parallel import apply_tensor_parallel
    from perfmodel.bench.recipe_wrap import shard_with_recipe
    from perfmodel.bench.tp import fsdp_mesh

    model = build_model(case.spec, dtype=resolve_dtype(case.recipe.master_dtype))
    if layout.tp > 1:
        apply_tensor_parallel(model, mesh["tp"], sequence_parallel=layout.sequence_parallel,
                              loss_parallel=True)
    return shard_with_recipe(model, case.recipe, mesh=fsdp_mesh(mesh, layout))


def run_layout_case(case: MemoryCase) -> dict[str, Any]:
    """Track one layout case under FakeTensorMode with the fake process group; its row."""
    # lazy: torch, the optional [bench] extra
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.memory import tracked_steps
    from perfmodel.bench.recipe_wrap import make_optimizer
    from perfmodel.bench.tp import (
        check_layout_buildable,
        fake_tracking,
        layout_mesh,
        local_param_bytes,
        step_context,
    )

    layout = layout_of(case)
    check_layout_buildable(case.spec, layout)
    start_s = time.perf_counter()
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=case.world_size, store=FakeStore())
    try:
        mesh = layout_mesh(layout)  # before fake mode: its process groups are real objects
        with fake_tracking(), FakeTensorMode():
            model = build_parallel_model(case, layout, mesh)
            optimizer = make_optimizer(model, case.recipe)
            tokens = torch.randint(0, case.spec.vocab_size, (case.micro_batch, case.seq_len))
            columns = tracked_steps(model, optimizer, tokens, case, steps=case.steps,
                                    context=step_context(layout))
            param_bytes = local_param_bytes(model)
    finally:
        dist.destroy_process_group()
    return {**shape_columns(case.config_id, case.spec), **case_key(case),
            "ground_truth": "fsdp-mem-tracker/fake", **columns,
            "local_param_bytes": param_bytes, "wall_s": time.perf_counter() - start_s,
            "torch_version": torch.__version__}


# ---- the shipped grid and the held-out configurations --------------------------------------

GRID_MODELS = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.1", "llama-3.1-70b",
               "llama-3.1-405b", "llama-3.2-1b", "gemma-2b")
"""Catalog models of the grid: untied Llama-layout models up to 405B (tensor parallel and
HSDP), and two tied models (HSDP only: torchtitan's plan does not shard tied weights)."""
GRID_SEQ_LENS = (2048, 8192)
GRID_MICRO_BATCHES = (1, 2, 4)
GRID_AC = ("none", "op-sac", "full")
GRID_ACCUM = ((1, "reduce_scatter"), (2, "reduce_scatter"), (2, "no_sync"))
GRID_LAYOUTS: tuple[tuple[int, int, int], ...] = (
    # (world, dp_replicate, tp); dp_shard is what is left
    (4, 1, 4), (8, 1, 8),                          # tensor parallel only
    (8, 1, 2), (8, 1, 4), (64, 1, 2), (64, 1, 4), (64, 1, 8), (512, 1, 8),   # FSDP x TP
    (8, 2, 1), (8, 4, 1), (64, 2, 1), (64, 8, 1),  # HSDP
    (64, 2, 8), (64, 4, 2), (512, 8, 8),           # HSDP x TP
)
"""Layouts of the grid as (world size, dp_replicate, tp); 512-rank layouts are for the
405B-class model only."""
HEAVY_CASES = {"llama-3.1-70b": 4, "llama-3.1-405b": 2}
"""Grid cases of the large models (70B: about a minute each, 405B: several), drawn first."""
GRID_CASES = 40
"""Cases of the shipped grid. The grid was first drawn with 96 cases (8 of 70B, 4 of 405B);
that generation could not finish in the time the issue had on a shared 2-core CPU (26 rows in
about 25 minutes, the costliest still ahead), so before any error was looked at the definition
was cut to 40 cases (4 of 70B, 2 of 405B): the same seeded shuffle and stratification, a
shorter draw, so every case of the shorter grid was a case of the longer one."""


def _layout_case(name: str, spec: ModelSpec, world: int, dp_replicate: int, tp: int, sp: bool,
                 seq_len: int, m: int, k: int, mode: str, ac: str, steps: int) -> MemoryCase:
    layout = ParallelLayout(dp_replicate=dp_replicate, tp=tp, sequence_parallel=sp)
    return MemoryCase(config_id=name, spec=spec, world_size=world, seq_len=seq_len,
                      micro_batch=m, accum_steps=k, steps=steps,
                      recipe=DEFAULT_RECIPE.with_overrides(ac=ac, accum_mode=mode,
                                                           parallel=layout))


def _buildable(spec: ModelSpec, world: int, dp_replicate: int, tp: int) -> bool:
    # lazy: torch, the optional [bench] extra (the check itself needs none)
    from perfmodel.bench.tp import check_layout_buildable

    layout = ParallelLayout(dp_replicate=dp_replicate, tp=tp).resolve(world)
    try:
        check_layout_buildable(spec, layout)
    except UserInputError:
        return False
    return True


def grid_cases(n: int = GRID_CASES, *, seed: int = 0, steps: int = 1) -> list[MemoryCase]:
    """A seeded random subset of `n` grid cases, cheapest first: `HEAVY_CASES` of the large
    models, then the rest stratified so that every layout kind and AC mode appears about
    equally often."""
    specs = {name: get_model(name) for name in GRID_MODELS}
    combos = []
    for name, (world, rep, tp), sp, s, m, (k, mode), ac in itertools.product(
            GRID_MODELS, GRID_LAYOUTS, (True, False), GRID_SEQ_LENS, GRID_MICRO_BATCHES,
            GRID_ACCUM, GRID_AC):
        spec = specs[name]
        if (world == 512) != (spec.total_params > 200e9) or (tp == 1 and not sp):
            continue   # 512 ranks for the 405B model only; sequence parallelism needs tp
        if not _buildable(spec, world, rep, tp):
            continue
        combos.append((name, world, rep, tp, sp and tp > 1, s, m, k, mode, ac))
    rng = random.Random(seed)
    rng.shuffle(combos)
    picked: list[Any] = []
    for name, count in HEAVY_CASES.items():
        picked += [c for c in combos if c[0] == name][:count]
    cells: dict[tuple[str, str], list[Any]] = {}
    for combo in combos:
        if combo[0] in HEAVY_CASES:
            continue
        _, world, rep, tp, sp = combo[:5]
        kind = layout_kinds(rep, world // (rep * tp), tp, sp)[0]
        cells.setdefault((kind, combo[9]), []).append(combo)
    while len(picked) < n and any(cells.values()):
        for cell in cells.values():
            if cell and len(picked) < n:
                picked.append(cell.pop())
    cases = [_layout_case(name, specs[name], world, rep, tp, sp, s, m, k, mode, ac, steps)
             for name, world, rep, tp, sp, s, m, k, mode, ac in picked]
    return sorted(cases, key=lambda c: c.spec.total_params * c.seq_len * c.micro_batch)


def heldout_specs() -> dict[str, ModelSpec]:
    """Architectures outside the grid: two untied Llama-layout shapes between the catalog's
    (tensor parallel and HSDP) and two tied ones (HSDP)."""
    return {
        "heldout-qwen-14b": ModelSpec(name="heldout-qwen-14b", family="qwen2", hidden_size=5120,
                                      num_layers=48, num_heads=40, num_kv_heads=8,
                                      intermediate_size=13824, vocab_size=152064,
                                      **FAMILY_LAYOUT["qwen2"]),
        "heldout-mistral-wide": ModelSpec(name="heldout-mistral-wide", family="mistral",
                                          hidden_size=5120, num_layers=20, num_heads=32,
                                          num_kv_heads=8, head_dim=128,
                                          intermediate_size=16384, vocab_size=32768),
        "heldout-llama-34b": ModelSpec(name="heldout-llama-34b", family="llama",
                                       hidden_size=8192, num_layers=48, num_heads=64,
                                       num_kv_heads=8, intermediate_size=22016,
                                       vocab_size=32000),
        "heldout-llama-3b": ModelSpec(name="heldout-llama-3b", family="llama", hidden_size=3072,
                                      num_layers=28, num_heads=24, num_kv_heads=8,
                                      intermediate_size=8192, vocab_size=128256,
                                      tie_word_embeddings=True),
    }


HELDOUT_SEED = 23
"""Seed of the held-out draw (fixed before any held-out row was measured)."""
HELDOUT_SEQ_LENS = (1024, 4096)
HELDOUT_MICRO_BATCHES = (1, 2, 3)
HELDOUT_AC = ("none", "op-sac", "full", "attn")
HELDOUT_LAYOUTS: tuple[tuple[int, int, int], ...] = (
    (2, 1, 2), (16, 1, 2), (16, 1, 8), (32, 1, 4), (128, 1, 8),     # TP, FSDP x TP
    (16, 2, 1), (32, 4, 1), (128, 16, 1),                          # HSDP
    (32, 2, 4), (128, 4, 8),                                       # HSDP x TP
)
"""Held-out layouts (world, dp_replicate, tp): world sizes, degrees and an AC mode the grid
does not have."""


def heldout_cases(steps: int = 1) -> list[MemoryCase]:
    """The 20 held-out configurations: `random.Random(HELDOUT_SEED)` draws 20 distinct
    (model, layout, sequence parallelism, S, m, accumulation, AC) combinations from the
    held-out space (`heldout_specs`, `HELDOUT_*`), of which at most 4 are of the 34B shape."""
    specs = heldout_specs()
    space = []
    for name, (world, rep, tp), sp, s, m, (k, mode), ac in itertools.product(
            specs, HELDOUT_LAYOUTS, (True, False), HELDOUT_SEQ_LENS, HELDOUT_MICRO_BATCHES,
            GRID_ACCUM, HELDOUT_AC):
        if (tp == 1 and not sp) or not _buildable(specs[name], world, rep, tp):
            continue
        space.append((name, world, rep, tp, sp and tp > 1, s, m, k, mode, ac))
    rng = random.Random(HELDOUT_SEED)
    rng.shuffle(space)
    picked: list[Any] = []
    for combo in space:
        if combo[0] == "heldout-llama-34b" and sum(c[0] == combo[0] for c in picked) >= 4:
            continue
        picked.append(combo)
        if len(picked) == 20:
            break
    return [_layout_case(name, specs[name], world, rep, tp, sp, s, m, k, mode, ac, steps)
            for name, world, rep, tp, sp, s, m, k, mode, ac in picked]


# ---- runner ------------------------------------------------------------------------------

def run_layout_cases(cases: Sequence[MemoryCase], out_path: str | Path, *, jobs: int = 1,
                     limit: int | None = None,
                     draw: dict[str, Any] | None = None) -> dict[str, int]:
    """Track every case not yet in `out_path` (resume), over `jobs` processes, each case in a
    fresh process with its own fake process group (`perfmodel.bench.memory_runner` says why);
    the parent appends each finished row. `draw`: how the cases were drawn (recorded in the
    session's env.json)."""
    return run_tracked_cases(cases, out_path, worker=run_layout_case, key=case_key,
                             steps=lambda c: c.steps, columns=COLUMNS, key_columns=KEY_COLUMNS,
                             benchmark="memory-layouts", ground_truth=GROUND_TRUTHS,
                             on_row=_log_row, jobs=jobs, limit=limit, draw=draw)


def _log_row(row: dict[str, Any]) -> None:
    logger.info("%s world %s dp_replicate %s tp %s sp %s S=%s m=%s k=%s %s ac=%s: peak %.2f GiB "
                "(%.1f s)", row["model"], row["world_size"], row["dp_replicate"], row["tp"],
                row["sequence_parallel"], row["seq_len"], row["micro_batch"], row["accum_steps"],
                row["accum_mode"], row["ac"], row["peak_bytes"] / 2**30, row["wall_s"])



# ---- the same tracker on real tensors (gloo) ---------------------------------------------

def _real_rank(rank: int, case: MemoryCase, port: int, out: str) -> None:
    # lazy: torch, the optional [bench] extra
    import torch
    import torch.distributed as dist

    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.memory import tracked_steps
    from perfmodel.bench.model import random_tokens
    from perfmodel.bench.recipe_wrap import make_optimizer
    from perfmodel.bench.tp import layout_mesh, local_param_bytes, step_context

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=case.world_size)
    try:
        start_s = time.perf_counter()
        layout = layout_of(case)
        mesh = layout_mesh(layout)
        model = build_parallel_model(case, layout, mesh)
        optimizer = make_optimizer(model, case.recipe)
        # every data-parallel rank its own batch; the tensor-parallel ranks of a group the same
        tokens = random_tokens(case.spec, case.micro_batch, case.seq_len,
                               seed=rank // layout.tp)
        columns = tracked_steps(model, optimizer, tokens, case, steps=case.steps,
                                context=step_context(layout))
        if rank == 0:
            row = {**shape_columns(case.config_id, case.spec), **case_key(case, "real"),
                   "ground_truth": "fsdp-mem-tracker/real-gloo", **columns,
                   "local_param_bytes": local_param_bytes(model),
                   "wall_s": time.perf_counter() - start_s, "torch_version": torch.__version__}
            CsvLog(out, COLUMNS, KEY_COLUMNS).append([row])
    finally:
        dist.destroy_process_group()


def run_real_layout_case(case: MemoryCase, out_path: str | Path) -> None:
    """Track `case` on real tensors, one gloo process per rank of its world (keep it small);
    rank 0 appends its row to `out_path`. The same tracker and wrapping as `run_layout_case`,
    without FakeTensorMode and its workarounds: the check of the fake-mode ground truth."""
    # lazy: torch, the optional [bench] extra
    import torch.multiprocessing as tmp

    # lazy: the real-tensor runner's helper, with torch
    from perfmodel.bench.memory_real import _free_port

    layout_of(case)  # a layout that does not fit the world fails here, not in a child
    tmp.spawn(  # type: ignore[attr-defined,no-untyped-call]  # untyped torch API
        _real_rank, args=(case, _free_port(), str(out_path)), nprocs=case.world_size,
        join=True)
