"""Stage memory of pipelines of mixture-of-experts models (`perfmodel.costs.memory.pipeline_memory`
with MoE stages): against PyTorch's tracker on the shipped MoE stage grid and its held-out draw,
the draws themselves, a live tracker run of a dense-then-MoE model, and the CLI's states."""

from __future__ import annotations

import json
import math

import pytest

from perfmodel.costs.memory import pipeline_memory
from perfmodel.profiles.memory_validation import dataset_path
from perfmodel.profiles.pipeline_memory_validation import (
    MAPE_GOAL_PCT,
    MOE_DATASET,
    MOE_HELDOUT,
    WORST_GOAL_PCT,
    compare_pipeline_memory,
    pipeline_summary,
)
from perfmodel.spec.arch import ModelSpec, MoeSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.formulas import GIB
from perfmodel.spec.hf_config import load_hf_config
from perfmodel.spec.paths import REPO_ROOT
from perfmodel.spec.pipeline import stage_blocks
from perfmodel.spec.recipe import DEFAULT_RECIPE

# ---- against the tracker ------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "rows"), [(MOE_DATASET, 72), (MOE_HELDOUT, 16)])
def test_model_matches_the_tracker_on_moe_stages(name: str, rows: int) -> None:
    """MAPE <= 3 % and no row beyond 8 %, over the dataset and per schedule and AC mode."""
    records = compare_pipeline_memory(dataset_path(name))
    assert len(records) >= rows
    assert {r["ep"] for r in records} >= ({"1", "2", "4", "8"} if name == MOE_DATASET
                                          else {"1", "2", "4"})
    for group in pipeline_summary(records):
        assert group["mape_pct"] <= MAPE_GOAL_PCT, group
        assert group["worst_pct"] <= WORST_GOAL_PCT, group
    for record in records:
        assert record["in_flight_torch"] == record["in_flight_model"], record


# ---- the draws ----------------------------------------------------------------------------------

@pytest.mark.torch
@pytest.mark.parametrize("name", [MOE_DATASET, MOE_HELDOUT])
def test_shipped_moe_stage_dataset_is_its_draw(name: str) -> None:
    pytest.importorskip("torch")
    import csv

    from perfmodel.bench.common import CsvLog
    from perfmodel.bench.pipeline_memory import (
        MOE_KEY_COLUMNS,
        MOE_PIPELINE_COLUMNS,
        moe_grid_cases,
        moe_heldout_cases,
    )

    path = dataset_path(name)
    assert next(csv.reader(path.open())) == list(MOE_PIPELINE_COLUMNS)
    assert path.with_name(path.name + ".env.json").is_file()
    log = CsvLog(path, MOE_PIPELINE_COLUMNS, MOE_KEY_COLUMNS)
    cases = moe_grid_cases() if name == MOE_DATASET else moe_heldout_cases()
    assert log.done_keys() == {log.key_of(c.key()) for c in cases}


@pytest.mark.torch
def test_grid_and_heldout_draws_are_disjoint() -> None:
    pytest.importorskip("torch")
    from perfmodel.bench.pipeline_memory import moe_grid_cases, moe_heldout_cases

    grid, held = moe_grid_cases(), moe_heldout_cases()
    assert len(held) >= 12
    assert not {str(c.key()) for c in grid} & {str(c.key()) for c in held}
    for field in ("seq_len", "capacity_factor"):
        assert not {getattr(c, field) for c in grid} & {getattr(c, field) for c in held}
    assert not ({c.recipe.parallel.dp_shard for c in grid}
                & {c.recipe.parallel.dp_shard for c in held})
    # both grid shapes at every ep on pp 2 and 4
    for config in {c.config_id for c in grid}:
        assert {c.ep for c in grid if c.config_id == config} == {1, 2, 4, 8}
    assert {c.recipe.parallel.pp for c in grid} == {2, 4}


# ---- a live tracker run -------------------------------------------------------------------------

TINY = ModelSpec(name="tiny-moe", family="mixtral", hidden_size=64, num_layers=4, num_heads=4,
                 num_kv_heads=2, intermediate_size=128, vocab_size=256,
                 moe=MoeSpec(num_experts=4, experts_per_token=2, expert_intermediate_size=64,
                             moe_layers=(1, 2, 3)))
"""A dense first layer, then MoE layers: stage 0 of pp 2 holds a dense and an MoE block."""


@pytest.mark.torch
@pytest.mark.parametrize(("rank", "ac", "capacity_factor", "moment"), [
    (0, "full", 1.0, "moe_recompute_dispatch"), (1, "full", 1.0, "moe_recompute_dispatch"),
    (0, "none", 1.5, "moe_forward"), (0, "full", 1.5, "moe_recompute_dispatch")])
def test_live_tracker_run_of_moe_stages_matches_the_model(rank: int, ac: str,
                                                          capacity_factor: float,
                                                          moment: str) -> None:
    """torch's Schedule1F1B for one rank of pp 2 x dp_shard 2 with ep 2 (experts FSDP-sharded
    over dp_shard / ep = 1 rank), tracked now: the states to the byte (the dense and MoE blocks
    placed by global index), the peak within 3 %, the in-flight micro-batches, and the moment
    the model's peak lies at, the op where torch's tracker peaks in these runs: the combine
    all-to-all, inside the forward without checkpointing and inside the recompute under full
    checkpointing (`moe_dispatch_peak_bytes`, `moe_recompute_dispatch_bytes`)."""
    pytest.importorskip("torch")
    from perfmodel.bench.pipeline_memory import PipelineMemoryCase, run_case

    recipe = DEFAULT_RECIPE.with_overrides(ac=ac, pp=2, pp_schedule="1f1b", dp_shard=2,
                                           ep=2, moe_capacity_factor=capacity_factor)
    row = run_case(PipelineMemoryCase(config_id="tiny-moe", spec=TINY, seq_len=64,
                                      micro_batch=2, accum_steps=2, recipe=recipe, rank=rank,
                                      ep=2, capacity_factor=capacity_factor))
    predicted = pipeline_memory(TINY, num_gpus=4, seq_len=64, micro_batch=2, accum_steps=2,
                                recipe=recipe).ranks[rank]
    breakdown = predicted.breakdown
    assert breakdown.sharded_params_bytes == row["sharded_param_bytes"]
    assert breakdown.optimizer_states_bytes == row["optimizer_bytes"]
    error = (breakdown.tracked_bytes - row["peak_bytes"]) / row["peak_bytes"]
    assert abs(error) <= MAPE_GOAL_PCT / 100, (row, breakdown)
    assert row["in_flight"] == str(predicted.in_flight[0]) == str(2 - rank)
    # ceil(128 tokens x 2 / 4 experts x capacity factor)
    assert int(row["expert_capacity"]) == math.ceil(64 * capacity_factor)
    assert breakdown.phase.startswith(moment + "("), breakdown.phase


@pytest.mark.torch
def test_the_bench_refuses_ep_for_a_dense_model_and_op_sac_for_moe() -> None:
    pytest.importorskip("torch")
    from perfmodel.bench.pipeline_memory import PipelineMemoryCase
    from perfmodel.spec.catalog import get_model

    kw = {"seq_len": 32, "micro_batch": 1, "accum_steps": 2, "rank": 0}
    with pytest.raises(UserInputError, match="dense model"):
        PipelineMemoryCase(config_id="x", spec=get_model("tiny-llama"), ep=2,
                           recipe=DEFAULT_RECIPE.with_overrides(pp=2, dp_shard=2), **kw)
    with pytest.raises(UserInputError, match="op-sac"):
        PipelineMemoryCase(config_id="x", spec=TINY, ep=2, recipe=DEFAULT_RECIPE.with_overrides(
            pp=2, dp_shard=2, ac="op-sac"), **kw)


# ---- the CLI ------------------------------------------------------------------------------------

QWEN3 = "tests/data/configs/qwen3_30b_a3b/config.json"


def test_cli_prices_the_states_of_each_moe_stage(run_cli) -> None:  # type: ignore[no-untyped-def]
    """Qwen3-30B-A3B on 2 x 8 GPUs, pp 2, ep 8: each pipeline rank keeps 1/8 of its stage's
    parameters (the dense part over dp_shard 8, each rank's 128/8 experts whole: expert FSDP
    degree dp_shard / ep = 1), so master weights are 4 B and AdamW moments 8 B per parameter of
    the stage over 8, and the CLI's peak is the worst rank's, above those states."""
    result = run_cli("predict", QWEN3, "--gpu", "H100-SXM5-80GB", "--nodes", "2",
                     "--gpus-per-node", "8", "--seq-len", "4096", "--micro-batch", "1",
                     "--accum", "8", "--pp", "2", "--ep", "8", "--ac", "full", "--format",
                     "json")
    assert result.code == 0, result.err
    peak_gib = json.loads(result.out)["peak_gib"]
    spec = load_hf_config(REPO_ROOT / QWEN3)
    pp, dp_shard = 2, 8
    cuts = stage_blocks(spec.num_layers, pp)
    stage_params = [cuts[0] * spec.block_params + spec.embedding_params,
                    cuts[1] * spec.block_params + spec.norm_params + spec.lm_head_params]
    result_pp = pipeline_memory(spec, num_gpus=16, seq_len=4096, micro_batch=1, accum_steps=8,
                                recipe=DEFAULT_RECIPE.with_overrides(pp=2, ep=8, ac="full"))
    for rank, params in zip(result_pp.ranks, stage_params, strict=True):
        master = rank.breakdown.sharded_params_bytes
        assert master == pytest.approx(4 * params / dp_shard, rel=1e-4)
        assert rank.breakdown.optimizer_states_bytes >= 8 * params / dp_shard
        assert peak_gib * GIB >= rank.breakdown.sharded_params_bytes \
            + rank.breakdown.optimizer_states_bytes
    assert math.isclose(peak_gib, result_pp.worst.peak_bytes / GIB, rel_tol=1e-9)
