#!/usr/bin/env python
"""Measure torch.compile's effect on the bench model's forward + backward on this CPU and write
catalogs/profiles/data/cpu-compile.csv (`perfmodel.bench.compile_cpu`; issue 26 item 4).

One row per catalog model and shape (written as it is measured): eager and compiled median step
times and their ratio, with the torch version, the thread count and the C++ compiler Inductor
used. Without a C++ compiler the CSV holds one row per shape saying so and no times (the
measurement is skipped, never guessed).

    .venv/bin/python -m scripts.measure_compile_cpu                  # writes the CSV
    .venv/bin/python -m scripts.measure_compile_cpu --out other.csv
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from perfmodel.bench.compile_cpu import cxx_compiler, measure_compile
from perfmodel.spec.catalog import get_model

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "catalogs" / "profiles" / "data" / "cpu-compile.csv"
SHAPES = (("tiny-llama", 128, 4), ("tiny-llama", 256, 4))
"""(catalog model, sequence length, micro-batch) measured: small enough for a 2-core CPU."""
COLUMNS = ("model", "seq_len", "micro_batch", "threads", "eager_s", "compiled_s", "speedup",
           "torch", "cxx", "note")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows: list[dict[str, object]] = []
    cxx = cxx_compiler()
    handle = open(args.out, "w", encoding="utf-8", newline="")  # noqa: SIM115 (rows as measured)
    writer = csv.DictWriter(handle, fieldnames=COLUMNS)
    writer.writeheader()
    for name, seq, mb in SHAPES:
        timing = measure_compile(get_model(name), seq_len=seq, micro_batch=mb,
                                 threads=args.threads, iters=args.iters)
        if timing is None:
            rows.append({"model": name, "seq_len": seq, "micro_batch": mb,
                         "threads": args.threads, "torch": torch.__version__, "cxx": "",
                         "note": "skipped: no C++ compiler (g++, c++, clang++, cc) on PATH; "
                                 "TorchInductor's CPU backend needs one"})
            writer.writerow(rows[-1])
            handle.flush()
            continue
        rows.append({"model": name, "seq_len": seq, "micro_batch": mb, "threads": args.threads,
                     "eager_s": f"{timing.eager_s:.6f}", "compiled_s": f"{timing.compiled_s:.6f}",
                     "speedup": f"{timing.speedup:.4f}", "torch": torch.__version__, "cxx": cxx,
                     "note": "fp32 forward + backward, medians after warm-up"})
        writer.writerow(rows[-1])
        handle.flush()
        logging.info("%s S=%d m=%d: eager %.4f s, compiled %.4f s, speedup %.3f", name, seq, mb,
                     timing.eager_s, timing.compiled_s, timing.speedup)
    handle.close()
    sys.stdout.write(f"wrote {args.out} ({len(rows)} rows)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
