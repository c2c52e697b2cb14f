#!/usr/bin/env python
"""ShardMeter against published tensor-parallel / HSDP / context-parallel training runs (issue 23,
validation only: nothing is fitted to these rows).

Every row of `catalogs/published/layout-runs.csv` (written by `python -m
scripts.build_layout_runs`; sources and caveats in catalogs/published/README.md) is either
predicted or listed with the reasons ShardMeter cannot express it (pipeline parallelism, mixture
of experts, FP8, a GPU without a catalog entry, a layout or GPU count the source does not
publish). A predicted row goes through the Python API exactly as `shardmeter predict` does:
`perfmodel.api.predict(WorkloadSpec(...))` with a `TrainingRecipe` whose `parallel` field is the
row's `ParallelLayout` and the GPU's default profile (the shipped calibrated profile of the A100
80GB and H100; other GPUs the same rules as `shardmeter predict`). The compared metric is
tokens/s per GPU: as published, or derived from a published step time (S x global batch / step /
GPUs) or from published TFLOP/s per GPU divided by the source's own FLOPs per token
(`FLOP_CONVENTIONS`). The output is a per-source table (rows, MAPE, signed median error), a
per-row table and the rows not predicted with their reasons; `--json` / `--csv` write the same
for docs.

Settings a row does not publish follow the rules of `SOURCE_RULES` and `plan_row` (stated in
catalogs/published/README.md, "Rules for unstated settings"); they were fixed before any
prediction was compared with a published figure, and nothing is tuned per row.

    .venv/bin/python -m scripts.validate_layouts                        # markdown to stdout
    .venv/bin/python -m scripts.validate_layouts --json out.json --csv out.csv
    .venv/bin/python -m scripts.validate_layouts --write-inputs DIR     # config.json, recipe
                                                                        # YAML and the shardmeter
                                                                        # command of every row
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from perfmodel.api.predict import predict
from perfmodel.api.workload import WorkloadSpec
from perfmodel.formatting import json_ready, markdown_table
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import DatasetError, UserInputError
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.paths import catalog_dir
from perfmodel.spec.pipeline import check_schedule
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe
from perfmodel.uncertainty.coverage import PrintedCase

RUNS_CSV = catalog_dir() / "published" / "layout-runs.csv"
"""The published runs (python -m scripts.build_layout_runs writes it)."""
GOAL_MAPE_PCT = 15.0
"""Issues 23, 24 and 26's goal per source for published runs (layouts, FP8, MoE): a finding
reported, not a contract any test asserts."""
GPUS_PER_NODE = 8
"""Every published cluster here has 8 GPUs per node (DGX / HGX / Grand Teton)."""

REQUIRED = ("run_id", "source_id", "source_url", "source_title", "table_or_section", "as_of",
            "model", "gpu", "framework")
"""Columns every row must fill."""
INTEGER = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "ffn_size", "vocab_size",
           "num_experts", "experts_per_token", "num_gpus", "tp", "pp", "cp", "ep", "dp",
           "dp_shard", "dp_replicate", "virtual_stages", "seq_len", "micro_batch",
           "global_batch_seqs", "global_batch_tokens")
"""Columns that are positive integers where filled."""
REAL = ("params_b", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu_pct", "step_time_s")
"""Columns that are positive finite numbers where filled."""
CHOICES = {"sequence_parallel": ("", "yes", "no"), "torch_compile": ("", "yes", "no"),
           "precision": ("", "bf16", "fp8", "mxfp8")}
AS_OF = re.compile(r"\d{4}-\d{2}(-\d{2})?")


# ---- the data -------------------------------------------------------------------------------

def load_runs(path: str | Path = RUNS_CSV) -> list[dict[str, str]]:
    """The rows, each checked: required columns filled, a source url, an ISO as_of, numbers
    positive and finite; DatasetError naming the line and the field otherwise."""
    path = Path(path)
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as err:
        raise DatasetError(f"{path}: cannot read the published runs ({err})",
                           hint="regenerate it with `python -m scripts.build_layout_runs`."
                           ) from err
    seen: set[str] = set()
    for line, row in enumerate(rows, start=2):
        def bad(name: str, why: str, row: dict[str, str] = row, line: int = line) -> DatasetError:
            return DatasetError(f"{path}, line {line}: field {name!r} is {row.get(name)!r}: {why}",
                                hint="fix the row in scripts/build_layout_runs.py and rerun it.")
        for name in REQUIRED:
            if not (row.get(name) or "").strip():
                raise bad(name, "required")
        if not row["source_url"].startswith(("https://", "http://")):
            raise bad("source_url", "must start with a https:// address")
        if not AS_OF.fullmatch(row["as_of"]):
            raise bad("as_of", "must be an ISO date (YYYY-MM-DD or YYYY-MM)")
        if row["run_id"] in seen:
            raise bad("run_id", "duplicate")
        seen.add(row["run_id"])
        for name in (*INTEGER, *REAL):
            text = row.get(name, "")
            if not text:
                continue
            try:
                value = float(text)
            except ValueError:
                raise bad(name, "not a number") from None
            if not (math.isfinite(value) and value > 0):
                raise bad(name, "must be a positive finite number")
            if name in INTEGER and value != int(value):
                raise bad(name, "must be an integer")
        for name, allowed in CHOICES.items():
            if row.get(name, "") not in allowed:
                raise bad(name, f"must be one of {allowed}")
    return rows


def _int(row: Mapping[str, str], name: str) -> int | None:
    return int(float(row[name])) if row.get(name) else None


def _float(row: Mapping[str, str], name: str) -> float | None:
    return float(row[name]) if row.get(name) else None


# ---- the rules --------------------------------------------------------------------------------

GPU_MAP: dict[str, str] = {
    "A100-SXM4-80GB (Selene)": "A100-SXM4-80GB",
    "A100-SXM4-80GB": "A100-SXM4-80GB",
    "A100-80GB (128 GPUs, 400 Gbps)": "A100-SXM4-80GB",
    "A100 (128 GPUs)": "A100-SXM4-80GB",
    "H100 (variant not stated)": "H100-SXM5-80GB",
    "H100-SXM5-80GB (700 W, HBM3; Grand Teton, RoCE 400 Gb/s)": "H100-SXM5-80GB",
    "H100-SXM5-80GB (DGX H100, EOS; NVLink4; 8x400 Gb/s IB)": "H100-SXM5-80GB",
    "H100 96GB HBM2e (Grand Teton, 500 W power limit, 400 Gb/s RDMA per GPU)": "H100-SXM5-80GB",
    "H100 SXM HBM2e ~94-95GB, lower TDP": "H100-SXM5-80GB",
    "H100 (96 GPUs, 800 Gbps; MFU table says 'H100 80G')": "H100-SXM5-80GB",
    "H100 (DGX-H100)": "H100-SXM5-80GB",
    "H100": "H100-SXM5-80GB",
    "H100-80GB": "H100-SXM5-80GB",
    "H200 (8/host, NVLink; 400 Gb/s CX-7 RDMA per GPU)": "H200-SXM-141GB",
    "B200 (power limited)": "B200",
    "B200 (DGX-B200)": "B200",
    "B200": "B200",
}
"""Published GPU -> the catalog GPU of the same die, form factor and SM count (the A100 SXM4 80GB
in DGX/HGX nodes, the GH100 SXM, ...). What the catalog GPU does not describe is not corrected
for: torchtitan's H100s are 96 GB HBM2e parts capped at 500 W and predicted as the 700 W HBM3
H100 SXM5, B200 power limits are not modelled, a stated NIC bandwidth is not used (links and NICs
are the catalog's, as in `shardmeter predict`). GB200, GB300 and H800 have no catalog entry."""

MEGATRON_GPT_FAMILIES = ("GPT-3-style dense (Megatron)", "GPT dense (Megatron-Core)",
                         "GPT-3 dense (MHA)")


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceRules:
    """How one source's rows become a ShardMeter workload: the framework's parallelism and
    recipe, and the values its rows leave unstated (with why)."""

    framework: str
    """megatron (Megatron-LM, Megatron-Core, NeMo), torchtitan or fms (fms-fsdp)."""
    metric: str = "tokens"
    """What the source publishes per row: tokens (tokens/s/GPU), step (step time with global
    batch) or a FLOP_CONVENTIONS key (TFLOP/s per GPU)."""
    defaults: Mapping[str, tuple[Any, str]] = field(default_factory=dict)
    """Setting -> (value, why) for settings the source's rows leave empty."""
    ac_names: Mapping[str, str] = field(default_factory=dict)
    """The source's checkpointing words -> a CheckpointPolicy name."""


SOURCE_RULES: dict[str, SourceRules] = {
    "narayanan2021": SourceRules(
        framework="megatron", metric="narayanan2021-eq3",
        defaults={
            "activation_checkpointing": ("full", "the paper's FLOP count (Eq. 3) includes the "
                                         "recompute forward pass: full recompute"),
            "micro_batch": (1, "micro-batch not published: rule 1 (Megatron requires "
                            "--micro-batch-size; 1 is the smallest)"),
            "sequence_parallel": (False, "sequence parallelism appeared in 2022"),
        }),
    "mcore2024": SourceRules(
        framework="megatron", metric="megatron-core-r0.8",
        defaults={
            "activation_checkpointing": ("none", "not stated: Megatron-Core's default (no "
                                         "recompute)"),
            "micro_batch": (1, "micro-batch not published: rule 1 (Megatron requires "
                            "--micro-batch-size; 1 is the smallest)"),
            "sequence_parallel": (True, "--tp-comm-overlap (stated) requires sequence "
                                  "parallelism"),
            "async_tp": (True, "--tp-comm-overlap (stated) overlaps TP communication with the "
                         "GEMMs"),
        }),
    "korthikanti2022": SourceRules(framework="megatron", metric="step",
                                   ac_names={"selective": "attn"}),
    "dgxc_2411": SourceRules(framework="megatron", metric="step",
                             ac_names={"selective": "attn"}),
    "tt_h100_2412": SourceRules(
        framework="torchtitan",
        defaults={"seq_len": (8192, "train_configs/llama3_8b.toml at torchtitan 9dec370")},
        ac_names={"selective": "op-sac"}),
    "tt_asynctp_2506": SourceRules(
        framework="torchtitan",
        defaults={"seq_len": (8192, "llama3_{8b,70b}.toml at torchtitan 820504e")},
        ac_names={"selective (per-op)": "op-sac"}),
    "tt_405b_2408": SourceRules(
        framework="torchtitan",
        defaults={"seq_len": (8192, "train_configs/llama3_405b.toml at torchtitan 3faaa1a")}),
    "tt_mxfp8_b200": SourceRules(framework="torchtitan",
                                 ac_names={"selective (per-op)": "op-sac"}),
    "tt_trainy_h200": SourceRules(framework="torchtitan",
                                  ac_names={"selective (per-op)": "op-sac"}),
    "fms_fsdp": SourceRules(
        framework="fms",
        defaults={
            "seq_len": (4096, "fms-fsdp train_config.seq_length default"),
            "activation_checkpointing": (
                "full", "README (the text publishing the figure) says selective AC, "
                "docs/train_details.md says none: the README wins, and fms-fsdp's "
                "selective_checkpointing default 1 checkpoints every block"),
        },
        ac_names={"selective": "full"}),
}
"""Per source (the README's rule table). Framework rules (`_layout`): Megatron data parallelism
is plain DDP (dp_shard 1, dp_replicate = DP, gradients reduced once per step); torchtitan is
FSDP2 over its published dp_shard with sequence parallelism under TP; fms-fsdp's FSDP1 shards
over every GPU (FULL_SHARD) or over a node (HYBRID_SHARD), reducing in bf16 (its bfSixteen
policy). Checkpointing words: Megatron 'selective' is the attention-core recompute (attn),
torchtitan's 'selective' is its per-op policy (op-sac), fms-fsdp's 'Selective AC' is
selective_checkpointing at its default 1 (every block: full)."""


def _megatron_core_flops(row: Mapping[str, str]) -> float:
    """FLOPs per token of Megatron-Core r0.8.0's `num_floating_point_operations`
    (megatron/training/training.py at f2e5db40): 12·l·h²·((1 + g/a + s/h)·(a·d/h)
    + (ffn/h)·gated + V/(2·l·h)); GPT: g = a (MHA), a·d = h, ffn = 4h, not gated."""
    h, layers, s, vocab = (int(row[k]) for k in ("hidden_size", "num_layers", "seq_len",
                                                  "vocab_size"))
    return 12.0 * layers * h * h * ((1 + 1 + s / h) + 4.0 + vocab / (2.0 * layers * h))


def _narayanan_flops(row: Mapping[str, str]) -> float:
    """FLOPs per token of Narayanan et al. 2021, Eq. 3 (with activation recomputation):
    96·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    h, layers, s, vocab = (int(row[k]) for k in ("hidden_size", "num_layers", "seq_len",
                                                  "vocab_size"))
    return 96.0 * layers * h * h * (1 + s / (6.0 * h) + vocab / (16.0 * layers * h))


FLOP_CONVENTIONS: dict[str, tuple[Callable[[Mapping[str, str]], float], str]] = {
    "narayanan2021-eq3": (_narayanan_flops, "Narayanan et al. 2021 Eq. 3: "
                          "96·l·h²·(1 + S/6h + V/16lh) per token"),
    "megatron-core-r0.8": (_megatron_core_flops, "Megatron-Core r0.8.0 "
                           "num_floating_point_operations: 12·l·h²·(6 + S/h + V/2lh) per token "
                           "(GPT, MHA, 4h MLP)"),
}
"""The source's FLOPs per token that turn its TFLOP/s per GPU into tokens/s per GPU."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RowPlan:
    """One published row: what is compared and, when ShardMeter can express it, the workload."""

    run_id: str
    source_id: str
    model: str
    """As published."""
    reasons: tuple[str, ...] = ()
    """Why it is not predicted (empty: predicted)."""
    kind: str = ""
    """layout (tp, cp or data-parallel replicas > 1) or fsdp-reference (plain FSDP)."""
    model_name: str = ""
    """Catalog model name, or the file name of the config.json `model_config` describes."""
    model_config: Mapping[str, Any] | None = None
    """Hugging Face config.json of the published dimensions (None: a catalog model)."""
    gpu: str = ""
    """Catalog GPU."""
    num_gpus: int = 0
    seq_len: int = 0
    micro_batch: int = 0
    accum: int = 0
    recipe: TrainingRecipe = DEFAULT_RECIPE
    published_tokens_per_s_per_gpu: float = 0.0
    metric_basis: str = ""
    """How the published tokens/s/GPU was read or derived."""
    assumptions: tuple[str, ...] = ()
    """The rules that filled a setting the row does not publish."""

    @property
    def predicted(self) -> bool:
        return not self.reasons


def _ac_name(row: Mapping[str, str], rules: SourceRules, assumptions: list[str]) -> str:
    published = row["activation_checkpointing"]
    if not published:
        value, why = rules.defaults["activation_checkpointing"]
        assumptions.append(f"ac {value}: {why}")
        return str(value)
    name = rules.ac_names.get(published, published)
    if name != published:
        assumptions.append(f"ac {name}: the source's '{published}'")
    return name


def _setting(row: Mapping[str, str], name: str, rules: SourceRules,
             assumptions: list[str]) -> Any:
    if row.get(name):
        return row[name]
    value, why = rules.defaults[name]
    assumptions.append(f"{name} {value}: {why}")
    return value


def _model(row: Mapping[str, str]) -> tuple[str, dict[str, Any] | None, str]:
    """(catalog name or config file name, config.json or None, reason it cannot be built)."""
    family = row["model_family"]
    dims = {k: _int(row, k) for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                                      "ffn_size", "vocab_size")}
    h, layers, heads = dims["hidden_size"], dims["num_layers"], dims["num_heads"]
    if h is None or layers is None or heads is None or dims["vocab_size"] is None:
        return "", None, "model dimensions not published (hidden, layers, heads, vocabulary)"
    slug = re.sub(r"[^a-z0-9]+", "-", f"{row['source_id']} {row['model']}".lower()).strip("-")
    if family in MEGATRON_GPT_FAMILIES:
        # Megatron's GPT: LayerNorm, biases, GELU 4h MLP (or the published ffn), learned
        # absolute positions, input embedding tied to the output layer
        config: dict[str, Any] = {"model_type": "gpt2", "n_embd": h, "n_layer": layers,
                                  "n_head": heads, "vocab_size": dims["vocab_size"],
                                  "n_positions": int(row["seq_len"])}
        if dims["ffn_size"]:
            config["n_inner"] = dims["ffn_size"]
        return f"{slug}.json", config, ""
    if dims["ffn_size"] is None or dims["num_kv_heads"] is None and "GQA" in family:
        return "", None, "model dimensions not published (MLP width or key/value heads)"
    kv = dims["num_kv_heads"] or heads
    if family in ("Llama 3 dense (GQA)", "Llama 2 dense"):
        for name in ("Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.1-405B"):
            spec = get_model(name)
            if (spec.hidden_size, spec.num_layers, spec.num_heads, spec.num_kv_heads,
                    spec.intermediate_size, spec.vocab_size) == (h, layers, heads, kv,
                                                                 dims["ffn_size"],
                                                                 dims["vocab_size"]):
                return name, None, ""
        return f"{slug}.json", {"model_type": "llama", "hidden_size": h,
                                "num_hidden_layers": layers, "num_attention_heads": heads,
                                "num_key_value_heads": kv, "intermediate_size": dims["ffn_size"],
                                "vocab_size": dims["vocab_size"], "tie_word_embeddings": False,
                                "max_position_embeddings": 4096}, ""
    if family == "Nemotron-4 dense (GQA, squared-ReLU)":
        # StarCoder2's layout: LayerNorm, a plain (not gated) MLP, grouped-query attention; no
        # biases and an untied head as Nemotron-4 (squared ReLU instead of GELU changes no
        # matmul)
        return f"{slug}.json", {"model_type": "starcoder2", "hidden_size": h,
                                "num_hidden_layers": layers, "num_attention_heads": heads,
                                "num_key_value_heads": kv, "intermediate_size": dims["ffn_size"],
                                "vocab_size": dims["vocab_size"], "use_bias": False,
                                "tie_word_embeddings": False, "sliding_window": None,
                                "max_position_embeddings": int(row["seq_len"])}, ""
    return "", None, f"no parameter layout for model family {family!r}"


def is_moe(row: Mapping[str, str]) -> bool:
    """A mixture-of-experts row (predicted apart by `scripts.validate_moe`)."""
    return bool(row["num_experts"] or row["ep"] or "MoE" in row["model_family"])


def _not_expressible(row: Mapping[str, str]) -> list[str]:
    """Why ShardMeter cannot predict the row (empty: it can)."""
    out = []
    if row["precision"] in ("fp8", "mxfp8"):
        out.append(f"{row['precision'].upper()} training is not modelled (bf16 only)")
    if is_moe(row):
        if "MLA" in row["model_family"]:
            out.append("mixture-of-experts model with multi-head latent attention (DeepSeek-V3): "
                       "MLA is not modelled (ModelSpec.check_step_modelled; issue 26)")
        if (row["tp"] or "1") != "1":
            out.append("mixture-of-experts model with tp > 1: not modelled (expert tensor "
                       "parallelism; issue 26)")
        out.append("mixture-of-experts model: predicted apart by `python -m "
                   "scripts.validate_moe` where it can be (tp = 1 with a shipped "
                   "config.json), listed there with its reasons otherwise")
    if _schedule(row) is None:
        out.append(f"pipeline schedule {row['pp_schedule']!r} is not modelled (gpipe, 1f1b, "
                   "interleaved-1f1b)")
    if row["gpu"] not in GPU_MAP:
        out.append(f"GPU {row['gpu']!r} has no catalog entry")
    if not row["num_gpus"]:
        out.append("GPU count not published")
    if row["source_id"] not in SOURCE_RULES:
        if not out:
            out.append("no framework rules for this source")
    elif SOURCE_RULES[row["source_id"]].framework == "megatron" and not row["tp"]:
        out.append("layout (TP/PP/DP) not published")
    return out


_SCHEDULES = {"": "1f1b", "1f1b": "1f1b", "gpipe": "gpipe",
              "interleaved 1f1b": "interleaved-1f1b", "interleaved-1f1b": "interleaved-1f1b"}
"""Published schedule names -> ParallelLayout.pp_schedule (others are not modelled)."""


def _schedule(row: Mapping[str, str]) -> str | None:
    """The row's pipeline schedule (interleaved when it names virtual stages > 1; Megatron's
    default is 1F1B); None when it is one ShardMeter does not model (DualPipe, zero bubble)."""
    name = _SCHEDULES.get(row["pp_schedule"].strip().lower())
    if name == "1f1b" and (_int(row, "virtual_stages") or 1) > 1:
        return "interleaved-1f1b"
    return name


def pipeline_fields(row: Mapping[str, str]) -> dict[str, Any]:
    """The pipeline fields of the row's ParallelLayout."""
    pp = _int(row, "pp") or 1
    v = _int(row, "virtual_stages") or 1
    return {"pp": pp, "virtual_stages": v if pp > 1 else 1,
            "pp_schedule": (_schedule(row) or "1f1b") if pp > 1 else "1f1b"}


def _layout(row: Mapping[str, str], rules: SourceRules, assumptions: list[str],
            ) -> tuple[ParallelLayout, int, str]:
    """The row's ParallelLayout, its data-parallel degree and the recipe's accumulation mode."""
    gpus = int(row["num_gpus"])
    tp, cp = _int(row, "tp") or 1, _int(row, "cp") or 1
    pipe = pipeline_fields(row)
    pp = pipe["pp"]
    if rules.framework == "megatron":
        dp = gpus // (tp * cp * pp)
        if dp * tp * cp * pp != gpus or (row["dp"] and int(row["dp"]) != dp):
            raise UserInputError(f"{row['run_id']}: DP = {gpus}/(tp {tp} x cp {cp} x pp {pp}) "
                                 f"is not {row['dp'] or 'an integer'}")
        sp = _setting(row, "sequence_parallel", rules, assumptions)
        sp = sp if isinstance(sp, bool) else sp == "yes"
        async_tp = bool(rules.defaults.get("async_tp", (False, ""))[0])
        if async_tp:
            assumptions.append(f"async_tp True: {rules.defaults['async_tp'][1]}")
        return (ParallelLayout(dp_shard=1, dp_replicate=dp, tp=tp, cp=cp,
                               sequence_parallel=sp or tp == 1, async_tp=async_tp and tp > 1,
                               **pipe),
                dp, "no_sync")
    if rules.framework == "torchtitan":
        shard = int(row["dp_shard"])
        if shard * tp * cp * pp != gpus:
            raise UserInputError(f"{row['run_id']}: dp_shard {shard} x tp {tp} x cp {cp} x pp "
                                 f"{pp} is not {gpus} GPUs")
        return (ParallelLayout(dp_shard=shard, tp=tp, cp=cp, sequence_parallel=True,
                               async_tp="async TP" in row["framework"], **pipe),
                shard, "reduce_scatter")
    # fms-fsdp: FSDP1 FULL_SHARD over every GPU, or HYBRID_SHARD: shard in a node, replicate
    if "(HSDP)" in row["framework"]:
        nodes = gpus // GPUS_PER_NODE
        layout = ParallelLayout(dp_shard=GPUS_PER_NODE, dp_replicate=nodes)
        assumptions.append(f"HSDP: dp_shard {GPUS_PER_NODE} (a node) x dp_replicate {nodes}")
        return layout, gpus, "reduce_scatter"
    return ParallelLayout(dp_shard=gpus), gpus, "reduce_scatter"


def published_metric(row: Mapping[str, str], metric: str = "tokens") -> tuple[float, str]:
    """(tokens/s/GPU, how it is read) or (0, why none); `metric` is the source's
    `SourceRules.metric` (a FLOP_CONVENTIONS key reads published TFLOP/s per GPU). The one
    reading of a published row's figure (layouts, FP8 and MoE rows)."""
    gpus = int(row["num_gpus"])
    if row["tokens_per_s_per_gpu"]:
        return float(row["tokens_per_s_per_gpu"]), "published tokens/s/GPU"
    step, batch, seq = _float(row, "step_time_s"), _int(row, "global_batch_seqs"), \
        _int(row, "seq_len")
    if step and batch and seq:
        return batch * seq / step / gpus, "S x global batch / published step time / GPUs"
    tflops = _float(row, "tflops_per_gpu")
    if tflops and metric in FLOP_CONVENTIONS:
        flops, text = FLOP_CONVENTIONS[metric]
        return tflops * 1e12 / flops(row), f"published TFLOP/s/GPU / ({text})"
    return 0.0, ("no tokens/s/GPU, step time with global batch, or TFLOP/s with a known FLOP "
                 "convention published")


def plan_row(row: Mapping[str, str]) -> RowPlan:
    """The workload of one published row under the rules, or the reasons there is none."""
    def refused(*why: str) -> RowPlan:
        return RowPlan(run_id=row["run_id"], source_id=row["source_id"], model=row["model"],
                       reasons=tuple(r for r in why if r))

    reasons = _not_expressible(row)
    if reasons:
        return refused(*reasons)
    rules = SOURCE_RULES[row["source_id"]]
    model_name, config, why = _model(row)
    published, basis = published_metric(row, rules.metric)
    if why or not published:
        return refused(why, "" if published else basis)
    assumptions: list[str] = []
    seq = int(_setting(row, "seq_len", rules, assumptions))
    micro = int(_setting(row, "micro_batch", rules, assumptions))
    ac = _ac_name(row, rules, assumptions)
    layout, dp, accum_mode = _layout(row, rules, assumptions)
    gpus = int(row["num_gpus"])
    batch = _int(row, "global_batch_seqs")
    accum = 1
    if batch is not None:
        accum = batch // (dp * micro)
        if accum < 1 or accum * dp * micro != batch:
            return refused(f"global batch {batch} is not a multiple of DP {dp} x micro-batch "
                           f"{micro}")
    elif rules.framework == "megatron":
        return refused("global batch not published")
    if layout.pp > 1:
        try:
            check_schedule(layout.pp_schedule, layout.pp, layout.virtual_stages, accum)
        except UserInputError as err:
            return refused(f"{accum} micro-batches per step do not run its schedule: "
                           f"{err.message}")
    recipe = DEFAULT_RECIPE.with_overrides(
        name=f"published:{rules.framework}", ac=ac, accum_mode=accum_mode, parallel=layout,
        reduce_dtype="bf16" if rules.framework == "fms" else DEFAULT_RECIPE.reduce_dtype)
    kind = "layout" if (layout.tp, layout.cp, layout.dp_replicate, layout.pp) != (1, 1, 1, 1) \
        else \
        "fsdp-reference"
    return RowPlan(run_id=row["run_id"], source_id=row["source_id"], model=row["model"],
                   kind=kind, model_name=model_name, model_config=config,
                   gpu=GPU_MAP[row["gpu"]], num_gpus=gpus, seq_len=seq, micro_batch=micro,
                   accum=accum, recipe=recipe, published_tokens_per_s_per_gpu=published,
                   metric_basis=basis, assumptions=tuple(assumptions))


# ---- predictions -------------------------------------------------------------------------------

def model_path(plan: RowPlan, config_dir: Path) -> str:
    """The model argument of the API / CLI: a catalog name, or the row's config.json written in
    `config_dir`."""
    if plan.model_config is None:
        return plan.model_name
    path = config_dir / plan.model_name
    path.write_text(json.dumps(plan.model_config, indent=1) + "\n")
    return str(path)


def workload_spec(plan: RowPlan, config_dir: Path) -> WorkloadSpec:
    """The `WorkloadSpec` `shardmeter predict` builds for the same settings."""
    nodes = max(1, plan.num_gpus // GPUS_PER_NODE)
    return WorkloadSpec(model_name=model_path(plan, config_dir), gpu_name=plan.gpu, nodes=nodes,
                        gpus_per_node=plan.num_gpus // nodes, seq_len=plan.seq_len,
                        micro_batch=plan.micro_batch, accum=plan.accum, recipe=plan.recipe)


def recipe_mapping(recipe: TrainingRecipe) -> dict[str, Any]:
    """The recipe as a recipe YAML (`--recipe FILE`): the fields that differ from torchtitan's
    and the whole layout."""
    base = DEFAULT_RECIPE.to_dict()
    mine = recipe.to_dict()
    out: dict[str, Any] = {"base": "torchtitan"}
    out.update({k: v for k, v in mine.items() if k not in ("outer", "parallel")
                and v != base[k]})
    out["parallel"] = recipe.parallel.to_dict()
    return out


def cli_args(plan: RowPlan, spec: WorkloadSpec, recipe_path: Path) -> list[str]:
    """`shardmeter` arguments that predict the same workload."""
    return ["predict", spec.model_name, "--gpu", spec.gpu_name, "--nodes", str(spec.nodes),
            "--gpus-per-node", str(spec.gpus_per_node), "--seq-len", str(spec.seq_len),
            "--micro-batch", str(spec.micro_batch), "--accum", str(spec.accum),
            "--recipe", str(recipe_path), "--format", "json"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RowResult:
    """A row's plan and, when predicted, ShardMeter's figures."""

    plan: RowPlan
    predicted_tokens_per_s_per_gpu: float | None = None
    step_time_s: float | None = None
    compute_busy_s: float | None = None
    """Compute-stream busy time of the step (contention included): step_time_s less the compute
    stream's idle time."""
    bound: str = ""
    layout: str = ""
    profile: str = ""
    command: tuple[str, ...] = ()
    p10_tokens_per_s_per_gpu: float | None = None
    """The 80 % interval's lower end that `shardmeter predict` prints (its record's
    `tokens_per_s_per_gpu_p10`, widened where the query lies beyond the residuals)."""
    p90_tokens_per_s_per_gpu: float | None = None
    """The printed 80 % interval's upper end."""
    interval_group: str = ""
    """The residual group that formed the interval (`interval_group`)."""
    interval_widened: tuple[str, ...] = ()
    """Why the printed interval was widened (`interval_widened`; empty: not widened)."""

    @property
    def error_pct(self) -> float | None:
        if self.predicted_tokens_per_s_per_gpu is None:
            return None
        return 100.0 * (self.predicted_tokens_per_s_per_gpu
                        / self.plan.published_tokens_per_s_per_gpu - 1.0)

    def printed_case(self) -> PrintedCase | None:
        """This run against the interval ShardMeter printed for it (None: not predicted)."""
        if self.predicted_tokens_per_s_per_gpu is None or self.p10_tokens_per_s_per_gpu is None \
                or self.p90_tokens_per_s_per_gpu is None:
            return None
        return PrintedCase(group=self.interval_group, source=self.plan.source_id,
                           case=self.plan.run_id,
                           measured=self.plan.published_tokens_per_s_per_gpu,
                           lower=self.p10_tokens_per_s_per_gpu,
                           upper=self.p90_tokens_per_s_per_gpu,
                           point=self.predicted_tokens_per_s_per_gpu,
                           widened=bool(self.interval_widened))

    @property
    def compute_only_error_pct(self) -> float | None:
        """The error if the step took only its compute (every collective hidden): how much of
        the error the compute model makes on its own (a diagnostic, not a prediction)."""
        if self.predicted_tokens_per_s_per_gpu is None or not self.compute_busy_s \
                or not self.step_time_s:
            return None
        fast = self.predicted_tokens_per_s_per_gpu * self.step_time_s / self.compute_busy_s
        return 100.0 * (fast / self.plan.published_tokens_per_s_per_gpu - 1.0)


def evaluate(plan: RowPlan, inputs: Path) -> RowResult:
    """Predict one planned row through `perfmodel.api.predict` (its config.json and recipe YAML
    written in `inputs`)."""
    if not plan.predicted:
        return RowResult(plan=plan)
    spec = workload_spec(plan, inputs)
    recipe_path = inputs / f"{plan.run_id}.recipe.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe_mapping(plan.recipe), sort_keys=False))
    p = predict(spec)
    busy = float(p.record["inner_step_time_s"]) - float(p.record["compute_idle_s"])
    return RowResult(plan=plan, predicted_tokens_per_s_per_gpu=float(
        p.record["tokens_per_s_per_gpu"]), step_time_s=p.step_time_s, compute_busy_s=busy,
                     bound=p.bound,
                     p10_tokens_per_s_per_gpu=float(p.record["tokens_per_s_per_gpu_p10"]),
                     p90_tokens_per_s_per_gpu=float(p.record["tokens_per_s_per_gpu_p90"]),
                     interval_group=str(p.record["interval_group"]),
                     interval_widened=tuple(p.record["interval_widened"]),
                     layout=p.workload.recipe.parallel.describe(), profile=p.workload.profile.name,
                     command=("shardmeter", *cli_args(plan, spec, recipe_path),
                              # a run the memory model says does not fit: predict exits 1
                              # without the flag, and the published run did run
                              *(() if p.record["fits"] else ("--allow-oom",))))


def evaluate_all(rows: Sequence[Mapping[str, str]], inputs: Path) -> list[RowResult]:
    return [evaluate(plan_row(row), inputs) for row in rows]


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceSummary:
    """Per source: the layout rows' MAPE and signed median error, the FSDP references apart."""

    source_id: str
    rows: int
    layout_rows: int
    mape_pct: float | None
    median_error_pct: float | None
    reference_rows: int
    reference_mape_pct: float | None
    not_predicted: int


def mape_pct(errors: Sequence[float]) -> float | None:
    """Mean absolute percentage error of signed % errors (None: no error); the one formula of
    validate_layouts, validate_fp8 and validate_moe."""
    return statistics.fmean(abs(e) for e in errors) if errors else None


def summarise(results: Sequence[RowResult]) -> list[SourceSummary]:
    out = []
    for source in dict.fromkeys(r.plan.source_id for r in results):
        mine = [r for r in results if r.plan.source_id == source]
        layout = [e for r in mine if r.plan.kind == "layout" and (e := r.error_pct) is not None]
        ref = [e for r in mine if r.plan.kind == "fsdp-reference"
               and (e := r.error_pct) is not None]
        out.append(SourceSummary(
            source_id=source, rows=len(mine), layout_rows=len(layout), mape_pct=mape_pct(layout),
            median_error_pct=statistics.median(layout) if layout else None,
            reference_rows=len(ref), reference_mape_pct=mape_pct(ref),
            not_predicted=sum(not r.plan.predicted for r in mine)))
    return out


# ---- output -------------------------------------------------------------------------------------

def fmt_pct(value: float | None, digits: int = 1) -> str:
    """A figure of the validation tables ('–' for none)."""
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(results: Sequence[RowResult]) -> str:
    summary = summarise(results)
    layout = [e for r in results if r.plan.kind == "layout" and (e := r.error_pct) is not None]
    parts = ["## Published parallel-layout runs: ShardMeter's tokens/s/GPU against the published",
             f"MAPE over the {len(layout)} layout rows: {fmt_pct(mape_pct(layout))} % (goal <= "
             f"{GOAL_MAPE_PCT:.0f} % per source); signed median "
             f"{fmt_pct(statistics.median(layout) if layout else None)} % (+ = predicted faster).",
             markdown_table(
                 ["source", "rows", "layout rows predicted", "MAPE %", "signed median %",
                  "FSDP references", "reference MAPE %", "not predicted"],
                 [[s.source_id, s.rows, s.layout_rows, fmt_pct(s.mape_pct),
                   fmt_pct(s.median_error_pct),
                   s.reference_rows, fmt_pct(s.reference_mape_pct), s.not_predicted]
                  for s in summary]),
             "### Predicted rows",
             markdown_table(
                 ["run", "model", "kind", "GPU (catalog)", "GPUs", "layout", "S", "m", "k", "ac",
                  "published tok/s/GPU", "basis", "predicted", "error %",
                  "compute-only error %", "bound"],
                 [[r.plan.run_id, r.plan.model, r.plan.kind, r.plan.gpu, r.plan.num_gpus,
                   r.layout, r.plan.seq_len, r.plan.micro_batch, r.plan.accum, r.plan.recipe.ac,
                   f"{r.plan.published_tokens_per_s_per_gpu:.5g}", r.plan.metric_basis,
                   f"{r.predicted_tokens_per_s_per_gpu:.5g}", fmt_pct(r.error_pct),
                   fmt_pct(r.compute_only_error_pct), r.bound]
                  for r in results if r.predicted_tokens_per_s_per_gpu is not None]),
             "### Settings filled by the rules (per predicted row)",
             markdown_table(["run", "rules applied"],
                            [[r.plan.run_id, "; ".join(r.plan.assumptions) or "–"]
                             for r in results if r.plan.predicted]),
             "### Rows not predicted",
             markdown_table(["run", "model", "why"],
                            [[r.plan.run_id, r.plan.model, "; ".join(r.plan.reasons)]
                             for r in results if not r.plan.predicted])]
    return "\n\n".join(parts) + "\n"


def records(results: Sequence[RowResult], inputs: str = "") -> list[dict[str, Any]]:
    """One flat record per row (the CSV and the JSON `rows`); a non-empty `inputs` (a temporary
    folder) is written INPUTS in the commands: rerun with --write-inputs to get the files."""
    out = []
    for r in results:
        p = r.plan
        out.append({"run_id": p.run_id, "source_id": p.source_id, "model": p.model,
                    "status": "predicted" if p.predicted else "not predicted",
                    "reasons": "; ".join(p.reasons), "kind": p.kind, "gpu": p.gpu,
                    "num_gpus": p.num_gpus or None, "layout": r.layout,
                    "seq_len": p.seq_len or None, "micro_batch": p.micro_batch or None,
                    "accum": p.accum or None, "ac": p.recipe.ac if p.predicted else "",
                    "published_tokens_per_s_per_gpu": p.published_tokens_per_s_per_gpu or None,
                    "metric_basis": p.metric_basis,
                    "predicted_tokens_per_s_per_gpu": r.predicted_tokens_per_s_per_gpu,
                    "error_pct": r.error_pct, "compute_only_error_pct": r.compute_only_error_pct,
                    "p10_tokens_per_s_per_gpu": r.p10_tokens_per_s_per_gpu,
                    "p90_tokens_per_s_per_gpu": r.p90_tokens_per_s_per_gpu,
                    "interval_group": r.interval_group,
                    "interval_widened": "; ".join(r.interval_widened),
                    "step_time_s": r.step_time_s, "compute_busy_s": r.compute_busy_s,
                    "bound": r.bound,
                    "profile": r.profile, "rules_applied": "; ".join(p.assumptions),
                    "command": " ".join(r.command).replace(inputs, "INPUTS") if inputs
                    else " ".join(r.command)})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", dest="csv_path", type=Path, help="Write one row per run here.")
    parser.add_argument("--json", dest="json_path", type=Path,
                        help="Write the per-source summary and every row here.")
    parser.add_argument("--write-inputs", type=Path, default=None,
                        help="Keep each row's config.json and recipe YAML in this folder (the "
                             "commands in --json / --csv refer to them); default: a temporary "
                             "folder, written INPUTS in the commands.")
    parser.add_argument("--source", action="append", default=None,
                        help="Only rows of this source_id (repeatable).")
    args = parser.parse_args(argv)
    rows = [r for r in load_runs() if args.source is None or r["source_id"] in args.source]
    with tempfile.TemporaryDirectory() as tmp:
        inputs = args.write_inputs or Path(tmp)
        inputs.mkdir(parents=True, exist_ok=True)
        results = evaluate_all(rows, inputs)
    print(markdown(results), end="")
    table = records(results, "" if args.write_inputs else tmp)
    if args.csv_path:
        with args.csv_path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    if args.json_path:
        args.json_path.write_text(json.dumps(json_ready({
            "goal_mape_pct": GOAL_MAPE_PCT,
            "sources": [vars_of(s) for s in summarise(results)],
            "rows": table}), indent=1) + "\n")
    return 0


def vars_of(summary: SourceSummary) -> dict[str, Any]:
    return {f: getattr(summary, f) for f in SourceSummary.__dataclass_fields__}


if __name__ == "__main__":
    sys.exit(main())
