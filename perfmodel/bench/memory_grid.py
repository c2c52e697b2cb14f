"""The design space of the shipped memory-tracker dataset, and a parallel runner for it.

The grid of issue 9: every catalog model up to 70B, S in {2048, 8192}, m in {1, 2, 4}, AC in
{none, selective, full}, world sizes {8, 64}, and k = 1 or k = 2 in either accumulation mode.
`grid_cases(n, seed)` draws a seeded random subset without replacement (stratified so every AC
mode and accumulation setting appears about equally often); `heldout_cases()` lists the 20
configurations the memory model is checked on but never tuned on (models, S and world sizes
outside the grid).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing as mp
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from perfmodel.bench.common import CsvLog
from perfmodel.bench.environment import append_environment, environment_record
from perfmodel.bench.memory import COLUMNS, KEY_COLUMNS, MemoryCase, run_cases, run_fake_case
from perfmodel.costs.features import spec_from_row
from perfmodel.profiles.fsdp_compare import read_fsdp_dataset, row_recipe
from perfmodel.spec.arch import FAMILY_LAYOUT, ModelSpec
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.recipe import AC_MODES, DEFAULT_RECIPE, TrainingRecipe

logger = logging.getLogger(__name__)

GRID_SEQ_LENS = (2048, 8192)
GRID_MICRO_BATCHES = (1, 2, 4)
GRID_AC = AC_MODES
GRID_WORLD_SIZES = (8, 64)
GRID_ACCUM = ((1, "reduce_scatter"), (2, "reduce_scatter"), (2, "no_sync"))
"""(k, accumulation mode); k = 1 is the same run in both modes, so it is listed once."""
HEAVY_PARAMS = 30e9
MAX_HEAVY_CASES = 8
"""At most this many grid cases of models above `HEAVY_PARAMS` (70B: over a minute each)."""


GRID_MODELS = ("smollm-360m", "llama-3.2-1b", "phi-1.5", "gemma-2b", "yi-6b", "llama-3-8b",
               "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "mistral-7b-v0.1", "chinchilla-1b",
               "chinchilla-10b")
"""Catalog models up to 70B when the shipped dataset was drawn (Yi-1.5-6B is Yi-6B's shape);
pinned so that `--grid N --seed S` draws the same cases when the catalog grows."""


def grid_models() -> list[str]:
    """The grid's catalog models (`GRID_MODELS`)."""
    return list(GRID_MODELS)


def _case(name: str, spec: ModelSpec, ws: int, seq_len: int, m: int, k: int, mode: str,
          ac: str, recipe: TrainingRecipe = DEFAULT_RECIPE, steps: int = 2) -> MemoryCase:
    return MemoryCase(config_id=name, spec=spec, world_size=ws, seq_len=seq_len, micro_batch=m,
                      accum_steps=k, recipe=recipe.with_overrides(ac=ac, accum_mode=mode),
                      steps=steps)


def grid_cases(n: int, *, seed: int = 0, models: Sequence[str] | None = None,
               steps: int = 2) -> list[MemoryCase]:
    """A seeded random subset of `n` grid cases, cheapest (smallest model x tokens) first."""
    names = list(models) if models is not None else grid_models()
    combos = list(itertools.product(names, GRID_WORLD_SIZES, GRID_SEQ_LENS, GRID_MICRO_BATCHES,
                                    GRID_ACCUM, GRID_AC))
    rng = random.Random(seed)
    rng.shuffle(combos)
    # Stratify: round-robin over (AC, accumulation) cells so every cell is covered evenly.
    cells: dict[tuple[str, tuple[int, str]], list[Any]] = {}
    for combo in combos:
        cells.setdefault((combo[5], combo[4]), []).append(combo)
    specs = {name: get_model(name) for name in names}
    picked: list[Any] = []
    heavy = 0
    while len(picked) < n and any(cells.values()):
        for cell in cells.values():
            while cell and len(picked) < n:
                combo = cell.pop()
                # Each >30B case takes minutes on a shared CPU: cap them (coverage, not count).
                if specs[combo[0]].total_params > HEAVY_PARAMS:
                    if heavy >= MAX_HEAVY_CASES:
                        continue
                    heavy += 1
                picked.append(combo)
                break
    cases = [_case(name, specs[name], ws, s, m, k, mode, ac, steps=steps)
             for name, ws, s, m, (k, mode), ac in picked]
    return sorted(cases, key=lambda c: c.spec.total_params * c.seq_len * c.micro_batch)


def heldout_specs() -> dict[str, ModelSpec]:
    """Architectures that are not in the catalog grid (sizes between and around the catalog's)."""
    return {
        "heldout-llama-3b": ModelSpec(name="heldout-llama-3b", family="llama", hidden_size=3072,
                                      num_layers=28, num_heads=24, num_kv_heads=8,
                                      intermediate_size=8192, vocab_size=128256,
                                      tie_word_embeddings=True),
        "heldout-qwen-14b": ModelSpec(name="heldout-qwen-14b", family="qwen2", hidden_size=5120,
                                      num_layers=48, num_heads=40, num_kv_heads=8,
                                      intermediate_size=13824, vocab_size=152064,
                                      **FAMILY_LAYOUT["qwen2"]),
        "heldout-phi-2": ModelSpec(name="heldout-phi-2", family="phi", hidden_size=2560,
                                   num_layers=32, num_heads=32, num_kv_heads=32,
                                   intermediate_size=10240, vocab_size=51200,
                                   **FAMILY_LAYOUT["phi"]),
        "heldout-mistral-wide": ModelSpec(name="heldout-mistral-wide", family="mistral",
                                          hidden_size=5120, num_layers=20, num_heads=32,
                                          num_kv_heads=8, head_dim=128,
                                          intermediate_size=16384, vocab_size=32768),
    }


def heldout_cases(steps: int = 2) -> list[MemoryCase]:
    """20 configurations outside the grid: held-out models, S in {1024, 4096}, G in {16, 32}."""
    specs = heldout_specs()
    plan = [  # (model, G, S, m, k, mode, ac)
        ("heldout-llama-3b", 16, 4096, 2, 1, "reduce_scatter", "none"),
        ("heldout-llama-3b", 32, 4096, 4, 2, "no_sync", "selective"),
        ("heldout-llama-3b", 16, 1024, 8, 2, "reduce_scatter", "full"),
        ("heldout-llama-3b", 32, 4096, 1, 2, "reduce_scatter", "selective"),
        ("heldout-llama-3b", 16, 4096, 2, 2, "no_sync", "full"),
        ("heldout-qwen-14b", 32, 4096, 1, 1, "reduce_scatter", "selective"),
        ("heldout-qwen-14b", 16, 4096, 2, 2, "reduce_scatter", "full"),
        ("heldout-qwen-14b", 32, 1024, 4, 2, "no_sync", "none"),
        ("heldout-qwen-14b", 16, 4096, 1, 2, "no_sync", "selective"),
        ("heldout-qwen-14b", 32, 4096, 2, 1, "reduce_scatter", "full"),
        ("heldout-phi-2", 16, 4096, 1, 1, "reduce_scatter", "none"),
        ("heldout-phi-2", 32, 4096, 2, 2, "reduce_scatter", "selective"),
        ("heldout-phi-2", 16, 1024, 4, 2, "no_sync", "full"),
        ("heldout-phi-2", 32, 4096, 4, 2, "no_sync", "none"),
        ("heldout-phi-2", 16, 4096, 2, 1, "reduce_scatter", "selective"),
        ("heldout-mistral-wide", 16, 4096, 1, 2, "reduce_scatter", "none"),
        ("heldout-mistral-wide", 32, 4096, 2, 1, "reduce_scatter", "selective"),
        ("heldout-mistral-wide", 16, 1024, 8, 2, "no_sync", "selective"),
        ("heldout-mistral-wide", 32, 4096, 4, 2, "reduce_scatter", "full"),
        ("heldout-mistral-wide", 16, 4096, 2, 2, "no_sync", "full"),
    ]
    return [_case(name, specs[name], ws, s, m, k, mode, ac, steps=steps)
            for name, ws, s, m, k, mode, ac in plan]


def real_cases() -> list[MemoryCase]:
    """Small shapes for the real-tensor 2-rank gloo check of the tracker (`memory_real`): every AC
    mode at k = 1 and k = 2 in both accumulation modes, plus a Phi-style and a tied-embedding
    shape."""
    small = get_model("small-llama")
    cases = [_case("small-llama", small, 2, 256, 2, k, mode, ac)
             for ac in GRID_AC for k, mode in GRID_ACCUM]
    cases.append(_case("tiny-phi", get_model("tiny-phi"), 2, 128, 2, 2, "no_sync", "selective"))
    cases.append(_case("tiny-gqa", get_model("tiny-gqa"), 2, 128, 4, 2, "reduce_scatter", "full"))
    return cases


def _worker(case: MemoryCase) -> dict[str, Any]:

    return run_fake_case(case)


def run_parallel(cases: Iterable[MemoryCase], out_path: str | Path, *, jobs: int = 1,
                 limit: int | None = None) -> dict[str, int]:
    """`run_cases` over `jobs` processes (each case runs in its own fake process group); the
    parent appends every finished row, so the CSV stays resumable."""

    if jobs <= 1:
        return run_cases(cases, out_path, limit=limit)

    log = CsvLog(out_path, COLUMNS, KEY_COLUMNS)
    done = log.done_keys()
    todo = [c for c in cases if log.key_of(c.key("fake")) not in done]
    skipped = len(list(cases)) - len(todo) if isinstance(cases, list) else 0
    todo = todo[:limit] if limit is not None else todo
    append_environment(out_path, environment_record(
        device="fake", threads=1,
        extra={"benchmark": "memory", "jobs": jobs,
               "tracked_steps": sorted({c.steps for c in todo}), "cases": len(todo)}))
    with mp.get_context("spawn").Pool(jobs, maxtasksperchild=4) as pool:
        for row in pool.imap_unordered(_worker, todo):
            log.append([row])
            logger.info("%s G=%s S=%s m=%s k=%s %s ac=%s: peak %.2f GiB (%.1f s)", row["model"],
                        row["world_size"], row["seq_len"], row["micro_batch"], row["accum_steps"],
                        row["accum_mode"], row["ac"], row["peak_bytes"] / 2**30, row["wall_s"])
    return {"measured": len(todo), "skipped": skipped}


def cases_like(fsdp_data: str | Path) -> list[MemoryCase]:
    """The configurations of an FSDP2 benchmark CSV (`shardmeter bench fsdp`), each trained with
    the recipe its row says: their memory, re-measured by the real-tensor runner."""

    frame = read_fsdp_dataset(fsdp_data)
    if frame.empty:
        raise UserInputError(f"{fsdp_data}: no rows", hint="give a CSV written by "
                             "`shardmeter bench fsdp`.")
    return [MemoryCase(config_id=r["model"], spec=spec_from_row(r), world_size=int(r["world_size"]),
                       seq_len=int(r["seq_len"]), micro_batch=int(r["micro_batch"]),
                       accum_steps=int(r["grad_accum"]), recipe=row_recipe(r, str(fsdp_data)),
                       steps=1)
            for _, r in frame.iterrows()]
