"""The training-recipe CLI options every modelling command shares (`perfmodel.spec.recipe`).

`--recipe` names a shipped recipe (`torchtitan`, `paper`) or a YAML file with `base:` and
overrides; the single-field flags override it. Unset flags keep the recipe's value, so
`--ac` defaults to the recipe's checkpointing mode.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from perfmodel.spec.errors import UserInputError
from perfmodel.spec.inputs import load_yaml
from perfmodel.spec.layout import PP_SCHEDULES
from perfmodel.spec.recipe import (
    ACCUM_MODES,
    ATTENTION_KERNELS,
    COMPUTE_DTYPES,
    DTYPES,
    LOSS_MODES,
    TrainingRecipe,
    named_recipe,
    recipe_from_mapping,
)
from planner.cli.common import CheckpointParam

RECIPE_FLAG_FIELDS = ("ac", "accum_mode", "param_dtype", "reduce_dtype", "attention", "loss",
                      "compute_dtype", "fp8_all_gather", "compile")
"""Keyword names the options below pass to the command, in `TrainingRecipe` field names."""
LAYOUT_FLAG_FIELDS = ("tp", "pp", "dp_replicate", "cp", "virtual_stages", "pp_schedule",
                      "sequence_parallel", "async_tp", "ep")
"""Keyword names of the layout options, in `ParallelLayout` field names (dp_shard is what the
other degrees leave of the island's GPUs)."""


def layout_option_list() -> list[Callable[..., Any]]:
    """The parallel-layout options (`perfmodel.spec.layout.ParallelLayout`); unset ones keep
    the recipe's `parallel:` values."""
    return [
        click.option("--tp", type=int, default=None,
                     help="Tensor-parallel degree (default: the recipe's, else 1)."),
        click.option("--pp", type=int, default=None,
                     help="Pipeline-parallel degree (default: the recipe's, else 1)."),
        click.option("--dp-replicate", type=int, default=None,
                     help="HSDP replicas of the FSDP group (default: the recipe's, else 1)."),
        click.option("--cp", type=int, default=None,
                     help="Context-parallel degree (default: the recipe's, else 1)."),
        click.option("--virtual-stages", type=int, default=None,
                     help="Pipeline stages per GPU (default: the recipe's, else 1)."),
        click.option("--pp-schedule", type=click.Choice(PP_SCHEDULES), default=None,
                     help="Pipeline schedule (default: the recipe's, else 1f1b)."),
        click.option("--sequence-parallel/--no-sequence-parallel", "sequence_parallel",
                     default=None,
                     help="Sequence parallelism under --tp (default: the recipe's, else on)."),
        click.option("--async-tp/--no-async-tp", "async_tp", default=None,
                     help="Overlap tensor-parallel collectives with matmuls (CUDA async TP; "
                          "default: the recipe's, else off)."),
        click.option("--ep", type=int, default=None,
                     help="Expert-parallel degree of a mixture-of-experts model: ranks borrowed "
                          "from dp_shard x cp (default: the recipe's, else 1)."),
    ]


def layout_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator adding `layout_option_list()` to a click command."""
    for option in reversed(layout_option_list()):
        func = option(func)
    return func


def recipe_option_list(*, ac: bool = True) -> list[Callable[..., Any]]:
    """`--recipe` plus per-field overrides; `ac=False` for commands that declare --ac themselves."""
    options = [
        click.option("--recipe", "recipe_name", default="torchtitan", show_default=True,
                     help="Training recipe: torchtitan, paper, or a recipe YAML file."),
        click.option("--accum-mode", "accum_mode", type=click.Choice(ACCUM_MODES), default=None,
                     help="Gradient accumulation: reduce_scatter every micro-step, or no_sync "
                          "(default: the recipe's)."),
        click.option("--param-dtype", type=click.Choice(DTYPES), default=None,
                     help="Dtype of gathered parameters (default: the recipe's)."),
        click.option("--reduce-dtype", type=click.Choice(DTYPES), default=None,
                     help="Dtype of the gradient reduce-scatter (default: the recipe's)."),
        click.option("--attention", type=click.Choice(ATTENTION_KERNELS), default=None,
                     help="Attention kernel (default: the recipe's)."),
        click.option("--loss", type=click.Choice(LOSS_MODES), default=None,
                     help="Loss computation (default: the recipe's)."),
        click.option("--compute-dtype", type=click.Choice(COMPUTE_DTYPES), default=None,
                     help="Dtype of the block linears' matmuls: bf16 or a torchao float8 recipe "
                          "(a prior; refused on GPUs without FP8, e.g. A100; default: the "
                          "recipe's, else bf16)."),
        click.option("--fp8-all-gather/--no-fp8-all-gather", "fp8_all_gather", default=None,
                     help="FSDP all-gather of the linears' weights in float8 (needs an fp8 "
                          "--compute-dtype; default: the recipe's, else off)."),
        click.option("--compile/--no-compile", "compile", default=None,
                     help="torch.compile (a sourced prior speed effect; default: the recipe's, "
                          "else off)."),
    ]
    if ac:
        options.insert(1, click.option("--ac", type=CheckpointParam(), default=None,
                                       help="Activation checkpointing (default: the recipe's)."))
    return options


def recipe_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator adding `recipe_option_list()` to a click command."""
    for option in reversed(recipe_option_list()):
        func = option(func)
    return func


def load_recipe(name_or_path: str) -> TrainingRecipe:
    """A named recipe, or one read from a YAML file (exit 2 with file and field on errors); a
    value that names a path (a folder, a missing file, anything with a '/' or a YAML suffix) is
    read as a file, never looked up as a recipe name."""
    path = Path(name_or_path)
    looks_like_path = (name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path
                       or os.sep in name_or_path)
    if not (looks_like_path or path.exists()):
        return named_recipe(name_or_path)
    data = load_yaml(path, what="recipe file",
                     hint="give an existing recipe YAML file, or torchtitan / paper.")
    return recipe_from_mapping(data or {}, source=str(path))


def recipe_from_options(recipe_name: str, **flags: Any) -> TrainingRecipe:
    """The recipe named by `--recipe` with the per-field flags that were set applied."""
    overrides = {k: flags.get(k) for k in RECIPE_FLAG_FIELDS + LAYOUT_FLAG_FIELDS}
    return load_recipe(recipe_name).with_overrides(**overrides)


def refuse_unmeasurable(recipe: TrainingRecipe, command: str) -> None:
    """UserInputError (exit 2) when a benchmark command is asked for FP8 or torch.compile,
    which its CPU workers do not run (they would measure bf16/fp32 eager and label it FP8)."""
    if recipe.compute_dtype != "bf16" or recipe.fp8_all_gather or recipe.compile:
        raise UserInputError(f"{command}: --compute-dtype {recipe.compute_dtype} / "
                             f"--fp8-all-gather {recipe.fp8_all_gather} / --compile "
                             f"{recipe.compile} cannot be measured by the CPU benchmark workers",
                             hint="drop --compute-dtype, --fp8-all-gather and --compile (FP8 has "
                                  "no CPU ground truth; torch.compile on CPU is measured by "
                                  "python -m scripts.measure_compile_cpu).")
