"""Typed API of `shardmeter bench compute` and `shardmeter bench memory`.

A frozen request says what to measure; `plan_compute_bench` picks the configurations (no torch
needed, so a dry run works without the [bench] extra), `run_compute_bench` measures them and
`run_memory_bench` tracks FSDP2 memory. The CLI (`planner.cli.bench_cmd`,
`planner.cli.bench_memory_cmd`) only checks that torch is there, parses options and formats.
Importing this module does not import torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from perfmodel.bench import common, memory_grid
from perfmodel.bench import compute as cb
from perfmodel.bench.common import CsvLog
from perfmodel.bench.compute import shape_row
from perfmodel.bench.environment import append_environment, environment_record, warn_small_pages
from perfmodel.bench.memory import CATEGORIES, COLUMNS, KEY_COLUMNS, MemoryCase, run_fake_case
from perfmodel.bench.memory_real import run_real_cases
from perfmodel.bench.space import load_space
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.formulas import GIB
from perfmodel.spec.inputs import check_limit
from perfmodel.spec.recipe import named_recipe

if TYPE_CHECKING:
    from perfmodel.bench.compute import BenchConfig
    from perfmodel.bench.memory import MemoryCase
    from perfmodel.bench.space import DesignSpace
    from perfmodel.spec.recipe import TrainingRecipe

DEVICES = ("cpu", "cuda")
"""Devices `bench compute` measures on."""
DEFAULT_ITERS = 10
"""Profiled iterations per point when neither the request nor the space's named.iters says."""
MEMORY_ROW_FIELDS = ("model", "world_size", "seq_len", "micro_batch", "accum_steps", "accum_mode",
                     "ac", "wall_s")
"""Case columns of a `bench memory` row shown before the peak and its breakdown."""


# ---- bench compute --------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class ComputeBenchRequest:
    """`shardmeter bench compute`: forward/backward/optimizer phases over a design space."""

    space_path: str
    """Design-space YAML file (`perfmodel.bench.space`)."""
    out_path: Path
    """Output CSV (appended; rerun to resume)."""
    configs: int = 150
    """Sobol configurations to sample (ignored with `named`)."""
    device: str = "cpu"
    """'cpu' or 'cuda'."""
    dtype: str = "float32"
    """float32, bfloat16 or float16."""
    seed: int = 0
    """Sobol scrambling seed (also the seed of weights and tokens)."""
    iters: int | None = None
    """Profiled iterations per point; None: the space's named.iters with `named`, else 10."""
    warmup: int = 2
    """Unprofiled warm-up steps per point."""
    threads: int = 1
    """torch intra-op threads."""
    max_time_s: float | None = None
    """Per-configuration time cap of the micro-batch sweep; None: the space's (none if named)."""
    memory_cap_gib: float | None = None
    """Estimated-memory cap of the sweep, GiB; None: the space's (none if named)."""
    named: bool = False
    """Measure the space's held-out named models instead of Sobol shapes."""
    limit: int | None = None
    """Run at most this many unfinished configurations; None: all."""

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise UserInputError(f"unknown device {self.device!r}",
                                 hint=f"use one of {', '.join(DEVICES)}.")
        for flag, value, limit in (("--max-time-s", self.max_time_s, "seconds"),
                                   ("--memory-cap-gib", self.memory_cap_gib, "memory_gib")):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or value <= 0:
                raise UserInputError(f"{flag} {value!r}: must be a finite number > 0",
                                     hint=f"pass {flag} with a value > 0, or leave it out for "
                                          "the space's.")
            check_limit(limit, value, field=flag)
        for flag, count, least in (("-n", self.configs, 1), ("--limit", self.limit, 1),
                                   ("--seed", self.seed, 0)):
            if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                                      or count < least):
                raise UserInputError(f"{flag} {count!r}: must be an integer >= {least}",
                                     hint=f"pass {flag} {max(least, 1)} or more.")
        check_limit("bench_configs", self.configs, field="-n")


@dataclass(frozen=True, kw_only=True, slots=True)
class ComputeBenchPlan:
    """The configurations a `bench compute` request measures."""

    request: ComputeBenchRequest
    """What was asked."""
    space: DesignSpace
    """The loaded design space."""
    configs: list[BenchConfig]
    """Sobol-sampled or named configurations, in run order."""

    def records(self) -> list[dict[str, Any]]:
        """One row per configuration: its shape and micro-batch sweep (the dry-run listing)."""

        return [shape_row(c) | {"micro_batches": " ".join(map(str, c.micro_batches))}
                for c in self.configs]


@dataclass(frozen=True, kw_only=True, slots=True)
class ComputeBenchCounts:
    """What the output CSV holds after a run."""

    rows: int
    """Rows (one per phase and point)."""
    configs: int
    """Distinct configurations."""
    points: int
    """Distinct (configuration, micro-batch) points."""


def plan_compute_bench(request: ComputeBenchRequest) -> ComputeBenchPlan:
    """Load the design space and pick its configurations (no torch needed)."""

    design = load_space(request.space_path)
    configs = (cb.named_configs(design) if request.named
               else cb.sample_configs(design, request.configs, request.seed))
    return ComputeBenchPlan(request=request, space=design, configs=configs)


def run_compute_bench(plan: ComputeBenchPlan) -> ComputeBenchCounts:
    """Measure every configuration of `plan` not finished in its CSV yet (needs torch); records
    the environment next to the CSV."""

    r, design = plan.request, plan.space
    warn_small_pages(r.device)
    iters = r.iters
    if iters is None:
        iters = (design.named.iters if r.named and design.named and design.named.iters
                 else None) or DEFAULT_ITERS
    common.check_run_inputs(out=r.out_path, columns=cb.COLUMNS, key_columns=cb.KEY_COLUMNS,
                            dtype=r.dtype, threads=r.threads, iters=iters, warmup=r.warmup)
    settings = cb.ComputeSettings(
        device=common.resolve_device(r.device), dtype=common.resolve_dtype(r.dtype),
        threads=common.set_threads(r.threads), iters=iters, warmup=r.warmup,
        time_per_config_s=_cap(r.max_time_s, 1.0, 0.0 if r.named else design.time_per_config_s),
        memory_cap_bytes=_cap(r.memory_cap_gib, 1024**3,
                              0.0 if r.named else design.memory_cap_bytes),
        seed=r.seed)
    append_environment(r.out_path, environment_record(
        device=r.device, threads=settings.threads, extra={
            "benchmark": "compute", "space": str(r.space_path), "named": r.named,
            "n": r.configs, "seed": r.seed, "iters": iters, "warmup": r.warmup,
            "dtype": r.dtype, "time_per_config_s": settings.time_per_config_s,
            "memory_cap_bytes": settings.memory_cap_bytes}))
    counts = cb.run_compute(plan.configs, r.out_path, settings, limit=r.limit)
    return ComputeBenchCounts(rows=counts["rows"], configs=counts["configs"],
                              points=counts["points"])


def _cap(given: float | None, unit: float, default: float) -> float:
    """A sweep cap: the request's if given, else the default (named models have none: their
    micro-batch list is explicit)."""
    return default if given is None else given * unit


# ---- bench memory ---------------------------------------------------------------------------

def _torchtitan() -> TrainingRecipe:

    return named_recipe("torchtitan")


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryBenchRequest:
    """`shardmeter bench memory`: PyTorch's FSDPMemTracker on one case (under FakeTensorMode),
    a dataset grid, the held-out cases, or the tracker itself against real-tensor runs."""

    model: str | None = None
    """Catalog model of the single case."""
    nodes: int = 1
    """Nodes in the island (single case)."""
    gpus_per_node: int = 8
    """GPUs per node (single case)."""
    world_size: int | None = None
    """FSDP ranks; None: nodes x GPUs per node."""
    seq_len: int | None = None
    """Sequence length S of the single case."""
    micro_batch: int = 1
    """Sequences per rank (single case)."""
    accum: int = 1
    """Micro-steps k per optimizer step (single case)."""
    recipe: Callable[[], TrainingRecipe] = field(default=_torchtitan, repr=False)
    """Builds the single case's training recipe; called only for a single case (the dataset
    cases carry their own recipes), after the mode checks."""
    out_path: Path | None = None
    """CSV to append rows to (rerun to resume); None: track one case and print only."""
    grid: int | None = None
    """Track this many random cases of the dataset grid."""
    heldout: bool = False
    """Track the held-out validation cases."""
    real: bool = False
    """Check the tracker itself: small real-tensor 2-rank gloo runs."""
    like: Path | None = None
    """With `real`: measure the configurations of this `bench fsdp` CSV instead."""
    seed: int = 0
    """Grid sampling seed."""
    steps: int = 2
    """Optimizer steps tracked (after a zero-gradient step creates the AdamW state)."""
    jobs: int = 1
    """Parallel processes for grid / held-out cases."""
    limit: int | None = None
    """Track at most this many new grid / held-out cases."""
    only_model: str | None = None
    """With grid / held-out: track only the drawn cases of this model."""

    def __post_init__(self) -> None:
        if self.like is not None and not self.real:
            raise UserInputError("--like measures real-tensor runs", hint="add --real.")
        if self.real and self.out_path is None:
            raise UserInputError("--real writes a dataset", hint="pass -o DATA.csv.")
        if not self.real and (self.grid is not None or self.heldout) and self.out_path is None:
            raise UserInputError("--grid/--heldout write a dataset", hint="pass -o DATA.csv.")

    @property
    def mode(self) -> str:
        """'real', 'dataset' (grid or held-out cases) or 'single'."""
        if self.real:
            return "real"
        return "dataset" if self.grid is not None or self.heldout else "single"


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryBenchResult:
    """What a `bench memory` run did."""

    mode: str
    """The request's mode: 'real', 'dataset' or 'single'."""
    measured: int
    """Cases run now."""
    skipped: int
    """Cases already in the CSV."""
    row: dict[str, Any] | None = None
    """Single case: its peak and breakdown in GiB (`memory_display_row`); else None."""
    recipe_summary: str = ""
    """Single case: the recipe it was trained with, in one line."""


def run_memory_bench(request: MemoryBenchRequest) -> MemoryBenchResult:
    """Run the request's cases (needs torch): real-tensor checks, dataset cases written to the
    CSV, or one case (written to the CSV when one is given) returned as a display row."""

    r = request
    if r.mode == "real":

        cases = memory_grid.real_cases() if r.like is None else memory_grid.cases_like(r.like)
        counts = run_real_cases(cases, cast(Path, r.out_path))  # the request requires it
        return MemoryBenchResult(mode=r.mode, measured=counts["measured"],
                                 skipped=counts["skipped"])
    if r.mode == "dataset":
        cases = (memory_grid.grid_cases(r.grid, seed=r.seed, steps=r.steps)
                 if r.grid is not None and not r.heldout else memory_grid.heldout_cases(r.steps))
        if r.only_model is not None:
            cases = [c for c in cases if c.config_id == r.only_model.lower()]
        counts = memory_grid.run_parallel(cases, cast(Path, r.out_path), jobs=r.jobs,
                                          limit=r.limit)  # the request requires out_path
        return MemoryBenchResult(mode=r.mode, measured=counts["measured"],
                                 skipped=counts["skipped"])
    recipe = r.recipe()
    case = _single_case(r, recipe)
    return MemoryBenchResult(mode=r.mode, measured=1, skipped=0,
                             row=memory_display_row(_track_single(case, r.out_path)),
                             recipe_summary=recipe.summary())


def _single_case(r: MemoryBenchRequest, recipe: TrainingRecipe) -> MemoryCase:

    if r.model is None or r.seq_len is None:
        raise UserInputError("bench memory needs MODEL and --seq-len (or --grid / --heldout)",
                             hint="e.g. shardmeter bench memory Llama-3.1-8B --seq-len 8192.")
    ws = r.world_size if r.world_size is not None else r.nodes * r.gpus_per_node
    return MemoryCase(config_id=r.model, spec=get_model(r.model), world_size=ws,
                      seq_len=r.seq_len, micro_batch=r.micro_batch, accum_steps=r.accum,
                      recipe=recipe, steps=r.steps)


def _track_single(case: MemoryCase, out_path: Path | None) -> dict[str, Any]:
    """The case's tracked row: appended to (or, when there, read from) `out_path` if given."""

    if out_path is None:
        return run_fake_case(case)

    memory_grid.run_parallel([case], out_path, jobs=1)
    log = CsvLog(out_path, COLUMNS, KEY_COLUMNS)
    return next(row for row in log.rows() if log.key_of(row) == log.key_of(case.key("fake")))


def memory_display_row(row: dict[str, Any]) -> dict[str, Any]:
    """A tracked row as printed: case columns, the peak and each non-zero category in GiB."""

    out = {k: row[k] for k in MEMORY_ROW_FIELDS}
    out["peak_gib"] = int(row["peak_bytes"]) / GIB
    for column in CATEGORIES.values():
        if float(row[column]):
            out[column.removesuffix("_bytes") + "_gib"] = float(row[column]) / GIB
    return out
