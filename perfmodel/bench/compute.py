"""Compute benchmark: profile forward, backward and optimizer phases over a design space.

As in the paper (III-A): a parameterised catalog of transformer shapes is sampled (here with a
seeded scrambled Sobol sequence, rounded to valid shapes), each shape trains a few steps under
`torch.profiler`, and the logical phase times come from grouping the trace's events by the
`record_function` range ("forward", "backward", "optimizer") that encloses them. Per shape a
micro-batch sweep 1, 2, 4, ... stops at out-of-memory (GPU) or at the space's time/memory caps.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scipy.stats import qmc

from perfmodel import progress
from perfmodel.bench.common import (
    CsvLog,
    dtype_name,
    is_oom,
    median_iqr,
    time_budget_left,
)
from perfmodel.bench.environment import release_freed_memory
from perfmodel.bench.space import DIMS as _DIMS
from perfmodel.bench.space import (
    DesignSpace,
    IntRange,
)
from perfmodel.costs.memory import FP32_CONFIG, memory_breakdown
from perfmodel.spec.arch import FAMILY_LAYOUT, ModelSpec
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import DatasetError, UserInputError
from perfmodel.spec.recipe import TrainingRecipe

logger = logging.getLogger(__name__)

PHASES = ("forward", "backward", "optimizer")
COLUMNS = ("model", "family", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
           "tie_word_embeddings", "seq_len", "micro_batch", "phase", "time_s", "time_iqr_s",
           "iters", "device", "dtype", "threads")
KEY_COLUMNS = ("model", "seq_len", "micro_batch", "phase")
_SHAPE_COLUMNS = COLUMNS[1:10]
_DEVICE_KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


# ---- design space (perfmodel.bench.space) and configurations -------------------------------

@dataclass(frozen=True, slots=True)
class BenchConfig:
    """One shape to benchmark with its micro-batch sweep."""

    config_id: str
    """Dataset `model` column: <space id_prefix>-NNNN (sobol-NNNN by default) or the named
    model's name."""
    spec: ModelSpec
    """Architecture."""
    seq_len: int
    """Sequence length."""
    micro_batches: tuple[int, ...]
    """Micro-batches to try, in order (the sweep may stop early)."""


def doubling(max_micro_batch: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to max_micro_batch."""
    return tuple(2**i for i in range(int(math.log2(max(1, max_micro_batch))) + 1))


def shape_from_unit(space: DesignSpace, u: Sequence[float], name: str) -> tuple[ModelSpec, int]:
    """Round one point of the unit cube onto a valid shape (h % a == 0, a % a_kv == 0, even d)."""
    r = space.ranges
    fam = space.families[min(int(u[0] * len(space.families)), len(space.families) - 1)]
    tie = space.tie_choices[min(int(u[1] * len(space.tie_choices)), len(space.tie_choices) - 1)]
    kv = _clip(int(r["num_key_value_heads"].pick(u[5])), r["num_key_value_heads"])
    heads = max(kv, round(r["num_attention_heads"].pick(u[4]) / kv) * kv)
    step = math.lcm(2 * heads, r["hidden_size"].multiple_of)
    hidden = max(step, round(r["hidden_size"].pick(u[2]) / step) * step)
    hidden += step * math.ceil(max(0, r["hidden_size"].low - hidden) / step)
    layout = dict(FAMILY_LAYOUT[fam], tie_word_embeddings=tie)
    spec = ModelSpec(name=name, family=fam, hidden_size=hidden, num_heads=heads, num_kv_heads=kv,
                     num_layers=_clip(int(r["num_hidden_layers"].pick(u[3])),
                                      r["num_hidden_layers"]),
                     intermediate_size=_rounded(r["intermediate_size"], u[6]),
                     vocab_size=_rounded(r["vocab_size"], u[7]), **layout)
    seq = space.seq_lens[min(int(u[8] * len(space.seq_lens)), len(space.seq_lens) - 1)]
    return spec, seq


def _clip(v: int, rng: IntRange) -> int:
    return max(rng.low, min(rng.high, v))


def _rounded(rng: IntRange, u: float) -> int:
    m = rng.multiple_of
    return max(m, round(_clip(int(rng.pick(u)), rng) / m) * m)


def sample_configs(space: DesignSpace, n: int, seed: int) -> list[BenchConfig]:
    """The first n shapes of a scrambled Sobol sequence that satisfy the space's step limit.

    Ids are the index in the raw sequence, so they stay stable when n grows.
    """

    if n < 1:
        raise UserInputError(f"-n must be >= 1, got {n}", hint="pass -n 150 (the CPU default).")
    if not space.ranges:
        raise UserInputError(f"design space {space.name!r} lists named models only: it has no "
                             "dimensions to sample",
                             hint="run it with --named.")
    sobol = qmc.Sobol(d=len(_DIMS), scramble=True, rng=seed)
    points = sobol.random_base2(int(math.ceil(math.log2(8 * n))))
    out: list[BenchConfig] = []
    for i, u in enumerate(points):
        spec, seq = shape_from_unit(space, u, f"{space.id_prefix}-{i:04d}")
        if space.max_step_gflop and _step_gflop(spec, seq, 1) > space.max_step_gflop:
            continue
        out.append(BenchConfig(spec.name, spec, seq, doubling(space.max_micro_batch)))
        if len(out) == n:
            return out
    raise UserInputError(f"only {len(out)} of {n} Sobol points satisfy max_step_gflop "
                         f"in {space.name}",
                         hint="raise limits.max_step_gflop or ask for fewer configurations.")


def named_configs(space: DesignSpace) -> list[BenchConfig]:
    """The held-out named models (catalog names or config.json files), layer count reduced as the
    space's `named` section says: one configuration per model and sequence length, models in the
    file's order, each model's sequence lengths in theirs. The dataset's `model` column is the
    model's name (a config.json's folder name), the same at every sequence length."""

    if space.named is None:
        raise UserInputError(f"design space {space.name!r} has no 'named' section",
                             hint="add named: {models, num_hidden_layers, seq_len, micro_batches}.")
    out: list[BenchConfig] = []
    for name in space.named.models:
        spec = get_model(name)
        if space.named.num_hidden_layers:
            spec = replace(spec, num_layers=space.named.num_hidden_layers)
        out.extend(BenchConfig(spec.name, spec, seq, space.named.micro_batches)
                   for seq in space.named.seq_lens)
    return out


def progress_keys(configs: Sequence[BenchConfig]) -> dict[tuple[str, int], str]:
    """(configuration id, sequence length) -> its name in the `.progress` file: the id alone when
    the id has one sequence length in `configs` (every sampled shape, and the files written
    before named models could list several), else `<id>@S<seq_len>`."""
    seqs: dict[str, set[int]] = {}
    for c in configs:
        seqs.setdefault(c.config_id, set()).add(c.seq_len)
    return {(c.config_id, c.seq_len): (c.config_id if len(seqs[c.config_id]) == 1
                                       else f"{c.config_id}@S{c.seq_len}") for c in configs}


def _step_gflop(spec: ModelSpec, seq_len: int, micro_batch: int) -> float:
    return spec.train_flops_per_token(seq_len) * seq_len * micro_batch / 1e9


BENCH_RECIPE = TrainingRecipe(name="compute-bench", param_dtype="fp32", reduce_dtype="fp32",
                              ac="none")
"""What the compute benchmark trains: the plain torch model in fp32, no checkpointing, AdamW."""


def estimate_memory_bytes(spec: ModelSpec, seq_len: int, micro_batch: int) -> float:
    """Peak memory of one benchmark step, from the memory model (`perfmodel.costs.memory`) of an
    unsharded fp32 step: the cap that stops a micro-batch sweep before it would swap."""
    return float(memory_breakdown(spec, num_gpus=1, seq_len=seq_len, micro_batch=micro_batch,
                                  recipe=BENCH_RECIPE, config=FP32_CONFIG).peak_bytes)


# ---- phase grouping (pure) ----------------------------------------------------------------

def group_phases(events: Sequence[Mapping[str, Any]], device: str = "cpu",
                 phases: Sequence[str] = PHASES) -> list[dict[str, float]]:
    """Phase durations (seconds) per iteration from Chrome-trace events of a profiler session.

    CPU: each phase's time is the duration of its host `record_function` range (cat
    'user_annotation'); the k-th range of each phase belongs to iteration k.
    CUDA: each device kernel (cat kernel/gpu_memcpy/gpu_memset) is linked through its
    'correlation' id to the host launch event, and assigned to the host phase range that
    contains the launch; the phase time is the sum of its kernels' durations.
    """
    ranges = sorted((e for e in events
                     if e.get("cat") == "user_annotation" and e.get("name") in phases),
                    key=lambda e: float(e["ts"]))
    per_phase: dict[str, list[tuple[float, float]]] = {p: [] for p in phases}
    for e in ranges:
        per_phase[e["name"]].append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    counts = {len(v) for v in per_phase.values()}
    if len(counts) != 1:
        raise DatasetError("trace has unequal phase range counts "
                           f"{ {k: len(v) for k, v in per_phase.items()} }",
                           hint="wrap every training step in forward/backward/optimizer "
                                "record_function ranges.")
    iterations = counts.pop()
    if device == "cpu":
        return [{p: (per_phase[p][i][1] - per_phase[p][i][0]) * 1e-6 for p in phases}
                for i in range(iterations)]
    sums = [dict.fromkeys(phases, 0.0) for _ in range(iterations)]
    for launch_ts, dur_us in _device_kernels(events):
        for p in phases:
            for i, (start, end) in enumerate(per_phase[p]):
                if start <= launch_ts <= end:
                    sums[i][p] += dur_us * 1e-6
    return sums


def _device_kernels(events: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """(host launch timestamp, device duration) in microseconds for every device kernel."""
    launches = {e["args"]["correlation"]: float(e["ts"]) for e in events
                if e.get("cat") in _LAUNCH_CATS and "correlation" in e.get("args", {})}
    out = []
    for e in events:
        if e.get("cat") in _DEVICE_KERNEL_CATS:
            corr = e.get("args", {}).get("correlation")
            if corr in launches:
                out.append((launches[corr], float(e["dur"])))
    return out


# ---- measurement --------------------------------------------------------------------------

_profiler_warm = False


def _train_step(model: Any, tokens: Any, optimizer: Any, sync: Callable[[], None]) -> None:
    # lazy: torch, the optional [bench] extra
    from torch.profiler import record_function

    with record_function("forward"):
        loss = model(tokens)
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    sync()


def profile_steps(step: Callable[[], None], *, iters: int, device: str) -> list[dict[str, Any]]:
    """Run `step` `iters` times under torch.profiler; return the Chrome-trace events."""
    # lazy: torch, the optional [bench] extra
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(iters):
            step()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return list(json.loads(path.read_text())["traceEvents"])


def measure_micro_batch(model: Any, optimizer: Any, spec: ModelSpec, seq_len: int, micro_batch: int,
                        *, iters: int, warmup: int, device: str) -> dict[str, Any]:
    """Warm up, then profile `iters` steps; median and IQR per phase (Spread objects)."""
    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.comm_worker import device_sync
    from perfmodel.bench.model import random_tokens

    global _profiler_warm
    tokens = random_tokens(spec, micro_batch, seq_len, device=device, seed=micro_batch)
    sync = device_sync(device)

    def step() -> None:
        _train_step(model, tokens, optimizer, sync)

    for _ in range(warmup):
        step()
    if not _profiler_warm:  # the first profiler session of a process is slow: throw it away
        profile_steps(step, iters=1, device=device)
        _profiler_warm = True
    per_iter = group_phases(profile_steps(step, iters=iters, device=device), device)
    return {p: median_iqr([it[p] for it in per_iter]) for p in PHASES}


def shape_row(cfg: BenchConfig) -> dict[str, Any]:
    """The shape columns of a dataset row."""
    s = cfg.spec
    return {"model": cfg.config_id, "family": s.family, "hidden_size": s.hidden_size,
            "num_hidden_layers": s.num_layers, "num_attention_heads": s.num_heads,
            "num_key_value_heads": s.num_kv_heads, "head_dim": s.d,
            "intermediate_size": s.intermediate_size, "vocab_size": s.vocab_size,
            "tie_word_embeddings": s.tie_word_embeddings, "seq_len": cfg.seq_len}


def check_existing(log: CsvLog, configs: Sequence[BenchConfig]) -> None:
    """Refuse to resume into a file whose rows describe other shapes under the same ids (an id
    may stand for one shape at several sequence lengths)."""
    expected: dict[str, list[dict[str, str]]] = {}
    for c in configs:
        expected.setdefault(c.config_id, []).append(
            {k: str(v).lower() for k, v in shape_row(c).items()})
    for row in log.rows():
        wants = expected.get(row["model"])
        if wants is None:
            continue
        got = {k: row[k].lower() for k in wants[0]}
        if got not in wants:
            want = wants[0] if len(wants) == 1 else wants
            raise DatasetError(
                f"{log.path}: rows for {row['model']!r} describe another shape ({got} != {want})",
                hint="resume with the same --space/--seed, or write to a new output file (-o).")


def summarise_rows(rows: Sequence[Mapping[str, str]]) -> dict[str, int]:
    """Rows and distinct (model, seq_len, micro_batch) points of a dataset."""
    points = {(r["model"], r["seq_len"], r["micro_batch"]) for r in rows}
    return {"rows": len(rows), "configs": len({r["model"] for r in rows}), "points": len(points)}


# ---- the sweep ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ComputeSettings:
    """How each configuration is measured."""

    device: str
    """'cpu' or 'cuda'."""
    dtype: Any
    """torch dtype of parameters and activations."""
    threads: int
    """torch intra-op threads (recorded per row)."""
    iters: int
    """Profiled iterations per micro-batch."""
    warmup: int
    """Unprofiled warm-up steps per micro-batch."""
    time_per_config_s: float
    """Per-configuration time cap (0: none)."""
    memory_cap_bytes: float
    """Estimated-memory cap for the sweep (0: none)."""
    seed: int = 0
    """Seed of weights and tokens."""


def run_compute(configs: Sequence[BenchConfig], out_path: str | Path, settings: ComputeSettings,
                *, limit: int | None = None) -> dict[str, int]:
    """Measure every configuration not finished in `out_path` yet; returns dataset counts.

    Finished configurations are listed in `<out>.progress` as `id reason points` (why their
    sweep stopped and how many micro-batches it measured); finished (configuration,
    micro-batch) rows are never measured again. A configuration with fewer complete
    micro-batches in the CSV than its progress line says (a CSV truncated or damaged behind an
    intact progress file) is measured again, whatever the line's reason.
    """

    out = Path(out_path)
    log = CsvLog(out, COLUMNS, KEY_COLUMNS)
    check_existing(log, configs)
    progress_file = Path(f"{out}.progress")
    measured = _measured_steps(log)
    reasons = _finished_configs(progress_file)
    keys = progress_keys(configs)
    written: dict[tuple[str, int], set[int]] = {}
    for r in log.rows():
        written.setdefault((r["model"], int(r["seq_len"])), set()).add(int(r["micro_batch"]))
    finished = {keys[c.config_id, c.seq_len] for c in configs
                if _is_finished(c, reasons.get(keys[c.config_id, c.seq_len]), written, measured)}
    pending = [c for c in configs
               if keys[c.config_id, c.seq_len] not in finished][:limit]  # limit None: all
    logger.info("%d configurations, %d already finished, %d to run now",
                len(configs), len(finished), len(pending))
    with progress.task("bench compute (configurations)", total=len(pending)) as advance:
        for cfg in pending:
            t0 = time.perf_counter()
            reason = run_config(cfg, log, measured, settings)
            points = len(measured.get((cfg.config_id, cfg.seq_len), {}))
            with progress_file.open("a") as fh:
                fh.write(f"{keys[cfg.config_id, cfg.seq_len]} {reason} {points}\n")
            logger.info("%s (%s h=%d L=%d f=%d V=%d S=%d): %s after %.1f s", cfg.config_id,
                        cfg.spec.family, cfg.spec.hidden_size, cfg.spec.num_layers,
                        cfg.spec.intermediate_size, cfg.spec.vocab_size, cfg.seq_len, reason,
                        time.perf_counter() - t0)
            advance(1)
    return summarise_rows(log.rows())


CAPPED = ("time-cap", "memory-cap")
"""Reasons a sweep stops only after measuring at least one micro-batch (`_stop_reason`)."""


def _finished_configs(progress_file: Path) -> dict[str, tuple[str, int | None]]:
    """Configuration -> (why its sweep stopped, micro-batches it measured; None on lines written
    before that was recorded), as listed in the progress file; an unterminated last line (a
    killed run) does not count."""
    if not progress_file.is_file():
        return {}
    complete = progress_file.read_text(errors="replace").split("\n")[:-1]
    out: dict[str, tuple[str, int | None]] = {}
    for parts in (line.split() for line in complete):
        if len(parts) >= 2:
            points = int(parts[2]) if len(parts) >= 3 and parts[2].isdigit() else None
            out[parts[0]] = (parts[1], points)
    return out


def _is_finished(cfg: BenchConfig, listed: tuple[str, int | None] | None,
                 written: Mapping[tuple[str, int], set[int]],
                 measured: Mapping[tuple[str, int], Mapping[int, float]]) -> bool:
    """Listed as finished (`listed`: the reason and point count of its progress line) and its
    rows are all in the dataset: a configuration with fewer complete micro-batches than it
    should have (a row dropped from a damaged or truncated file) goes back to measurement,
    whatever its progress line says."""
    if listed is None:
        return False
    reason, points = listed
    complete = set(measured.get((cfg.config_id, cfg.seq_len), {}))
    if written.get((cfg.config_id, cfg.seq_len), set()) - complete:  # phases missing
        return False
    if reason == "done":
        return set(cfg.micro_batches) <= complete
    if points is not None:
        # the sweep measures micro-batches in order: the first `points` must all be there
        return set(cfg.micro_batches[:points]) <= complete
    return reason not in CAPPED or cfg.micro_batches[0] in complete


def _measured_steps(log: CsvLog) -> dict[tuple[str, int], dict[int, float]]:
    """(model, seq_len) -> {micro_batch: step time} for points with all phases written."""
    acc: dict[tuple[str, int, int], dict[str, float]] = {}
    for r in log.rows():
        key = (r["model"], int(r["seq_len"]), int(r["micro_batch"]))
        acc.setdefault(key, {})[r["phase"]] = float(r["time_s"])
    out: dict[tuple[str, int], dict[int, float]] = {}
    for (model, seq, mb), phases in acc.items():
        if set(PHASES) <= set(phases):
            out.setdefault((model, seq), {})[mb] = sum(phases[p] for p in PHASES)
    return out


def _stop_reason(cfg: BenchConfig, mb: int, last: tuple[int, float] | None, start_s: float,
                 st: ComputeSettings) -> str | None:
    if (st.memory_cap_bytes
            and estimate_memory_bytes(cfg.spec, cfg.seq_len, mb) > st.memory_cap_bytes):
        return "memory-cap" if last else None
    if last is None:
        return None
    predicted_s = last[1] * mb / last[0] * (st.iters + st.warmup + 1)
    return "time-cap" if predicted_s > time_budget_left(start_s, st.time_per_config_s) else None


def run_config(cfg: BenchConfig, log: CsvLog, measured: dict[tuple[str, int], dict[int, float]],
               st: ComputeSettings) -> str:
    """Micro-batch sweep of one configuration; returns why it stopped."""

    # lazy: torch, the optional [bench] extra
    import torch

    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.model import build_model

    start = time.perf_counter()
    done = measured.setdefault((cfg.config_id, cfg.seq_len), {})
    model = optimizer = None
    last: tuple[int, float] | None = None
    try:
        model = build_model(cfg.spec, device=st.device, dtype=st.dtype, seed=st.seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for mb in cfg.micro_batches:
            if mb in done:
                last = (mb, done[mb])
                continue
            reason = _stop_reason(cfg, mb, last, start, st)
            if reason:
                return reason
            spreads = measure_micro_batch(model, optimizer, cfg.spec, cfg.seq_len, mb,
                                          iters=st.iters, warmup=st.warmup, device=st.device)
            base = shape_row(cfg) | {"micro_batch": mb, "iters": st.iters, "device": st.device,
                                     "dtype": dtype_name(st.dtype), "threads": st.threads}
            log.append(base | {"phase": p, "time_s": spreads[p].median_s,
                               "time_iqr_s": spreads[p].iqr_s}
                       for p in PHASES)
            last = (mb, sum(spreads[p].median_s for p in PHASES))
            done[mb] = last[1]
        return "done"
    except (RuntimeError, torch.OutOfMemoryError) as err:
        if not is_oom(err):
            raise
        logger.info("%s: out of memory (%s)", cfg.config_id, str(err).splitlines()[0][:120])
        return "oom"
    finally:
        del model, optimizer
        gc.collect()
        if st.device == "cuda":
            torch.cuda.empty_cache()
        else:
            release_freed_memory()
