"""`shardmeter bench memory`: PyTorch's FSDPMemTracker on the real model under FakeTensorMode.

torch is imported inside the command only, so `shardmeter --help` stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from perfmodel.errors import UserInputError
from perfmodel.hardware import GIB
from planner.cli.common import emit_records, format_option
from planner.cli.recipe_opts import recipe_from_options, recipe_options

_ROW_FIELDS = ("model", "world_size", "seq_len", "micro_batch", "accum_steps", "accum_mode", "ac",
               "peak_bytes", "wall_s")


def _display(row: dict[str, Any]) -> dict[str, Any]:
    from perfmodel.bench.memory import CATEGORIES

    out = {k: row[k] for k in _ROW_FIELDS if k != "peak_bytes"}
    out["peak_gib"] = int(row["peak_bytes"]) / GIB
    for column in CATEGORIES.values():
        if float(row[column]):
            out[column.removesuffix("_bytes") + "_gib"] = float(row[column]) / GIB
    return out


def _single_case(model: str | None, nodes: int, gpus_per_node: int, world_size: int | None,
                 seq_len: int | None, micro_batch: int, accum: int, recipe: Any,
                 steps: int) -> Any:
    from perfmodel.bench.memory import MemoryCase
    from perfmodel.catalog import get_model

    if model is None or seq_len is None:
        raise UserInputError("bench memory needs MODEL and --seq-len (or --grid / --heldout)",
                             hint="e.g. shardmeter bench memory Llama-3.1-8B --seq-len 8192.")
    ws = world_size if world_size is not None else nodes * gpus_per_node
    return MemoryCase(config_id=model, spec=get_model(model), world_size=ws, seq_len=seq_len,
                      micro_batch=micro_batch, accum_steps=accum, recipe=recipe, steps=steps)


@click.command("memory")
@click.argument("model", required=False)
@click.option("--nodes", type=int, default=1, show_default=True, help="Nodes in the island.")
@click.option("--gpus-per-node", type=int, default=8, show_default=True, help="GPUs per node.")
@click.option("--world-size", type=int, default=None,
              help="FSDP ranks (overrides nodes x GPUs per node).")
@click.option("--seq-len", type=int, default=None, help="Sequence length S.")
@click.option("--micro-batch", type=int, default=1, show_default=True, help="Sequences per rank.")
@click.option("--accum", type=int, default=1, show_default=True, help="Micro-steps k per step.")
@recipe_options
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="CSV to append rows to (rerun to resume); none: print only.")
@click.option("--grid", type=int, default=None,
              help="Track N random cases of the dataset grid instead of one case.")
@click.option("--heldout", is_flag=True, help="Track the 20 held-out validation cases.")
@click.option("--real", "real", is_flag=True,
              help="Check the tracker itself: small real-tensor 2-rank gloo runs, tracker vs "
                   "the CPU allocator's own accounting.")
@click.option("--like", "like", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --real: measure the configurations of this `bench fsdp` CSV instead "
                   "(each with its row's recipe).")
@click.option("--seed", type=int, default=0, show_default=True, help="Grid sampling seed.")
@click.option("--steps", type=int, default=2, show_default=True,
              help="Optimizer steps tracked (after a zero-gradient step creates the AdamW state).")
@click.option("--jobs", type=int, default=1, show_default=True, help="Parallel processes.")
@click.option("--limit", type=int, default=None, help="Track at most this many new cases.")
@click.option("--only", "only_model", default=None,
              help="With --grid/--heldout: track only the drawn cases of this model.")
@format_option()
def memory_cmd(model: str | None, nodes: int, gpus_per_node: int, world_size: int | None,
               seq_len: int | None, micro_batch: int, accum: int, recipe_name: str,
               out: Path | None, grid: int | None, heldout: bool, real: bool, like: Path | None,
               seed: int,
               steps: int, jobs: int,
               limit: int | None, only_model: str | None, fmt: str, **flags: Any) -> None:
    """FSDPMemTracker peak per GPU of MODEL trained as the recipe says, under FakeTensorMode
    (no real memory): two optimizer steps of k micro-steps, breakdown by category."""
    from planner.cli.bench_cmd import _require_torch, _verbose_bench_logs

    _require_torch()
    _verbose_bench_logs()
    from perfmodel.bench import memory_grid
    from perfmodel.bench.memory import run_fake_case

    if like is not None and not real:
        raise UserInputError("--like measures real-tensor runs", hint="add --real.")
    if real:
        if out is None:
            raise UserInputError("--real writes a dataset", hint="pass -o DATA.csv.")
        from perfmodel.bench.memory_real import run_real_cases

        cases = memory_grid.real_cases() if like is None else memory_grid.cases_like(like)
        counts = run_real_cases(cases, out)
        click.echo(f"{out}: {counts['measured']} real runs, {counts['skipped']} already there")
        return
    if grid is not None or heldout:
        if out is None:
            raise UserInputError("--grid/--heldout write a dataset", hint="pass -o DATA.csv.")
        cases = (memory_grid.grid_cases(grid, seed=seed, steps=steps)
                 if grid is not None and not heldout else memory_grid.heldout_cases(steps))
        if only_model is not None:
            cases = [c for c in cases if c.config_id == only_model.lower()]
        counts = memory_grid.run_parallel(cases, out, jobs=jobs, limit=limit)
        click.echo(f"{out}: {counts['measured']} tracked, {counts['skipped']} already there")
        return
    recipe = recipe_from_options(recipe_name, **flags)
    case = _single_case(model, nodes, gpus_per_node, world_size, seq_len, micro_batch, accum,
                        recipe, steps)
    if out is not None:
        memory_grid.run_parallel([case], out, jobs=1)
        from perfmodel.bench.common import CsvLog
        from perfmodel.bench.memory import COLUMNS, KEY_COLUMNS

        log = CsvLog(out, COLUMNS, KEY_COLUMNS)
        row = next(r for r in log.rows() if log.key_of(r) == log.key_of(case.key("fake")))
    else:
        row = run_fake_case(case)
    emit_records([_display(row)], fmt, title=f"FSDPMemTracker ({recipe.summary()})")
