#!/usr/bin/env python
"""Where the time of a measured TP = 2 CPU step goes, beside what the shipped profile predicts
for it (issue 23's CPU miss: every TP = 2 row of cpu-fsdp-layouts.csv is predicted too fast).

    .venv/bin/python -m scripts.profile_tp_step                # every judged row, markdown
    .venv/bin/python -m scripts.profile_tp_step --case 0 --case 8

Claim: per row of `catalogs/profiles/data/cpu-fsdp-layouts.csv` with two ranks, the same
configuration is retrained here (2 gloo ranks under torchrun, the row's recipe and layout,
`perfmodel.bench.fsdp_worker`'s model, sharding and step; jemalloc preloaded as
scripts/collect_cpu_data.sh does when it is installed) and one step is profiled with
torch.profiler on both ranks. Reported per row, beside the dataset's measured step and the
profile's prediction (`perfmodel.profiles.fsdp_compare.compare_fsdp`: compute and
communication busy time): this run's unprofiled median step (timed as the dataset's:
`fsdp_worker.timed_steps`, the slower rank per step), the profiled step (the profiler's own
overhead included), the time the slower rank spent waiting on the inline collectives
(`_c10d_functional::wait_tensor`, inclusive) and the host time of DTensor's dispatch
(self time of DTensor's Python subclass dispatch, redistributions and local/DTensor
conversions, forward and backward).
Why: the step-time gap has to be split into a communication part (the collectives' time on the
critical path, which the isolated `bench comm` sweep times with a barrier per repetition and
keeps the median of) and a host part (DTensor's per-op sharding propagation, absent from the
compute benchmark's plain modules) before either can be modelled; this measures both on the
rows themselves. Diagnostic only: nothing here is fitted, and the rows stay validation data.
Checked by: running it (it is a diagnostic report, not a shipped figure's generator).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "catalogs" / "profiles" / "data" / "cpu-fsdp-layouts.csv"
PROFILE = ROOT / "catalogs" / "profiles" / "cpu-x86-2core.yaml"
DTENSOR_EVENTS = frozenset({"PythonSubclass", "Redistribute", "NestedRedistribute",
                            "RedistributeBackward", "_FromTorchTensor", "_ToTorchTensor",
                            "_FromTorchTensorBackward", "_ToTorchTensorBackward"})
"""torch.profiler event names of DTensor's host work (torch 2.13)."""
WAIT_EVENT = "_c10d_functional::wait_tensor"


def worker(plan_path: Path, out_path: Path, iters: int) -> None:
    """One rank: each planned case trained, timed unprofiled, then one step profiled."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from perfmodel.bench.comm_worker import setup
    from perfmodel.bench.fsdp import FsdpCase
    from perfmodel.bench.fsdp_worker import data_rank, make_step, shard_model, timed_steps
    from perfmodel.bench.model import random_tokens
    from perfmodel.bench.recipe_wrap import make_optimizer
    from perfmodel.spec.recipe import recipe_from_mapping

    device = setup("gloo", 1)
    results = []
    for entry in json.loads(plan_path.read_text()):
        case = FsdpCase.from_json(entry["case"])
        recipe = recipe_from_mapping(entry["recipe"], source=str(DATA))
        model = shard_model(case, device, torch.float32, recipe)
        optimizer = make_optimizer(model, recipe)
        tokens = random_tokens(case.spec, case.micro_batch, case.seq_len, device=device,
                               seed=1000 * data_rank(recipe) + case.micro_batch)
        step = make_step(model, optimizer, tokens, case.grad_accum, lambda: None, recipe)
        for _ in range(3):
            step()
        # the dataset's timing: each step after a barrier, the slower rank's time per step
        times = timed_steps(step, iters=iters, device=device)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            dist.barrier()
            t0 = time.perf_counter()
            step()
            profiled_s = time.perf_counter() - t0
        events = prof.key_averages()
        mine = [statistics.median(times), profiled_s,
                sum(e.cpu_time_total for e in events if e.key == WAIT_EVENT) / 1e6,
                sum(e.count for e in events if e.key == WAIT_EVENT),
                sum(e.self_cpu_time_total for e in events if e.key in DTENSOR_EVENTS) / 1e6]
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        results.append(gathered)
        del model, optimizer
    if dist.get_rank() == 0:
        out_path.write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


def _launch(plan: list[dict[str, Any]], iters: int) -> list[Any]:
    """Run the worker on 2 ranks (jemalloc preloaded when installed, as the collection did)."""
    with tempfile.TemporaryDirectory() as tmp:
        plan_path, out_path = Path(tmp) / "plan.json", Path(tmp) / "out.json"
        plan_path.write_text(json.dumps(plan))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        jemalloc = next((p for p in ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
                                     "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2")
                         if Path(p).is_file()), None)
        if jemalloc:
            env |= {"LD_PRELOAD": jemalloc, "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1"}
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
        subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "--log-dir",
                        str(Path(tmp) / "logs"), str(Path(__file__).resolve()), "--worker",
                        "--plan", str(plan_path), "--out", str(out_path),
                        "--iters", str(iters)], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        result: list[Any] = json.loads(out_path.read_text())
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--case", type=int, action="append",
                        help="index among the 2-rank rows (default: all)")
    parser.add_argument("--iters", type=int, default=7, help="unprofiled steps per case")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--plan", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.plan, args.out, args.iters)
        return 0
    from perfmodel.bench.fsdp import FsdpCase
    from perfmodel.costs.features import spec_from_row
    from perfmodel.formatting import markdown_table
    from perfmodel.profiles.fsdp_compare import (
        compare_fsdp,
        read_fsdp_dataset,
        recipe_mapping,
        row_recipe,
    )

    rows_in = [row for _, row in read_fsdp_dataset(DATA).iterrows()]
    judged = [i for i, row in enumerate(rows_in) if int(row["world_size"]) == 2]
    picks = [judged[i] for i in (args.case or range(len(judged)))]
    predicted = compare_fsdp(DATA, str(PROFILE))
    plan = [{"case": FsdpCase(str(rows_in[i]["model"]), spec_from_row(rows_in[i]),
                              int(rows_in[i]["seq_len"]), int(rows_in[i]["micro_batch"]),
                              int(rows_in[i]["grad_accum"])).to_json(),
             "recipe": recipe_mapping(row_recipe(rows_in[i], str(DATA)))} for i in picks]
    measured = _launch(plan, args.iters)
    rows = []
    for i, ranks in zip(picks, measured, strict=True):
        p = predicted[i]
        slow = max(ranks, key=lambda r: r[0])
        rows.append([p["model"], p["layout"], p["micro_batch"], p["grad_accum"],
                     f"{p['measured_step_s']:.4f}", f"{slow[0]:.4f}", f"{slow[1]:.4f}",
                     f"{p['predicted_step_s']:.4f}", f"{p['predicted_compute_s']:.4f}",
                     f"{p['predicted_comm_s']:.4f}", f"{max(r[2] for r in ranks):.4f}",
                     str(max(r[3] for r in ranks)), f"{max(r[4] for r in ranks):.4f}"])
    sys.stdout.write(markdown_table(
        ["case", "layout", "m", "k", "dataset step s", "this run s", "profiled s",
         "predicted s", "predicted compute s", "predicted comm s", "collective wait s",
         "waits", "DTensor host s"], rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
