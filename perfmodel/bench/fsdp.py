"""End-to-end FSDP2 check: real sharded training steps under torchrun, timed per step.

`shardmeter bench fsdp --space catalogs/spaces/fsdp-cpu.yaml -o DATA.csv` resolves the cases of
the space file (shapes x micro-batches x gradient-accumulation steps), writes them to a JSON plan
next to the output and launches `torchrun ... -m perfmodel.bench.fsdp_worker`. Each worker trains
exactly the run's `TrainingRecipe` (`--recipe`, default torchtitan) through
`perfmodel.bench.recipe_wrap`: activation checkpointing, `fully_shard` per block then the root with
the recipe's `MixedPrecisionPolicy` and resharding, its accumulation mode (reduce-scatter every
micro-step, or `set_requires_gradient_sync(False)` until the last), AdamW. Rank 0 writes the
median step time (max over ranks per step), the peak memory per rank and the recipe (JSON), row
by row; rerunning resumes. `compare_fsdp` predicts every row with the recipe it trained.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfmodel.arch import FAMILY_LAYOUT, ModelSpec
from perfmodel.bench.comm import launch, torchrun_command
from perfmodel.bench.common import (
    check_run_inputs,
    positive_int,
    read_space_yaml,
    reject_unknown_keys,
)
from perfmodel.errors import ConfigError, UserInputError
from perfmodel.recipe import DEFAULT_RECIPE, TrainingRecipe, recipe_from_mapping

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

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
_SPEC_KEYS = {"hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
              "num_attention_heads": "num_heads", "num_key_value_heads": "num_kv_heads",
              "intermediate_size": "intermediate_size", "vocab_size": "vocab_size",
              "head_dim": "head_dim", "tie_word_embeddings": "tie_word_embeddings"}


@dataclass(frozen=True, slots=True)
class FsdpCase:
    """One measured FSDP2 configuration."""

    config_id: str
    """Dataset `model` column."""
    spec: ModelSpec
    """Architecture."""
    seq_len: int
    """Sequence length."""
    micro_batch: int
    """Sequences per rank per micro-step."""
    grad_accum: int
    """Micro-steps per optimizer step."""

    def to_json(self) -> dict[str, Any]:
        spec = {k: v for k, v in asdict(self.spec).items() if k != "published_params"}
        return {"config_id": self.config_id, "spec": spec, "seq_len": self.seq_len,
                "micro_batch": self.micro_batch, "grad_accum": self.grad_accum}

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> FsdpCase:
        return FsdpCase(raw["config_id"], ModelSpec(**raw["spec"]), int(raw["seq_len"]),
                        int(raw["micro_batch"]), int(raw["grad_accum"]))


@dataclass(frozen=True, slots=True)
class FsdpSettings:
    """How the FSDP2 steps are run."""

    backend: str
    """'gloo' (CPU) or 'nccl' (CUDA)."""
    link: str
    """Link recorded per row (catalogs/links.csv)."""
    dtype: str
    """Parameter/activation dtype."""
    iters: int
    """Timed steps per case."""
    warmup: int
    """Untimed steps per case."""
    threads: int = 1
    """torch threads per rank."""
    recipe: TrainingRecipe = DEFAULT_RECIPE
    """Training recipe the workers train (MixedPrecisionPolicy, resharding, accumulation, AC)."""


def _case_spec(path: Path, raw: Mapping[str, Any]) -> ModelSpec:
    from perfmodel.catalog import get_model

    overrides = {_SPEC_KEYS[k]: v for k, v in raw.items() if k in _SPEC_KEYS}
    try:
        if "model" in raw:
            return replace(get_model(str(raw["model"])), name=str(raw.get("name", raw["model"])),
                           **overrides)
        family = str(raw.get("family", "llama"))
        layout = dict(FAMILY_LAYOUT.get(family, {}))
        layout.update({k: overrides.pop(k) for k in ("tie_word_embeddings",) if k in overrides})
        return ModelSpec(name=str(raw["name"]), family=family, **overrides, **layout)
    except (KeyError, TypeError) as err:
        raise ConfigError(
            f"{path}: case {dict(raw)} is incomplete ({err})",
            hint="give `model:` (catalog name) or `name:` plus every shape field.") from err
    except UserInputError as err:  # an invalid shape or unknown model: name the space file
        raise ConfigError(f"{path}: case {dict(raw)}: {err.message}", hint=err.hint) from err


def load_cases(path: str | Path) -> list[FsdpCase]:
    """Cases of an FSDP space file: every shape x micro_batches x grad_accum."""
    p = Path(path)
    raw = read_space_yaml(p, what="FSDP space", example="catalogs/spaces/fsdp-cpu.yaml")
    if not isinstance(raw, dict) or not isinstance(raw.get("shapes"), list):
        raise UserInputError(f"{p}: expected a mapping with a 'shapes' list",
                             hint="see catalogs/spaces/fsdp-cpu.yaml for the format.")
    example = "catalogs/spaces/fsdp-cpu.yaml"
    reject_unknown_keys(p, "", raw, ("name", "seq_len", "micro_batches", "grad_accum", "shapes"),
                        example=example)
    if not raw["shapes"]:
        raise UserInputError(f"{p}: 'shapes' is empty: nothing to measure",
                             hint="list at least one shape (see catalogs/spaces/fsdp-cpu.yaml).")
    cases = []
    for i, shape in enumerate(raw["shapes"]):
        if not isinstance(shape, dict):
            raise UserInputError(f"{p}: shapes[{i}] = {shape!r} is not a mapping",
                                 hint="write each shape as `- {model: NAME, ...}`.")
        reject_unknown_keys(p, f"shapes[{i}]", shape,
                            ("model", "name", "family", *_SPEC_KEYS, "seq_len",
                             "micro_batches", "grad_accum"), example=example)
        spec = _case_spec(p, shape)
        seq_len = positive_int(p, f"shapes[{i}].seq_len",
                               shape.get("seq_len", raw.get("seq_len", 128)))
        lists: dict[str, list[Any]] = {}
        for key in ("micro_batches", "grad_accum"):
            values = shape.get(key, raw.get(key, [1]))
            if not isinstance(values, list) or not values:
                raise UserInputError(f"{p}: shapes[{i}].{key} = {values!r}: "
                                     "must be a non-empty list",
                                     hint=f"write e.g. `{key}: [1, 2]`.")
            lists[key] = values
        for mb in lists["micro_batches"]:
            for ga in lists["grad_accum"]:
                cases.append(FsdpCase(spec.name, spec, seq_len,
                                      positive_int(p, f"shapes[{i}].micro_batches", mb),
                                      positive_int(p, f"shapes[{i}].grad_accum", ga)))
    return cases


def run_fsdp(cases: Sequence[FsdpCase], out_path: str | Path, settings: FsdpSettings, *, nproc: int,
             torchrun_args: str | None = None) -> Path:
    """Write the case plan next to the output and launch the FSDP2 workers; returns the plan
    path."""
    from perfmodel.catalog import get_link

    get_link(settings.link)
    if settings.iters < 1 or settings.warmup < 0:
        raise UserInputError(f"--iters must be >= 1 and --warmup >= 0, got {settings.iters}, "
                             f"{settings.warmup}",
                             hint="e.g. --iters 5 --warmup 2.")
    if not cases:  # checked here too: torchrun must not start for nothing
        raise UserInputError("no FSDP cases to run", hint="list shapes in the --space file.")
    check_run_inputs(out=out_path, columns=COLUMNS, key_columns=KEY_COLUMNS, dtype=settings.dtype,
                     threads=settings.threads, nproc=nproc, iters=settings.iters,
                     warmup=settings.warmup)
    plan = Path(f"{out_path}.plan.json")
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_text(json.dumps([c.to_json() for c in cases], indent=1) + "\n")
    args = ["--out", str(out_path), "--plan", str(plan), "--backend", settings.backend,
            "--link", settings.link, "--dtype", settings.dtype, "--iters", str(settings.iters),
            "--warmup", str(settings.warmup), "--threads", str(settings.threads),
            "--recipe", json.dumps(recipe_mapping(settings.recipe))]
    launch(torchrun_command("perfmodel.bench.fsdp_worker", args, nproc=nproc,
                            torchrun_args=torchrun_args),
           threads=settings.threads, what="FSDP2 benchmark")
    return plan


# ---- measured vs simulated ----------------------------------------------------------------

def _memory_config(dtype: str) -> Any:
    """Memory-model element sizes of a run in `dtype` (pure fp32 on CPU: every element 4 B, no
    caching-allocator reserve); bf16 runs keep the model's mixed-precision defaults."""
    from perfmodel.memory import MemoryConfig

    if dtype in ("float32", "fp32"):
        return MemoryConfig(compute_param_bytes=4, reduce_grad_bytes=4, activation_bytes=4,
                            logits_bytes=4, reserve_bytes=0)
    return MemoryConfig()


def recipe_mapping(recipe: TrainingRecipe) -> dict[str, Any]:
    """The recipe as a JSON-able mapping without the DiLoCo settings (FSDP training ignores
    them)."""
    data = recipe.to_dict()
    data.pop("outer", None)
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
    from perfmodel.memory_validation import read_rows

    keys = ("model", "world_size", "seq_len", "micro_batch", "accum_steps")
    rows = read_rows(memory_data)
    if rows and "allocator_peak_bytes" not in rows[0]:
        raise UserInputError(f"{memory_data}: no column 'allocator_peak_bytes'",
                             hint="give a CSV written by `shardmeter bench memory --real`.")
    return {tuple(r[k] for k in keys): float(r["allocator_peak_bytes"]) for r in rows}


def read_fsdp_dataset(data: str | Path) -> pd.DataFrame:
    """A `shardmeter bench fsdp` CSV, every cell a string; UserInputError naming a missing file
    or missing columns (`recipe` may be absent: such rows trained `legacy_recipe`)."""
    import pandas as pd

    hint = "give a CSV written by `shardmeter bench fsdp`."
    if not Path(data).is_file():
        raise UserInputError(f"{data}: no such file", hint=hint)
    frame = pd.read_csv(data, dtype=str, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in frame.columns and c != "recipe"]
    if missing:
        raise UserInputError(f"{data}: missing column(s) {', '.join(missing)}", hint=hint)
    return frame


def compare_fsdp(data: str | Path, profile_name: str, *, hardware: str | None = None,
                 memory_data: str | Path | None = None) -> list[dict[str, Any]]:
    """Measured FSDP2 steps beside the simulator's prediction (perfmodel.fsdp.simulate_step over
    the profile's compute and comm coefficients) and the memory model's peak, per row. The
    measured peak is the row's own, or with `memory_data` (`bench memory --real --like DATA`)
    the real-tensor allocator peak of the same configuration."""

    from perfmodel.catalog import get_gpu
    from perfmodel.features import spec_from_row
    from perfmodel.fsdp import simulate_step, step_costs
    from perfmodel.hardware import IslandSpec
    from perfmodel.memory import memory_breakdown
    from perfmodel.profile import load_profile

    profile = load_profile(profile_name)
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
        peak = memory_breakdown(spec, num_gpus=world, seq_len=seq, micro_batch=mb, recipe=recipe,
                                accum_steps=ga, config=_memory_config(row["dtype"])).peak_bytes
        key = (str(row["model"]), *(str(row[k]) for k in ("world_size", "seq_len",
                                                          "micro_batch", "grad_accum")))
        if peaks and key not in peaks:
            raise UserInputError(f"{memory_data}: no row for {key} of {data}",
                                 hint=f"run `shardmeter bench memory --real --like {data} "
                                      f"-o {memory_data}` (it resumes).")
        measured_mem = peaks[key] if peaks else float(row["peak_memory_bytes"])
        out.append({"model": row["model"], "recipe": recipe.name, "accum_mode": recipe.accum_mode,
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
