"""DiLoCo / Streaming DiLoCo CLI options: the recipe's `OuterRecipe` from flags, and the sync link.

Every flag defaults to None: a flag that is set wins; otherwise a value a recipe file sets
(anything other than `OuterRecipe`'s default) is kept; otherwise the command's historical default
applies (`predict --strategy diloco` H = 100; Streaming DiLoCo F = 3, τ = 2, H = F·τ), so the
commands behave as before unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

import click

from perfmodel.errors import UserInputError
from perfmodel.recipe import FRAGMENT_PATTERNS, PSEUDO_GRADIENT_DTYPES, OuterRecipe, TrainingRecipe

STREAMING_DEFAULTS = {"num_fragments": 3, "delay_steps": 2}
"""Streaming DiLoCo defaults of the CLI (the ShardMeter paper's figure 6 schedule); H = F·τ."""
DILOCO_DEFAULT_INNER_STEPS = 100
"""H of `predict --strategy diloco` unless set."""


def dtype_option() -> Callable[..., Any]:
    return click.option(
        "--pseudo-gradient-dtype",
        "dtype",
        type=click.Choice(PSEUDO_GRADIENT_DTYPES),
        default=None,
        help="Dtype of the exchanged pseudo-gradient; int8/fp4 send one "
        "fp32 scale per 128 values (default: the recipe's, fp32).",
    )


def outer_option_list() -> list[Callable[..., Any]]:
    """Fragment pattern, backward overlap and the same-cluster topology switch."""
    return [
        click.option(
            "--fragment-pattern",
            type=click.Choice(FRAGMENT_PATTERNS),
            default=None,
            help="Blocks per fragment: consecutive, or every F-th block (default: the recipe's, "
            "contiguous).",
        ),
        click.option(
            "--overlap-backward/--no-overlap-backward",
            "overlap_backward",
            default=None,
            help="Start each block's exchange when its backward is done and need it only at its "
            "forward (default: the recipe's, on; --example keeps figure 6's off).",
        ),
        click.option(
            "--islands-same-cluster",
            is_flag=True,
            default=False,
            help="Islands share one cluster: sync over its inter-node fabric, not the WAN.",
        ),
    ]


def resolve_outer(recipe: TrainingRecipe, *, defaults: dict[str, Any], **flags: Any) -> OuterRecipe:
    """The outer settings: set flags, else non-default recipe values, else `defaults`."""
    library = OuterRecipe()
    values: dict[str, Any] = {}
    for f in fields(OuterRecipe):
        flag = flags.get(f.name)
        mine = getattr(recipe.outer, f.name)
        if flag is not None:
            values[f.name] = flag
        elif mine != getattr(library, f.name) or f.name not in defaults:
            values[f.name] = mine
        else:
            values[f.name] = defaults[f.name]
    return replace(recipe.outer, **values)


def streaming_outer(
    recipe: TrainingRecipe,
    *,
    model: Any,
    fragments: int | None,
    delay: int | None,
    sync_every: int | None,
    dtype: str | None,
    fragment_pattern: str | None,
    overlap_backward: bool | None,
) -> OuterRecipe:
    """Streaming DiLoCo settings with the CLI's defaults (H = F·max(τ, 1) unless given)."""
    for option, value, least in (
        ("--fragments", fragments, 1),
        ("--delay", delay, 0),
        ("--sync-every", sync_every, 1),
    ):
        if value is not None and value < least:
            raise UserInputError(
                f"{option} {value}: must be >= {least}", hint=f"pass {option} >= {least}."
            )
    outer = resolve_outer(
        recipe,
        defaults=dict(STREAMING_DEFAULTS),
        num_fragments=fragments,
        delay_steps=delay,
        pseudo_gradient_dtype=dtype,
        fragment_pattern=fragment_pattern,
        overlap_backward=overlap_backward,
    )
    if outer.num_fragments > model.num_layers:
        raise UserInputError(
            f"--fragments {outer.num_fragments}: {model.name} has only {model.num_layers} layers",
            hint=f"pass --fragments {model.num_layers} or fewer (a fragment is a layer group).",
        )
    if sync_every is not None:
        h = sync_every
    elif recipe.outer.inner_steps != OuterRecipe().inner_steps:
        h = recipe.outer.inner_steps
    else:
        h = outer.num_fragments * max(outer.delay_steps, 1)
    return replace(outer, inner_steps=h)


def sync_link(
    island: Any,
    *,
    islands: int,
    wan_gbit_s: float,
    wan_latency_ms: float,
    dtype: str,
    same_cluster: bool,
) -> Any:
    """The link pseudo-gradients cross: the WAN, or the island's inter-node fabric."""
    from perfmodel.streaming import WanLink, fabric_link

    if islands < 1:
        raise UserInputError(
            f"--islands {islands}: must be > 0", hint="pass --islands with a value > 0."
        )
    if same_cluster:
        return fabric_link(island.gpu.name, num_islands=islands, dtype=dtype)
    for option, value, zero_ok in (
        ("--wan-gbit-s", wan_gbit_s, False),
        ("--wan-latency-ms", wan_latency_ms, True),
    ):
        if value < 0 or (value == 0 and not zero_ok):
            bound = ">= 0" if zero_ok else "> 0"
            raise UserInputError(
                f"{option} {value}: must be {bound}", hint=f"pass {option} with a value {bound}."
            )
    return WanLink(
        num_islands=islands,
        bw_bytes_per_s=wan_gbit_s * 1e9 / 8,
        latency_s=wan_latency_ms / 1e3,
        dtype=dtype,
    )


def describe_outer(outer: OuterRecipe, link: Any, *, bandwidth: bool = True) -> str:
    """One line: the outer settings and the link, for terminal output."""
    where = "cluster fabric" if link.kind == "fabric" else "WAN"
    speed = f"{link.bw_bytes_per_s * 8 / 1e9:.4g} Gbit/s, " if bandwidth else ""
    return (
        f"outer: H={outer.inner_steps}, F={outer.num_fragments} ({outer.fragment_pattern}), "
        f"τ={outer.delay_steps}, overlap backward {'on' if outer.overlap_backward else 'off'}, "
        f"pseudo-gradient {outer.pseudo_gradient_dtype}, {outer.optimizer} outer optimizer; "
        f"sync over the {where}: {link.num_islands} islands, {speed}{link.latency_s * 1e3:.4g} ms"
    )
