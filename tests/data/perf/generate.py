"""Regenerate the small synthetic datasets of this folder (deterministic, seeded).

    .venv/bin/python tests/data/perf/generate.py

compute_small.csv: four catalog tiny/small models, times from the coefficients below with 2%
log-normal noise. comm_small.csv: gloo-style loopback collectives from the coefficients below
(reduce_scatter twice all_gather, as when it runs through all_reduce), 2% noise. Not measurements.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from perfmodel.costs.comm import LinkCoefficients, synthetic_comm_dataset  # noqa: E402
from perfmodel.costs.compute import synthetic_compute_dataset  # noqa: E402
from perfmodel.spec.catalog import get_model  # noqa: E402

COMPUTE = {
    "forward": {"tok_block_matmul": 1.0e-12, "tok_lm_head": 1.5e-12, "layers": 2e-4, "const": 1e-3},
    "backward": {
        "tok_block_matmul": 2.0e-12,
        "tok_lm_head": 3.0e-12,
        "layers": 4e-4,
        "const": 2e-3,
    },
    "optimizer": {"shard_params": 5e-10, "layers": 1e-4, "const": 5e-4},
}
COMM = {
    ("all_gather", "loopback"): LinkCoefficients(latency_s=50e-6, bandwidth_bytes_per_s=4e9),
    ("reduce_scatter", "loopback"): LinkCoefficients(latency_s=100e-6, bandwidth_bytes_per_s=2e9),
    ("all_reduce", "loopback"): LinkCoefficients(latency_s=60e-6, bandwidth_bytes_per_s=3e9),
}

if __name__ == "__main__":
    models = [get_model(n) for n in ("tiny-llama", "tiny-gqa", "small-llama", "tiny-phi")]
    synthetic_compute_dataset(models, COMPUTE, seq_lens=(64, 256), micro_batches=(1, 2, 4),
                              noise=0.02, seed=7).to_csv(HERE / "compute_small.csv", index=False)
    synthetic_comm_dataset(COMM, backend="gloo", world_sizes=(2, 4),
                           payloads_bytes=(2**12, 2**18, 2**22), noise=0.02,
                           seed=7).to_csv(HERE / "comm_small.csv", index=False)
