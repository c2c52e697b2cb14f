"""DiLoCo / Streaming DiLoCo CLI options (their resolution lives in `perfmodel.api.workload`).

Every flag defaults to None: a flag that is set wins; otherwise a value a recipe file sets
(anything other than `OuterRecipe`'s default) is kept; otherwise the command's historical default
applies (`predict --strategy diloco` and `streaming-diloco` H = 100; Streaming DiLoCo F = 3, τ = 2;
the `streaming` tuner H = F·τ), so the
commands behave as before unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

# The resolution of the outer settings and the sync link moved to perfmodel (the public API
# uses them); re-exported here for callers of the old paths.
from perfmodel.api.workload import (
    DILOCO_DEFAULT_INNER_STEPS,
    STREAMING_DEFAULTS,
    describe_outer,
    resolve_outer,
    streaming_outer,
    sync_link,
)
from perfmodel.spec.recipe import FRAGMENT_PATTERNS, PSEUDO_GRADIENT_DTYPES

__all__ = ["DILOCO_DEFAULT_INNER_STEPS", "STREAMING_DEFAULTS", "describe_outer", "dtype_option",
           "outer_option_list", "resolve_outer", "streaming_outer", "sync_link"]


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
