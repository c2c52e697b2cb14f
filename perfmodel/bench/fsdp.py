"""End-to-end FSDP2 check: real sharded training steps under torchrun, timed per step.

`shardmeter bench fsdp --space catalogs/spaces/fsdp-cpu.yaml -o DATA.csv` resolves the cases of
the space file (shapes x micro-batches x gradient-accumulation steps), writes them to a JSON plan
next to the output and launches `torchrun ... -m perfmodel.bench.fsdp_worker`. Each worker trains
exactly the run's `TrainingRecipe` (`--recipe`, default torchtitan) through
`perfmodel.bench.recipe_wrap`: activation checkpointing, `fully_shard` per block then the root with
the recipe's `MixedPrecisionPolicy` and resharding, its accumulation mode (reduce-scatter every
micro-step, or `set_requires_gradient_sync(False)` until the last), AdamW. With `--tp`,
`--dp-replicate` and `--[no-]sequence-parallel` the recipe carries a parallel layout (checked
against every case and the rank count before any rank starts): torchtitan's tensor-parallel plan,
then FSDP2 or HSDP over what the layout leaves. Rank 0 writes the median step time (max over
ranks per step), the peak memory per rank and the recipe (JSON, the layout resolved on the
ranks), row by row; rerunning resumes. `compare_fsdp` predicts every row with the recipe (and
layout) it trained.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfmodel.bench.comm import WORKER_LOG_SUFFIX, launch, torchrun_command
from perfmodel.bench.common import (
    check_run_inputs,
    positive_int,
    read_space_yaml,
    reject_unknown_keys,
)
from perfmodel.bench.parallel import check_benchmarkable
from perfmodel.profiles.fsdp_compare import COLUMNS, KEY_COLUMNS, recipe_mapping
from perfmodel.spec.arch import FAMILY_LAYOUT, ModelSpec
from perfmodel.spec.catalog import get_link, get_model
from perfmodel.spec.errors import ConfigError, UserInputError
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

SPEC_KEYS = {"hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
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
    """How the FSDP2 (and pipeline: `perfmodel.bench.pipeline.PipelineSettings`) steps are
    run."""

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
    """Training recipe the workers train (MixedPrecisionPolicy, resharding, accumulation, AC;
    under a pipeline the layout is the case's)."""


def case_spec(path: Path, raw: Mapping[str, Any]) -> ModelSpec:

    overrides = {SPEC_KEYS[k]: v for k, v in raw.items() if k in SPEC_KEYS}
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
                            ("model", "name", "family", *SPEC_KEYS, "seq_len",
                             "micro_batches", "grad_accum"), example=example)
        spec = case_spec(p, shape)
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


def check_layout(cases: Sequence[FsdpCase], layout: ParallelLayout, *,
                 world_size: int | None) -> None:
    """UserInputError (before any rank starts) naming the first case or rank count the parallel
    layout cannot train: the layout's rules (`ParallelLayout.resolve`, `check_model`) and the
    benchmark's (`perfmodel.bench.parallel.check_benchmarkable`); `world_size` None (a
    multi-node launch): the ranks are not known here, their check is the workers'."""
    if layout.is_default:
        return
    resolved = layout.resolve(world_size) if world_size is not None else layout
    for case in cases:
        check_benchmarkable(case.spec, resolved)
        try:
            resolved.check_model(num_layers=case.spec.num_layers, num_heads=case.spec.num_heads,
                                 num_kv_heads=case.spec.num_kv_heads,
                                 intermediate_size=case.spec.intermediate_size,
                                 seq_len=case.seq_len)
        except UserInputError as err:
            raise UserInputError(f"case {case.config_id}: {err.message}", hint=err.hint) from None
        if resolved.tp > 1 and resolved.sequence_parallel and case.seq_len % resolved.tp:
            raise UserInputError(
                f"case {case.config_id}: sequence parallelism splits the sequence "
                f"{case.seq_len} over tp {resolved.tp} ranks unevenly",
                hint=f"use a seq_len that is a multiple of {resolved.tp}, or "
                     "--no-sequence-parallel.")


def run_fsdp(cases: Sequence[FsdpCase], out_path: str | Path, settings: FsdpSettings, *, nproc: int,
             torchrun_args: str | None = None) -> Path:
    """Write the case plan next to the output and launch the FSDP2 workers; returns the plan
    path."""

    get_link(settings.link)
    if settings.iters < 1 or settings.warmup < 0:
        raise UserInputError(f"--iters must be >= 1 and --warmup >= 0, got {settings.iters}, "
                             f"{settings.warmup}",
                             hint="e.g. --iters 5 --warmup 2.")
    if not cases:  # checked here too: torchrun must not start for nothing
        raise UserInputError("no FSDP cases to run", hint="list shapes in the --space file.")
    check_layout(cases, settings.recipe.parallel, world_size=nproc if torchrun_args is None
                 else None)
    return launch_workers("perfmodel.bench.fsdp_worker", cases, out_path, settings,
                          columns=COLUMNS, key_columns=KEY_COLUMNS, nproc=nproc,
                          torchrun_args=torchrun_args, what="FSDP2 benchmark")


def launch_workers(worker: str, cases: Sequence[Any], out_path: str | Path,
                   settings: FsdpSettings, *, columns: Sequence[str], key_columns: Sequence[str],
                   nproc: int, torchrun_args: str | None, what: str) -> Path:
    """Check the output and run settings, write the case plan (each case's `to_json`) next to
    the output and launch `worker` under torchrun with the settings; returns the plan path.
    Shared by the FSDP2 and pipeline benchmarks, whose workers take the same arguments."""
    check_run_inputs(out=out_path, columns=columns, key_columns=key_columns, dtype=settings.dtype,
                     threads=settings.threads, nproc=nproc, iters=settings.iters,
                     warmup=settings.warmup)
    plan = Path(f"{out_path}.plan.json")
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_text(json.dumps([c.to_json() for c in cases], indent=1) + "\n")
    args = ["--out", str(out_path), "--plan", str(plan), "--backend", settings.backend,
            "--link", settings.link, "--dtype", settings.dtype, "--iters", str(settings.iters),
            "--warmup", str(settings.warmup), "--threads", str(settings.threads),
            "--recipe", json.dumps(recipe_mapping(settings.recipe))]
    launch(torchrun_command(worker, args, nproc=nproc, torchrun_args=torchrun_args),
           threads=settings.threads, what=what, log_path=f"{out_path}{WORKER_LOG_SUFFIX}")
    return plan
