#!/usr/bin/env python
"""Write catalogs/published/layout-runs.csv: published training-throughput measurements of
tensor-, context-, pipeline-parallel, HSDP, mixture-of-experts and FP8 runs (issue 23,
validation only: nothing is ever fitted to them).

Every value below is typed next to the source it was read in (the only hand step); an empty cell
means the source does not state it (never guessed), and where a value follows only from an
identity (DP = GPUs / (TP·PP·CP), tokens/s/GPU = S·GBS / step / GPUs) it is left empty and the
note says how to derive it. `python -m scripts.validate_layouts` decides which rows ShardMeter can
express and predicts them; catalogs/published/README.md ("Published parallel-layout runs") gives
each source's caveats and the rules for settings a row does not publish.

    .venv/bin/python -m scripts.build_layout_runs           # write the CSV
    .venv/bin/python -m scripts.build_layout_runs --check   # exit 1 when the CSV is stale
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "catalogs" / "published" / "layout-runs.csv"

COLUMNS = (
    "run_id", "source_id", "source_url", "source_title", "table_or_section", "as_of", "model",
    "params_b", "model_family", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
    "ffn_size", "vocab_size", "num_experts", "experts_per_token", "gpu", "num_gpus", "tp", "pp",
    "cp", "ep", "dp", "dp_shard", "dp_replicate", "virtual_stages", "pp_schedule",
    "sequence_parallel", "seq_len", "micro_batch", "global_batch_seqs", "global_batch_tokens",
    "activation_checkpointing", "precision", "torch_compile", "framework",
    "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu_pct", "step_time_s", "notes",
)
"""Columns of the CSV: identity, source (url, title, table, as_of), model, hardware, layout,
batch, recipe, the published metrics (exactly as published), notes."""

GH = "https://github.com/"
SOURCES: dict[str, tuple[str, str, str]] = {
    "narayanan2021": (
        "https://arxiv.org/abs/2104.04473 ; " + GH + "NVIDIA/Megatron-LM/blob/"
        "50a4b5fa0280a160cc1b03a1c15faddbc1b1da9a/images/cases_april2021.png",
        "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters "
        "Using Megatron-LM (+ Megatron-LM README table, Apr 2021)", "2021-04-08"),
    "mcore2024": (
        GH + "NVIDIA/Megatron-LM/blob/f2e5db402c44ae309aa6448bcb4ae87e8ae0f5f4/images/"
        "model_table.png",
        "NVIDIA Megatron-LM README, Performance Benchmarking (Megatron-Core r0.8.0, H100 weak "
        "scaling table)", "2024-07-15"),
    "korthikanti2022": (
        "https://arxiv.org/abs/2205.05198 ; " + GH + "NVIDIA/Megatron-LM/blob/"
        "2e90a342f5006a3e4f8cacf44002dbae0e10aa17/README.md",
        "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models",
        "2022-05-10"),
    "llama3_2024": ("https://arxiv.org/abs/2407.21783",
                    "Llama Team, AI @ Meta 2024, The Llama 3 Herd of Models", "2024-07-23"),
    "tt_h100_2412": (
        GH + "pytorch/torchtitan/blob/820504e20d1149fbf0b98c567af24c4b0433b22d/benchmarks/"
        "llama3_h100_202412_torchtitan.md",
        "torchtitan benchmarks: Llama 3.1 8B/70B/405B on H100, end of 2024 (torchtitan team)",
        "2025-01-30"),
    "tt_asynctp_2506": (
        GH + "pytorch/torchtitan/blob/2887250bbd9103d0bc997ea2efb3a525b5e5dbc0/benchmarks/"
        "asyncTP_llama3_h100_2025-06_torchtitan.md",
        "torchtitan benchmarks: async TP on Llama 3 8B/70B, H100, June 2025", "2025-06-16"),
    "tt_405b_2408": (
        GH + "pytorch/torchtitan/blob/3faaa1a0dee68ce028400e3dafd1735d152cb4f8/docs/"
        "performance.md",
        "torchtitan docs/performance.md, Llama 3.1 performance numbers (405B on 128 H100)",
        "2024-08-23"),
    "tt_trainy_h200": (
        GH + "pytorch/torchtitan/blob/cbccb387871a5e1f522c1e222c51ab88b03c0392/benchmarks/"
        "llama3-8b_h200_202506_trainy-whitefiber.md",
        "torchtitan benchmarks: Llama 3.1 8B on H200 (Trainy on WhiteFiber, June 2025)",
        "2025-07-11"),
    "tt_mxfp8_b200": (
        GH + "pytorch/torchtitan/blob/b3da1a2d84436016be650c3271d1a5f6380090a5/torchtitan/"
        "components/quantization/mxfp8.md ; " + GH + "pytorch/ao/blob/"
        "36027d82d1ad9949597ea16002ff4940374b1b94/docs/source/workflows/training.md",
        "torchtitan mxfp8.md / torchao docs: Training e2e benchmarks on NVIDIA B200 (Llama3-8b)",
        "2025-12-03"),
    "torchao_moe_scout": (
        GH + "pytorch/ao/blob/838dcebb13be7cd7b7ae5d1d8c4e674c89a5d7b8/torchao/prototype/"
        "moe_training/README.md",
        "torchao prototype/moe_training README: MXFP8 MoE training case study, Llama4 Scout on "
        "GB200", "2025-10-13"),
    "fms_fsdp": (
        GH + "foundation-model-stack/fms-fsdp/blob/5a296afe42f9932f590783cb053fa0f9384e01fc/"
        "README.md",
        "IBM foundation-model-stack fms-fsdp README: Training throughput benchmarks",
        "2024-05-09"),
    "olmo_core": (
        GH + "allenai/OLMo-core/blob/7e58d1289bc27103880e7a8382ad0847c35e04f7/README.md",
        "AllenAI OLMo-core README: throughput of official training scripts on H100",
        "2025-03-12"),
    "dgxc_2411": (
        GH + "NVIDIA/dgxc-benchmarking/tree/35a9aecc8d5b17d99d80f52f38c75ade0dbab7ae",
        "NVIDIA DGX Cloud Benchmarking recipes v24.11.1 (Expected Performance tables, DGX H100 "
        "EOS reference)", "2025-06-09"),
    "dgxc_2505": (
        GH + "NVIDIA/dgxc-benchmarking/blob/68eaf7e117bf16cb018861ce101e8f80925f74d8/"
        "deepseek_v3/pretraining/README.md",
        "NVIDIA DGX Cloud Benchmarking recipes v25.05: DeepSeek-V3 pre-training", "2025-06-10"),
    "mbridge_2511": (
        GH + "NVIDIA-NeMo/Megatron-Bridge/blob/067f987df03b8355b03192d88d70f1709fedf51a/docs/"
        "performance-summary-archive.md",
        "NVIDIA Megatron-Bridge performance summary archive, 25.11 NeMo container",
        "2025-12-04"),
    "mbridge_2606": (
        GH + "NVIDIA-NeMo/Megatron-Bridge/blob/067f987df03b8355b03192d88d70f1709fedf51a/docs/"
        "performance-summary-archive.md",
        "NVIDIA Megatron-Bridge performance summary archive, 26.06 NeMo container", "2026-07"),
    "mbridge_2608": (
        GH + "NVIDIA-NeMo/Megatron-Bridge/blob/067f987df03b8355b03192d88d70f1709fedf51a/docs/"
        "performance-summary.md",
        "NVIDIA Megatron-Bridge performance summary, 26.08 NeMo container", "2026-08-11"),
    "mbridge_2602": (
        GH + "NVIDIA-NeMo/Megatron-Bridge/blob/067f987df03b8355b03192d88d70f1709fedf51a/docs/"
        "performance-summary-archive.md",
        "NVIDIA Megatron-Bridge performance summary archive, 26.02 NeMo container", "2026-02-25"),
    "mbridge_260201": (
        GH + "NVIDIA-NeMo/Megatron-Bridge/blob/067f987df03b8355b03192d88d70f1709fedf51a/docs/"
        "performance-summary-archive.md",
        "NVIDIA Megatron-Bridge performance summary archive, 26.02.01 NeMo container",
        "2026-03-21"),
    "mbridge_2604": (
        GH + "NVIDIA-NeMo/Megatron-Bridge/blob/067f987df03b8355b03192d88d70f1709fedf51a/docs/"
        "performance-summary-archive.md",
        "NVIDIA Megatron-Bridge performance summary archive, 26.04 NeMo container", "2026-04-17"),
    "mbridge_260401": (
        GH + "NVIDIA-NeMo/Megatron-Bridge/blob/067f987df03b8355b03192d88d70f1709fedf51a/docs/"
        "performance-summary-archive.md",
        "NVIDIA Megatron-Bridge performance summary archive, 26.04.01 NeMo container",
        "2026-05-16"),
    "torchao_moe_b200": (
        GH + "pytorch/ao/blob/838dcebb13be7cd7b7ae5d1d8c4e674c89a5d7b8/torchao/prototype/"
        "moe_training/README.md",
        "torchao prototype/moe_training README: End-to-end training, Llama4 16e MoE layer vs "
        "bfloat16 baseline with TorchTitan (4xB200)", "2025-10-13"),
    "deepseek_v3": ("https://arxiv.org/abs/2412.19437",
                    "DeepSeek-AI 2024, DeepSeek-V3 Technical Report", "2024-12-27"),
    "llmfoundry_fp8": (
        GH + "mosaicml/llm-foundry/blob/495218376830947dce625efabc4d86be7c47cc45/scripts/train/"
        "benchmarking/README.md",
        "MosaicML llm-foundry benchmarking README, H100 80GB FP8 table", "2024-04-22"),
}
"""source_id -> (url, title, as_of: the date of the version read)."""


class Builder:
    """Collects rows in source order and numbers them per source."""

    def __init__(self) -> None:
        self.rows: list[dict[str, str]] = []
        self._count: dict[str, int] = {}

    def add(self, source_id: str, section: str, **values: Any) -> None:
        url, title, as_of = SOURCES[source_id]
        row = dict.fromkeys(COLUMNS, "")
        self._count[source_id] = self._count.get(source_id, 0) + 1
        row.update(run_id=f"{source_id}-{self._count[source_id]:02d}", source_id=source_id,
                   source_url=url, source_title=title, table_or_section=section,
                   as_of=str(values.pop("as_of", as_of)))
        for key, value in values.items():
            if key not in COLUMNS:
                raise KeyError(f"unknown column {key!r}")
            row[key] = "" if value is None else str(value)
        self.rows.append(row)


def _megatron(b: Builder) -> None:
    """Narayanan 2021, Megatron-Core 2024 and Korthikanti 2022 (NVIDIA Megatron-LM)."""
    # params, heads, hidden, layers, tp, pp, gpus, batch, TFLOP/s, % of peak, aggregate PFLOP/s
    nar = [(1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44, 4.4),
           (3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44, 8.8),
           (7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46, 18.2),
           (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43, 34.6),
           (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44, 70.8),
           (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45, 143.8),
           (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47, 227.1),
           (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50, 297.4),
           (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52, 410.2),
           (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52, 502.0)]
    for p, h, d, layers, tp, pp, g, batch, tflops, pct, agg in nar:
        b.add("narayanan2021", "Table 1 (paper) = README 'cases_april2021' table",
              model=f"GPT {p}B", params_b=p, model_family="GPT-3-style dense (Megatron)",
              hidden_size=d, num_layers=layers, num_heads=h, vocab_size=51200,
              gpu="A100-SXM4-80GB (Selene)", num_gpus=g, tp=tp, pp=pp, seq_len=2048,
              global_batch_seqs=batch, precision="", framework="Megatron-LM",
              tflops_per_gpu=tflops, mfu_pct=pct,
              notes=(f"README image gives model-parallel size {tp * pp} (=TP x PP), hidden, "
                     "layers, GPUs, batch, TFLOP/s, % of peak, aggregate "
                     f"{agg} PFLOP/s; heads and the TP/PP split are from Table 1 of the paper as "
                     "transcribed in three independent stored notes (ids 66766946069, "
                     "63236651303, 55320678230), all agreeing and consistent with the README's "
                     "MP size. 16-bit mixed precision, % of 312 TFLOP/s peak. FLOPs counted by "
                     "paper Eq.3 (GEMMs only, INCLUDING the extra recompute forward pass, i.e. "
                     "closer to HFU; full activation recompute used). Interleaved schedule / "
                     "microbatch size per row not given in the table. DP = num_gpus/(TP*PP) "
                     "(not published per row). tokens/s/GPU not published."))
    # params, heads, hidden, layers, tp, pp, dp, gpus, batch, TFLOP/s, MFU %, aggregate PFLOP/s
    mc = [(1.7, 16, 2048, 24, 1, 1, 48, 48, 192, 408.8, 41, 19.6),
          (7.1, 32, 4096, 30, 2, 1, 48, 96, 192, 465.9, 47, 44.7),
          (16, 48, 6144, 32, 4, 1, 48, 192, 192, 489.1, 49, 93.9),
          (32, 56, 7168, 48, 8, 1, 48, 384, 192, 459.6, 46, 176.5),
          (70, 64, 8192, 84, 8, 2, 48, 768, 384, 419.7, 42, 322.3),
          (119, 80, 10240, 92, 8, 4, 48, 1536, 768, 420.5, 43, 645.9),
          (177, 96, 12288, 96, 8, 6, 48, 2304, 1152, 432.8, 44, 997.2),
          (314, 128, 16384, 96, 8, 8, 48, 3072, 1536, 474.4, 48, 1457.4),
          (462, 144, 18432, 112, 8, 16, 48, 6144, 3072, 459.9, 47, 2825.6)]
    for p, h, d, layers, tp, pp, dp, g, batch, tflops, mfu, agg in mc:
        b.add("mcore2024", "README 'Performance Benchmarking' model table (images/model_table.png)",
              model=f"GPT {p}B", params_b=p, model_family="GPT dense (Megatron-Core)",
              hidden_size=d, num_layers=layers, num_heads=h, vocab_size=131072,
              gpu="H100 (variant not stated)", num_gpus=g, tp=tp, pp=pp, dp=dp, seq_len=4096,
              global_batch_seqs=batch, framework="Megatron-Core r0.8.0", tflops_per_gpu=tflops,
              mfu_pct=mfu,
              notes=(f"Aggregate {agg} PFLOP/s published. Precision not stated (MFU = TFLOP/s / "
                     "989 matches H100 dense BF16 peak). Comm overlap: --overlap-grad-reduce, "
                     "--overlap-param-gather, --tp-comm-overlap, PP overlap; end-to-end incl. "
                     "data loading/optimizer/logging. Microbatch, interleaving, SP, activation "
                     "checkpointing not stated. Image read from the repo at commit f2e5db4 "
                     "(still in README at d98e8a6, 2026-08)."))
    for g, mfu in [(96, 47), (4608, 42)]:
        b.add("mcore2024", "README 'Strong Scaling Results' text (+ images/strong_scaling.png)",
              model="GPT 177B (GPT-3 175B with 131072 vocab)", params_b=177,
              model_family="GPT dense (Megatron-Core)", hidden_size=12288, num_layers=96,
              num_heads=96, vocab_size=131072, gpu="H100 (variant not stated)", num_gpus=g,
              seq_len=4096, global_batch_seqs=1152, framework="Megatron-Core r0.8.0",
              mfu_pct=mfu,
              notes=("Text: 'strong scales the standard GPT-3 model (slightly more than 175 "
                     "billion parameters due to larger vocabulary size) from 96 H100 GPUs to "
                     "4,608 GPUs, using the same batch size of 1,152 sequences throughout ... "
                     "reduction in MFU from 47% to 42%.' Per-point TP/PP/DP not published (the "
                     "weak-scaling table uses TP8 PP6 DP48 for 177B at 2304 GPUs); intermediate "
                     "points only in the plot. Dims taken from the 177B weak-scaling table row."))
    # model, params, heads, hidden, layers, tp, pp, gpus, batch, micro, interleave, step (this
    # work), step (full recompute), MFU, HFU
    kor = [("22B", 22, 64, 6144, 48, 8, 1, 8, 4, 4, None, "1.10", 1.42, 41.5, 43.7),
           ("175B (GPT-3)", 175, 96, 12288, 96, 8, 8, 64, 64, 1, 3, 13.75, 18.13, 51.4, 52.8),
           ("530B (MT-NLG)", 530, 128, 20480, 105, 8, 35, 280, 280, 1, 3, 37.83, 49.05, 56.0,
            57.0),
           ("1T", 1000, 160, 25600, 128, 8, 64, 512, 512, 1, None, 71.49, 94.42, 56.3, 57.0)]
    for m, p, h, d, layers, tp, pp, g, batch, mb, vs, t_new, t_full, mfu, hfu in kor:
        b.add("korthikanti2022",
              "Table 5 (end-to-end, 'present work') with Table 3 configs; MFU/HFU also in "
              "Megatron-LM README (May 2022)",
              model=m, params_b=p, model_family="GPT-3-style dense (Megatron)", hidden_size=d,
              num_layers=layers, num_heads=h, vocab_size=51200, gpu="A100-SXM4-80GB",
              num_gpus=g, tp=tp, pp=pp, dp=1, virtual_stages=vs or "",
              pp_schedule="interleaved 1F1B" if vs else "", sequence_parallel="yes",
              seq_len=2048, micro_batch=mb, global_batch_seqs=batch,
              activation_checkpointing="selective", framework="Megatron-LM", mfu_pct=mfu,
              step_time_s=t_new,
              notes=(f"HFU {hfu}% (README table). Same config with FULL activation recompute: "
                     f"step time {t_full} s (Table 5). MFU/HFU from the primary Megatron-LM "
                     "README at 2e90a342 ('measured using a data parallel size of one'); configs "
                     "(heads, TP, PP, GPUs, batch, microbatch, interleave m=3 for 175B/530B) and "
                     "step times from stored transcriptions of the paper (ids 55271916660, "
                     "66591054521), which agree. Model FLOPs = 72*B*L*s*h^2*(1+s/(6h)+V/(12hL)) "
                     "per iteration (paper Eq.); A100 peak 312 TFLOP/s. Mixed (16-bit) "
                     "precision. tokens/s = batch*2048/step_time (not published)."))
    for ac, mfu, note in [("selective", 54.2, "sequence parallelism + selective recompute"),
                          ("full", 42.1, "full activation recompute baseline")]:
        b.add("korthikanti2022", "Abstract (530B on 2240 A100)", model="530B (MT-NLG)",
              params_b=530, model_family="GPT-3-style dense (Megatron)", hidden_size=20480,
              num_layers=105, num_heads=128, vocab_size=51200, gpu="A100-SXM4-80GB",
              num_gpus=2240, tp=8, pp=35, dp=8,
              sequence_parallel="yes" if ac == "selective" else "", seq_len=2048,
              activation_checkpointing=ac, framework="Megatron-LM", mfu_pct=mfu,
              notes=("Abstract: '530B ... on 2240 NVIDIA A100 GPUs, we achieve a MFU of 54.2%, "
                     "which is 29% faster than the 42.1% we achieve using recomputation' "
                     f"({note}). TP/PP/DP: a stored transcription says this is the Table 3 530B "
                     "layout (TP8, PP35) with 8-way data parallelism (2240 = 280 x 8); global "
                     "batch not given."))


L8 = dict(model="Llama 3.1 8B", params_b=8, model_family="Llama 3 dense (GQA)", hidden_size=4096,
          num_layers=32, num_heads=32, num_kv_heads=8, ffn_size=14336, vocab_size=128256)
L70 = dict(model="Llama 3.1 70B", params_b=70, model_family="Llama 3 dense (GQA)",
           hidden_size=8192, num_layers=80, num_heads=64, num_kv_heads=8, ffn_size=28672,
           vocab_size=128256)
L405 = dict(model="Llama 3.1 405B", params_b=405, model_family="Llama 3 dense (GQA)",
            hidden_size=16384, num_layers=126, num_heads=128, num_kv_heads=8, ffn_size=53248,
            vocab_size=128256)


def _llama3(b: Builder) -> None:
    """The Llama 3 paper, Table 4."""
    dp4 = (" DP for this row: v1 PDF text (stored copies ids 55567177796, 39822971701, "
           "70888892482) prints 4, which does not multiply out (8*16*16*4=8192); a stored note "
           "quoting arXiv v3 (id 70974299245) and other transcriptions print 8 "
           "(8*16*16*8=16384). 8 recorded.")
    for g, tp, cp, pp, dp, s, bdp, tflops, mfu, extra in [
            (8192, 8, 1, 16, 64, 8192, 32, 430, 43, ""),
            (16384, 8, 1, 16, 128, 8192, 16, 400, 41, ""),
            (16384, 8, 16, 16, 8, 131072, 16, 380, 38, dp4)]:
        b.add("llama3_2024",
              "Section 3.3.2, Table 4 'Scaling configurations and MFU for each stage of Llama 3 "
              "405B pre-training'", **L405,
              gpu="H100-SXM5-80GB (700 W, HBM3; Grand Teton, RoCE 400 Gb/s)", num_gpus=g,
              tp=tp, pp=pp, cp=cp, dp=dp, seq_len=s, precision="bf16",
              framework="Meta internal (4D parallelism; DP = FSDP)", tflops_per_gpu=tflops,
              mfu_pct=mfu,
              notes=(f"Published Batch size/DP = {bdp} sequences; Tokens/Batch published as "
                     "'16M'. BF16 MFU (Chowdhery et al. definition). Dims: paper Table 3 (vocab "
                     "128,000 in paper; 128256 per config.json in shared/data/models.csv)."
                     + extra))


TT_H100 = "H100 96GB HBM2e (Grand Teton, 500 W power limit, 400 Gb/s RDMA per GPU)"
TT_NOTE = ("TPS/GPU read at the 90th iteration. torchtitan 'tps' = tokens per second per device "
           "(torchtitan/components/metrics.py). Versions: torch 1963fc8 (2024-12-23), torchao "
           "eab345c, torchtitan 9dec370 (2024-12-26).")
TT_SEQ_NOTE = (" Sequence length not stated in the table; train_configs/llama3_*b.toml at "
               "torchtitan 9dec370 set seq_len = 8192 (overrides unknown).")


def _torchtitan(b: Builder) -> None:
    """torchtitan's benchmark pages (end of 2024, async TP June 2025, 405B August 2024, H200
    June 2025, MXFP8 B200 December 2025) and torchao's MoE case study."""
    for tech, g, gb, tps, mem, comp, prec, tab in [
            ("FSDP", 8, 16, 5762, 82.4, "no", "bf16", "Table 1"),
            ("FSDP + torch.compile", 8, 16, 6667, 77.0, "yes", "bf16", "Table 1"),
            ("FSDP + torch.compile + Float8", 8, 16, 8532, 76.8, "yes", "fp8", "Table 1"),
            ("FSDP", 128, 256, 5605, 67.0, "no", "bf16", "Table 3"),
            ("FSDP + torch.compile", 128, 256, 6514, 62.0, "yes", "bf16", "Table 3"),
            ("FSDP + torch.compile + Float8", 128, 256, 8380, 61.8, "yes", "fp8", "Table 3")]:
        what = ("Float8 on nn.Linear (torchao). " if prec == "fp8"
                else "Only FSDP (no TP/PP); included as H100 reference. ")
        b.add("tt_h100_2412", f"{tab}: 1D parallelism (FSDP), Llama 3.1 8B, {g} GPUs", **L8,
              gpu=TT_H100, num_gpus=g, dp_shard=g, micro_batch=2, global_batch_seqs=gb,
              activation_checkpointing="selective", precision=prec, torch_compile=comp,
              framework="torchtitan (FSDP2)", tokens_per_s_per_gpu=tps,
              notes=(f"Technique '{tech}'; local batch 2; memory {mem} GiB. " + what
                     + "Doc: 8B without Float8 on 8/128 GPUs reaches 33-39% MFU (peak taken as "
                     "H100 SXM although GPUs are HBM2e/500 W). " + TT_NOTE + TT_SEQ_NOTE))
    for fs, cp, s, tps, mem in [(8, 1, 32768, 3890, 83.9), (4, 2, 65536, 2540, 84.2),
                                (2, 4, 131072, 1071, 84.0), (1, 8, 262144, 548, 84.5)]:
        b.add("tt_h100_2412",
              "Table 2: FSDP + CP + torch.compile + Float8, Llama 3.1 8B, 8 GPUs", **L8,
              gpu=TT_H100, num_gpus=8, cp=cp, dp_shard=fs, seq_len=s, micro_batch=1,
              activation_checkpointing="full", precision="fp8", torch_compile="yes",
              framework="torchtitan (FSDP2 + CP)", tokens_per_s_per_gpu=tps,
              notes=(f"Parallelism 'FSDP {fs}, CP {cp}'; local batch size 1; memory {mem} GiB. "
                     "Float8 on linears. " + TT_NOTE))
    for tech, tps, mem in [("2D", 829, 71.9), ("2D + AsyncTP", 876, 67.6)]:
        b.add("tt_h100_2412",
              "Table 4: 2D (FSDP + TP) + torch.compile + Float8, Llama 3.1 70B, 256 GPUs", **L70,
              gpu=TT_H100, num_gpus=256, tp=8, dp_shard=32, micro_batch=16,
              global_batch_seqs=512, activation_checkpointing="full", precision="fp8",
              torch_compile="yes",
              framework="torchtitan (FSDP2 + TP" + (", async TP)" if "Async" in tech else ")"),
              tokens_per_s_per_gpu=tps,
              notes=(f"'{tech}'; FSDP 32, TP 8; local batch 16, global 512; memory {mem} GiB. "
                     + TT_NOTE + TT_SEQ_NOTE))
    for sched, tps, mem in [("1F1B", 100, 82.5), ("Interleaved 1F1B", 128, 72.7)]:
        b.add("tt_h100_2412",
              "Table 5: 3D (FSDP + TP + PP) + torch.compile + Float8 + AsyncTP, Llama 3.1 405B, "
              "512 GPUs", **L405,
              gpu=TT_H100, num_gpus=512, tp=8, pp=8, dp_shard=8, pp_schedule=sched,
              global_batch_seqs=256, activation_checkpointing="full", precision="fp8",
              torch_compile="yes", framework="torchtitan (FSDP2 + async TP + PP)",
              tokens_per_s_per_gpu=tps,
              notes=(f"Schedule {sched}; 'Local batch size 32, global batch size 256' (local = "
                     "per DP rank; PP microbatch count/virtual stages not stated); memory "
                     f"{mem} GiB (max over PP ranks). " + TT_NOTE + TT_SEQ_NOTE))
    for fs, cp, s, tps, mem in [(8, 1, 32768, 76, 75.3), (4, 2, 65536, 47, 75.9),
                                (2, 4, 131072, 31, 77.1), (1, 8, 262144, 16, 84.9)]:
        b.add("tt_h100_2412",
              "Table 6: 4D (FSDP + TP + PP + CP) + torch.compile + Float8 + AsyncTP + 1F1B, "
              "Llama 3.1 405B, 512 GPUs", **L405,
              gpu=TT_H100, num_gpus=512, tp=8, pp=8, cp=cp, dp_shard=fs, pp_schedule="1F1B",
              seq_len=s, activation_checkpointing="full", precision="fp8", torch_compile="yes",
              framework="torchtitan (FSDP2 + async TP + PP + CP)", tokens_per_s_per_gpu=tps,
              notes=(f"'FSDP {fs}, CP {cp}', TP 8, PP 8; local batch size 8 (per DP rank); "
                     f"memory {mem} GiB. " + TT_NOTE))

    async_note = ("torchtitan tokens/sec (per device by torchtitan's tps convention). Versions: "
                  "torch 38410cf9 (2025-06-14), torchao 6243040, torchtitan 820504e. Seq len not "
                  "stated in the doc. Hardware section of the doc: Grand Teton, H100 96GB HBM2e, "
                  "400 Gb/s RDMA per GPU, 500 W default power limit.")
    low = "Rowwise float8 vanilla-TP baseline flagged as low (torchtitan issue 1207). "
    for model, g, fs, mb, ac, section, rows in [
            (L70, 256, 32, 16, "full",
             "Llama3 70b on 256 H100s with FSDP=32, TP=8, torch.compile, full AC, local batch "
             "size 16",
             [("None (bfloat16)", 597.3, 652.4, "bf16"),
              ("float8 tensorwise", 809.8, 942.4, "fp8"),
              ("float8 rowwise", 599.6, 624.8, "fp8")]),
            (L8, 64, 8, 12, "selective (per-op)",
             "Llama3 8b on 64 H100s with FSDP=8, TP=8, torch.compile, per op SAC, local batch "
             "size 12",
             [("None (bfloat16)", 4378, 4809.4, "bf16"),
              ("float8 tensorwise", 5078.1, 5570.1, "fp8"),
              ("float8 rowwise", 3708.5, 3914.9, "fp8")])]:
        for quant, vanilla, asynchronous, prec in rows:
            for kind, tps in [("vanilla TP", vanilla), ("async TP", asynchronous)]:
                b.add("tt_asynctp_2506", section, **model, gpu=TT_H100, num_gpus=g, tp=8,
                      dp_shard=fs, micro_batch=mb, activation_checkpointing=ac, precision=prec,
                      torch_compile="yes", framework=f"torchtitan (FSDP2 + {kind})",
                      tokens_per_s_per_gpu=tps,
                      notes=(f"Quantization '{quant}', {kind}. "
                             + (low if "rowwise" in quant else "") + async_note))

    for opt, wps, mfu, prec in [("None", 109, 29.0, "bf16"), ("Float8", 177, 23.46, "fp8"),
                                ("Float8 + Async TP", 185, 24.52, "fp8")]:
        b.add("tt_405b_2408", "Llama 3.1 performance numbers (405B, 128 H100, 2D FSDP2 + TP)",
              **L405, gpu="H100 SXM HBM2e ~94-95GB, lower TDP", num_gpus=128, tp=8,
              dp_shard=16, micro_batch=2, global_batch_seqs=32, activation_checkpointing="full",
              precision=prec,
              framework="torchtitan (FSDP2 + TP" + (", async TP)" if "Async" in opt else ")"),
              tokens_per_s_per_gpu=wps, mfu_pct=mfu,
              notes=(f"Optimizations '{opt}'. 'WPS' = tokens/s (per device). Local batch 2 x 16 "
                     "FSDP ranks = 32 global; TP degree = 128/16 = 8 "
                     "(train_configs/llama3_405b.toml at 3faaa1a: tensor_parallel_degree = 8, "
                     "seq_len = 8192, compile = true - table itself states neither). MFU "
                     "computed with H100 SXM peak on lower-TDP HBM2e parts (footnote 1: "
                     "understates true MFU); Float8 MFU uses BF16 peak and attention not in "
                     "float8 (footnote 2). Numbers corrected in commit 3faaa1a (earlier 118 WPS / "
                     "37.1% used a different peak)."))

    for nodes, tps, mem in [(4, 10938, 47.96), (8, 10753, 46.97)]:
        b.add("tt_trainy_h200", f"Results table, NUM_NODES={nodes}", **L8,
              gpu="H200 (8/host, NVLink; 400 Gb/s CX-7 RDMA per GPU)", num_gpus=nodes * 8,
              dp_shard=nodes * 8, seq_len=8192, micro_batch=2, global_batch_seqs=nodes * 8 * 2,
              activation_checkpointing="selective (per-op)", precision="fp8",
              torch_compile="yes", framework="torchtitan (FSDP2, float8 all-gather)",
              tokens_per_s_per_gpu=tps,
              notes=(f"TPS/GPU sampled at iteration 100; memory {mem} GiB. Command: "
                     "llama3_8b.toml + --training.local_batch_size=2 --training.compile, float8 "
                     "linear converter with enable_fsdp_float8_all_gather, "
                     "precompute_float8_dynamic_scale_for_fsdp, force_recompute_fp8_weight_in_bwd."
                     " seq_len 8192, selective op AC and data_parallel_shard_degree=-1 come from "
                     "llama3_8b.toml at the cited torchtitan commit e7c0cae. global_batch_seqs = "
                     "GPUs x 2 by construction (no grad accumulation in the command). torch "
                     "2.8.0a0 (NGC 25.05), torchao 0afa4c1."))

    for scaling, tps, mem, prec in [
            ("none (bfloat16)", 8307.5, 33.71, "bf16"),
            ("float8 tensorwise (f8 all-gather)", 10417.0, 33.38, "fp8"),
            ("mxfp8_cublas", 9969.0, 33.88, "mxfp8"),
            ("mxfp8_cublas_rceil", 9642.0, 33.88, "mxfp8"),
            ("float8 rowwise", 8640.5, 33.72, "fp8")]:
        b.add("tt_mxfp8_b200", "Training e2e benchmarks on NVIDIA B200 (Dense Models)",
              **dict(L8, model="Llama3-8b"), gpu="B200 (power limited)", num_gpus=8, dp_shard=8,
              seq_len=8192, micro_batch=1, activation_checkpointing="selective (per-op)",
              precision=prec, torch_compile="yes", framework="torchtitan (FSDP2) + torchao",
              tokens_per_s_per_gpu=tps,
              notes=(f"Scaling '{scaling}'; peak memory {mem} GB. Published as 'Median "
                     "tokens/second' (torchtitan tps is per device). 100 steps. pytorch "
                     "2.9.0.dev20250815+cu128, torchao 0.13.0+gite4e681be, torchtitan 6fc499f. "
                     "torchtitan mxfp8.md lists 4 of these rows; the float8 rowwise row is only "
                     "in torchao docs/source/workflows/training.md. Model dims assumed = Llama "
                     "3.1 8B (the doc says 'Llama3-8b')."))

    for prec, tps in [("bf16", 6169), ("mxfp8", 7401)]:
        b.add("torchao_moe_scout",
              "Case study: 64-node GB200, Llama4 Scout (also torchtitan mxfp8.md 'MoE models')",
              model="Llama4 Scout", model_family="Llama 4 MoE", gpu="GB200", num_gpus=512, ep=16,
              seq_len=8192, micro_batch=1, activation_checkpointing="none", precision=prec,
              torch_compile="yes", framework="torchtitan + torchao MXFP8 grouped GEMM",
              tokens_per_s_per_gpu=tps,
              notes=("Published 'BF16 tokens/sec' / 'MXFP8 tokens/sec' at 512 GPUs (1.20x). "
                     "Config text: 'Parallelisms (64 nodes of 4 devices each = 256 chips): "
                     "FSDP=256 (attention, shared experts, dense FFNs) and 256/4=64 (routed "
                     "experts), EP=16' - inconsistent with '512 GPUs' in the table; recorded as "
                     "published. mxfp8 on routed-expert grouped GEMMs and all linears except "
                     "output, router.gate, wk, wv. Model dims not given in the source."))

    for config, median, gib in [("bf16 baseline", 49381.0, 145.55),
                             ("MXFP8 for Linears only", 52038.0, 146.62),
                             ("MXFP8 for Grouped GEMMs only", 69350.0, 144.71),
                             ("MXFP8 for Linears + Grouped GEMMs", 70747.0, 145.32)]:
        b.add("torchao_moe_b200",
              "End-to-end training: Llama4 16e MoE layer vs bfloat16 baseline with TorchTitan",
              model="Llama4 17Bx16E (2 layers)", model_family="Llama 4 MoE", hidden_size=5120,
              num_layers=2, num_heads=40, num_kv_heads=8, vocab_size=202048, num_experts=16,
              experts_per_token=1, gpu="B200", num_gpus=4, dp_shard=4, ep=4, seq_len=8192,
              micro_batch=8, activation_checkpointing="none",
              precision="bf16" if config.startswith("bf16") else "mxfp8", torch_compile="yes",
              framework="torchtitan (FSDP2 + EP) + torchao MXFP8", tokens_per_s_per_gpu=median,
              notes=(f"Configuration '{config}'; 'Throughput (Median Tokens/s)' {median}, max "
                     f"memory {gib} GiB (torchtitan tps is per device). Source text: 'Single node "
                     "benchmarks with 4xB200', 'Llama4 16e default configs; FSDP=4, EP=4; "
                     "AC=none; compile=True; seq_len=8192; local_bs=8', 'Reduced num layers from "
                     "48 -> 2 to avoid OOM in single node setting', 'TorchTitan debug model config "
                     "(same as Llama4 17bx16e, but with 2 layers)'. Other dims: torchtitan "
                     "models/llama4 at 58c5455 (2025-10-13), '17bx16e': dim=5120, n_heads=40, "
                     "n_kv_heads=8, MoEArgs(num_experts=16) (top_k 1, one shared expert by "
                     "default), interleave_moe_layer_step=1, vocab_size default 202048. Load "
                     "balance not forced (MoEArgs _debug_force_load_balance default False). Global "
                     "batch = local 8 x 4 ranks (not published)."))


def _fms(b: Builder) -> None:
    """IBM foundation-model-stack fms-fsdp (FSDP / HSDP)."""
    sizes = {
        "7b": dict(model="Llama2 7B (fms)", params_b=7, hidden_size=4096, num_layers=32,
                   num_heads=32, num_kv_heads=32, ffn_size=11008, vocab_size=32000),
        "13b": dict(model="Llama2 13B (fms)", params_b=13, hidden_size=5120, num_layers=40,
                    num_heads=40, num_kv_heads=40, ffn_size=13824, vocab_size=32000),
        "34b": dict(model="Llama2-arch 34B (fms)", params_b=34, hidden_size=8192, num_layers=48,
                    num_heads=64, num_kv_heads=8, ffn_size=22016, vocab_size=32000),
        "70b": dict(model="Llama2 70B (fms)", params_b=70, hidden_size=8192, num_layers=80,
                    num_heads=64, num_kv_heads=8, ffn_size=28672, vocab_size=32000)}
    common = ("Dims from fms_fsdp/utils/config_utils.py (llama2_* variants) + ibm-fms LLaMAConfig "
              "defaults (emb 4096, 32 heads, 32 layers, vocab 32000); MHA where kvheads unset. "
              "Batch size 2 per GPU, torch.compile on; 'exact same scripts and configurations' "
              "on both clusters. Seq len not stated in the README (fms-fsdp train_config default "
              "seq_length = 4096). MFU per NanoGPT/PaLM method, HFU via PyTorch FLOP counter.")
    section = "Training throughput benchmarks (tokens/sec/GPU) + MFU/HFU table"
    for size, shard, ac, a_tps, a_mfu, a_hfu, h_tps, h_mfu, h_hfu in [
            ("7b", "HSDP", "none", 4550, 68, 68, 9600, 46, 46),
            ("13b", "FSDP", "selective", 2150, 61, 69, 4850, 43, 46),
            ("34b", "FSDP", "selective", 820, 55, 74, 1830, 38, 49),
            ("70b", "FSDP", "selective", 410, 55, 74, 890, 38, 47)]:
        model = dict(sizes[size], model_family="Llama 2 dense")
        extra = (" README text says 13B on A100 is 'only 0.48 MFU', contradicting the table's "
                 "0.61." if size == "13b" else "")
        b.add("fms_fsdp", section, **model, gpu="A100-80GB (128 GPUs, 400 Gbps)", num_gpus=128,
              micro_batch=2, activation_checkpointing=ac, precision="bf16", torch_compile="yes",
              framework=f"PyTorch FSDP ({shard}) fms-fsdp", tokens_per_s_per_gpu=a_tps,
              mfu_pct=a_mfu,
              notes=(f"Sharding '{shard}' (HSDP = shard within node, replicate across nodes). MFU "
                     f"published as 0.{a_mfu:02d}, HFU 0.{a_hfu:02d}. " + common + extra))
        b.add("fms_fsdp", section, **model,
              gpu="H100 (96 GPUs, 800 Gbps; MFU table says 'H100 80G')", num_gpus=96,
              micro_batch=2, activation_checkpointing=ac, precision="bf16", torch_compile="yes",
              framework=f"PyTorch FSDP ({shard}) fms-fsdp", tokens_per_s_per_gpu=h_tps,
              mfu_pct=h_mfu,
              notes=(f"Sharding '{shard}'. MFU published as 0.{h_mfu:02d}, HFU 0.{h_hfu:02d}. "
                     + common))
    b.add("fms_fsdp",
          "README 'Training Details' (Llama2 7B replica trained to 2.2T tokens) + "
          "docs/train_details.md",
          **dict(sizes["7b"], model_family="Llama 2 dense"), gpu="A100 (128 GPUs)",
          num_gpus=128, seq_len=4096, micro_batch=2, global_batch_tokens="", precision="bf16",
          framework="PyTorch FSDP (HSDP) fms-fsdp", tokens_per_s_per_gpu=3700,
          notes=("Production run: 2.2T tokens, 4k context, 128 A100, 162k GPU hours, 3700 "
                 "tokens/s/GPU (~40B tokens/day). train_details.md: HSDP (weights+optimizer "
                 "sharded within a node, DP across nodes), 'no activation recomputation', per-GPU "
                 "batch 2, 'effective batch size of 1M tokens/batch'; README says selective "
                 "activation checkpointing was used - conflicting, so AC left empty. Run predates "
                 "torch.compile support (train_details: compile 'can provide further boost'). "
                 "as_of of README table 2024-05-09 (commit ed74fd5); training run late 2023."))


def _olmo(b: Builder) -> None:
    """AllenAI OLMo-core's README throughput table."""
    sizes = [
        (dict(model="OLMo-2 1B (OLMo-1124 arch)", params_b=1, model_family="OLMo 2 dense",
              hidden_size=2048, num_layers=18, num_heads=16), "OLMo2-1B.py", 8, 1024, 55000,
         65000),
        (dict(model="OLMo-2 7B (OLMo-1124 arch)", params_b=7, model_family="OLMo 2 dense",
              hidden_size=4096, num_layers=32, num_heads=32), "OLMo2-7B.py", 2, 1024, 10000,
         13000),
        (dict(model="Llama 3 8B (OLMo-core)", params_b=8, model_family="Llama 3 dense (GQA)",
              hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=8), "Llama3-8B.py", 2,
         1024, 9500, 12500),
        (dict(model="OLMo-2 13B (OLMo-1124 arch)", params_b=13, model_family="OLMo 2 dense",
              hidden_size=5120, num_layers=40, num_heads=40), "OLMo2-13B.py", 1, 2048, 4600,
         5500)]
    section = "README throughput table (removed after 7e58d12)"
    for model, script, mb, gb, bf16, fp8 in sizes:
        base = (f"Script src/scripts/train/{script}: rank_microbatch_size={mb}*4096 tokens, "
                f"global_batch_size={gb}*4096 tokens, compile on. Data parallel: FSDP in the "
                "scripts when the numbers were last set (commit 8e716b5, 2024-11-27); HSDP in the "
                "scripts at the README commit 7e58d12. GPU count not published ('measured on a "
                "cluster with NVIDIA H100 GPUs'). 'Throughput reported in tokens per second per "
                "device' (rounded). Dims from olmo_core TransformerConfig at 8e716b5 (FFN via "
                "multiplier, not listed).")
        b.add("olmo_core", section, **model, gpu="H100", seq_len=4096, micro_batch=mb,
              global_batch_tokens=gb * 4096, precision="bf16", torch_compile="yes",
              framework="OLMo-core (FSDP2)", tokens_per_s_per_gpu=bf16, notes=base)
        b.add("olmo_core", section, **model, gpu="H100", seq_len=4096, micro_batch=mb,
              global_batch_tokens=gb * 4096, precision="fp8", torch_compile="yes",
              framework="OLMo-core (FSDP2) + torchao float8", tokens_per_s_per_gpu=fp8,
              notes=("Precision 'BF16/FP8': most matmuls in float8, everything else bf16 "
                     "(--train_module.float8_config.enabled=true). " + base))


DG_H100 = "H100-SXM5-80GB (DGX H100, EOS; NVLink4; 8x400 Gb/s IB)"
DSV3 = dict(model="DeepSeek-V3 671B", params_b=671, model_family="DeepSeek-V3 MoE (MLA)",
            hidden_size=7168, num_layers=61, num_heads=128, ffn_size=2048, num_experts=256,
            experts_per_token=8)
DSV3_NOTE = ("Model dims from the DeepSeek-V3 paper section 4.2 (ffn_size = per-expert "
             "intermediate 2048; 1 shared + 256 routed experts, first 3 layers dense; 37B active; "
             "vocab '128K').")


def _dgxc(b: Builder) -> None:
    """NVIDIA DGX Cloud benchmarking recipes v24.11.1 and v25.05."""
    tail = (" Step time = last logged train_step_timing. Published aggregate throughput {tput} "
            "tokens/s (= seq*GBS/step); per-GPU = that / num_gpus (not published). MFU uses peak "
            "989 (BF16) / 1979 (FP8) TFLOP/s.")

    def dg(section: str, model: dict[str, Any], g: int, layout: tuple[Any, ...], mb: int,
           gb: int, seq: int, step: Any, tput: int, mfu: Any, prec: str, ac: str, sp: str,
           framework: str, extra: str, **more: Any) -> None:
        tp, pp, cp, vp = layout
        b.add("dgxc_2411", section, **model, gpu=DG_H100, num_gpus=g, tp=tp, pp=pp, cp=cp,
              virtual_stages=vp, sequence_parallel=sp, seq_len=seq, micro_batch=mb,
              global_batch_seqs=gb, activation_checkpointing=ac, precision=prec,
              framework=framework, mfu_pct=mfu, step_time_s=step,
              notes=extra + tail.format(tput=tput), **more)

    nemo = "NeMo 24.09 (Megatron-Core)"
    for prec, rows in [("bf16", [(576, 252, "17.20", 120022, 55.78),
                                 (2304, 1008, 17.62, 468646, 54.45)]),
                       ("fp8", [(576, 252, 11.24, 183664, 42.71),
                                (2304, 1008, 12.35, 668626, 38.87)])]:
        for g, gb, step, tput, mfu in rows:
            dg(f"llama3.1/README_405b.md 'Llama 3.1 405b 24.09 {prec.upper()} (TP=8, PP=9, "
               "CP=2, VP=7, MBS=1, GA=63)'", L405, g, (8, 9, 2, 7), 1, gb, 8192, step, tput,
               mfu, prec, "none", "yes", nemo,
               "Recipe llama3.1/llama3.1_405b.yaml: activations_checkpoint_granularity null, "
               "sequence_parallel true, seq 8192. GA 63. Model FLOPs/sample 2.17e16 (README "
               "formula incl. attention s/h term, no causal halving).")
    for prec, rows in [("bf16", [(64, 128, 14.72, 71235, "54.10"),
                                 (2048, 4096, 14.98, 2248957, 53.38)]),
                       ("fp8", [(64, 128, 11.01, 95239, 36.17),
                                (2048, 4096, 11.39, 2945955, 34.96)])]:
        for g, gb, step, tput, mfu in rows:
            dg(f"llama3.1/README_70b.md 'Llama 3.1 70b 24.09 {prec.upper()} (TP=4, PP=4, CP=2, "
               "VP=5, MBS=1, GA=64)'", L70, g, (4, 4, 2, 5), 1, gb, 8192, step, tput, mfu, prec,
               "none", "yes", nemo,
               "Recipe llama3.1_70b.yaml: no activation checkpointing, sequence_parallel true, "
               "seq 8192. GA 64. Model FLOPs/sample 3.94e15.")
    for prec, rows in [("bf16", [(8, 128, 12.91, 81222, 59.37),
                                 (128, 2048, "13.10", 1280704, 58.51)]),
                       ("fp8", [(8, 128, 9.67, 108436, 39.63), (128, 2048, 9.82, 1708474, 39.02)])]:
        for g, gb, step, tput, mfu in rows:
            dg(f"llama3.1/README_8b.md 'Llama 3.1 8b 24.09 {prec.upper()} (TP=1, PP=1, CP=2, "
               "MBS=1, GA=32)'", L8, g, (1, 1, 2, ""), 1, gb, 8192, step, tput, mfu, prec,
               "none", "no", nemo,
               "Recipe llama3.1_8b.yaml: no activation checkpointing, sequence_parallel false, "
               "seq 8192. GA 32. Model FLOPs/sample 4.74e14.")
    g175 = dict(model="GPT-3 175B", params_b=175, model_family="GPT-3 dense (MHA)",
                hidden_size=12288, num_layers=96, num_heads=96, ffn_size=49152, vocab_size=51200)
    for prec, rows in [("bf16", [(128, 256, 8.91, 58843, 49.93),
                                 (2048, 4096, 9.02, 930001, 49.32)]),
                       ("fp8", [(128, 256, 5.92, 88562, 37.56),
                                (2048, 4096, 6.24, 1344328, 35.63)])]:
        for g, gb, step, tput, mfu in rows:
            dg(f"nemo_megatron/README_175b.md 'NeMo Megatron 24.11 {prec.upper()} (TP=4,PP=8, "
               "MBS=1, VP=12, SEQ=2048)'", g175, g, (4, 8, "", 12), 1, gb, 2048, step, tput, mfu,
               prec, "none", "yes",
               "NeMo Megatron 24.11 (launcher; README table header says 24.11, README index "
               "lists container 24.05)",
               "Recipe gpt3_175b_hydra.yaml: no activation checkpointing, sequence_parallel "
               "true, num_query_groups null (MHA), vocab 51200 in README FLOPs note. Model "
               "FLOPs/sample 2.20e15.")
    n340 = dict(model="Nemotron-4 340B", params_b=340,
                model_family="Nemotron-4 dense (GQA, squared-ReLU)", hidden_size=18432,
                num_layers=96, num_heads=96, num_kv_heads=8, ffn_size=73728, vocab_size=256000)
    for prec, rows in [("bf16", [(128, 32, 4.61, 28432, 55.38),
                                 (2048, 512, 4.84, 433296, 52.75)]),
                       ("fp8", [(128, 32, 3.16, 41478, 40.38), (2048, 512, 3.49, 600903, 36.56)])]:
        for g, gb, step, tput, mfu in rows:
            dg(f"nemotron/README_340b.md 'Nemotron4 340b 24.11 {prec.upper()} (TP=8, PP=8, "
               "MBS=1, GA=16, VP=12)'", n340, g, (8, 8, "", 12), 1, gb, 4096, step, tput, mfu,
               prec, "selective", "yes", "NeMo 24.09 container",
               "Recipe nemotron4-340b-synth.yaml: activations_checkpoint_granularity selective, "
               "sequence_parallel true, seq 4096, synthetic data. GA 16. Model FLOPs/sample "
               "1.01e16 (dense formula 24Lh^2+12Lhs+48Lh^2+6Vh).")
    n15 = dict(model="Nemotron-4 15B", params_b=15,
               model_family="Nemotron-4 dense (GQA, squared-ReLU)", hidden_size=6144,
               num_layers=32, num_heads=48, num_kv_heads=8, ffn_size=24576, vocab_size=256000)
    for prec, rows in [("bf16", [(16, 64, 2.83, 92630, "62.10"),
                                 (2048, 8192, 2.96, 11335957, 59.37)]),
                       ("fp8", [(16, 64, 2.08, 126031, 42.22),
                                (2048, 8192, 2.18, 15391941, 40.29)])]:
        for g, gb, step, tput, mfu in rows:
            dg(f"nemotron/README_15b.md 'Nemotron4 15b 24.11 {prec.upper()} (TP=4, PP=1, MBS=4, "
               "GA=4)'", n15, g, (4, 1, "", ""), 4, gb, 4096, step, tput, mfu, prec, "none",
               "yes", "NeMo 24.09 container",
               "Recipe nemotron4-15b-synth.yaml: no activation checkpointing, sequence_parallel "
               "true, seq 4096, synthetic data. GA 4. Model FLOPs/sample 434.5e12.")
    grok = dict(model="Grok-1 314B", params_b=314, model_family="Grok-1 MoE (GQA, GeGLU)",
                hidden_size=6144, num_layers=64, num_heads=48, num_kv_heads=8, ffn_size=32768)
    for prec, rows in [("bf16", [(512, 1, 1024, 20.83, 402718, "41.5"),
                                 (2048, 4, 4096, 21.09, 1591011, "41.0")]),
                       ("fp8", [(512, 1, 1024, 16.69, 502613, "25.9"),
                                (2048, 4, 4096, 17.04, 1969157, "25.3")])]:
        for g, dp, gb, step, tput, mfu in rows:
            dg(f"grok1/README_314b.md 'Grok 1 314b Dev {prec.upper()}' + config table", grok, g,
               (4, 8, 2, 8), 1, gb, 8192, step, tput, mfu, prec, "none", "yes",
               "NeMo 24.09 container (Megatron-Core MoE)",
               f"Config table row: TP4 PP8 CP2 EP8 DP{dp} VP8 MBS1 GA128 (as published; in this "
               "table TP*PP*CP*EP*DP = GPUs, i.e. the published DP excludes EP). grok1_314b.yaml: "
               "8 experts, top-2, moe_grouped_gemm false, no activation checkpointing, "
               "sequence_parallel true, tokenizer meta-llama/Meta-Llama-3-70B (vocab not stated), "
               "synthetic data. Model FLOPs for GBS=1 'per GPU for 2048 GPUs' 4.27e15.",
               ep=8, dp=dp, num_experts=8, experts_per_token=2)

    b.add("dgxc_2505", "deepseek_v3/pretraining/README.md 'H100 Performance' + H100 config table",
          **DSV3, gpu=DG_H100, num_gpus=1024, tp=2, pp=16, cp=1, ep=64, dp=32, virtual_stages=1,
          seq_len=4096, micro_batch=1, global_batch_seqs=8192, precision="bf16",
          framework="NeMo 25.04/Megatron-Core (llmb recipe)", tflops_per_gpu=163.7,
          mfu_pct=16.55, step_time_s=52.04,
          notes=("ETP 1, GA 256. Published throughput 644781.55 tokens/s aggregate; MFU = "
                 "TFLOPS_per_GPU (Megatron log) / 989. Step time = mean of iterations 11-44. 'FP8 "
                 "recipe is not currently supported'. " + DSV3_NOTE))
    for g, ep, dp, gb, step, tput, tflops, mfu in [
            (128, 32, 16, 1024, 34.168, 122755.33, 249.3, 10.18),
            (512, 64, 64, 4096, 34.274, 489502.71, 248.53, 10.14)]:
        b.add("dgxc_2505",
              "deepseek_v3/pretraining/README.md 'GB200 Performance' + GB200 config table", **DSV3,
              gpu="GB200 (DGX GB200 NVL72 reference)", num_gpus=g, tp=2, pp=4, cp=1, ep=ep,
              dp=dp, virtual_stages=1, seq_len=4096, micro_batch=1, global_batch_seqs=gb,
              precision="bf16", framework="NeMo 25.04/Megatron-Core (llmb recipe)",
              tflops_per_gpu=tflops, mfu_pct=mfu, step_time_s=step,
              notes=(f"ETP 1, GA 64. Published throughput {tput} tokens/s aggregate; MFU = "
                     "TFLOPS_per_GPU / 2450 (GB200 BF16 peak as stated). " + DSV3_NOTE))


def _megatron_bridge(b: Builder) -> None:
    """NVIDIA Megatron-Bridge performance summaries and the DeepSeek-V3 report."""
    note = ("Megatron-Bridge performance recipes; MoE benchmarks force-balance tokens across "
            "experts and are token-dropless. FSDP column semantics in the archive: '>0: FSDP "
            "with sharding group size = #GPUs/(TP x PP); 0: DDP'.")
    q30 = dict(model="Qwen3-30B-A3B", params_b=30, model_family="Qwen3 MoE")
    q235 = dict(model="Qwen3-235B-A22B", params_b=235, model_family="Qwen3 MoE")
    oss = dict(model="GPT-OSS 120B", params_b=120, model_family="GPT-OSS MoE")
    fw = "Megatron-Bridge (NeMo 25.11, Megatron-Core)"
    for model, label, g, prec, gb, mb, s, fsdp, tp, pp, cp, vp, ep, ga, tps, tflops in [
            (L8, "LLAMA3_8B", 8, "fp8", 128, 1, 8192, 8, 1, 1, 1, "", 1, 16, 14451, 744),
            (L70, "LLAMA3_70B", 64, "fp8", 128, 1, 8192, 0, 4, 8, 1, 5, 1, 64, 1602, 719),
            (L405, "LLAMA3.1_405B", 1024, "fp8", 512, 1, 8192, 0, 8, 8, 2, 8, 1, 64, 292, 737),
            (oss, "", 64, "bf16", 512, 4, 4096, 0, 1, 4, 1, 1, 8, 2, 5630, 153),
            (q30, "", 16, "fp8", 512, 2, 4096, 0, 1, 2, 1, 24, 8, 32, 5275, 121),
            (q235, "", 256, "fp8", 2048, 1, 4096, 0, 2, 8, 1, 4, 32, 128, 1575, 233)]:
        published = "FP8-CS" if prec == "fp8" else "BF16"
        what = ("Dense model in FP8 (dims = Llama 3/3.1 architecture). " if label
                else "MoE dims not in the source. ")
        b.add("mbridge_2511", "25.11 NeMo Container, Pre-Training Performance, System: DGX-H100",
              **(dict(model, model=label) if label else model), gpu="H100 (DGX-H100)",
              num_gpus=g, tp=tp, pp=pp, cp=cp, ep=ep if ep != 1 else "",
              dp_shard=fsdp or "", virtual_stages=vp, seq_len=s, micro_batch=mb,
              global_batch_seqs=gb, precision=prec, framework=fw, tokens_per_s_per_gpu=tps,
              tflops_per_gpu=tflops,
              notes=(f"Published precision '{published}' (FP8 current scaling). FSDP column "
                     f"{fsdp}, EP {ep}, GA {ga}. " + what + note))
    for prec, pp, vp, ep, ga, tps, tflops, label in [
            ("bf16", 4, 4, 64, 64, 3139, 782, "BF16"),
            ("mxfp8", 8, 4, 32, 128, 4018, 1003, "FP8-MX")]:
        b.add("mbridge_2511",
              "25.11 NeMo Container, Pre-Training Performance, System: DGX-GB200 (DeepSeekV3 w/o "
              "MTP)", **DSV3, gpu="GB200 (DGX-GB200)", num_gpus=256, tp=1, pp=pp, cp=1, ep=ep,
              virtual_stages=vp, seq_len=4096, micro_batch=1, global_batch_seqs=4096,
              precision=prec, framework=fw, tokens_per_s_per_gpu=tps, tflops_per_gpu=tflops,
              notes=(f"Published precision '{label}' (MX = 32x32 quantization blocks on GB200). "
                     f"FSDP 0, GA {ga}. " + DSV3_NOTE + " " + note))
    moe_note = ("Quoted row (the table's columns: Model | #-GPUs | Precision | GBS | MBS | "
                "Sequence Length | FSDP | TP | PP | CP | VP | EP | GA | Tokens / sec / GPU | Model "
                "TFLOP / sec / GPU): ")
    for model, prec, label, g, gb, mb, ep, tps, tflops, quote in [
            (oss, "bf16", "BF16", 64, 512, 4, 8, 8213, 223,
             "| GPT OSS 120B | 64 | BF16 | 512 | 4 | 4096 | 0 | 1 | 1 | 1 | 1 | 8 | 2 | 8213 | "
             "223 |"),
            (q30, "mxfp8", "FP8-MX", 8, 512, 1, 8, 9299, 214,
             "| Qwen3_30B_a3B | 8 | FP8-MX | 512 | 1 | 4096 | 0 | 1 | 1 | 1 | 1 | 8 | 64 | 9299 | "
             "214 |")]:
        b.add("mbridge_2511", "25.11 NeMo Container, Pre-Training Performance, System: DGX-B200",
              **model, gpu="B200 (DGX-B200)", num_gpus=g, tp=1, pp=1, cp=1, ep=ep,
              seq_len=4096, micro_batch=mb, global_batch_seqs=gb, precision=prec, framework=fw,
              tokens_per_s_per_gpu=tps, tflops_per_gpu=tflops,
              notes=(f"Published precision '{label}'. " + moe_note + quote
                     + " MoE dims not in the source. " + note))
    b.add("mbridge_2606",
          "26.06 NeMo Container, Pre-Training Performance, Model: LLAMA3.1_405B (DGX-H100 row)",
          **dict(L405, model="LLAMA3.1_405B"), gpu="H100 (DGX-H100)", num_gpus=1024, tp=8,
          pp=8, cp=2, virtual_stages=8, seq_len=8192, micro_batch=1, global_batch_seqs=1536,
          precision="fp8", framework="Megatron-Bridge (NeMo 26.06)", tokens_per_s_per_gpu=326,
          tflops_per_gpu=822,
          notes=("Published precision 'FP8'. EP n/a. Compare with the 25.11 row (GBS 512: 292 "
                 "tok/s/GPU). as_of: archive section '26.06 NeMo Container' (file commit "
                 "4ab94df, 2026-08-11). " + note))
    b.add("mbridge_2606",
          "26.06 NeMo Container, Pre-Training Performance, Model: Qwen3_30B_a3B (DGX-H100 row)",
          **q30, gpu="H100 (DGX-H100)", num_gpus=16, tp=1, pp=1, cp=1, ep=16, seq_len=4096,
          micro_batch=1, global_batch_seqs=1024, precision="fp8",
          framework="Megatron-Bridge (NeMo 26.06)", tokens_per_s_per_gpu=8826,
          tflops_per_gpu=203,
          notes="Published precision 'FP8'; VP n/a. MoE dims not in the source. " + note)
    for model, system, g, gb, tp, pp, vp, ep, tps, tflops in [
            (DSV3, "DGX-GB200", 256, 4096, 1, 4, 4, 64, 4912, 1276),
            (DSV3, "DGX-GB300", 256, 4096, 1, 2, 8, 32, 6288, 1635),
            (q235, "DGX-GB200", 256, 8192, 1, 8, 3, 32, 7280, 1077)]:
        b.add("mbridge_2608",
              f"26.08 NeMo Container, Pre-Training Performance, Model: {model['model']} "
              f"({system})", **model, gpu=system.replace("DGX-", ""), num_gpus=g, tp=tp, pp=pp,
              cp=1, ep=ep, virtual_stages=vp, seq_len=4096, micro_batch=1,
              global_batch_seqs=gb, precision="mxfp8", framework="Megatron-Bridge (NeMo 26.08)",
              tokens_per_s_per_gpu=tps, tflops_per_gpu=tflops,
              notes=("Published precision 'MXFP8'. "
                     + (DSV3_NOTE + " " if model is DSV3 else "MoE dims not in the source. ")
                     + note))

    # every DGX-H100 / DGX-B200 MoE row with TP = PP = 1 of the 26.02 - 26.04.01 archive
    # sections (issue 26: scripts.validate_moe predicts them); column order of those tables
    cols = ("Quoted row (the table's columns: System | #-GPUs | Precision | GBS | MBS | Sequence "
            "Length | FSDP | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / "
            "GPU), under '#### Model: {name}': ")
    gpus = {"DGX-H100": "H100 (DGX-H100)", "DGX-B200": "B200 (DGX-B200)"}
    precisions = {"BF16": "bf16", "FP8": "fp8", "MXFP8": "mxfp8"}
    for source, container, rows in [
            ("mbridge_2602", "26.02", [
                (oss, "GPT OSS 120B", "DGX-B200", 64, "BF16", 1280, 4, 64, 8047, 219,
                 "| DGX-B200 | 64 | BF16 | 1280 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 64 | 8047 | "
                 "219 |"),
                (q30, "Qwen3_30B_a3B", "DGX-B200", 8, "MXFP8", 512, 1, 8, 9691, 223,
                 "| DGX-B200 | 8 | MXFP8 | 512 | 1 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 9691 | "
                 "223 |")]),
            ("mbridge_260201", "26.02.01", [
                (oss, "GPT OSS 120B", "DGX-B200", 64, "BF16", 1280, 4, 8, 13722, 373,
                 "| DGX-B200 | 64 | BF16 | 1280 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 13722 | "
                 "373 |"),
                (q30, "Qwen3_30B_a3B", "DGX-B200", 8, "MXFP8", 512, 4, 8, 26695, 614,
                 "| DGX-B200 | 8 | MXFP8 | 512 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 26695 | "
                 "614 |")]),
            ("mbridge_2604", "26.04", [
                (oss, "GPT OSS 120B", "DGX-B200", 64, "BF16", 1280, 4, 8, 13045, 355,
                 "| DGX-B200 | 64 | BF16 | 1280 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 13045 | "
                 "355 |"),
                (q30, "Qwen3_30B_a3B", "DGX-B200", 8, "MXFP8", 512, 4, 8, 26859, 618,
                 "| DGX-B200 | 8 | MXFP8 | 512 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 26859 | "
                 "618 |"),
                (q30, "Qwen3_30B_a3B", "DGX-H100", 16, "FP8", 1024, 1, 16, 8901, 205,
                 "| DGX-H100 | 16 | FP8 | 1024 | 1 | 4096 | 0 | 1 | 1 | 1 | n/a | 16 | 8901 | "
                 "205 |")]),
            ("mbridge_260401", "26.04.01", [
                (oss, "GPT OSS 120B", "DGX-B200", 64, "BF16", 1280, 4, 8, 13568, 369,
                 "| DGX-B200 | 64 | BF16 | 1280 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 13568 | "
                 "369 |"),
                (q30, "Qwen3_30B_a3B", "DGX-B200", 8, "MXFP8", 512, 4, 8, 27136, 619,
                 "| DGX-B200 | 8 | MXFP8 | 512 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 27136 | "
                 "619 |"),
                (q30, "Qwen3_30B_a3B", "DGX-H100", 16, "FP8", 1024, 1, 16, 8960, 206,
                 "| DGX-H100 | 16 | FP8 | 1024 | 1 | 4096 | 0 | 1 | 1 | 1 | n/a | 16 | 8960 | "
                 "206 |")])]:
        for model, name, system, g, label, gb, mb, ep, tps, tflops, quote in rows:
            b.add(source,
                  f"{container} NeMo Container, Pre-Training Performance, Model: {name} "
                  f"({system} row)", **model, gpu=gpus[system], num_gpus=g, tp=1, pp=1, cp=1,
                  ep=ep, seq_len=4096, micro_batch=mb, global_batch_seqs=gb,
                  precision=precisions[label],
                  framework=f"Megatron-Bridge (NeMo {container}, Megatron-Core)",
                  tokens_per_s_per_gpu=tps, tflops_per_gpu=tflops,
                  notes=(f"Published precision '{label}'; FSDP 0 (DDP); VP n/a. "
                         + cols.format(name=name) + quote + " MoE dims not in the source. "
                         + note))

    b.add("deepseek_v3",
          "Sections 1 & 3.1-3.2 (training costs, 180K H800 GPU hours per trillion tokens; "
          "parallelism) and 4.2 (hyper-parameters)", **DSV3,
          gpu="H800 (8/node NVLink+NVSwitch, InfiniBand across nodes)", num_gpus=2048, tp=1,
          pp=16, ep=64, pp_schedule="DualPipe", seq_len=4096, global_batch_seqs=15360,
          precision="fp8", framework="HAI-LLM (in-house)",
          notes=("Published efficiency: 180K H800 GPU hours per trillion tokens (3.7 days on 2048 "
                 "H800); pre-training 2664K GPU hours for 14.8T tokens. Implied tokens/s/GPU = "
                 "1e12/(180e3*3600) (not published as such). Layout: 16-way PP, 64-way EP "
                 "spanning 8 nodes, ZeRO-1 DP (degree not stated; 2048/(16*64)=2), no tensor "
                 "parallelism ('without using costly Tensor Parallelism'). FP8 mixed precision "
                 "(fine-grained tile/block quantization). Batch ramps 3072 -> 15360 sequences "
                 "over the first 469B tokens, then 15360. Includes MTP (depth 1). " + DSV3_NOTE))


def _llm_foundry_fp8(b: Builder) -> None:
    """llm-foundry's H100 FP8 table (FP8 was left out of the calibration data)."""
    mpt = {"3b": dict(model="MPT-3B", params_b=3, model_family="MPT dense (ALiBi, LayerNorm)",
                      hidden_size=2560, num_layers=32, num_heads=20, num_kv_heads=20,
                      ffn_size=10240, vocab_size=50368),
           "1b": dict(model="MPT-1B", params_b=1, model_family="MPT dense (ALiBi, LayerNorm)",
                      hidden_size=2048, num_layers=24, num_heads=16, num_kv_heads=16,
                      ffn_size=8192, vocab_size=50368)}
    for size, s, mfu, hfu, tflop, mb, ga, gb, tput, tps, gbt, ac in [
            ("3b", 32768, 14.38, 19.18, 284, 3, 6, 144, 46853, 5856, 4718592, "full"),
            ("3b", 8192, 23.28, 23.28, 460, 3, 6, 144, 153174, 19146, 1179648, "none"),
            ("3b", 2048, 27.7, 27.7, 548, 10, 6, 480, 244692, 30586, 983040, "none"),
            ("3b", 512, 30.25, 30.25, 598, 40, 6, 1920, 292217, 36527, 983040, "none"),
            ("1b", 32768, 17.55, 17.55, 347, 1, 4, 32, 100643, 12580, 1048576, "none"),
            ("1b", 8192, 20.71, 20.71, 409, 2, 4, 64, 256087, 32010, 524288, "none"),
            ("1b", 512, 29.06, 29.06, 575, 56, 4, 1792, 562523, 70315, 917504, "none")]:
        b.add("llmfoundry_fp8", "## H100 80GB FP8", **mpt[size], gpu="H100-80GB", num_gpus=8,
              dp_shard=8, seq_len=s, micro_batch=mb, global_batch_seqs=gb,
              global_batch_tokens=gbt, activation_checkpointing=ac, precision="fp8",
              framework="llm-foundry / Composer (FSDP FULL_SHARD, amp_fp8 via TransformerEngine)",
              tokens_per_s_per_gpu=tps, mfu_pct=mfu,
              notes=(f"HFU {hfu}%, 'Model TFLOP' {tflop}, GradAccum {ga}, aggregate {tput} T/s. "
                     "MFU per the README formula ((6N + 12*L*d*S) FLOPs/token, attention "
                     "included, no causal halving); Model TFLOP / MFU ~ 1979 indicates the H100 "
                     f"FP8 dense peak was used. Dims from scripts/train/yamls/pretrain/mpt-{size}"
                     ".yaml (expansion 4). Not in the project's llm-foundry.csv (fp8 left out "
                     "there)."))


def build_rows() -> list[dict[str, str]]:
    """Every row, grouped by source in the order the sources were read."""
    b = Builder()
    _megatron(b)
    _llama3(b)
    _torchtitan(b)
    _fms(b)
    _olmo(b)
    _dgxc(b)
    _megatron_bridge(b)
    _llm_foundry_fp8(b)
    return b.rows


def render(rows: Sequence[dict[str, str]]) -> str:
    """The CSV text of `rows`."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="Exit 1 when the CSV differs from what this script writes.")
    args = parser.parse_args(argv)
    text = render(build_rows())
    if args.check:
        current = OUT.read_text() if OUT.is_file() else ""
        if current != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run python -m scripts.build_layout_runs",
                  file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text.splitlines()) - 1} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
