#!/usr/bin/env python
"""ShardMeter's mixture-of-experts step against published MoE training throughputs (issue 26,
validation only: nothing is fitted to these rows).

Claim: every MoE row of `catalogs/published/layout-runs.csv` (a row with routed experts, an
expert-parallel degree or an MoE model family; figures typed next to their source by
`scripts.build_layout_runs`) is either predicted or listed with every reason it cannot be:
multi-head latent attention (DeepSeek-V3), tp > 1 with experts (expert tensor parallelism), a
GPU without a catalog entry, a model without a shipped config.json (`MOE_MODELS`), a source
without MoE framework rules (`MOE_RULES`), FP8 on only part of the matmuls, no per-GPU
throughput.
Why: issue 26 asks for published MoE throughputs the tool was never fitted to, reported apart
with a MAPE per source (goal <= 15 %); `scripts.validate_layouts` refuses every MoE row, so this
command predicts the ones ShardMeter can express (tp = 1, any pp, expert parallelism borrowed
from FSDP's ranks inside each pipeline stage) through the same `perfmodel.api.predict` path
(`validate_layouts.evaluate`), with the rules below fixed before any prediction was compared
with a figure.
Checked by: tests/test_validate_moe.py (every MoE row predicted or given a reason, none
dropped; the mapping and the rules as documented; the markdown lists every row).

Rules for what a row does not publish (catalogs/published/README.md, "Published MoE runs"):
  * Megatron-Bridge (Megatron-Core): its data parallelism is DDP with the distributed optimizer,
    and ShardMeter's ep borrows its ranks from dp_shard, so the row is modelled as FSDP over
    every GPU of a pipeline stage (dp_shard = GPUs / (cp · pp)) with the published ep; under
    pp > 1 the schedule is the dense Megatron rows' (`scripts.validate_layouts.pipeline_fields`:
    Megatron's default 1F1B, interleaved 1F1B with the published virtual stages when they are
    more than 1), gradients reduced once per step
    (`accum_mode no_sync`); activation checkpointing none (not stated: Megatron-Core's
    default); no torch.compile; 'FP8' / 'FP8-CS' = fp8-tensorwise (current per-tensor scaling),
    'MXFP8' / 'FP8-MX' = mxfp8; the FP8 all-gather off (not stated).
  * torchtitan / torchao: FSDP2 over the published dp_shard with the published ep, no
    accumulation (global batch = local x DP), torch.compile as published.

    .venv/bin/python -m scripts.validate_moe            # markdown to stdout
    .venv/bin/python -m scripts.validate_moe --csv out.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfmodel.formatting import markdown_table
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.pipeline import check_schedule
from perfmodel.spec.recipe import DEFAULT_RECIPE
from scripts.validate_layouts import (
    GOAL_MAPE_PCT,
    GPU_MAP,
    RowPlan,
    RowResult,
    evaluate,
    fmt_pct,
    is_moe,
    load_runs,
    mape_pct,
    pipeline_fields,
    published_metric,
)

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
"""The shipped Hugging Face config.json files (sources in tests/data/configs/README.md)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeModel:
    """A published model name -> a shipped config.json (and the published differences)."""

    config: str
    """Path under tests/data/configs."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Fields set on the (text) config: what the source publishes that the shipped file differs
    in."""
    why: str = ""


MOE_MODELS: dict[str, MoeModel] = {
    "Qwen3-30B-A3B": MoeModel(
        config="qwen3_30b_a3b/config.json",
        why="the shipped Qwen/Qwen3-30B-A3B config.json (Megatron-Bridge's Qwen3_30B_a3B recipe "
            "is that model; the table publishes no dims)"),
    "GPT-OSS 120B": MoeModel(
        config="gpt_oss_120b/config.json",
        why="the shipped openai/gpt-oss-120b config.json (the table publishes no dims)"),
    "Llama4 17Bx16E (2 layers)": MoeModel(
        config="llama4_maverick/config.json",
        overrides={"num_local_experts": 16, "interleave_moe_layer_step": 1,
                   "num_hidden_layers": 2},
        why="the shipped Llama-4 Maverick text config with torchtitan's 17bx16e differences "
            "(16 routed experts, every layer MoE: interleave_moe_layer_step 1) and the source's "
            "2 layers; hidden 5120, 40/8 heads, expert FFN 8192, top-1 + one shared expert and "
            "vocabulary 202048 are the same in both"),
}
"""Published model (layout-runs.csv `model`) -> its config. Other MoE models are listed with a
reason (their config.json is not shipped, or their family is not modelled)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeRules:
    """How one source's MoE rows become a workload (the module docstring's rules)."""

    framework: str
    """megatron (Megatron-Bridge / Megatron-Core) or torchtitan."""


MOE_RULES: dict[str, MoeRules] = {
    **{source: MoeRules(framework="megatron")
       for source in ("mbridge_2511", "mbridge_2602", "mbridge_260201", "mbridge_2604",
                      "mbridge_260401", "mbridge_2606", "mbridge_2608")},
    "torchao_moe_b200": MoeRules(framework="torchtitan"),
}

PRECISION = {"bf16": "bf16", "fp8": "fp8-tensorwise", "mxfp8": "mxfp8"}
"""layout-runs.csv precision -> TrainingRecipe.compute_dtype (Megatron-Bridge 'FP8' / 'FP8-CS'
is per-tensor current scaling, torchao's tensorwise recipe; 'MXFP8' / 'FP8-MX' is mxfp8)."""

PARTIAL_FP8 = {
    "torchao_moe_b200-02": "MXFP8 on the dense linears only (routed-expert grouped GEMMs in bf16)",
    "torchao_moe_b200-03": "MXFP8 on the routed-expert grouped GEMMs only (dense linears in bf16)",
}
"""Rows whose FP8 covers only part of the block matmuls: ShardMeter's compute_dtype switches
every block matmul at once, so they are listed, not predicted."""


def moe_rows(rows: Sequence[Mapping[str, str]]) -> list[Mapping[str, str]]:
    return [row for row in rows if is_moe(row)]


def _reasons(row: Mapping[str, str]) -> list[str]:
    """Why the MoE row cannot be predicted (empty: it can)."""
    out = []
    if "MLA" in row["model_family"]:
        out.append("multi-head latent attention (DeepSeek-V3) is not modelled "
                   "(ModelSpec.check_step_modelled)")
    if (row["tp"] or "1") != "1":
        out.append(f"tp {row['tp']} with experts: expert tensor parallelism is not modelled")
    if row["gpu"] not in GPU_MAP:
        out.append(f"GPU {row['gpu']!r} has no catalog entry")
    if not row["num_gpus"]:
        out.append("GPU count not published")
    if row["model"] not in MOE_MODELS and "MLA" not in row["model_family"]:
        out.append(f"no shipped config.json for {row['model']!r} (model family "
                   f"{row['model_family']!r})")
    if row["source_id"] not in MOE_RULES:
        out.append(f"no MoE framework rules for source {row['source_id']!r} ({row['framework']})")
    if row["run_id"] in PARTIAL_FP8:
        out.append(PARTIAL_FP8[row["run_id"]] + ": compute_dtype switches every block matmul")
    published, why = published_metric(row)
    if not published:
        out.append(why)
    return out


def model_config(name: str) -> dict[str, Any]:
    """The config.json of a published model: the shipped file with its overrides (on
    `text_config` where the file is multimodal)."""
    entry = MOE_MODELS[name]
    config: dict[str, Any] = json.loads((CONFIGS / entry.config).read_text())
    target: dict[str, Any] = config.get("text_config", config)
    target.update(entry.overrides)
    return config


def plan_moe_row(row: Mapping[str, str]) -> RowPlan:
    """The workload of one MoE row under the rules, or the reasons there is none."""
    reasons = _reasons(row)
    if reasons:
        return RowPlan(run_id=row["run_id"], source_id=row["source_id"], model=row["model"],
                       reasons=tuple(reasons))
    rules = MOE_RULES[row["source_id"]]
    gpus, cp, ep = int(row["num_gpus"]), int(row["cp"] or 1), int(row["ep"] or 1)
    pipe = pipeline_fields(row)
    pp = int(pipe["pp"])
    micro, seq = int(row["micro_batch"]), int(row["seq_len"])
    assumptions = [f"model: {MOE_MODELS[row['model']].why}"]
    if rules.framework == "megatron":
        dp_shard = gpus // (cp * pp)
        accum_mode, ac, compile_ = "no_sync", "none", False
        assumptions += [
            f"FSDP dp_shard {dp_shard} with ep {ep}: Megatron's DDP + distributed optimizer, "
            "expressed as FSDP because ShardMeter's ep borrows FSDP ranks",
            "accum_mode no_sync: Megatron reduces gradients once per step",
            "ac none: not stated (Megatron-Core's default)", "no torch.compile (Megatron)"]
        if row["precision"] != "bf16":
            assumptions.append("FP8 all-gather off: not stated")
    else:
        dp_shard = int(row["dp_shard"])
        accum_mode, ac, compile_ = "reduce_scatter", row["activation_checkpointing"], \
            row["torch_compile"] == "yes"
    if pp > 1:
        assumptions.append(f"pp {pp}: {pipe['pp_schedule']}"
                           + (f" with {pipe['virtual_stages']} virtual stages"
                              if pipe["virtual_stages"] > 1 else "")
                           + " (Megatron's default schedule; interleaved when the source "
                             "names virtual stages)")
    if dp_shard * cp * pp != gpus:
        return RowPlan(run_id=row["run_id"], source_id=row["source_id"], model=row["model"],
                       reasons=(f"dp_shard {dp_shard} x cp {cp} x pp {pp} is not {gpus} GPUs",))
    dp = dp_shard  # the cp ranks of a data-parallel rank share its sequences
    batch = int(row["global_batch_seqs"]) if row["global_batch_seqs"] else dp * micro
    if not row["global_batch_seqs"]:
        assumptions.append(f"global batch {batch}: local {micro} x DP {dp}, no accumulation")
    accum = batch // (dp * micro)
    if accum < 1 or accum * dp * micro != batch:
        return RowPlan(run_id=row["run_id"], source_id=row["source_id"], model=row["model"],
                       reasons=(f"global batch {batch} is not a multiple of DP {dp} x "
                                f"micro-batch {micro}",))
    if pp > 1:
        try:
            check_schedule(pipe["pp_schedule"], pp, pipe["virtual_stages"], accum)
        except UserInputError as err:
            return RowPlan(run_id=row["run_id"], source_id=row["source_id"], model=row["model"],
                           reasons=(f"{accum} micro-batches per step do not run its schedule: "
                                    f"{err.message}",))
    published, basis = published_metric(row)
    recipe = DEFAULT_RECIPE.with_overrides(
        name=f"published-moe:{rules.framework}", ac=ac, accum_mode=accum_mode, compile=compile_,
        compute_dtype=PRECISION[row["precision"] or "bf16"],
        parallel=ParallelLayout(dp_shard=dp_shard, cp=cp, ep=ep, **pipe))
    slug = row["run_id"].replace("_", "-")
    return RowPlan(run_id=row["run_id"], source_id=row["source_id"], model=row["model"],
                   kind="moe", model_name=f"{slug}.json", model_config=model_config(row["model"]),
                   gpu=GPU_MAP[row["gpu"]], num_gpus=gpus, seq_len=seq, micro_batch=micro,
                   accum=accum, recipe=recipe,
                   published_tokens_per_s_per_gpu=published, metric_basis=basis,
                   assumptions=tuple(assumptions))


def evaluate_moe(rows: Sequence[Mapping[str, str]], inputs: Path) -> list[RowResult]:
    """Every MoE row of `rows`, planned and (when it can be) predicted."""
    out = []
    for row in moe_rows(rows):
        plan = plan_moe_row(row)
        try:
            out.append(evaluate(plan, inputs))
        except UserInputError as err:  # e.g. a layout the model or the GPU refuses
            out.append(RowResult(plan=RowPlan(run_id=plan.run_id, source_id=plan.source_id,
                                              model=plan.model, reasons=(err.message,))))
    return out


def markdown(results: Sequence[RowResult]) -> str:
    summary = []
    for source in dict.fromkeys(r.plan.source_id for r in results):
        mine = [r for r in results if r.plan.source_id == source]
        errors = [e for r in mine if (e := r.error_pct) is not None]
        mape = mape_pct(errors)
        summary.append([source, str(len(mine)), str(len(errors)), fmt_pct(mape),
                        fmt_pct(statistics.median(errors) if errors else None),
                        "–" if mape is None else ("met" if mape <= GOAL_MAPE_PCT else "missed")])
    everything = [e for r in results if (e := r.error_pct) is not None]
    predicted = [r for r in results if r.predicted_tokens_per_s_per_gpu is not None]
    parts = [
        "## Published MoE runs: ShardMeter's tokens/s/GPU against the published",
        f"MAPE over the {len(everything)} predicted MoE rows: "
        f"{fmt_pct(mape_pct(everything))} % (goal <= "
        f"{GOAL_MAPE_PCT:.0f} % per source; {len(results) - len(everything)} of the "
        f"{len(results)} MoE rows not predicted, with their reasons below). Nothing here was "
        "fitted; FP8 and compile figures are priors (catalogs/precision.csv).",
        markdown_table(["source", "MoE rows", "predicted", "MAPE %", "signed median %",
                        f"goal <= {GOAL_MAPE_PCT:.0f} %"], summary),
        "### Predicted rows",
        markdown_table(
            ["run", "model", "GPU (catalog)", "GPUs", "layout", "dtype", "S", "m", "k", "ac",
             "published tok/s/GPU", "predicted", "error %", "compute-only error %", "bound"],
            [[r.plan.run_id, r.plan.model, r.plan.gpu, r.plan.num_gpus, r.layout,
              r.plan.recipe.compute_dtype, r.plan.seq_len, r.plan.micro_batch, r.plan.accum,
              r.plan.recipe.ac, f"{r.plan.published_tokens_per_s_per_gpu:.5g}",
              f"{r.predicted_tokens_per_s_per_gpu:.5g}", fmt_pct(r.error_pct),
              fmt_pct(r.compute_only_error_pct), r.bound] for r in predicted]),
        "### Settings filled by the rules (per predicted row)",
        markdown_table(["run", "rules applied"],
                       [[r.plan.run_id, "; ".join(r.plan.assumptions)] for r in predicted]),
        "### MoE rows not predicted",
        markdown_table(["run", "model", "why"],
                       [[r.plan.run_id, r.plan.model, "; ".join(r.plan.reasons)]
                        for r in results if r.predicted_tokens_per_s_per_gpu is None])]
    return "\n\n".join(parts) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--csv", help="also write the per-row results to this CSV")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = evaluate_moe(load_runs(), Path(tmp))
    sys.stdout.write(markdown(results))
    if args.csv:
        with open(args.csv, "w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["run_id", "source_id", "model", "gpu", "num_gpus", "layout",
                             "compute_dtype", "published_tokens_per_s_per_gpu",
                             "predicted_tokens_per_s_per_gpu", "error_pct",
                             "not_predicted_because"])
            for r in results:
                writer.writerow([r.plan.run_id, r.plan.source_id, r.plan.model, r.plan.gpu,
                                 r.plan.num_gpus or "", r.layout,
                                 r.plan.recipe.compute_dtype if r.plan.predicted else "",
                                 r.plan.published_tokens_per_s_per_gpu or "",
                                 r.predicted_tokens_per_s_per_gpu, r.error_pct,
                                 "; ".join(r.plan.reasons)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
