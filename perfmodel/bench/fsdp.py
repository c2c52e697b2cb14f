"""End-to-end FSDP2 check: real sharded training steps under torchrun, timed per step.

`shardmeter bench fsdp --space catalogs/spaces/fsdp-cpu.yaml -o DATA.csv` resolves the cases of
the space file (shapes x micro-batches x gradient-accumulation steps), writes them to a JSON plan
next to the output and launches `torchrun ... -m perfmodel.bench.fsdp_worker`. Each worker wraps
every block and the root with `torch.distributed.fsdp.fully_shard`, trains with AdamW and skips
gradient synchronisation on non-final micro-steps (`set_requires_gradient_sync(False)`), as FSDP2
gradient accumulation does. Rank 0 writes the median step time (max over ranks per step) and the
peak memory per rank, row by row; rerunning resumes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from perfmodel.arch import FAMILY_LAYOUT, ModelSpec
from perfmodel.bench.comm import launch, torchrun_command
from perfmodel.bench.common import read_space_yaml
from perfmodel.errors import ConfigError, UserInputError

logger = logging.getLogger(__name__)

SHAPE_COLUMNS = ("model", "family", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
                 "tie_word_embeddings")
COLUMNS = (*SHAPE_COLUMNS, "seq_len", "micro_batch", "grad_accum", "world_size", "backend", "link",
           "device", "dtype", "threads", "step_time_s", "step_time_iqr_s", "iters", "peak_memory_bytes",
           "memory_source")
KEY_COLUMNS = ("model", "seq_len", "micro_batch", "grad_accum", "world_size", "backend", "dtype")
_SPEC_KEYS = {"hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
              "num_attention_heads": "num_heads", "num_key_value_heads": "num_kv_heads",
              "intermediate_size": "intermediate_size", "vocab_size": "vocab_size",
              "head_dim": "head_dim", "tie_word_embeddings": "tie_word_embeddings"}


@dataclass(frozen=True, slots=True)
class FsdpCase:
    """One measured FSDP2 configuration."""

    config_id: str
    """Dataset `model` column."""
    spec: ModelSpec
    """Architecture."""
    seq_len: int
    """Sequence length."""
    micro_batch: int
    """Sequences per rank per micro-step."""
    grad_accum: int
    """Micro-steps per optimizer step."""

    def to_json(self) -> dict[str, Any]:
        spec = {k: v for k, v in asdict(self.spec).items() if k != "published_params"}
        return {"config_id": self.config_id, "spec": spec, "seq_len": self.seq_len,
                "micro_batch": self.micro_batch, "grad_accum": self.grad_accum}

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> FsdpCase:
        return FsdpCase(raw["config_id"], ModelSpec(**raw["spec"]), int(raw["seq_len"]),
                        int(raw["micro_batch"]), int(raw["grad_accum"]))


@dataclass(frozen=True, slots=True)
class FsdpSettings:
    """How the FSDP2 steps are run."""

    backend: str
    """'gloo' (CPU) or 'nccl' (CUDA)."""
    link: str
    """Link recorded per row (catalogs/links.csv)."""
    dtype: str
    """Parameter/activation dtype."""
    iters: int
    """Timed steps per case."""
    warmup: int
    """Untimed steps per case."""
    threads: int = 1
    """torch threads per rank."""


def _case_spec(path: Path, raw: Mapping[str, Any]) -> ModelSpec:
    from perfmodel.catalog import get_model

    overrides = {_SPEC_KEYS[k]: v for k, v in raw.items() if k in _SPEC_KEYS}
    try:
        if "model" in raw:
            return replace(get_model(str(raw["model"])), name=str(raw.get("name", raw["model"])), **overrides)
        family = str(raw.get("family", "llama"))
        layout = dict(FAMILY_LAYOUT.get(family, {}))
        layout.update({k: overrides.pop(k) for k in ("tie_word_embeddings",) if k in overrides})
        return ModelSpec(name=str(raw["name"]), family=family, **overrides, **layout)
    except (KeyError, TypeError) as err:
        raise ConfigError(f"{path}: case {dict(raw)} is incomplete ({err})",
                          hint="give `model:` (catalog name) or `name:` plus every shape field.") from err


def load_cases(path: str | Path) -> list[FsdpCase]:
    """Cases of an FSDP space file: every shape x micro_batches x grad_accum."""
    p = Path(path)
    raw = read_space_yaml(p, what="FSDP space", example="catalogs/spaces/fsdp-cpu.yaml")
    if not isinstance(raw, dict) or not isinstance(raw.get("shapes"), list):
        raise UserInputError(f"{p}: expected a mapping with a 'shapes' list",
                             hint="see catalogs/spaces/fsdp-cpu.yaml for the format.")
    cases = []
    for shape in raw["shapes"]:
        spec = _case_spec(p, shape)
        for mb in shape.get("micro_batches", raw.get("micro_batches", [1])):
            for ga in shape.get("grad_accum", raw.get("grad_accum", [1])):
                cases.append(FsdpCase(spec.name, spec, int(shape.get("seq_len", raw.get("seq_len", 128))),
                                      int(mb), int(ga)))
    return cases


def run_fsdp(cases: Sequence[FsdpCase], out_path: str | Path, settings: FsdpSettings, *, nproc: int,
             torchrun_args: str | None = None) -> Path:
    """Write the case plan next to the output and launch the FSDP2 workers; returns the plan path."""
    from perfmodel.catalog import get_link

    get_link(settings.link)
    if settings.iters < 1 or settings.warmup < 0:
        raise UserInputError(f"--iters must be >= 1 and --warmup >= 0, got {settings.iters}, {settings.warmup}",
                             hint="e.g. --iters 5 --warmup 2.")
    plan = Path(f"{out_path}.plan.json")
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_text(json.dumps([c.to_json() for c in cases], indent=1) + "\n")
    args = ["--out", str(out_path), "--plan", str(plan), "--backend", settings.backend,
            "--link", settings.link, "--dtype", settings.dtype, "--iters", str(settings.iters),
            "--warmup", str(settings.warmup), "--threads", str(settings.threads)]
    launch(torchrun_command("perfmodel.bench.fsdp_worker", args, nproc=nproc, torchrun_args=torchrun_args),
           threads=settings.threads, what="FSDP2 benchmark")
    return plan


# ---- measured vs simulated ----------------------------------------------------------------

def _memory_config(dtype: str) -> Any:
    """Memory-model element sizes of a run in `dtype` (pure fp32 on CPU: every element 4 B, no
    caching-allocator reserve); bf16 runs keep the model's mixed-precision defaults."""
    from perfmodel.memory import MemoryConfig

    if dtype in ("float32", "fp32"):
        return MemoryConfig(compute_param_bytes=4, reduce_grad_bytes=4, activation_bytes=4,
                            logits_bytes=4, reserve_bytes=0)
    return MemoryConfig()


def compare_fsdp(data: str | Path, profile_name: str, *, hardware: str | None = None) -> list[dict[str, Any]]:
    """Measured FSDP2 steps beside the simulator's prediction (perfmodel.fsdp.simulate_step over
    the profile's compute and comm coefficients) and the memory model's peak, per row."""
    import pandas as pd

    from perfmodel.catalog import get_gpu
    from perfmodel.features import spec_from_row
    from perfmodel.fsdp import simulate_step, step_costs
    from perfmodel.hardware import IslandSpec
    from perfmodel.memory import memory_breakdown
    from perfmodel.profile import load_profile

    profile = load_profile(profile_name)
    gpu = get_gpu(hardware or profile.hardware)
    frame = pd.read_csv(data, dtype=str, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise UserInputError(f"{data}: missing column(s) {', '.join(missing)}",
                             hint="give a CSV written by `shardmeter bench fsdp`.")
    out = []
    for _, row in frame.iterrows():
        spec = spec_from_row(row)
        world, seq, mb, ga = (int(row[k]) for k in ("world_size", "seq_len", "micro_batch", "grad_accum"))
        island = IslandSpec(gpu=gpu, num_nodes=1, gpus_per_node=world, intra_link=row["link"],
                            inter_link=row["link"])
        elem = 4 if row["dtype"] in ("float32", "fp32") else 2
        costs = step_costs(spec, profile, island, seq_len=seq, micro_batch=mb, param_bytes=elem,
                           grad_bytes=elem if elem == 4 else 4)
        sim = simulate_step(costs, accum_steps=ga)
        measured = float(row["step_time_s"])
        peak = memory_breakdown(spec, num_gpus=world, seq_len=seq, micro_batch=mb,
                                config=_memory_config(row["dtype"])).peak_bytes
        measured_mem = float(row["peak_memory_bytes"])
        out.append({"model": row["model"], "seq_len": seq, "micro_batch": mb, "grad_accum": ga,
                    "world_size": world, "measured_step_s": measured, "predicted_step_s": sim.step_time_s,
                    "step_error_pct": 100.0 * (sim.step_time_s - measured) / measured,
                    "predicted_compute_s": sim.compute_busy_s, "predicted_comm_s": sim.comm_busy_s,
                    "predicted_exposed_comm_s": sim.exposed_comm_s,
                    "measured_peak_mib": measured_mem / 2**20, "predicted_peak_mib": peak / 2**20,
                    "memory_error_pct": 100.0 * (peak - measured_mem) / measured_mem if measured_mem else float("nan")})
    return out
