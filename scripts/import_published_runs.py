#!/usr/bin/env python3
"""Build catalogs/published/llm-foundry.csv from the llm-foundry benchmark tables.

    .venv/bin/python -m scripts.import_published_runs           # (re)write the CSVs
    .venv/bin/python -m scripts.import_published_runs --check   # exit 1 if a CSV is stale

Input: catalogs/published/source/llm-foundry-benchmarking-README.md, a verbatim excerpt of
mosaicml/llm-foundry scripts/train/benchmarking/README.md at commit SOURCE_COMMIT (its H100 80GB
BF16, A100 80GB and A100 40GB tables). Every row is parsed, never typed, and cross-checked:

* Throughput (T/s) / #GPUs equals Throughput (T/s/GPU) up to the table's integer rounding;
* GlobalBatchSize (T) = GlobalBatchSize x SeqLen;
* MFU recomputed with the README's formula from NumParams, SeqLen and T/s/GPU (dense bf16 peak
  of catalogs/gpus.csv) matches the published MFU within 1 % (relative);
* MicroBatchSize x GradAccum x #GPUs = GlobalBatchSize;
* NumParams equals the parameter count of the MPT dimensions (learned positional embedding of
  SeqLen x d_model, biases, LayerNorm with bias, tied LM head: the benchmark models' layout),
  so the model dimensions below are confirmed by the published parameter count.

A failed check stops the import (a copying error in the snapshot cannot go unnoticed).

Second input, VALIDATION ONLY (never fitted to): catalogs/published/source/
torchtitan-docs-performance.md, a verbatim excerpt of pytorch/torchtitan docs/performance.md at
TT_COMMIT (FSDP2 on 64 A100 80GB: Llama 3 8B/70B at S=8192, Llama 2 13B/70B at S=4096), written
to catalogs/published/validation-torchtitan.csv. Its MFU column is recomputed from the Llama
dimensions (torchtitan's 6·N + 12·L·d·S FLOPs per token) as a check; 'selective op' rows train
op-sac and 'selective layer' rows layer:2 (`TT_AC`).
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
import re
import sys
from pathlib import Path

from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.catalog import get_gpu
from perfmodel.spec.formulas import six_n_flops_per_token

ROOT = Path(__file__).resolve().parent.parent


SOURCE = ROOT / "catalogs" / "published" / "source" / "llm-foundry-benchmarking-README.md"
OUT = ROOT / "catalogs" / "published" / "llm-foundry.csv"
SOURCE_REPO = "mosaicml/llm-foundry"
SOURCE_PATH = "scripts/train/benchmarking/README.md"
SOURCE_COMMIT = "061f2c7ce64e655100286584a7629e2a09f827ba"
TABLES = {  # section title in the README -> catalog GPU, interconnect as published
    "H100 80GB BF16": ("H100-SXM5-80GB", "not stated"),
    "A100 80GB with 1600 Gbps node-node interconnect (RoCE)": ("A100-SXM4-80GB",
                                                              "1600 Gbps RoCE node-node"),
    "A100 40GB with 1600 Gbps node-node interconnect (RoCE)": ("A100-SXM4-40GB",
                                                              "1600 Gbps RoCE node-node"),
}
# MPT dimensions (d_model, n_layers, n_heads) of scripts/train/yamls/pretrain/mpt-*.yaml, as in
# ../shared/data/published_fsdp_runs.csv; expansion ratio 4, vocabulary 50368. NumParams checks
# them.
MPT_DIMS = {"125m": (768, 12, 12), "350m": (1024, 24, 16), "760m": (1536, 24, 12),
            "1b": (2048, 24, 16), "3b": (2560, 32, 32), "7b": (4096, 32, 32),
            "13b": (5120, 40, 40), "30b": (7168, 48, 64), "70b": (8192, 80, 64)}
VOCAB = 50368
GPUS_PER_NODE = 8
COLUMNS = ["source_table", "model", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
           "intermediate_size", "vocab_size", "gpu", "gpu_published", "interconnect",
           "num_gpus", "nodes", "gpus_per_node", "seq_len", "micro_batch", "accum_steps",
           "global_batch", "activation_checkpointing", "precision", "mp_mode", "pure_bf16",
           "sharding", "tokens_per_s", "tokens_per_s_per_gpu", "mfu_pct", "hfu_pct",
           "num_params", "source_repo", "source_path", "source_commit", "source_url"]

TT_SOURCE = ROOT / "catalogs" / "published" / "source" / "torchtitan-docs-performance.md"
TT_OUT = ROOT / "catalogs" / "published" / "validation-torchtitan.csv"
TT_REPO, TT_PATH = "pytorch/torchtitan", "docs/performance.md"
TT_COMMIT = "041336434916bdc0f88c1f89fda176fd3c2092e4"
# (section, size) -> (name, d_model, layers, heads, kv heads, intermediate, vocab, seq_len): Llama 3
# 8B as catalogs/models.csv Llama-3-8B, Llama 3 70B with Llama-3.1-70B's dimensions (same
# architecture), Llama 2 13B / 70B from their config.json; the MFU check confirms each.
TT_MODELS = {
    ("Llama 3", "8B"): ("Llama-3-8B", 4096, 32, 32, 8, 14336, 128256, 8192),
    ("Llama 3", "70B"): ("Llama-3-70B", 8192, 80, 64, 8, 28672, 128256, 8192),
    ("Llama 2", "13B"): ("Llama-2-13B", 5120, 40, 40, 40, 13824, 32000, 4096),
    ("Llama 2", "70B"): ("Llama-2-70B", 8192, 80, 64, 8, 28672, 32000, 4096),
}
TT_AC = {"no": "none", "selective op": "op-sac", "selective layer": "layer:2", "full": "full"}
"""torchtitan's AC column -> CheckpointPolicy. 'selective layer' is torchtitan's layer SAC; the
table does not state its interval, so every 2nd layer (the `selective_ac_option = "2"` its
configs document) is an assumption of this import."""

logger = logging.getLogger("import_published_runs")


class ImportCheckError(RuntimeError):
    """A parsed row fails a consistency check."""


def mpt_params(hidden: int, layers: int, seq_len: int) -> int:
    """Parameters of the benchmarked MPT layout: 12h^2 + 13h per block (q/k/v/o and 4h MLP with
    biases, two LayerNorms with bias), tied embedding V*h, learned positions S*h, final norm 2h."""
    return layers * (12 * hidden * hidden + 13 * hidden) + (VOCAB + seq_len) * hidden + 2 * hidden


def parse_tables(text: str) -> list[tuple[str, dict[str, str]]]:
    """(section title, row as header -> cell) for every table row of the known sections."""
    rows: list[tuple[str, dict[str, str]]] = []
    section, header = "", None
    for line in text.splitlines():
        if line.startswith("## "):
            section, header = line[3:].strip(), None
            continue
        if section not in TABLES or not line.strip().startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif set(cells) <= {"---"}:
            continue
        else:
            names = list(header)
            if len(cells) == len(names) + 1 and "Model TFLOP" not in names:
                # The A100 40GB table's header lacks the 'Model TFLOP' column its rows carry.
                names.insert(names.index("HFU") + 1, "Model TFLOP")
            if len(cells) != len(names):
                raise ImportCheckError(
                    f"{section}: row has {len(cells)} cells, header {len(names)}"
                )
            rows.append((section, dict(zip(names, cells, strict=True))))
    return rows


def _peak_flops(gpu: str) -> float:

    return get_gpu(gpu).bf16_flops_per_s


def convert(section: str, raw: dict[str, str]) -> dict[str, object]:
    """One CSV row, after the consistency checks."""
    gpu, interconnect = TABLES[section]
    name = raw["Model"]
    hidden, layers, heads = MPT_DIMS[name]
    seq, gpus = int(raw["SeqLen (T)"]), int(raw["# GPUs"])
    tps, tps_gpu = int(raw["Throughput (T/s)"]), int(raw["Throughput (T/s/GPU)"])
    gbs, mfu = int(raw["GlobalBatchSize"]), float(raw["MFU"])
    params = int(raw["NumParams"])
    where = f"{section}: {name} S={seq} GPUs={gpus}"
    if abs(tps / gpus - tps_gpu) > 1.0:
        raise ImportCheckError(f"{where}: T/s {tps} / {gpus} != T/s/GPU {tps_gpu}")
    if int(raw["GlobalBatchSize (T)"]) != gbs * seq:
        raise ImportCheckError(f"{where}: global tokens != batch x SeqLen")
    if mpt_params(hidden, layers, seq) != params:
        raise ImportCheckError(f"{where}: NumParams {params} != MPT layout "
                               f"{mpt_params(hidden, layers, seq)}")
    flops_per_token = six_n_flops_per_token(params, layers, hidden, seq)
    mfu_check = 100 * tps_gpu * flops_per_token / _peak_flops(gpu)
    if abs(mfu_check / mfu - 1) > 0.01:
        raise ImportCheckError(f"{where}: MFU {mfu} but recomputed {mfu_check:.2f}")
    if int(raw["MicroBatchSize"]) * int(raw["GradAccum"]) * gpus != gbs:
        raise ImportCheckError(f"{where}: micro-batch x accumulation x GPUs != global batch")
    if gpus % GPUS_PER_NODE:
        raise ImportCheckError(f"{where}: {gpus} GPUs is not whole 8-GPU nodes")
    ac = {"True": "full", "False": "none"}[raw["Activation Checkpointing"]]
    return {
        "source_table": section, "model": f"MPT-{name.upper()}",
        "hidden_size": hidden, "num_layers": layers, "num_heads": heads, "num_kv_heads": heads,
        "intermediate_size": 4 * hidden, "vocab_size": VOCAB, "gpu": gpu,
        "gpu_published": raw["GPU"], "interconnect": interconnect, "num_gpus": gpus,
        "nodes": gpus // GPUS_PER_NODE, "gpus_per_node": GPUS_PER_NODE, "seq_len": seq,
        "micro_batch": int(raw["MicroBatchSize"]), "accum_steps": int(raw["GradAccum"]),
        "global_batch": gbs, "activation_checkpointing": ac, "precision": raw["Precision"],
        "mp_mode": raw["MP Mode"], "pure_bf16": raw["MP Mode"] == "PURE",
        "sharding": raw["Sharding Strategy"], "tokens_per_s": tps, "tokens_per_s_per_gpu": tps_gpu,
        "mfu_pct": mfu, "hfu_pct": float(raw["HFU"]), "num_params": params,
        "source_repo": SOURCE_REPO, "source_path": SOURCE_PATH, "source_commit": SOURCE_COMMIT,
        "source_url": f"https://github.com/{SOURCE_REPO}/blob/{SOURCE_COMMIT}/{SOURCE_PATH}",
    }


def check_shared(rows: list[dict[str, object]]) -> int:
    """Every row of ../shared/data/published_fsdp_runs.csv is among the imported rows."""
    shared = ROOT.parent / "shared" / "data" / "published_fsdp_runs.csv"
    if not shared.is_file():
        logger.info("%s not found: skipping the cross-check with the shared rows", shared)
        return 0
    keys = {(r["gpu"], r["hidden_size"], r["seq_len"], r["num_gpus"], r["micro_batch"],
             r["tokens_per_s_per_gpu"]) for r in rows}
    n = 0
    for s in csv.DictReader(shared.open()):
        key = (s["gpu"], int(s["hidden_size"]), int(s["seq_len"]),
               int(s["nodes"]) * int(s["gpus_per_node"]), int(s["micro_batch"]), int(s["measured"]))
        if key not in keys:
            raise ImportCheckError(f"shared row {key} is not in the imported tables")
        n += 1
    return n


def llama_params(hidden: int, layers: int, heads: int, kv: int, inter: int, vocab: int) -> int:
    """Llama layout: q/k/v/o without bias (GQA), SwiGLU MLP, two RMSNorms, untied LM head."""
    return ModelSpec(name="llama", hidden_size=hidden, num_layers=layers, num_heads=heads,
                     num_kv_heads=kv, intermediate_size=inter, vocab_size=vocab).total_params


def torchtitan_rows(text: str) -> list[dict[str, object]]:
    rows, section = [], ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = "Llama 3" if "Llama 3" in line else "Llama 2" if "Llama 2" in line else ""
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not section or len(cells) != 5 or cells[0] in ("Model size", "-----"):
            continue
        size, batch, ac, wps, mfu = cells
        if ac not in TT_AC:
            logger.info("skipping %s %s '%s' (not modelled)", section, size, ac)
            continue
        name, h, n_layers, heads, kv, inter, vocab, seq = TT_MODELS[(section, size)]
        mb = int(re.match(r"\d+", batch).group())
        params = llama_params(h, n_layers, heads, kv, inter, vocab)
        mfu_pct = float(mfu.rstrip("%"))
        check = (
            100 * int(wps) * six_n_flops_per_token(params, n_layers, h, seq)
            / _peak_flops("A100-SXM4-80GB")
        )
        if abs(check / mfu_pct - 1) > 0.01:
            raise ImportCheckError(
                f"torchtitan {section} {size} {ac}: MFU {mfu_pct} but {check:.2f}"
            )
        rows.append(
            {
                "source_table": f"{section} performance numbers",
                "model": name,
                "hidden_size": h,
                "num_layers": n_layers,
                "num_heads": heads,
                "num_kv_heads": kv,
                "intermediate_size": inter,
                "vocab_size": vocab,
                "gpu": "A100-SXM4-80GB",
                "gpu_published": "A100 (80GB)",
                "interconnect": "not stated",
                "num_gpus": 64,
                "nodes": 8,
                "gpus_per_node": 8,
                "seq_len": seq,
                "micro_batch": mb,
                "accum_steps": 1,
                "global_batch": 64 * mb,
                "activation_checkpointing": TT_AC[ac],
                "precision": "bf16",
                "mp_mode": "FSDP2 MixedPrecisionPolicy",
                "pure_bf16": False,
                "sharding": "FSDP2",
                "tokens_per_s": 64 * int(wps),
                "tokens_per_s_per_gpu": int(wps),
                "mfu_pct": mfu_pct,
                "hfu_pct": "",
                "num_params": params,
                "source_repo": TT_REPO,
                "source_path": TT_PATH,
                "source_commit": TT_COMMIT,
                "source_url": f"https://github.com/{TT_REPO}/blob/{TT_COMMIT}/{TT_PATH}",
                "layout": "llama",
            }
        )
    return rows


def _csv(rows: list[dict[str, object]], columns: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def build_validation() -> str:
    rows = torchtitan_rows(TT_SOURCE.read_text())
    logger.info("%d validation rows (torchtitan, never fitted)", len(rows))
    return _csv(rows, [*COLUMNS, "layout"])


def build() -> str:
    rows = [convert(section, raw) for section, raw in parse_tables(SOURCE.read_text())]
    matched = check_shared(rows)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    by_table = {t: sum(r["source_table"] == t for r in rows) for t in TABLES}
    logger.info("%d rows (%s); %d shared rows matched", len(rows),
                ", ".join(f"{t.split(' with')[0]}: {n}" for t, n in by_table.items()), matched)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        outputs = {OUT: build(), TT_OUT: build_validation()}
    except ImportCheckError as err:
        logger.error("import check failed: %s", err)
        return 1
    if args.check:
        stale = [p for p, text in outputs.items() if not p.is_file() or p.read_text() != text]
        for path in stale:
            logger.error("stale: %s (rerun python -m scripts.import_published_runs)", path)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.write_text(text)
        logger.info("wrote %s", path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
