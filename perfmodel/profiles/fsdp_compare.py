"""Measured FSDP2 steps (a `shardmeter bench fsdp` CSV) beside the simulator's prediction and the
memory model's peak, row by row, each predicted with the recipe it trained (`compare_fsdp`).

No torch: the comparison reads a dataset and runs the models, so the FSDP-side fit
(`perfmodel.profiles.overlap`) and `shardmeter bench fsdp-compare` use it without the benchmark
extra. The dataset's column contract (`COLUMNS`, `KEY_COLUMNS`) lives here too: the benchmark
writes what this module reads.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from perfmodel.costs.features import spec_from_row
from perfmodel.costs.memory import DEFAULT_CONFIG, FP32_CONFIG, MemoryConfig, memory_breakdown
from perfmodel.profiles.memory_validation import read_rows
from perfmodel.profiles.profile import HardwareProfile, load_profile
from perfmodel.sim.fsdp import simulate_step, step_costs
from perfmodel.spec.catalog import get_gpu
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.inputs import read_text
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import TrainingRecipe, recipe_from_mapping

SHAPE_COLUMNS = ("model", "family", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
                 "tie_word_embeddings")
COLUMNS = (*SHAPE_COLUMNS, "seq_len", "micro_batch", "grad_accum", "world_size", "backend", "link",
           "device", "dtype", "threads", "step_time_s", "step_time_iqr_s", "iters",
           "peak_memory_bytes", "memory_source", "recipe")
"""`recipe` is the JSON mapping of the TrainingRecipe the step trained (datasets recorded before
it existed lack the column: `LEGACY_RECIPE` describes how they trained)."""
KEY_COLUMNS = ("model", "seq_len", "micro_batch", "grad_accum", "world_size", "backend", "dtype",
               "recipe")



def _memory_config(dtype: str) -> MemoryConfig:
    """Memory-model element sizes of a run in `dtype` (pure fp32 on CPU: every element 4 B, no
    caching-allocator reserve); bf16 runs keep the model's mixed-precision defaults."""

    return FP32_CONFIG if dtype in ("float32", "fp32") else DEFAULT_CONFIG


def recipe_mapping(recipe: TrainingRecipe) -> dict[str, Any]:
    """The recipe as a JSON-able mapping without the DiLoCo settings (FSDP training ignores
    them) and, for plain FSDP, without the default parallel layout (so cells written before
    layouts existed keep their text, which is also a resume key)."""
    data = recipe.to_dict()
    data.pop("outer", None)
    if recipe.parallel == ParallelLayout():
        data.pop("parallel", None)
    return data


def recipe_cell(recipe: TrainingRecipe) -> str:
    """The dataset's `recipe` cell (canonical JSON, so it is also a resume key)."""
    return json.dumps(recipe_mapping(recipe), sort_keys=True)


def legacy_recipe(dtype: str) -> TrainingRecipe:
    """How rows without a `recipe` column trained: no MixedPrecisionPolicy (parameters and
    gradients in the run dtype), gradient sync only on the last micro-step, every block resharded
    after forward (FSDP2's default; the root is kept), no activation checkpointing."""
    name = ("fp32" if dtype in ("float32", "fp32")
            else "bf16" if dtype in ("bfloat16", "bf16") else "fp16")
    return TrainingRecipe(name=f"legacy-{name}", param_dtype=name, reduce_dtype=name,
                          master_dtype=name, accum_mode="no_sync", ac="none",
                          reshard_last_block_after_forward=True)


def row_recipe(row: Mapping[str, Any] | pd.Series, source: str) -> TrainingRecipe:
    """The recipe a dataset row trained with (its `recipe` column, else `legacy_recipe`)."""
    text = str(row.get("recipe", "") or "").strip()
    if not text:
        return legacy_recipe(str(row["dtype"]))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserInputError(f"{source}: column 'recipe' is not JSON ({err})",
                             hint="give a CSV written by `shardmeter bench fsdp`.") from None
    return recipe_from_mapping(data, source=f"{source}: recipe")


def measured_peaks(memory_data: str | Path | None) -> dict[tuple[str, ...], float]:
    """Allocator peaks of a `bench memory --real` CSV by (model, world, S, m, k); {} for None."""
    if memory_data is None:
        return {}

    keys = ("model", "world_size", "seq_len", "micro_batch", "accum_steps")
    rows = read_rows(memory_data)
    if rows and "allocator_peak_bytes" not in rows[0]:
        raise UserInputError(f"{memory_data}: no column 'allocator_peak_bytes'",
                             hint="give a CSV written by `shardmeter bench memory --real`.")
    return {tuple(r[k] for k in keys): float(r["allocator_peak_bytes"]) for r in rows}


def read_fsdp_dataset(data: str | Path) -> pd.DataFrame:
    """A `shardmeter bench fsdp` CSV, every cell a string; UserInputError naming a missing file
    or missing columns (`recipe` may be absent: such rows trained `legacy_recipe`)."""

    hint = "give a CSV written by `shardmeter bench fsdp`."
    if not Path(data).is_file():
        raise UserInputError(f"{data}: no such file", hint=hint)
    text = read_text(data, what="bench fsdp dataset", hint=hint)
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as err:
        raise UserInputError(f"{data}: not a CSV table ({str(err)[:200]})", hint=hint) from None
    missing = [c for c in COLUMNS if c not in frame.columns and c != "recipe"]
    if missing:
        raise UserInputError(f"{data}: missing column(s) {', '.join(missing)}", hint=hint)
    for position, (_, row) in enumerate(frame.iterrows()):
        for column, (least, integer) in MEASURED_NUMBERS.items():
            _measured_number(row[column], column, least=least, integer=integer,
                             where=f"{data}, line {position + 2}")
    return frame


MEASURED_NUMBERS: dict[str, tuple[float, bool]] = {
    "world_size": (1, True), "seq_len": (1, True), "micro_batch": (1, True),
    "grad_accum": (1, True), "step_time_s": (0.0, False), "peak_memory_bytes": (0.0, False),
}
"""Numeric columns `compare_fsdp` reads: (least value, integer?); step_time_s must be > 0."""


def _measured_number(cell: str, column: str, *, least: float, integer: bool, where: str) -> float:
    """A measured cell: finite, an integer where it counts, >= least (> 0 for step_time_s)."""
    try:
        value = float(cell)
    except ValueError:
        value = float("nan")
    positive = column == "step_time_s"
    bad = (not math.isfinite(value) or value < least or (positive and value <= 0)
           or (integer and not value.is_integer()))
    if bad:
        kind = "an integer" if integer else "a finite number"
        bound = "> 0" if positive else f">= {least:g}"
        raise UserInputError(f"{where}: column {column!r} = {cell!r}: not {kind} {bound}",
                             hint=f"fix line {where.rsplit(' ', 1)[-1]} (a measured {column} is "
                                  f"{kind} {bound}), or rerun `shardmeter bench fsdp`.")
    return value


def compare_fsdp(data: str | Path, profile: HardwareProfile | str, *, hardware: str | None = None,
                 memory_data: str | Path | None = None) -> list[dict[str, Any]]:
    """Measured FSDP2 steps beside the simulator's prediction (perfmodel.sim.fsdp.simulate_step over
    the profile's compute and comm coefficients) and the memory model's peak, per row, each
    predicted with the recipe and parallel layout the row trained (`layout`: its degrees, e.g.
    'tp 2, sequence parallel'; world_size ranks on one node of the row's link). The measured
    peak is the row's own, or with `memory_data` (`bench memory --real --like DATA`) the
    real-tensor allocator peak of the same configuration."""

    profile = load_profile(profile) if isinstance(profile, str) else profile
    gpu = get_gpu(hardware or profile.hardware)
    frame = read_fsdp_dataset(data)
    peaks = measured_peaks(memory_data)
    out = []
    for _, row in frame.iterrows():
        spec = spec_from_row(row)
        world, seq, mb, ga = (int(row[k])
                              for k in ("world_size", "seq_len", "micro_batch", "grad_accum"))
        island = IslandSpec(gpu=gpu, num_nodes=1, gpus_per_node=world, intra_link=row["link"],
                            inter_link=row["link"])
        # Like with like: the prediction uses the recipe the row was measured with.
        recipe = row_recipe(row, str(data))
        costs = step_costs(spec, profile, island, seq_len=seq, micro_batch=mb, recipe=recipe)
        sim = simulate_step(costs, accum_steps=ga)
        measured = float(row["step_time_s"])
        # like with like: the tensors the allocator holds, without the modelled reserve (an
        # assumption about GPU allocators and workspaces, reported apart)
        peak = memory_breakdown(spec, num_gpus=world, seq_len=seq, micro_batch=mb, recipe=recipe,
                                accum_steps=ga, config=_memory_config(row["dtype"])).tracked_bytes
        key = (str(row["model"]), *(str(row[k]) for k in ("world_size", "seq_len",
                                                          "micro_batch", "grad_accum")))
        if peaks and key not in peaks:
            raise UserInputError(f"{memory_data}: no row for {key} of {data}",
                                 hint=f"run `shardmeter bench memory --real --like {data} "
                                      f"-o {memory_data}` (it resumes).")
        measured_mem = peaks[key] if peaks else float(row["peak_memory_bytes"])
        layout = recipe.parallel.resolve(world)
        out.append({"model": row["model"], "recipe": recipe.name, "accum_mode": recipe.accum_mode,
                    "layout": layout.describe(),
                    "seq_len": seq, "micro_batch": mb, "grad_accum": ga,
                    "world_size": world, "measured_step_s": measured,
                    "predicted_step_s": sim.step_time_s,
                    "step_error_pct": 100.0 * (sim.step_time_s - measured) / measured,
                    "predicted_compute_s": sim.compute_busy_s, "predicted_comm_s": sim.comm_busy_s,
                    "predicted_exposed_comm_s": sim.exposed_comm_s,
                    "measured_peak_mib": measured_mem / 2**20, "predicted_peak_mib": peak / 2**20,
                    "memory_error_pct": (100.0 * (peak - measured_mem) / measured_mem
                                         if measured_mem else float("nan"))})
    return out
