#!/usr/bin/env python3
"""Regenerate docs/VALIDATION.md: every figure recomputed from the shipped data, none typed.

    .venv/bin/python -m scripts.make_validation                    # all three parts
    .venv/bin/python -m scripts.make_validation --part calibrated  # one part (repeatable)
    .venv/bin/python -m scripts.make_validation --check            # exit 1 if the doc is stale
    .venv/bin/python -m scripts.make_validation --refresh          # recompute the cached CVs
    .venv/bin/python -m scripts.make_validation --fit              # refit the CPU profile first

The nested cross-validations (leave-one-architecture-out compute refits, the FSDP-side grid) take
most of an hour on two cores; their out-of-fold results are cached in catalogs/cv-cache/ under the
sha256 of their datasets and of the code that computes them (`perfmodel.profiles.cache`).
`--check` verifies those keys and re-renders from the cache in seconds, and fails naming what
changed; `--refresh` recomputes them.

Parts (each between `<!-- part:NAME -->` markers, regenerated and checked on its own):
  measured    (a) this machine: `shardmeter validate` (leave-one-architecture-out compute,
              5-fold collectives) and `shardmeter bench fsdp-compare` on catalogs/profiles/data/;
  calibrated  (b) GPUs calibrated on published runs: leave-one-model-size-out CV per GPU and per
              checkpointing mode (catalogs/published/calibration-cv.csv, written by
              python -m scripts.make_calibrated_profiles) beside the datasheet prior's error; the
              shipped profiles are re-simulated to check that table is theirs;
  planner     (c) what the planner decides differently on instances/paper-case-study.yaml with the
              calibration-derived profiles instead of the datasheet priors;
  intervals   (d) the 80 % prediction intervals' coverage of held-out data per residual group
              (catalogs/uncertainty/residuals.csv, python -m scripts.make_residuals).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from perfmodel.api.fit import (
    ComputeFitRequest,
    ValidationRequest,
    fit_compute,
    validate_profile,
)
from perfmodel.bench.environment import environment_sessions
from perfmodel.costs.features import ALIGNED_WIDTH
from perfmodel.formatting import json_ready
from perfmodel.profiles.bounds import flag_text, near_bound
from perfmodel.profiles.memory_validation import markdown_section, read_rows
from perfmodel.profiles.memory_validation import tracker_agreement as agreement
from perfmodel.profiles.overlap import fit_overlap_slowdown
from perfmodel.profiles.profile import load_profile
from perfmodel.spec.errors import ShardMeterError
from scripts import (
    git_history,
    validation_gpu,
    validation_heldout,
    validation_intervals,
    validation_published,
)
from scripts.cache import cv_cache, set_cache_mode

ROOT = Path(__file__).resolve().parent.parent

DOC = "docs/VALIDATION.md"
DATA = "catalogs/profiles/data"
PROFILE = "catalogs/profiles/cpu-x86-2core.yaml"
COMPUTE, COMM, FSDP = f"{DATA}/cpu-compute.csv", f"{DATA}/cpu-comm.csv", f"{DATA}/cpu-fsdp.csv"
FSDP_MEMORY = f"{DATA}/cpu-fsdp-memory.csv"
WIDTH_PROBE = f"{DATA}/cpu-width-probe.csv"
HOLDOUT, FSDP_AC = validation_heldout.HOLDOUT, validation_heldout.FSDP_AC
"""Validation-only CPU datasets (no fit reads them), reported apart by `validation_heldout`."""
SPACES = "catalogs/spaces"
WIDE, ALIGNED = f"{SPACES}/cpu-wide.yaml", f"{SPACES}/cpu-aligned.yaml"
BEFORE_ALIGNED = "52c2105"
"""The last commit whose CPU profile was fitted without the cpu-aligned.yaml shapes and the
aligned-width feature: its docs/VALIDATION.md reports the named models' backward error before
them (`before_aligned_errors` checks that its compute data has no aligned rows)."""
NAMED = {
    "SmolLM-360M": "SmolLM", "Llama-3.2-1B": "Llama 3.2", "Phi-1.5": "Phi-1.5", "Gemma-2B": "Gemma",
    "Yi-6B": "Yi-1.5",
}
# Paper (arXiv:2608.23840) Table I: (fwd, bwd, step) MAPE % on A100 and H200; §IV-B comm MAPE %.
PAPER = {"SmolLM-360M": ((5.29, 10.44, 4.03), (15.22, 28.74, 4.83)),
         "Llama-3.2-1B": ((5.09, 10.13, 8.68), (8.44, 6.97, 6.88)),
         "Phi-1.5": ((5.95, 8.12, 4.53), (8.1, 8.15, 0.62)),
         "Gemma-2B": ((5.45, 4.15, 12.34), (12.64, 6.56, 8.98)),
         "Yi-6B": ((22.3, 7.09, 2.51), (16.56, 12.36, 7.23))}
PAPER_COMM = {"all_gather": 14.99, "reduce_scatter": 13.1, "all_reduce": 2.14}
GOAL_PCT = 10.0
STEP_GOAL_PCT, STEP_CASE_LIMIT_PCT = 15.0, 25.0
def _yaml(path: str) -> Any:
    return yaml.safe_load((ROOT / path).read_text())


def _session(name: str, key: str) -> Any:
    """A setting every session of a dataset's sidecar agrees on ('?' when they differ)."""
    values = {json.dumps(s.get(key)) for s in _sessions(name) if key in s}
    return json.loads(values.pop()) if len(values) == 1 else "?"


def _words(n: int) -> str:
    return {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}.get(n, str(n))


def collected_text() -> str:
    """How the timing data were collected: every figure read from the design spaces, the data
    and the datasets' sidecars."""
    wide, aligned = _yaml(WIDE), _yaml(ALIGNED)
    models = pd.read_csv(ROOT / COMPUTE, usecols=["model"])["model"].unique()
    sobol = sum(str(m).startswith("sobol-") for m in models)
    extra = sum(str(m).startswith(f"{aligned.get('id_prefix', 'aligned')}-") for m in models)
    named = wide["named"]
    sweep = ", ".join(str(2**i) for i in range(3))
    limits = wide["limits"]
    dtype = _session(COMPUTE, "dtype")
    threads = _session(COMPUTE, "threads")
    comm_world = _session(COMM, "world_size")
    ranks = _ranks()
    widths = ", ".join(str(w) for w in aligned["hidden_size"][:-1])
    thread_text = (f"{_words(threads)} thread{'' if threads == 1 else 's'}"
                   if isinstance(threads, int) else f"{threads} threads")
    paragraph = (
        "`scripts/collect_cpu_data.sh` measured every timing dataset below on one machine, on "
        "jemalloc set never to return freed pages (`LD_PRELOAD=libjemalloc.so.2 "
        "MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1`): glibc's malloc unmaps every large "
        "freed tensor, so each step's fresh gradients and optimizer temporaries fault their pages "
        "in again, at a cost that swings with the VM's huge-page supply, while a GPU's caching "
        f"allocator reuses warm memory. Compute: `{WIDE}` ({sobol} scrambled-Sobol shapes in the "
        f"data, hidden {wide['hidden_size']['min']}-{wide['hidden_size']['max']}, vocabulary "
        f"{wide['vocab_size']['min']}-{wide['vocab_size']['max']}, "
        f"{'/'.join(wide['families'])} layouts, {wide['num_hidden_layers']['min']}-"
        f"{wide['num_hidden_layers']['max']} layers, micro-batch sweep {sweep}, ... to "
        f"{wide['max_micro_batch']} under a {limits['time_per_config_s']} s and "
        f"{limits['memory_gib']} GiB cap; `--named`: the {_words(len(named['models']))} held-out "
        f"models' real shapes with {_words(named['num_hidden_layers'])} layers, sequence "
        f"{named['seq_len']}, micro-batches "
        f"{' and '.join(str(m) for m in named['micro_batches'])}), then `{ALIGNED}` ({extra} "
        f"more Sobol shapes, rows `{aligned.get('id_prefix', 'aligned')}-NNNN`, widths {widths} "
        f"or {aligned['hidden_size'][-1]} and FFNs up to {aligned['intermediate_size']['max']}, "
        "as the named models have and the cpu-wide shapes almost never do) and the width probe, "
        "in a second quiet run on the same machine (each session's date is in the sidecar); "
        f"{dtype}, AdamW, {thread_text}, phase times from the profiler's `record_function` "
        "ranges (median of the profiled steps, IQR per row). Collectives: gloo over TCP "
        f"loopback, {comm_world} ranks, slowest rank per repetition, median. FSDP2: "
        f"`catalogs/spaces/fsdp-cpu.yaml`, `fully_shard` per block and root, {ranks} ranks, "
        f"torchtitan's recipe in {dtype}. FSDP2 peak memory: the same configurations as "
        f"real-tensor {ranks}-rank gloo runs, the CPU allocator's live bytes of the training "
        "thread at their peak (`perfmodel/bench/alloc_trace.py`) beside FSDPMemTracker on the "
        "same step. Each dataset's commands, as its `*.env.json` sidecar records them:")
    return f"### How the data were collected\n\n{_wrap_text(paragraph)}\n\n"


def _wrap_text(text: str, bullet: bool = False) -> str:
    """A paragraph (or a bullet) wrapped at the docs' line length."""
    return textwrap.fill(text, width=99, break_on_hyphens=False, break_long_words=False,
                         initial_indent="- " if bullet else "",
                         subsequent_indent="  " if bullet else "")


def _table_column(doc: str, first_cell: str, column: int) -> float | None:
    """The number in `column` of the markdown table row whose first cell starts with
    `first_cell` (None when there is no such row)."""
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0].startswith(first_cell) and len(cells) > column:
            try:
                return float(cells[column])
            except ValueError:
                return None
    return None


def _named_widths() -> dict[str, int]:
    """Hidden size of each named model in the compute data."""
    frame = pd.read_csv(ROOT / COMPUTE, usecols=["model", "hidden_size"])
    first = frame.groupby("model")["hidden_size"].first()
    return {str(n): int(first[n]) for n in NAMED if n in first.index}


def before_aligned_errors() -> dict[str, float] | None:
    """Backward leave-one-architecture-out MAPE of each named model at a width that is a multiple
    of ALIGNED_WIDTH, as docs/VALIDATION.md reported it at BEFORE_ALIGNED (None without git)."""
    data = git_history.show(BEFORE_ALIGNED, COMPUTE)
    doc = git_history.show(BEFORE_ALIGNED, DOC)
    if data is None or doc is None:
        return None
    if "\naligned-" in data:
        raise SystemExit(f"{BEFORE_ALIGNED}:{COMPUTE} has aligned rows: BEFORE_ALIGNED is wrong")
    widths = _named_widths()
    out = {}
    for name, short in NAMED.items():
        if name in widths and widths[name] % ALIGNED_WIDTH == 0:
            value = _table_column(doc, f"{short} ({name}", 2)
            if value is not None:
                out[name] = value
    return out


def notes_text() -> str:
    """The caveats, every figure read (the named models' widths from the data, their errors
    before the aligned-width feature from git)."""
    named = _named_widths()
    at = {n: w for n, w in named.items() if w % ALIGNED_WIDTH == 0}
    others = [n for n in named if n not in at]
    before = before_aligned_errors()
    ranks = _ranks()
    ranks = _words(int(ranks)).capitalize() if ranks.isdigit() else ranks
    if before:
        errors = (f"had backward leave-one-architecture-out MAPE "
                  f"{f(min(before.values()))}-{f(max(before.values()))} % on these "
                  f"{_words(len(before))} (docs/VALIDATION.md at commit {BEFORE_ALIGNED})")
    else:
        errors = f"reported their backward error in docs/VALIDATION.md at commit {BEFORE_ALIGNED}"
    bullets = [
        f"Widths that are multiples of {ALIGNED_WIDTH}: every named model but "
        f"{', '.join(NAMED[n] for n in others)} has one "
        f"({' or '.join(str(w) for w in sorted(set(at.values())))}), and their backward passes "
        "run slower than the cpu-wide shapes' features predict (width probe above). The profile "
        "fitted before the `cpu-aligned.yaml` shapes, which show the regression such widths, and "
        f"the `aligned_weight_grads` candidate {errors}. The feature and those shapes were "
        "designed after seeing these errors, so the named models' backward figures above are no "
        "longer an untouched held-out estimate (the width probe is evidence in its own right); "
        "the fresh holdout above, frozen before it was measured, is. "
        "This is a property of this CPU's fp32 kernels; the GPU profiles do not carry the "
        "feature, and a GPU measured with `scripts/gpu_bench.sh` would get it only if its own "
        "data select it.",
        f"{ranks} ranks and gloo's threads share the {_words(_session(COMPUTE, 'cpu_count'))} "
        "cores, so a collective takes CPU time from the compute it overlaps (`overlap_slowdown`), "
        "and FSDP2's copies around each collective "
        "(all-gather copy-in and copy-out, reduce-scatter chunk-cat) run in the training thread "
        "(`fsdp_copy_s_per_byte`); both are fitted on the FSDP2 steps, hence the held-out column, "
        "and both are effective: they absorb the step model's other errors (their history "
        "above).",
        "The datasets measured before this collection (AMD EPYC, glibc's malloc with huge pages) "
        "are in the git history; they are not mixed with these: the CPU, the malloc and the named "
        "models' layer count all differ."]
    return "### Caveats\n\n" + "\n".join(_wrap_text(b, bullet=True) for b in bullets)


def shardmeter(*args: str) -> str:
    """Run the CLI of this checkout (same interpreter); returns stdout."""
    cmd = [
        sys.executable,
        "-c",
        "import sys; from planner.cli import main; main(sys.argv[1:])",
        *args,
    ]
    print("$ shardmeter", shlex.join(args), file=sys.stderr)
    return subprocess.run(cmd, cwd=ROOT, check=True, text=True, capture_output=True).stdout


P2P = f"{DATA}/cpu-p2p.csv"
"""Point-to-point timings (pipeline stage boundaries): `fit comm` adds send_recv from them, keeping
cpu-comm.csv's collectives and citing both datasets."""


INLINE = f"{DATA}/cpu-comm-inline.csv"
"""Collectives issued inline (`bench comm --inline`): `fit comm --inline` fits the profile's
inline table, which times the tensor- and context-parallel collectives (issue 23)."""
DISPATCH = f"{DATA}/cpu-tp-dispatch.csv"
"""DTensor's host dispatch under the TP plan (`bench dispatch`): `fit dispatch` (issue 23)."""


def fit_commands() -> list[tuple[str, ...]]:
    """The commands that fit the CPU profile, in order: compute, collectives (then send_recv when
    cpu-p2p.csv is shipped), the FSDP-side pair, then the tensor-parallel terms (inline
    collectives, DTensor dispatch) when their datasets are shipped."""
    return [
        ("fit", "compute", COMPUTE, "-o", PROFILE, "--hardware", "CPU-x86-2core", "--backend",
         "gloo"),
        ("fit", "comm", COMM, "-o", PROFILE),
        *([("fit", "comm", P2P, "-o", PROFILE)] if (ROOT / P2P).is_file() else []),
        ("fit", "overlap", FSDP, "-o", PROFILE),
        *([("fit", "comm", INLINE, "--inline", "-o", PROFILE)] if (ROOT / INLINE).is_file()
          else []),
        *([("fit", "dispatch", DISPATCH, "-o", PROFILE)] if (ROOT / DISPATCH).is_file() else []),
    ]
VALIDATE = ("validate", PROFILE, COMPUTE, "--comm", COMM, "--format", "json")
"""The command whose output part (a) renders (run through the API with the CV cache)."""
COMPARE = ("bench", "fsdp-compare", FSDP, "--profile", PROFILE, "--memory", FSDP_MEMORY,
           "--format", "json")


def fit() -> None:
    """Refit the CPU profile from scratch (prior of the CPU device, then compute, then comm, then
    the FSDP-side pair). The compute fit runs through the API, as its command would, so that its
    nested leave-one-architecture-out CV lands in the cache `validate` reads (one computation)."""
    (ROOT / PROFILE).unlink(missing_ok=True)
    compute, *others = fit_commands()
    with contextlib.chdir(ROOT):  # the command's relative paths, as the CLI run from ROOT has
        fit_compute(ComputeFitRequest(data_path=compute[2], output_path=compute[4],
                                      hardware=compute[6], backend=compute[8], cache=cv_cache()))
    for cmd in others:
        shardmeter(*cmd)


f = validation_gpu.f
table = validation_gpu.table


def mark(value: float, goal: float = GOAL_PCT) -> str:
    return "yes" if value == value and value <= goal else "no"


def named_layers() -> dict[str, int]:
    """Layers each named model was measured with (from the compute dataset)."""
    frame = pd.read_csv(ROOT / COMPUTE, usecols=["model", "num_hidden_layers"])
    return {str(k): int(v) for k, v in frame.groupby("model")["num_hidden_layers"].first().items()
            if k in NAMED}


def compute_section(rows: list[dict[str, Any]], mode: str) -> str:
    by_model = {r["model"]: r for r in rows}
    layers = named_layers()
    body = []
    for name, short in NAMED.items():
        r = by_model.get(name)
        if r is None:
            body.append([short, "not measured", "", "", "", "", ""])
            continue
        a100, h200 = PAPER[name]
        body.append(
            [
                f"{short} ({name}, {layers[name]} layer{'s' * (layers[name] > 1)})",
                f(r["forward_mape_pct"]), f(r["backward_mape_pct"]),
                f(r["step_mape_pct"]), f(r["optimizer_mape_pct"]), " / ".join(f(x) for x in a100),
                " / ".join(f(x) for x in h200),
            ]
        )
    sobol = [r for r in rows if r["model"] not in NAMED and r["model"] != "all"]
    pooled = by_model.get("all", {})
    fwd_ok = [mark(by_model[n]["forward_mape_pct"]) for n in NAMED if n in by_model]
    bwd_ok = [mark(by_model[n]["backward_mape_pct"]) for n in NAMED if n in by_model]
    return "\n\n".join(
        [
            "### Compute: Table I for this machine\n\n"
            f"Validation mode: {mode}. Each named model is predicted by a regression refitted "
            "without its own rows (the Sobol shapes and the other four named models stay in).",
            table(
                [
                    "model", "fwd", "bwd", "step", "optimizer", "paper A100 fwd/bwd/step",
                    "paper H200 fwd/bwd/step",
                ],
                body,
            ),
            f"Pooled over all {pooled.get('rows', '?')} rows ({len(sobol)} Sobol shapes + named): "
            f"forward {f(pooled.get('forward_mape_pct'))} %, backward "
            f"{f(pooled.get('backward_mape_pct'))} %, optimizer "
            f"{f(pooled.get('optimizer_mape_pct'))} %, step {f(pooled.get('step_mape_pct'))} %.",
            f"Goal (forward and backward <= {GOAL_PCT:.0f} % per named model): forward met for "
            f"{fwd_ok.count('yes')}/{len(fwd_ok)}, backward met for "
            f"{bwd_ok.count('yes')}/{len(bwd_ok)}.",
            profile_cv_line(),
        ]
    )


def profile_cv_line() -> str:
    """The profile's two CV figures per phase, each named for what it is."""
    compute = load_profile(str(ROOT / PROFILE)).compute
    phases = [p for p in ("forward", "backward", "optimizer") if p in compute]

    def figures(values: list[float | None]) -> str:
        if all(v is None for v in values):
            return "not recorded (a profile fitted before it was)"
        return " / ".join(f(float("nan") if v is None else v) for v in values) + " %"

    selection = figures([compute[p].selection_cv_mape_pct for p in phases])
    nested = figures([compute[p].nested_cv_mape_pct for p in phases])
    return (f"The profile records per phase ({' / '.join(phases)}) the CV MAPE that chose its "
            f"features, `selection_cv_mape_pct` {selection} (the best over the candidate "
            "subsets, so optimistic: a selection score), and the nested one, "
            f"`nested_cv_mape_pct` {nested} (selection redone without each model: the "
            "out-of-sample figure, over the configurations like the table above).")


def width_section() -> str:
    """Backward / forward time of one shape at eight widths (cpu-width-probe.csv), and the price
    the fitted profile puts on the widths that are multiples of features.ALIGNED_WIDTH."""
    data = pd.read_csv(ROOT / WIDTH_PROBE)
    times = data.pivot_table(index=["hidden_size", "micro_batch"], columns="phase",
                             values="time_s")
    ratio = (times["backward"] / times["forward"]).unstack("micro_batch")
    aligned = ratio.index % ALIGNED_WIDTH == 0
    body = [[h, "yes" if h % ALIGNED_WIDTH == 0 else "no",
             f(times.loc[(h, 1), "forward"], 4), f(times.loc[(h, 1), "backward"], 4),
             *(f(ratio.loc[h, m]) for m in ratio.columns)] for h in ratio.index]
    shape = data.iloc[0]
    coefs = load_profile(str(ROOT / PROFILE)).compute["backward"].coefficients
    price = (f"charges {coefs['aligned_weight_grads'] * 1e9:.2f} ns per such element per "
             "backward" if coefs.get("aligned_weight_grads") else "does not select it")
    return "\n\n".join([
        f"### Width probe: widths that are multiples of {ALIGNED_WIDTH}",
        f"One {shape['family']} shape ({shape['num_hidden_layers']} layers, "
        f"{shape['num_attention_heads']} heads, FFN {shape['intermediate_size']}, vocabulary "
        f"{shape['vocab_size']}, sequence {shape['seq_len']}) at {_words(len(ratio.index))} widths "
        "(`catalogs/spaces/cpu-width-probe.yaml`). A backward pass does about twice a forward's "
        "FLOPs at any width.",
        table(["hidden", f"multiple of {ALIGNED_WIDTH}", "fwd s (m=1)", "bwd s (m=1)",
               *(f"bwd/fwd (m={m})" for m in ratio.columns)], body),
        f"Mean backward/forward ratio: {f(np.nanmean(ratio[aligned].to_numpy()))} at multiples of "
        f"{ALIGNED_WIDTH}, {f(np.nanmean(ratio[~aligned].to_numpy()))} at the other widths ('-': "
        f"micro-batch {max(ratio.columns)} not reached under the probe's time cap). The "
        "regression's backward candidate `aligned_weight_grads` (weight-gradient elements per "
        f"pass in matrices whose rows are a multiple of {ALIGNED_WIDTH} long) lets the fit price "
        f"that; the fitted profile {price}.",
    ])


def comm_section(rows: list[dict[str, Any]], mode: str) -> str:
    body = [[r["op"], r["link"], r["rows"], f(r["mape_pct"]),
             f(PAPER_COMM.get(r["op"])) if r["link"] == "all" else "", mark(r["mape_pct"])]
            for r in rows]
    return "\n\n".join(
        [
            f"### Collectives (gloo, {_session(COMM, 'world_size')} ranks)\n\nValidation mode: "
            f"{mode}.",
            table(["op", "link", "rows", "MAPE %", "paper MAPE %", f"<= {GOAL_PCT:.0f} %"], body),
        ]
    )


def tracker_agreement() -> str:
    """How FSDPMemTracker compares with the allocator on the re-measured FSDP2 configurations."""
    return agreement(read_rows(ROOT / FSDP_MEMORY))


def held_out_errors() -> tuple[list[float], dict[str, Any]]:
    """Step errors with each FSDP case's shape held out of the FSDP-side fit (overlap_slowdown,
    fsdp_copy_s_per_byte), and the pair fitted on every row with its grid-edge flags."""
    result = fit_overlap_slowdown(load_profile(str(ROOT / PROFILE)), ROOT / FSDP,
                                  cache=cv_cache())
    flags = {flag.parameter: flag_text(flag) for flag in result.at_bound()}
    slowdowns = [g[0] for g in result.grid]
    return [float(e) for e in result.cv_errors_pct()], {
        "overlap_slowdown": result.overlap_slowdown,
        "fsdp_copy_s_per_byte": result.fsdp_copy_s_per_byte,
        "fitted_mape_pct": result.mape_pct(result.best), "flags": flags,
        "grid": (min(slowdowns), max(slowdowns))}


def _overlap_record(text: str) -> tuple[Any, ...] | None:
    """What one version of the CPU profile records about its FSDP-side fit (None before it had
    one): the contention factor, the copy cost, the factor's grid, the FSDP2 and compute
    datasets' sha256 and the whole record (so a refit that moves only the errors counts)."""
    doc = yaml.safe_load(text) or {}
    detail = doc.get("provenance_detail") or {}
    fit = detail.get("overlap_fit")
    if not isinstance(fit, dict):
        return None
    grid = fit.get("grid_overlap_slowdown") or fit.get("grid") or [None, None]
    shas = {d.get("kind"): str(d.get("sha256", ""))[:12] for d in detail.get("datasets", [])}
    return (float(doc.get("overlap_slowdown") or fit.get("overlap_slowdown") or 1.0),
            fit.get("fsdp_copy_s_per_byte"), (grid[0], grid[-1]), shas.get("fsdp", ""),
            shas.get("compute", ""), json.dumps(fit, sort_keys=True))


def contention_history() -> str:
    """The contention factor of every recorded fit of the CPU profile (read from git) beside the
    current one, and its spread: it is effective, so it moves when the data under it do."""
    current = _overlap_record((ROOT / PROFILE).read_text())
    history = git_history.recorded(PROFILE, _overlap_record)
    if current is None:
        return ""
    if not history:
        return ("The contention factor's earlier fits are recorded in git history, which this "
                "checkout lacks.")
    earlier = git_history.earlier_than_current(history, current)
    rows = [(r.short, r.date, r.value) for r in earlier] + [("this checkout", "", current)]
    body, interior = [], []
    for commit, date, (slowdown, copy, grid, fsdp_sha, compute_sha, _) in rows:
        edge = None not in grid and near_bound(slowdown, grid[0], grid[1]) is not None
        if not edge:
            interior.append((slowdown, fsdp_sha))
        body.append([commit, date, f(slowdown), "-" if copy is None else f(copy * 1e9),
                     f"{f(grid[0])}-{f(grid[1])}", "yes" if edge else "no", f"`{fsdp_sha}`",
                     f"`{compute_sha}`"])
    values = [r[2][0] for r in rows]
    same = [v for v, sha in interior if sha == current[3]]
    summary = (f"Across the {len(values)} recorded fits it ranged {f(min(values))}-"
               f"{f(max(values))}; {len(values) - len(interior)} of them ended on an edge of their "
               "grid, where the search wanted a value beyond it (no fit at all).")
    if interior:
        summary += (f" The {len(interior)} interior fit(s) ranged {f(min(v for v, _ in interior))}"
                    f"-{f(max(v for v, _ in interior))} (max/min "
                    f"{f(max(v for v, _ in interior) / min(v for v, _ in interior))})")
        summary += (f", {len(same)} of them on the current FSDP2 steps ({f(min(same))}-"
                    f"{f(max(same))}), moved by the compute data and model under it."
                    if same else ".")
    summary += (" It is an effective parameter, not a measured property of the machine: read "
                "its spread as the uncertainty of the value.")
    return "\n\n".join([
        "#### The contention factor across refits (effective)",
        "`overlap_slowdown` as every commit that refitted it recorded it "
        f"(`git log -p {PROFILE}`), and now:",
        table(["commit", "date", "overlap_slowdown", "fsdp_copy ns/B", "grid", "at grid edge",
               "FSDP2 steps sha256", "compute data sha256"], body),
        _wrap_text(summary)])


def fsdp_section(rows: list[dict[str, Any]]) -> str:
    held, fitted = held_out_errors()
    body = [
        [
            r["model"], r["seq_len"], r["micro_batch"], r["grad_accum"], f(r["measured_step_s"], 4),
            f(r["predicted_step_s"], 4), f(r["step_error_pct"], 1), f(e, 1),
            f(r["predicted_exposed_comm_s"], 4), f(r["measured_peak_mib"], 1),
            f(r["predicted_peak_mib"], 1), f(r["memory_error_pct"], 1),
        ]
        for r, e in zip(rows, held, strict=True)
    ]
    errors = [abs(e) for e in held]
    step = sum(errors) / len(rows)
    mem = [
        abs(r["memory_error_pct"]) for r in rows if r["memory_error_pct"] == r["memory_error_pct"]
    ]
    signs = sum(e < 0 for e in held)
    return "\n\n".join(
        [
            f"### FSDP2 end-to-end ({_ranks()} ranks, gloo) and the memory model",
            "The profile's two FSDP-side parameters are fitted on these steps (`fit overlap`: "
            f"overlap_slowdown {f(fitted['overlap_slowdown'])}"
            f"{_flagged(fitted, 'overlap_slowdown')}, fsdp_copy_s_per_byte "
            f"{fitted['fsdp_copy_s_per_byte'] * 1e9:.2f} ns/B"
            f"{_flagged(fitted, 'fsdp_copy_s_per_byte')}; both effective; in-sample step MAPE "
            f"{f(fitted['fitted_mape_pct'])} %), so the goal is judged on the held-out column: "
            "each case predicted with the pair fitted on the other model shapes' rows.",
            table(
                [
                    "case", "S", "m", "k", "measured s", "predicted s", "error %",
                    "held-out error %", "pred. exposed comm s", "measured peak MiB",
                    "predicted peak MiB", "memory error %",
                ],
                body,
            ),
            f"Held-out step-time MAPE {f(step)} % over {len(rows)} steps (goal <= "
            f"{STEP_GOAL_PCT:.0f} %: {mark(step, STEP_GOAL_PCT)}); largest held-out case error "
            f"{f(max(errors))} % (goal <= {STEP_CASE_LIMIT_PCT:.0f} %: "
            f"{mark(max(errors), STEP_CASE_LIMIT_PCT)}); predicted faster than measured in "
            f"{signs}/{len(rows)} steps; peak-memory MAPE "
            f"{f(sum(mem) / max(len(mem), 1))} % (goal <= {GOAL_PCT:.0f} %: "
            f"{mark(sum(mem) / max(len(mem), 1))}) against the allocator peaks of "
            f"`cpu-fsdp-memory.csv`. " + tracker_agreement(),
            contention_history(),
        ]
    )


def _ranks() -> str:
    worlds = sorted(pd.read_csv(ROOT / FSDP, usecols=["world_size"])["world_size"].unique())
    return "/".join(str(w) for w in worlds)


def _flagged(fitted: dict[str, Any], name: str) -> str:
    """' (at upper bound 16 of the grid)' for a value on a grid edge, else ''."""
    text = fitted["flags"].get(name)
    return f" ({text} of the grid)" if text else ""


def _sessions(name: str) -> list[dict[str, Any]]:
    return environment_sessions(ROOT / name)


def machines() -> str:
    """The CPU model(s) and dates the timing datasets' env.json sidecars record."""
    seen: dict[str, set[str]] = {}
    for name in (COMPUTE, COMM, FSDP):
        for session in _sessions(name):
            seen.setdefault(str(session.get("cpu_model", "?")), set()).add(session["date"][:10])
    return "; ".join(f"{cpu}, timing data collected {', '.join(sorted(days))}"
                     for cpu, days in sorted(seen.items()))


def _command(line: str) -> str:
    """A recorded command line with its program shortened (shardmeter, or the script's path in
    this checkout)."""
    program, _, rest = line.partition(" ")
    path = Path(program)
    if path.name == "shardmeter":
        return f"shardmeter {rest}"
    # the recorded path is the measuring checkout's: keep the part that names a file of this one
    inside = next((Path(*path.parts[i:]) for i in range(1, len(path.parts))
                   if (ROOT / Path(*path.parts[i:])).is_file()), Path(path.name))
    return f"{inside.as_posix()} {rest}"


def collection() -> str:
    """Each dataset's benchmark commands, malloc and machine load, from its env.json sidecar."""
    lines = []
    extra = [name for name in (P2P, HOLDOUT, FSDP_AC, validation_heldout.FSDP_LAYOUTS,
                               validation_heldout.PIPELINE) if (ROOT / name).is_file()]
    for name in (COMPUTE, WIDTH_PROBE, COMM, FSDP, FSDP_MEMORY, *extra):
        sessions = _sessions(name)
        commands = dict.fromkeys(_command(s["command"]) for s in sessions)
        mallocs = sorted({str(s.get("malloc_library", "glibc")) for s in sessions})
        loads = [float(s["loadavg_1m_at_start"]) for s in sessions if "loadavg_1m_at_start" in s]
        lines.append(f"- `{Path(name).name}` ({len(sessions)} session(s); malloc: "
                     f"{', '.join(mallocs)}; load average at start <= "
                     f"{f(max(loads, default=float('nan')))}):\n  `"
                     + "`\n  `".join(commands) + "`")
    return "\n".join(lines)


def part_measured() -> str:
    """(a) This machine: measured datasets, cross-validated."""
    report = validate_profile(ValidationRequest(profile_name=PROFILE, compute_data_path=COMPUTE,
                                                comm_data_path=COMM, cache=cv_cache()))
    result = json_ready(report.record())
    fits = fit_commands()
    commands = ["shardmeter " + " ".join(c) for c in (*fits, VALIDATE)]
    sections = [compute_section(result["compute"]["rows"], result["compute"]["mode"])]
    if (ROOT / WIDTH_PROBE).is_file():
        sections.append(width_section())
    sections.append(comm_section(result["comm"]["rows"], result["comm"]["mode"]))
    if (ROOT / FSDP).is_file():
        sections.append(fsdp_section(json.loads(shardmeter(*COMPARE))))
        commands.append("shardmeter " + " ".join(COMPARE))
    if (ROOT / DATA / "memory-tracker.csv").is_file():  # memory model vs FSDPMemTracker (issue 9)
        sections.append(markdown_section())
        commands.append("shardmeter validate cpu-x86-2core --memory")
    # validation only, reported apart (issues 22-24): the fresh holdout, checkpointing on FSDP2,
    # tensor-parallel and pipeline-parallel steps end to end
    sections += [validation_heldout.holdout_section(), validation_heldout.ac_section(),
                 validation_heldout.layouts_section(), validation_heldout.pipeline_section()]
    intro = "\n".join(
        [
            "## (a) This machine, measured",
            "",
            f"Machine: {machines()}; `catalogs/gpus_local.csv` CPU-x86-2core, a "
            f"{_session(COMPUTE, 'cpu_count')}-core KVM guest, one rank per core, "
            f"torch.set_num_threads({_session(COMPUTE, 'threads')}). The software, CPU and date of "
            "each dataset, its malloc and the machine's load when it started are in its "
            f"`*.env.json` sidecar (listed below). The profile `{PROFILE}` is fitted by the "
            f"first {len(fits)} "
            "commands (`--fit`: compute, collectives (and send_recv where measured), then the two "
            "FSDP-side parameters, "
            "contention and FSDP2's copies, on the FSDP2 steps); the others validate it:",
            "",
            "```",
            *commands,
            "```",
        ]
    )
    return "\n\n".join([intro, *sections, collected_text() + collection(), notes_text()])


PARTS: dict[str, Callable[[], str]] = {
    "measured": part_measured,
    "calibrated": validation_gpu.part_calibrated,
    "planner": validation_gpu.part_planner,
    "intervals": validation_intervals.part_intervals,
    "published": validation_published.part_published,
}
ARTIFACTS: dict[str, tuple[Path, Callable[[], str]]] = {
    "intervals": (validation_intervals.TRACK_RECORD, validation_intervals.track_record),
}
"""Files a part writes beside the doc (checked and written with it)."""
HEADER = """# ShardMeter validation

Generated by `python -m scripts.make_validation` from the data shipped in this repository; every
figure below is recomputed by it (`--check` fails when this file is stale, and CI runs it). Five
parts: (a) this machine, measured; (b) GPUs, calibrated on published FSDP runs; (c) what the
planner decides differently with the calibrated profiles; (d) how often the prediction intervals
hold on held-out data; (e) published parallel-layout, FP8 and MoE runs, validation only.
Regenerate one part with `--part NAME`.
The nested cross-validations behind part (a) are cached in `catalogs/cv-cache/` under the sha256
of their data and code; `--refresh` recomputes them."""


def _section(text: str, name: str) -> str | None:
    found = re.search(rf"<!-- part:{name} -->\n(.*?)\n<!-- /part:{name} -->", text, re.S)
    return found.group(1) if found else None


def _wrap(name: str, body: str) -> str:
    return f"<!-- part:{name} -->\n{body}\n<!-- /part:{name} -->"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", action="append", choices=list(PARTS), help="only this part")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--fit", action="store_true", help="refit the CPU profile first")
    parser.add_argument("--refresh", action="store_true",
                        help="recompute the cached cross-validations (catalogs/cv-cache)")
    parser.add_argument("--out", default=DOC)
    args = parser.parse_args(argv)
    if (args.fit or args.refresh) and args.check:
        parser.error("--fit and --refresh rewrite files; they cannot be combined with --check")
    set_cache_mode("check" if args.check else "refresh" if args.refresh or args.fit else "use")
    if args.fit:
        fit()
    out = ROOT / args.out
    current = out.read_text() if out.is_file() else ""
    names = args.part or list(PARTS)
    try:
        bodies = {name: PARTS[name]() for name in names}
    except ShardMeterError as err:  # a stale cache under --check: say what changed, no traceback
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    artifacts = {name: (path, text()) for name, (path, text) in ARTIFACTS.items()
                 if name in bodies}
    if args.check:
        stale = [(n, args.out) for n, body in bodies.items() if _section(current, n) != body]
        stale += [(name, str(path.relative_to(ROOT))) for name, (path, text) in artifacts.items()
                  if not path.is_file() or path.read_text() != text]
        for name, where in stale:
            print(f"stale: {where}, part {name!r} (rerun python -m scripts.make_validation "
                  f"--part {name})", file=sys.stderr)
        return 1 if stale else 0
    for path, text in artifacts.values():
        path.write_text(text)
        print(f"wrote {path}", file=sys.stderr)
    kept = {n: _section(current, n) for n in PARTS}
    parts = [_wrap(n, bodies.get(n) or kept[n] or f"(part {n} not generated yet)") for n in PARTS]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n\n".join([HEADER, *parts]) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
