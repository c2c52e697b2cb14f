"""`shardmeter bench memory`: PyTorch's FSDPMemTracker on the real model under FakeTensorMode.

torch is imported inside the command only, so `shardmeter --help` stays light.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import click

from perfmodel.bench import api_bench
from planner.cli.common import emit_records, format_option, require_torch, verbose_bench_logs
from planner.cli.recipe_opts import recipe_from_options, recipe_options, refuse_unmeasurable


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
               seed: int, steps: int, jobs: int, limit: int | None, only_model: str | None,
               fmt: str, **flags: Any) -> None:
    """FSDPMemTracker peak per GPU of MODEL trained as the recipe says, under FakeTensorMode
    (no real memory): two optimizer steps of k micro-steps, breakdown by category."""

    require_torch()
    verbose_bench_logs()
    refuse_unmeasurable(recipe_from_options(recipe_name, **flags), "bench memory")
    result = api_bench.run_memory_bench(api_bench.MemoryBenchRequest(
        model=model, nodes=nodes, gpus_per_node=gpus_per_node, world_size=world_size,
        seq_len=seq_len, micro_batch=micro_batch, accum=accum,
        recipe=partial(recipe_from_options, recipe_name, **flags), out_path=out, grid=grid,
        heldout=heldout, real=real, like=like, seed=seed, steps=steps, jobs=jobs, limit=limit,
        only_model=only_model))
    if result.row is not None:
        emit_records([result.row], fmt, title=f"FSDPMemTracker ({result.recipe_summary})")
    else:
        done = "real runs" if result.mode == "real" else "tracked"
        click.echo(f"{out}: {result.measured} {done}, {result.skipped} already there")
