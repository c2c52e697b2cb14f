"""torch.compile's effect on the bench model's forward + backward on this CPU (issue 26 item 4).

Claim: the measured ratio eager time / compiled time of one forward + backward of
`perfmodel.bench.model.Transformer` (fp32, one thread, as the compute benchmarks run) at a few
small shapes; medians over `iters` timed steps after `warmup` steps (compilation happens in the
warm-up and is not timed). TorchInductor's CPU backend generates C++, so the measurement needs a
C++ compiler; without one `measure_compile` returns None and the caller records why.
Why: the GPU compile effect in catalogs/precision.csv is a published prior; on the CPU the effect
can be measured, so it is (`python -m scripts.measure_compile_cpu` writes the CSV); it is
reported, not fed into the CPU profile.
Checked by: scripts.measure_compile_cpu (its CSV: one row per shape, both times measured on this
machine).
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from perfmodel.bench.model import build_model, random_tokens
from perfmodel.spec.arch import ModelSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class CompileTiming:
    """Eager and compiled forward + backward time of one shape."""

    eager_s: float
    """Median eager step time, seconds."""
    compiled_s: float
    """Median compiled step time, seconds."""

    @property
    def speedup(self) -> float:
        """eager / compiled (> 1: compile is faster)."""
        return self.eager_s / self.compiled_s


def cxx_compiler() -> str | None:
    """The C++ compiler Inductor would use (g++, c++, cc or clang++), or None."""
    for name in ("g++", "c++", "clang++", "cc"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _median_step_s(model: torch.nn.Module, run: Callable[[torch.Tensor], Any],
                   tokens: torch.Tensor, *, warmup: int, iters: int) -> float:
    def step() -> None:
        model.zero_grad(set_to_none=True)
        run(tokens).backward()

    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_compile(spec: ModelSpec, *, seq_len: int, micro_batch: int, warmup: int = 3,
                    iters: int = 5, threads: int = 1) -> CompileTiming | None:
    """Eager and `torch.compile`d forward + backward of `spec` (None without a C++ compiler)."""
    if cxx_compiler() is None:
        return None
    torch.set_num_threads(threads)
    tokens = random_tokens(spec, micro_batch, seq_len)
    eager = build_model(spec)
    eager_s = _median_step_s(eager, eager, tokens, warmup=warmup, iters=iters)
    model = build_model(spec)
    compiled_s = _median_step_s(model, torch.compile(model), tokens, warmup=warmup, iters=iters)
    return CompileTiming(eager_s=eager_s, compiled_s=compiled_s)
