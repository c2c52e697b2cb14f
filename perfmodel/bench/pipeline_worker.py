"""torchrun entry point of the pipeline benchmark (one process per pipeline rank).

Launched by `shardmeter bench pipeline`. Per case: build the model with the same seed on every
rank, keep this rank's stages (`perfmodel.bench.pipeline_stages`), warm up, then time whole
optimizer steps (the schedule over k micro-batches, then AdamW) after a barrier, keeping the
slowest rank per step; rank 0 writes the median and IQR and skips rows already in the file.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from perfmodel.bench.comm_worker import device_sync, done_keys_rank0, setup
from perfmodel.bench.common import CsvLog, dtype_name, median_iqr, resolve_dtype
from perfmodel.bench.environment import append_environment, environment_record
from perfmodel.bench.fsdp_worker import parse_worker_args, recipe_argument, timed_steps
from perfmodel.bench.model import build_model, random_tokens
from perfmodel.bench.pipeline import COLUMNS, KEY_COLUMNS, PipelineCase, case_recipe, row_key
from perfmodel.bench.pipeline_stages import (
    checkpoint_blocks,
    make_stage_optimizer,
    pipeline_schedule,
    train_step,
)
from perfmodel.profiles.fsdp_compare import recipe_cell

logger = logging.getLogger("perfmodel.bench.pipeline_worker")


def run_case(case: PipelineCase, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Measure one case; returns its dataset row."""
    dtype = resolve_dtype(args.dtype)
    pp, rank = dist.get_world_size(), dist.get_rank()
    recipe = case_recipe(recipe_argument(args), case, pp)
    model = checkpoint_blocks(build_model(case.spec, device=device, dtype=dtype, seed=0), recipe)
    run = pipeline_schedule(model, schedule=case.pp_schedule, pp=pp,
                            virtual_stages=case.virtual_stages, rank=rank,
                            micro_batches=case.grad_accum, micro_batch=case.micro_batch,
                            seq_len=case.seq_len, device=device)
    del model  # the stages keep their parts
    optimizer = make_stage_optimizer(list(run.modules.values()))
    # every rank draws the same batch: only stage 0 reads the tokens, the last stage the labels
    tokens = random_tokens(case.spec, case.micro_batch * case.grad_accum, case.seq_len,
                           device=device, seed=case.micro_batch)
    sync = device_sync(device)

    def step() -> None:
        train_step(run, optimizer, tokens)
        sync()

    for _ in range(args.warmup):
        step()
    spread = median_iqr(timed_steps(step, iters=args.iters, device=device))
    s = case.spec
    return {"model": case.config_id, "family": s.family, "hidden_size": s.hidden_size,
            "num_hidden_layers": s.num_layers, "num_attention_heads": s.num_heads,
            "num_key_value_heads": s.num_kv_heads, "head_dim": s.d,
            "intermediate_size": s.intermediate_size, "vocab_size": s.vocab_size,
            "tie_word_embeddings": s.tie_word_embeddings, "seq_len": case.seq_len,
            "micro_batch": case.micro_batch, "grad_accum": case.grad_accum, "pp": pp,
            "virtual_stages": case.virtual_stages, "pp_schedule": case.pp_schedule,
            "world_size": pp, "backend": args.backend, "link": args.link,
            "device": device.type, "dtype": dtype_name(dtype), "threads": args.threads,
            "step_time_s": spread.median_s, "step_time_iqr_s": spread.iqr_s,
            "iters": args.iters, "recipe": recipe_cell(recipe)}


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_worker_args(argv, description=__doc__, launcher="bench pipeline", iters=10,
                             warmup=3)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    device = setup(args.backend, args.threads)
    rank, pp = dist.get_rank(), dist.get_world_size()
    cases = [PipelineCase.from_json(c) for c in json.loads(Path(args.plan).read_text())]
    log = CsvLog(args.out, COLUMNS, KEY_COLUMNS)
    done = done_keys_rank0(log)
    if rank == 0:
        append_environment(args.out, environment_record(
            device=device.type, threads=args.threads,
            extra={"benchmark": "pipeline", "backend": args.backend, "world_size": pp,
                   "link": args.link}))
    dtype = dtype_name(resolve_dtype(args.dtype))
    for case in cases:
        recipe = case_recipe(recipe_argument(args), case, pp)
        if log.key_of(row_key(case, pp, args.backend, dtype, recipe)) in done:
            continue
        row = run_case(case, args, device)
        if rank == 0:
            log.append([row])
            logger.info("%s %s V=%d S=%d mb=%d k=%d: %.4f s/step", case.config_id,
                        case.pp_schedule, case.virtual_stages, case.seq_len, case.micro_batch,
                        case.grad_accum, row["step_time_s"])
        gc.collect()
        dist.barrier()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
