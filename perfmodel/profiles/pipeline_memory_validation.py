"""Stage memory against PyTorch: `perfmodel.costs.memory.pipeline_memory` on every row of the
pipeline tracker datasets (`python -m scripts.bench_pipeline_memory`).

`compare_pipeline_memory(path)` predicts the row's pipeline rank with the row's model, layout,
S, m, k and recipe fields and returns one record per row: tracked and predicted peak, the error,
the predicted moment, the in-flight micro-batches torch's runtime held and the ones
`perfmodel.spec.pipeline.in_flight` counts. `pipeline_summary(records)` groups the errors (all,
per schedule, per AC mode, per ground truth) into MAPE and worst case. No torch needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfmodel.costs.memory import MemoryConfig, RankMemory, pipeline_memory
from perfmodel.formatting import markdown_table
from perfmodel.profiles.memory_validation import dataset_path, read_rows, spec_of_row
from perfmodel.spec.formulas import GIB
from perfmodel.spec.recipe import named_recipe

DATASET = "memory-tracker-pipeline.csv"
"""The shipped pipeline grid under catalogs/profiles/data/."""
HELDOUT = "memory-tracker-pipeline-heldout.csv"
"""The 20 held-out pipeline configurations (a seeded draw; never used to build the model)."""
MOE_DATASET = "memory-tracker-moe-pipeline.csv"
"""The shipped grid of MoE stages (`perfmodel.bench.pipeline_memory.moe_grid_cases`)."""
MOE_HELDOUT = "memory-tracker-moe-pipeline-heldout.csv"
"""The held-out MoE stages (`moe_heldout_cases`, a seeded draw disjoint from the grid)."""
MAPE_GOAL_PCT = 3.0
WORST_GOAL_PCT = 8.0
"""Issue 24's done-when: MAPE <= 3 %, no row beyond 8 %."""

_REQUIRED = ("model", "family", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
             "tie_word_embeddings", "pp", "virtual_stages", "pp_schedule", "dp_shard", "tp",
             "rank", "seq_len", "micro_batch", "accum_steps", "ac", "recipe", "param_dtype",
             "reduce_dtype", "attention", "ground_truth", "in_flight", "peak_bytes")


def read_pipeline_rows(path: str | Path) -> list[dict[str, str]]:
    """Rows of a pipeline tracker CSV; DatasetError naming missing columns."""
    return read_rows(path, required=_REQUIRED,
                     create_hint="run `python -m scripts.bench_pipeline_memory --grid -o FILE`.",
                     writer="python -m scripts.bench_pipeline_memory")


def predict_pipeline_row(row: Mapping[str, str],
                         config: MemoryConfig | None = None) -> RankMemory:
    """The model's prediction for the pipeline rank of a tracker row."""
    pp, dp_shard, tp = int(row["pp"]), int(row["dp_shard"]), int(row["tp"])
    recipe = named_recipe(row["recipe"]).with_overrides(
        ac=row["ac"], param_dtype=row["param_dtype"], reduce_dtype=row["reduce_dtype"],
        attention=row["attention"], pp=pp, virtual_stages=int(row["virtual_stages"]),
        pp_schedule=row["pp_schedule"], dp_shard=dp_shard, tp=tp, ep=int(row.get("ep") or 1),
        moe_capacity_factor=float(row["capacity_factor"]) if row.get("capacity_factor")
        else None)
    result = pipeline_memory(spec_of_row(row), num_gpus=pp * dp_shard * tp,
                             seq_len=int(row["seq_len"]), micro_batch=int(row["micro_batch"]),
                             accum_steps=int(row["accum_steps"]), recipe=recipe,
                             config=config or MemoryConfig())
    return result.ranks[int(row["rank"])]


def compare_pipeline_row(row: Mapping[str, str]) -> dict[str, Any]:
    """One record: configuration, tracked and predicted peak (GiB), error %, moment, in-flight
    micro-batches (torch's runtime and the model's)."""
    rank = predict_pipeline_row(row)
    tracked = float(row["peak_bytes"])
    predicted = rank.breakdown.tracked_bytes
    out: dict[str, Any] = {k: row[k] for k in ("model", "num_hidden_layers", "pp_schedule", "pp",
                                               "virtual_stages", "dp_shard", "rank",
                                               "seq_len", "micro_batch", "accum_steps", "ac",
                                               "ground_truth")}
    out["ep"] = row.get("ep") or "1"
    out["tracker_gib"] = tracked / GIB
    out["model_gib"] = predicted / GIB
    out["error_pct"] = 100.0 * (predicted - tracked) / tracked
    out["moment"] = rank.breakdown.phase
    out["in_flight_torch"] = row["in_flight"]
    out["in_flight_model"] = "+".join(str(n) for n in rank.in_flight)
    return out


def compare_pipeline_memory(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Every row of a pipeline tracker dataset (default: the shipped grid) against the model."""
    return [compare_pipeline_row(r) for r in read_pipeline_rows(path or dataset_path(DATASET))]


def _group(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    errors = [abs(float(r["error_pct"])) for r in records]
    if not errors:
        return {"rows": 0, "mape_pct": float("nan"), "worst_pct": float("nan")}
    return {"rows": len(errors), "mape_pct": sum(errors) / len(errors), "worst_pct": max(errors)}


def pipeline_summary(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """MAPE and worst error: all rows, then per schedule, per AC mode and per ground truth."""
    out = [{"group": "all", **_group(records)}]
    for column, label in (("pp_schedule", "schedule"), ("ac", "ac"),
                          ("ground_truth", "ground truth")):
        for value in sorted({str(r[column]) for r in records}):
            out.append({"group": f"{label} {value}",
                        **_group([r for r in records if r[column] == value])})
    return out


def summary_markdown(records: Sequence[Mapping[str, Any]], title: str) -> str:
    """The summary as a markdown table under `title`, each group marked met / MISSED."""
    rows = [(g["group"], g["rows"], f"{g['mape_pct']:.2f}", f"{g['worst_pct']:.2f}",
             "met" if g["rows"] and g["mape_pct"] <= MAPE_GOAL_PCT
             and g["worst_pct"] <= WORST_GOAL_PCT else "MISSED")
            for g in pipeline_summary(records)]
    header = ["group", "rows", "MAPE %", "worst %",
              f"goal (<= {MAPE_GOAL_PCT:g} % / <= {WORST_GOAL_PCT:g} %)"]
    return f"{title}\n\n{markdown_table(header, rows)}"
