"""Command `layout`: the valid layouts of one island ranked by throughput
(`perfmodel.api.layout`); `--explain` places a named layout in that ranking."""

from __future__ import annotations

from typing import Any

import click
import pandas as pd

from perfmodel import api
from perfmodel.api.layout import (
    DEFAULT_TOP,
    LayoutRanking,
    LayoutRequest,
    explain,
    rank_layouts,
    require_a_layout,
)
from perfmodel.api.workload import positive
from perfmodel.numbers import format_number, format_percent
from planner.cli.common import (
    SCHEMA_VERSION,
    CheckpointParam,
    echo_wrapped,
    emit_compact,
    emit_json,
    emit_table,
    format_option,
    terminal_width,
    wide_option,
)
from planner.cli.layout_labels import layout_legend, short_layout
from planner.cli.recipe_opts import recipe_from_options, recipe_option_list

_TABLE_COLUMNS = ("rank", "layout_text", "ac", "micro_batch", "accum", "tokens_per_s_per_gpu",
                  "mfu", "peak_gib", "bubble_fraction", "why")
"""Columns of the full table (`--wide`)."""
def _compact_row(entry: dict[str, Any]) -> dict[str, str]:
    row = {"#": str(entry["rank"]), "layout": short_layout(entry["layout"]), "ac": entry["ac"],
           "m": str(entry["micro_batch"]), "k": str(entry["accum"]),
           "tok/s/GPU": format_number(entry["tokens_per_s_per_gpu"]),
           "MFU %": format_number(entry["mfu"] * 100, digits=3),
           "peak GiB": format_number(entry["peak_gib"])}
    if entry["layout"]["pp"] > 1 or entry.get("bubble_fraction", 0.0) > 0:
        row["bubble %"] = format_number(entry["bubble_fraction"] * 100, digits=3)
    else:
        row["bubble %"] = "-"
    return row


@click.command()
@click.argument("model_name", metavar="MODEL")
@click.option("--gpu", "gpu_name", required=True, help="Catalog GPU name.")
@click.option("--nodes", type=int, default=1, show_default=True, help="Nodes in the island.")
@click.option("--gpus-per-node", type=int, default=8, show_default=True, help="GPUs per node.")
@click.option("--seq-len", type=int, required=True, help="Sequence length in tokens.")
@click.option("--global-batch", "global_batch", type=int, required=True,
              help="Sequences per optimizer step (k x micro-batch x data-parallel ranks).")
@click.option("--top", type=int, default=DEFAULT_TOP, show_default=True,
              help="Layouts to show.")
@click.option("--ac-mode", "ac_modes", type=CheckpointParam(), multiple=True,
              help="Checkpointing modes to consider (repeatable; default none, op-sac, layer:2, "
                   "full).")
@click.option("--max-tp", type=int, default=None, help="Largest tensor-parallel degree.")
@click.option("--max-pp", type=int, default=None, help="Largest pipeline degree.")
@click.option("--max-ep", type=int, default=None,
              help="Largest expert-parallel degree (mixture-of-experts models).")
@click.option("--max-virtual-stages", type=int, default=None,
              help="Interleaved 1F1B is tried with 2, 4, ... up to this many virtual stages per "
                   "pipeline rank (default 4; more search deeper, at more time).")
@click.option("--explain", "named", default=None, metavar="LAYOUT",
              help="Where a layout ranks and what beating the best takes, e.g. "
                   "tp=8,pp=16,dp_shard=128,v=4,ac=none.")
@click.option("--profile", "profile_name", default=None,
              help="Hardware profile name or YAML path (default: the GPU's).")
@wide_option()
@format_option()
def layout(model_name: str, gpu_name: str, nodes: int, gpus_per_node: int, seq_len: int,
           global_batch: int, top: int, ac_modes: tuple[str, ...], max_tp: int | None,
           max_pp: int | None, max_ep: int | None, max_virtual_stages: int | None,
           named: str | None,
           profile_name: str | None, wide: bool, fmt: str, recipe_name: str, **flags: Any) -> None:
    """Rank the layouts (tp, pp, cp, HSDP, ep, schedule, checkpointing, micro-batch) of one
    island of MODEL for a global batch, by throughput."""
    request = layout_request(model_name=model_name, gpu_name=gpu_name, nodes=nodes,
                             gpus_per_node=gpus_per_node, seq_len=seq_len,
                             global_batch=global_batch, top=top, ac_modes=ac_modes,
                             max_tp=max_tp, max_pp=max_pp, max_ep=max_ep,
                             max_virtual_stages=max_virtual_stages,
                             profile_name=profile_name, recipe_name=recipe_name, **flags)
    if named is not None:
        result = explain(request, named)
        if fmt == "json":
            emit_json({"schema_version": SCHEMA_VERSION, "rank": result.rank, "of": result.of,
                       "gap_pct": result.gap_pct, "layout": result.entry, "best": result.best,
                       "explanation": result.lines})
            return
        for line in result.lines:
            echo_wrapped(line)
        return
    emit_ranking(request, rank_layouts(request), fmt=fmt, wide=wide)


def layout_request(*, model_name: str, gpu_name: str, nodes: int, gpus_per_node: int,
                   seq_len: int, global_batch: int, top: int, ac_modes: tuple[str, ...],
                   max_tp: int | None, max_pp: int | None, max_ep: int | None,
                   profile_name: str | None, recipe_name: str,
                   max_virtual_stages: int | None = None, **flags: Any) -> LayoutRequest:
    """The `LayoutRequest` of the command's options (the recipe flags in `flags`)."""
    parallel = {k: v for k, v in (("max_tp", max_tp), ("max_pp", max_pp), ("max_ep", max_ep),
                                  ("max_virtual_stages", max_virtual_stages)) if v is not None}
    for key, value in parallel.items():  # named by its flag, not as the space's field
        positive("--" + key.replace("_", "-"), value)   # (its size: click's BoundedInt)
    return LayoutRequest(
        workload=api.WorkloadSpec(model_name=model_name, gpu_name=gpu_name, nodes=nodes,
                                  gpus_per_node=gpus_per_node, seq_len=seq_len,
                                  profile_name=profile_name,
                                  recipe=recipe_from_options(recipe_name, **flags)),
        global_batch_seqs=global_batch, parallel=parallel,
        checkpointing=list(ac_modes) or None, top=top)


def emit_ranking(request: LayoutRequest, ranking: LayoutRanking, *, fmt: str,
                 wide: bool) -> None:
    """Print `ranking` of `request` as the command does in `fmt` (json, csv or the text view,
    `--wide` or compact), then exit 1 (`require_a_layout`) when no layout runs the batch."""
    w = request.workload
    if fmt == "json":
        emit_json({"schema_version": SCHEMA_VERSION, "layouts": ranking.entries,
                   "ranked": ranking.total, "considered": ranking.candidates,
                   "rejected": ranking.rejected})
        require_a_layout(request, ranking)
        return
    frame = pd.DataFrame(ranking.entries)
    if fmt == "csv":
        flat = frame.drop(columns=["layout"]) if not frame.empty else frame
        click.echo(flat.to_csv(index=False), nl=False)
        require_a_layout(request, ranking)
        return
    if frame.empty:
        echo_wrapped(f"no layout of {w.nodes} x {w.gpus_per_node} {w.gpu_name} runs a batch of "
                     f"{request.global_batch_seqs} sequences of {w.model_name}")
    else:
        best = ranking.entries[0]
        echo_wrapped(f"best: {best['layout_text']}, ac {best['ac']}, m {best['micro_batch']}, "
                     f"k {best['accum']}: {format_number(best['tokens_per_s_per_gpu'])} "
                     f"tok/s/GPU, MFU {format_percent(best['mfu'])}; {best['why']}")
        title = f"{ranking.total} of {ranking.candidates} layouts run the batch"
        if wide:
            emit_table(frame.loc[:, list(_TABLE_COLUMNS)], title=title)
        else:
            click.echo("")
            emit_compact([_compact_row(e) for e in ranking.entries], width=terminal_width(),
                         title=title + (f" (top {len(ranking.entries)})"
                                        if ranking.total > len(ranking.entries) else ""))
            legend = layout_legend([e["layout"] for e in ranking.entries])
            if legend:
                echo_wrapped(legend)
    if ranking.rejected:
        click.echo("")
        echo_wrapped(f"{len(ranking.rejected)} layouts cannot (json lists each with why), e.g. "
                     f"{ranking.rejected[0]['layout']} ac {ranking.rejected[0]['ac']}: "
                     f"{ranking.rejected[0]['why']}")
    if not wide:
        click.echo("every column and why: --wide or --format json")
    require_a_layout(request, ranking)


for _option in reversed(recipe_option_list(ac=False)):
    layout = _option(layout)
