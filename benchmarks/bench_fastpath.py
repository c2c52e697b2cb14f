"""Fast path vs graph simulator: FSDP step evaluations per second for a 32-layer model, one core.

Run: .venv/bin/python -m benchmarks.bench_fastpath [--quick]
Writes its section of docs/PERFORMANCE.md (command, date, machine, every figure).

Workload: Llama-3-8B (32 blocks + root = 33 FSDP units) with the H100-SXM5-80GB default profile
(its compute-communication contention factor included) and the torchtitan recipe;
configurations are (island, micro-batch) pairs: nodes 1..4 x GPUs per node {1, 2, 4, 8} x
micro-batch 1..N/16, i.e. real durations from the profile. One "step evaluation" is the step time
of one configuration (the fast path returns microstep_s and step_fixed_s, i.e. every k, at once;
the graph needs one simulation per k). The fast path is the FSDP step graph compiled once per
(units, recipe) and evaluated as max-plus operations over arrays. Timed: the schedule only
(durations are computed first), and separately the fast path including the duration arrays from
the profile (what the island table builder does), and the paper recipe. Single core: thread pools
pinned to 1 and the process to one CPU.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy is imported

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from perfmodel.profiles.profile import default_profile
from perfmodel.sim.fastpath import FastCosts, concat_fast_costs, fast_step, model_fast_costs
from perfmodel.sim.fsdp import simulate_step, step_costs
from perfmodel.sim.pipeline import pipeline_costs, pipeline_decomposition, simulate_pipeline
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import DEFAULT_RECIPE, PAPER_RECIPE

ROOT = Path(__file__).resolve().parent.parent


MODEL, GPU = "Llama-3-8B", "H100-SXM5-80GB"
SEQ_LEN = 4096
LAYOUT = ParallelLayout(tp=2, dp_replicate=2)
"""The layout row: tensor parallelism (sequence parallel) inside HSDP."""
LAYOUT_RECIPE = replace(DEFAULT_RECIPE, parallel=LAYOUT)
PIPELINE = ParallelLayout(tp=2, pp=4, virtual_stages=2, pp_schedule="interleaved-1f1b")
"""The pipeline row: interleaved 1F1B over 4 stages x 2 virtual stages, TP 2 inside."""
PIPELINE_RECIPE = replace(DEFAULT_RECIPE, parallel=PIPELINE)


# ---- helpers shared with bench_tables.py ----------------------------------------------------

def pin_one_core() -> int | str:
    """Pin this process to one CPU (the last one allowed) where the OS lets us."""
    if not hasattr(os, "sched_setaffinity"):
        return "unpinned"
    cpu = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def machine_lines() -> list[str]:
    import datetime as dt
    import platform

    cpu = platform.processor() or "unknown"
    try:
        names = [
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ]
        cpu = f"{names[0]} ({len(names)} logical CPUs)" if names else cpu
    except OSError:
        pass
    return [f"Date: {dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
            f"Machine: {platform.machine()}, {cpu}; {platform.system()} {platform.release()}",
            f"Python {platform.python_version()}, numpy {np.__version__}"]


def write_section(key: str, title: str, command: str, body: list[str]) -> Path:
    """Replace (or append) this benchmark's block of docs/PERFORMANCE.md."""
    from benchmarks._perfdoc import replace_block

    return replace_block(key, "\n".join([f"## {title}", "", f"Command: `{command}`", "", *body]))


# ---- benchmark ----------------------------------------------------------------------------------


def _islands() -> list[IslandSpec]:
    gpu = get_gpu(GPU)
    return [IslandSpec(gpu=gpu, num_nodes=n, gpus_per_node=g, intra_link=gpu.intra_node_link,
                       inter_link=gpu.inter_node_link, nics_per_node=gpu.nics_per_node)
            for n in (1, 2, 3, 4) for g in (1, 2, 4, 8)]


def _median_s(fn: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Fewer configurations and repeats.")
    args = parser.parse_args()
    cpu = pin_one_core()
    model, profile, islands = get_model(MODEL), default_profile(GPU), _islands()
    n_fast = 4096 if args.quick else 16384
    n_graph = 48 if args.quick else 192
    repeats = 5 if args.quick else 9
    mbs = np.arange(1, n_fast // len(islands) + 1)

    def costs_for(recipe: object) -> FastCosts:
        return concat_fast_costs(
            [
                model_fast_costs(
                    model, profile, isl, seq_len=SEQ_LEN, micro_batches=mbs, recipe=recipe
                )
                for isl in islands
            ]
        )

    costs, paper = costs_for(DEFAULT_RECIPE), costs_for(PAPER_RECIPE)
    fast_s = _median_s(lambda: fast_step(costs), repeats)
    paper_s = _median_s(lambda: fast_step(paper), repeats)
    # a layout: tensor parallelism with its inline collectives and HSDP replica all-reduces, on
    # the islands whose nodes hold a multiple of tp x dp_replicate GPUs
    layout_islands = [isl for isl in islands if isl.gpus_per_node >= 4]
    layout_mbs = np.arange(1, n_fast // len(layout_islands) + 1)
    layout_costs = concat_fast_costs([
        model_fast_costs(model, profile, isl, seq_len=SEQ_LEN, micro_batches=layout_mbs,
                         recipe=LAYOUT_RECIPE) for isl in layout_islands])
    layout_s = _median_s(lambda: fast_step(layout_costs), repeats)
    layout_graph = [step_costs(model, profile, layout_islands[i % len(layout_islands)],
                               seq_len=SEQ_LEN, micro_batch=1 + i // len(layout_islands),
                               recipe=LAYOUT_RECIPE) for i in range(8)]
    layout_check = fast_step(FastCosts.from_step_costs(layout_graph))
    layout_worst = max(
        abs(layout_check.step_time_s(k)[i] - simulate_step(c, accum_steps=k).step_time_s)
        / simulate_step(c, accum_steps=k).step_time_s
        for i, c in enumerate(layout_graph) for k in (1, 4))

    # a pipeline: the compiled interleaved-1F1B plan evaluated over an array of micro-batches on
    # a 4-node island (durations computed first, as for the FSDP rows); one evaluation = one
    # configuration's affine T(k) for every admissible k
    pipe_island = islands[-1]
    pipe_mbs = np.arange(1, n_fast + 1)
    pipe_costs = pipeline_costs(model, profile, pipe_island, seq_len=SEQ_LEN,
                                micro_batch=pipe_mbs, recipe=PIPELINE_RECIPE)
    pipe_s = _median_s(lambda: pipeline_decomposition(pipe_costs), repeats)
    pipe_rate = n_fast / pipe_s
    pipe_dec = pipeline_decomposition(pipe_costs)
    pipe_worst = 0.0
    for mb in (1, 3):
        one = pipeline_costs(model, profile, pipe_island, seq_len=SEQ_LEN, micro_batch=mb,
                             recipe=PIPELINE_RECIPE)
        for k in (PIPELINE.pp, 3 * PIPELINE.pp):
            graph_t = simulate_pipeline(one, micro_batches=k).step_time_s
            fast_t = float(np.asarray(pipe_dec.step_fixed_s)[mb - 1]
                           + k * np.asarray(pipe_dec.microstep_s)[mb - 1])
            pipe_worst = max(pipe_worst, abs(fast_t - graph_t) / graph_t)

    def with_profile() -> None:
        for isl in islands:
            fast_step(model_fast_costs(model, profile, isl, seq_len=SEQ_LEN, micro_batches=mbs))

    fast_profile_s = _median_s(with_profile, repeats)
    single = costs.take(slice(0, 1))
    n_single = 50 if args.quick else 200
    single_s = _median_s(lambda: [fast_step(single) for _ in range(n_single)], repeats)
    graph_cfgs = [step_costs(model, profile, islands[i % len(islands)], seq_len=SEQ_LEN,
                             micro_batch=int(1 + i // len(islands))) for i in range(n_graph)]
    graph_s = _median_s(lambda: [simulate_step(c) for c in graph_cfgs], max(3, repeats // 3))

    fast_rate, profile_rate, graph_rate = (
        n_fast / fast_s,
        n_fast / fast_profile_s,
        n_graph / graph_s,
    )
    single_rate, paper_rate = n_single / single_s, n_fast / paper_s
    n_layout = layout_costs.size
    layout_rate = n_layout / layout_s
    check = fast_step(FastCosts.from_step_costs(graph_cfgs[:8]))
    worst = max(abs(check.step_time_s(k)[i] - simulate_step(c, accum_steps=k).step_time_s)
                / simulate_step(c, accum_steps=k).step_time_s
                for i, c in enumerate(graph_cfgs[:8]) for k in (1, 4))
    lines = [
        f"Workload: {MODEL} ({model.num_layers} blocks + root = {len(model.fsdp_units(SEQ_LEN))} "
        f"FSDP units), {GPU} default profile ({profile.provenance}, overlap_slowdown "
        f"{getattr(profile, 'overlap_slowdown', 1.0):.3g}), seq {SEQ_LEN}, recipe "
        f"{DEFAULT_RECIPE.name} (selective AC); configurations = {len(islands)} islands x "
        f"micro-batches. Single core (CPU {cpu}, BLAS/OpenMP threads 1).",
        "",
        "| path | configurations | median time (s) | step evaluations / s |",
        "| --- | ---: | ---: | ---: |",
        f"| graph simulator (`fsdp.simulate_step`, one per configuration) | {n_graph} | "
        f"{graph_s:.4f} | {graph_rate:,.0f} |",
        f"| fast path (`fastpath.fast_step`, vectorised) | {n_fast} | {fast_s:.4f} | "
        f"{fast_rate:,.0f} |",
        f"| fast path incl. durations from the profile (`model_fast_costs` per island) | {n_fast} "
        f"| {fast_profile_s:.4f} | {profile_rate:,.0f} |",
        f"| fast path, paper recipe (no-sync, every unit resharded) | {n_fast} | {paper_s:.4f} | "
        f"{paper_rate:,.0f} |",
        f"| fast path, one configuration per call (no batching) | {n_single} | {single_s:.4f} | "
        f"{single_rate:,.0f} |",
        f"| fast path, layout {LAYOUT.describe()} | {n_layout} | {layout_s:.4f} | "
        f"{layout_rate:,.0f} |",
        "",
        f"Fast path / graph: {fast_rate / graph_rate:,.0f}x (same run). Target >= 100,000 "
        f"evaluations/s: {'met' if fast_rate >= 1e5 else 'NOT met'}. Largest relative difference "
        f"fast vs graph on 8 of the configurations (k = 1 and 4): {worst:.1e}. Medians of "
        f"{repeats} repeats (graph: {max(3, repeats // 3)}).",
        "",
        f"With a layout ({LAYOUT.describe()}, {len(layout_islands)} islands of 4 or 8 GPUs per "
        f"node): {layout_rate:,.0f} evaluations/s, target >= 100,000: "
        f"{'met' if layout_rate >= 1e5 else 'NOT met'}; largest relative difference fast vs "
        f"graph on 8 configurations (k = 1 and 4): {layout_worst:.1e}.",
        "",
        f"With a pipeline ({PIPELINE.describe()} on {pipe_island.num_nodes} x "
        f"{pipe_island.gpus_per_node} GPUs, the compiled plan's affine T(k) over {n_fast} "
        f"micro-batch sizes, `pipeline.pipeline_decomposition`): {pipe_rate:,.0f} "
        f"evaluations/s ({pipe_s:.4f} s), target >= 100,000: "
        f"{'met' if pipe_rate >= 1e5 else 'NOT met'}; largest relative difference vs the graph "
        f"(`simulate_pipeline`, m = 1 and 3, k = pp and 3 pp): {pipe_worst:.1e}.",
    ]
    path = write_section(
        "bench_fastpath",
        "Fast path vs graph simulator",
        f".venv/bin/python -m benchmarks.bench_fastpath{' --quick' if args.quick else ''}",
        machine_lines() + [""] + lines,
    )
    print("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
