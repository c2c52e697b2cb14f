"""The memory model against PyTorch's FSDPMemTracker (`shardmeter bench memory` datasets).

`compare_memory(path)` predicts every row of a tracker CSV with `perfmodel.costs.memory` (same
model,
world size, S, m, k, recipe fields) and returns one record per row: tracked vs predicted peak,
the error, the predicted peak phase, and per component the tracker's category and the model's
component in GiB. `memory_summary(records)` groups them (all, per AC mode, per accumulation
setting) into MAPE and worst-case error; the validate command and python -m scripts.make_validation
print both. No torch needed: the dataset is plain CSV.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfmodel.costs.memory import MemoryConfig, memory_breakdown
from perfmodel.formatting import markdown_table
from perfmodel.spec.arch import CONFIG_FAMILY_LAYOUT, FAMILY_LAYOUT, ModelSpec, MoeSpec
from perfmodel.spec.errors import DatasetError
from perfmodel.spec.formulas import GIB
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.paths import catalog_dir
from perfmodel.spec.recipe import canonical_ac, named_recipe

DATASET = "memory-tracker.csv"
"""The shipped grid dataset under catalogs/profiles/data/."""
HELDOUT = "memory-tracker-heldout.csv"
"""The 20 held-out configurations (never used to build or tune the model)."""

EXACT_MATCH_BYTES = 64
"""Tracker and allocator peaks that differ by at most this agree exactly (allocation rounding)."""

CATEGORY_OF_COMPONENT: dict[str, tuple[str, ...]] = {
    "sharded_params": ("sharded_param_bytes",),
    "optimizer_states": ("optimizer_bytes",),
    "sharded_grads": ("sharded_grad_bytes",),
    "unsharded_params": ("unsharded_param_bytes",),
    "unsharded_grads": ("unsharded_grad_bytes",),
    "all_gather": ("all_gather_bytes",),
    "reduce_scatter": ("reduce_scatter_bytes",),
    "activations": ("activation_bytes", "inputs_bytes"),
    "temporaries": ("temp_bytes", "buffer_bytes"),
}
"""Model component -> the tracker columns it predicts."""

_REQUIRED = ("model", "family", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
             "tie_word_embeddings", "world_size", "seq_len", "micro_batch", "accum_steps",
             "accum_mode", "ac", "recipe", "param_dtype", "reduce_dtype", "attention",
             "peak_bytes", *{c for cols in CATEGORY_OF_COMPONENT.values() for c in cols})


def dataset_path(name: str = DATASET) -> Path:
    """Path of a shipped tracker dataset."""
    return catalog_dir() / "profiles" / "data" / name


def spec_of_row(row: Mapping[str, str]) -> ModelSpec:
    """The architecture of a tracker row (its shape columns and the family's layout; an MoE
    row's expert columns, every layer an MoE layer, as `perfmodel.bench.moe` builds it)."""

    layout: dict[str, Any] = dict(FAMILY_LAYOUT.get(row["family"], {}))
    if int(row.get("num_experts") or 0):
        layout.update(CONFIG_FAMILY_LAYOUT.get(row["family"], {}))
        layout["qk_norm"] = row.get("qk_norm") or "none"
        layout["moe"] = MoeSpec(
            num_experts=int(row["num_experts"]), experts_per_token=int(row["experts_per_token"]),
            expert_intermediate_size=int(row["expert_intermediate_size"]),
            num_shared_experts=int(row["num_shared_experts"]),
            shared_intermediate_size=int(row["shared_intermediate_size"]),
            shared_expert_gate=row["shared_expert_gate"] == "true",
            moe_layers=tuple(range(int(row["num_hidden_layers"]))))
    layout["tie_word_embeddings"] = row["tie_word_embeddings"] == "true"
    return ModelSpec(name=row["model"], family=row["family"], hidden_size=int(row["hidden_size"]),
                     num_layers=int(row["num_hidden_layers"]),
                     num_heads=int(row["num_attention_heads"]),
                     num_kv_heads=int(row["num_key_value_heads"]), head_dim=int(row["head_dim"]),
                     intermediate_size=int(row["intermediate_size"]),
                     vocab_size=int(row["vocab_size"]), **layout)


def read_rows(path: str | Path, *, required: Sequence[str] = _REQUIRED,
              create_hint: str = "run `shardmeter bench memory --grid N -o FILE` to create it.",
              writer: str = "shardmeter bench memory") -> list[dict[str, str]]:
    """Rows of a tracker CSV (the FSDP one by default; the pipeline one passes its columns and
    generator); DatasetError naming missing columns."""

    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path} not found", hint=create_hint)
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    missing = [c for c in required if rows and c not in rows[0]]
    if missing:
        raise DatasetError(f"{path}: missing column(s) {', '.join(missing)}",
                           hint=f"give a CSV written by `{writer}`.")
    for i, row in enumerate(rows):  # datasets written before the rename say `selective`
        if "ac" in row:
            row["ac"] = canonical_ac(row["ac"], where=f"{path}, line {i + 2}: column 'ac'")
    return rows


def row_layout(row: Mapping[str, str]) -> ParallelLayout:
    """The parallel layout of a tracker row: its layout columns (`perfmodel.bench.memory_layouts`
    datasets), or plain FSDP over every rank (the FSDP datasets have none)."""
    if "tp" not in row:
        return ParallelLayout()
    return ParallelLayout(dp_replicate=int(row["dp_replicate"]), dp_shard=int(row["dp_shard"]),
                          tp=int(row["tp"]), cp=int(row["cp"]),
                          sequence_parallel=row["sequence_parallel"] == "true",
                          ep=int(row.get("ep") or 1))


MOE_DATASET = "memory-tracker-moe.csv"
"""The MoE grid (issue 26: `perfmodel.bench.memory_moe`, fixed-capacity routing, EP 1-8) under
catalogs/profiles/data/; compared with `compare_layouts` (its rows carry the layout columns
plus ep and the expert shape)."""

LAYOUT_DATASET = "memory-tracker-layouts.csv"
"""The shipped grid of parallel layouts (issue 23) under catalogs/profiles/data/."""
LAYOUT_HELDOUT = "memory-tracker-layouts-heldout.csv"
"""The 20 held-out layout configurations (never used to build or tune the model)."""
LAYOUT_KINDS = ("TP", "TP+SP", "FSDPxTP", "HSDP", "HSDPxTP")
"""Groups of the layout summaries: tensor parallel without / with sequence parallelism (any
data parallelism), FSDP x TP (dp_shard > 1, no replicas), HSDP (replicas, no TP), HSDP x TP."""


def layout_kinds(dp_replicate: int, dp_shard: int, tp: int, sequence_parallel: bool) -> list[str]:
    """The `LAYOUT_KINDS` a layout belongs to (TP / TP+SP overlap the data-parallel kinds)."""
    kinds = []
    if tp > 1:
        kinds.append("TP+SP" if sequence_parallel else "TP")
    if tp > 1 and dp_shard > 1 and dp_replicate == 1:
        kinds.append("FSDPxTP")
    if dp_replicate > 1:
        kinds.append("HSDPxTP" if tp > 1 else "HSDP")
    return kinds


def predict_row(row: Mapping[str, str], config: MemoryConfig | None = None) -> Any:
    """The model's breakdown for the configuration of a tracker row."""
    recipe = named_recipe(row["recipe"]).with_overrides(
        ac=row["ac"], accum_mode=row["accum_mode"], param_dtype=row["param_dtype"],
        reduce_dtype=row["reduce_dtype"], attention=row["attention"], parallel=row_layout(row),
        moe_capacity_factor=float(row["capacity_factor"]) if row.get("capacity_factor") else None)
    return memory_breakdown(spec_of_row(row), num_gpus=int(row["world_size"]),
                            seq_len=int(row["seq_len"]), micro_batch=int(row["micro_batch"]),
                            accum_steps=int(row["accum_steps"]), recipe=recipe,
                            config=config or MemoryConfig())


def compare_row(row: Mapping[str, str]) -> dict[str, Any]:
    """One record: configuration, tracked and predicted peak (GiB), error %, per component."""
    pred = predict_row(row)
    tracked = float(row["peak_bytes"])
    out: dict[str, Any] = {k: row[k] for k in ("model", "world_size", "seq_len", "micro_batch",
                                               "accum_steps", "accum_mode", "ac")}
    out["tracker_gib"] = tracked / GIB
    out["model_gib"] = pred.tracked_bytes / GIB
    out["error_pct"] = 100.0 * (pred.tracked_bytes - tracked) / tracked
    out["phase"] = pred.phase
    parts = pred.components()
    for comp, cols in CATEGORY_OF_COMPONENT.items():
        out[f"{comp}_tracker_gib"] = sum(float(row[c]) for c in cols) / GIB
        out[f"{comp}_model_gib"] = parts[comp] / GIB
    return out


def compare_layouts(path: str | Path) -> list[dict[str, Any]]:
    """Every row of a layout tracker dataset against the model, with its layout, layout kinds
    and ground truth."""
    out = []
    for row in read_rows(path):
        record = compare_row(row)
        layout = row_layout(row)
        record.update({k: row[k] for k in ("dp_replicate", "dp_shard", "tp",
                                           "sequence_parallel", "ground_truth")})
        record["ep"] = layout.ep
        record["kinds"] = layout_kinds(layout.dp_replicate, layout.size("dp_shard"), layout.tp,
                                       layout.sequence_parallel)
        out.append(record)
    return out


def layout_summary(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Summary rows of layout records: all, per layout kind, per AC mode, per ground truth."""
    groups: list[tuple[str, list[Mapping[str, Any]]]] = [("all", list(records))]
    groups += [(kind, [r for r in records if kind in r["kinds"]]) for kind in LAYOUT_KINDS]
    for ac in sorted({str(r["ac"]) for r in records}):
        groups.append((f"ac {ac}", [r for r in records if r["ac"] == ac]))
    for truth in sorted({str(r["ground_truth"]) for r in records}):
        groups.append((f"ground truth {truth}",
                       [r for r in records if r["ground_truth"] == truth]))
    return [{"group": name, **summarize(rows)} for name, rows in groups]


def compare_memory(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Every row of a tracker dataset (default: the shipped grid) against the model."""
    return [compare_row(r) for r in read_rows(path or dataset_path())]


def _accum_setting(record: Mapping[str, Any]) -> str:
    return "k=1" if int(record["accum_steps"]) == 1 else f"k>1 {record['accum_mode']}"


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """MAPE, worst absolute error (both %) and the row count of a group of records."""
    errors = [abs(float(r["error_pct"])) for r in records]
    if not errors:
        return {"rows": 0, "mape_pct": float("nan"), "worst_pct": float("nan")}
    return {"rows": len(errors), "mape_pct": sum(errors) / len(errors), "worst_pct": max(errors)}


def memory_summary(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Summary rows: all records, then per AC mode, then per accumulation setting."""
    groups: list[tuple[str, Iterable[Mapping[str, Any]]]] = [("all", records)]
    order = ("none", "op-sac", "attn", "full")
    modes = sorted({str(r["ac"]) for r in records},
                   key=lambda m: (order.index(m) if m in order else len(order), m))
    for ac in modes:
        groups.append((f"ac {ac}", [r for r in records if r["ac"] == ac]))
    for setting in ("k=1", "k>1 reduce_scatter", "k>1 no_sync"):
        groups.append((setting, [r for r in records if _accum_setting(r) == setting]))
    return [{"group": name, **summarize(list(rows))} for name, rows in groups]


def component_summary(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per component: mean absolute difference model - tracker (GiB) and its share of the peak."""
    out = []
    for comp in CATEGORY_OF_COMPONENT:
        diffs = [abs(r[f"{comp}_model_gib"] - r[f"{comp}_tracker_gib"]) for r in records]
        share = [d / r["tracker_gib"] for d, r in zip(diffs, records, strict=True)]
        out.append({"component": comp,
                    "mean_tracker_gib": (sum(r[f"{comp}_tracker_gib"] for r in records)
                                         / max(len(records), 1)),
                    "mean_abs_diff_gib": sum(diffs) / max(len(diffs), 1),
                    "mean_abs_diff_pct_of_peak": 100.0 * sum(share) / max(len(share), 1)})
    return out


def memory_report(path: str | Path | None = None) -> dict[str, Any]:
    """Everything the validate command prints: dataset, summary groups, components, rows."""
    path = Path(path) if path is not None else dataset_path()
    records = compare_memory(path)
    return {"dataset": str(path), "summary": memory_summary(records),
            "components": component_summary(records), "rows": records}


def _summary_md(report: Mapping[str, Any], title: str) -> str:
    rows = [(g["group"], g["rows"], f"{g['mape_pct']:.2f}", f"{g['worst_pct']:.2f}",
             "met" if g["rows"] and g["mape_pct"] <= 3.0 and g["worst_pct"] <= 8.0 else "MISSED")
            for g in report["summary"]]
    header = ["group", "rows", "MAPE %", "worst %", "goal (<= 3 % / <= 8 %)"]
    return "\n\n".join([f"{title} (`{Path(report['dataset']).name}`):",
                        markdown_table(header, rows)])


def markdown_section(paths: Sequence[str | Path] | None = None) -> str:
    """The memory section of docs/VALIDATION.md: model vs tracker on the shipped grid and the
    held-out configurations, per group and per component, plus the real-tensor tracker check."""

    grid = memory_report(dataset_path() if not paths else paths[0])
    parts = ["### Memory model vs PyTorch's FSDPMemTracker",
             "Ground truth: `shardmeter bench memory` (FSDPMemTracker around training steps of "
             "the project's model under FakeTensorMode with the fake process group, wrapped by "
             "`perfmodel/bench/recipe_wrap.py`, after a zero-gradient step created the AdamW "
             "state; the shipped grid and held-out files track one step each, `--steps 1`, "
             "recorded in their env.json); prediction: `perfmodel.costs.memory` (peak without the "
             "allocator reserve, which the tracker does not see). Command: "
             "`shardmeter validate cpu-x86-2core --memory`.",
             _summary_md(grid, "Grid dataset")]
    heldout_path = dataset_path(HELDOUT) if not paths or len(paths) < 2 else Path(paths[1])
    if heldout_path.is_file():
        parts.append(_summary_md(memory_report(heldout_path), "Held-out configurations"))
    comp = [(c["component"], f"{c['mean_tracker_gib']:.3f}", f"{c['mean_abs_diff_gib']:.4f}",
             f"{c['mean_abs_diff_pct_of_peak']:.3f}") for c in grid["components"]]
    parts.append(markdown_table(["component", "mean tracker GiB", "mean abs diff GiB",
                            "mean abs diff % of peak"], comp))
    real = dataset_path("memory-tracker-real.csv")
    if real.is_file():
        rows = list(csv.DictReader(real.open()))
        body = [(r["model"], r["seq_len"], r["micro_batch"], r["accum_steps"], r["accum_mode"],
                 r["ac"], f"{int(r['peak_bytes']) / 2**20:.3f}",
                 f"{int(r['allocator_peak_bytes']) / 2**20:.3f}",
                 f"{float(r['tracker_vs_allocator_pct']):+.4f}",
                 f"{int(r['allocator_retained_bytes']) / 2**20:.3f}",
                 f"{int(r['allocator_process_peak_bytes']) / 2**20:.3f}") for r in rows]
        parts.append("Is the tracker right? Real tensors, 2-rank gloo FSDP2 on this CPU "
                     "(`shardmeter bench memory --real`): tracker peak vs the CPU allocator's own "
                     "accounting (training thread) over an identical step (goal: within 5 %), "
                     "and the whole process. Where they differ, the difference is the FSDP "
                     "collective buffers (all-gather outputs, reduce-scatter inputs) whose free "
                     "the profiler did not record, because a gloo worker thread dropped the last "
                     "reference after Python (and so the tracker) had released them; they are "
                     "counted until their address is reused (retained MiB); whether a free is "
                     "lost depends on thread timing. gloo's own staging copies made inside c10d "
                     "ops are left out (NCCL keeps them outside the caching allocator).")
        parts.append(markdown_table(["case", "S", "m", "k", "accum", "AC", "tracker MiB",
                                "allocator MiB", "diff %", "retained MiB", "process MiB"], body))
        parts.append(tracker_agreement(rows))
    return "\n\n".join(parts)


def tracker_agreement(rows: Sequence[Mapping[str, str]]) -> str:
    """One sentence, computed from real-tensor rows (`bench memory --real`): in how many the
    tracker and the allocator agree exactly, in how many the allocator holds more than the
    tracker beyond the collective buffers whose free the profiler lost, and where the tracker
    counts more."""
    diff = [(r, int(r["allocator_peak_bytes"]) - int(r["peak_bytes"])) for r in rows]
    exact = sum(abs(d) <= EXACT_MATCH_BYTES for _, d in diff)
    above = sum(d > int(r["allocator_retained_bytes"]) + EXACT_MATCH_BYTES for r, d in diff)
    over = [f"{r['model']} m {r['micro_batch']} k {r['accum_steps']} "
            f"({float(r['tracker_vs_allocator_pct']):+.3f} %)"
            for r, d in diff if d < -EXACT_MATCH_BYTES]
    text = (f"On these {len(rows)} real-tensor runs FSDPMemTracker and the allocator agree within "
            f"{EXACT_MATCH_BYTES} B in {exact}/{len(rows)}; the allocator holds more than the "
            f"tracker beyond the lost-free collective buffers in {above}/{len(rows)}")
    return text + (f"; the tracker counts more in {', '.join(over)} (tracker vs allocator), "
                   "not explained here." if over else ".")
