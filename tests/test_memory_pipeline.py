"""Stage memory of pipeline ranks (`perfmodel.costs.memory.pipeline_memory`, issue 24 item 4):
against PyTorch's tracker on the shipped pipeline grid and the 20 held-out configurations, a
live tracker run, and the in-flight arithmetic."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.costs import memory as mem
from perfmodel.costs.memory import pipeline_memory
from perfmodel.profiles.memory_validation import dataset_path
from perfmodel.profiles.pipeline_memory_validation import (
    DATASET,
    HELDOUT,
    MAPE_GOAL_PCT,
    WORST_GOAL_PCT,
    compare_pipeline_memory,
    pipeline_summary,
)
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.pipeline import in_flight, stage_blocks
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")


def _recipe(schedule: str = "1f1b", pp: int = 4, v: int = 1, dp_shard: int = -1,
            ac: str = "op-sac") -> TrainingRecipe:
    return DEFAULT_RECIPE.with_overrides(ac=ac, pp=pp, virtual_stages=v, pp_schedule=schedule,
                                         dp_shard=dp_shard)


def _cut(name: str, layers: int) -> object:
    spec = get_model(name)
    return dataclasses.replace(spec, name=f"{spec.name} [{layers} blocks]", num_layers=layers,
                               published_params=None)


# ---- against the tracker ------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "rows"), [(DATASET, 60), (HELDOUT, 20)])
def test_model_matches_the_tracker(name: str, rows: int) -> None:
    """The done-when: MAPE <= 3 % and no row beyond 8 %, over the dataset and per schedule."""
    path = dataset_path(name)
    if not path.is_file():
        pytest.skip(f"{path} not shipped")
    records = compare_pipeline_memory(path)
    assert len(records) >= rows
    groups = {g["group"]: g for g in pipeline_summary(records)}
    for schedule in SCHEDULES:
        assert groups[f"schedule {schedule}"]["rows"] >= (3 if name == HELDOUT else 10)
    for group in groups.values():
        assert group["mape_pct"] <= MAPE_GOAL_PCT, group
        assert group["worst_pct"] <= WORST_GOAL_PCT, group


@pytest.mark.parametrize("name", [DATASET, HELDOUT])
def test_in_flight_equals_what_torch_held(name: str) -> None:
    """The micro-batches torch's runtime held between forward and backward (the length of each
    stage's forward cache, recorded per row) are the schedule's in-flight counts."""
    path = dataset_path(name)
    if not path.is_file():
        pytest.skip(f"{path} not shipped")
    for record in compare_pipeline_memory(path):
        assert record["in_flight_torch"] == record["in_flight_model"], record


# ---- the in-flight arithmetic -------------------------------------------------------------------

@pytest.mark.parametrize(("schedule", "pp", "v", "k"), [
    ("gpipe", 4, 1, 4), ("gpipe", 4, 1, 8), ("1f1b", 4, 1, 4), ("1f1b", 4, 1, 12),
    ("1f1b", 8, 1, 8), ("interleaved-1f1b", 2, 2, 4), ("interleaved-1f1b", 4, 2, 8)])
def test_every_rank_holds_what_its_schedule_implies(schedule: str, pp: int, v: int,
                                                    k: int) -> None:
    result = pipeline_memory(_cut("llama-3-8b", 16), num_gpus=8 * pp, seq_len=1024,
                             micro_batch=1, accum_steps=k, recipe=_recipe(schedule, pp, v))
    for rank in result.ranks:
        expected = in_flight(schedule, pp, v, k, rank.rank)
        assert rank.in_flight == tuple(expected[s] for s in rank.stages)
        if schedule == "gpipe":
            assert rank.in_flight == (k,)
        elif schedule == "1f1b":
            assert rank.in_flight == (min(k, pp - rank.rank),)


def _peak_slope_per_sequence(recipe: TrainingRecipe, k: int, rank: int) -> float:
    spec = _cut("llama-3-8b", 8)
    one, two = (pipeline_memory(spec, num_gpus=32, seq_len=2048, micro_batch=m,
                                accum_steps=k, recipe=recipe).ranks[rank].breakdown
                for m in (1, 2))
    return float(two.tracked_bytes - one.tracked_bytes)


def test_gpipe_memory_grows_with_every_micro_batch_and_1f1b_does_not() -> None:
    """Per extra micro-batch per step, GPipe holds one more micro-batch of saves; 1F1B holds
    pp - rank however many there are, and only the step's token ids and receive buffers (one
    per micro-batch) grow."""
    spec = _cut("llama-3-8b", 8)
    S, h, b = 2048, spec.hidden_size, 2

    def peak(schedule: str, k: int, rank: int) -> int:
        return pipeline_memory(spec, num_gpus=32, seq_len=S, micro_batch=1, accum_steps=k,
                               recipe=_recipe(schedule, 4, ac="full")).ranks[rank] \
            .breakdown.tracked_bytes

    # middle rank under full AC: a micro-batch holds its two blocks' inputs and the stage
    # output, minus the first block's input, which is the receive buffer (2 x b·h per token)
    held = 2 * b * h * S
    recv = 2 * b * h * S               # an activation and a gradient receive buffer per mb
    assert peak("gpipe", 8, 1) - peak("gpipe", 4, 1) == 4 * (held + recv)
    assert peak("1f1b", 8, 1) - peak("1f1b", 4, 1) == 4 * recv


def test_interleaving_needs_more_activation_memory_than_1f1b() -> None:
    spec = _cut("llama-3-8b", 16)
    kw = {"num_gpus": 32, "seq_len": 4096, "micro_batch": 2, "accum_steps": 8}
    one = pipeline_memory(spec, recipe=_recipe("1f1b", 4, ac="none"), **kw)
    inter = pipeline_memory(spec, recipe=_recipe("interleaved-1f1b", 4, 2, ac="none"), **kw)
    gpipe = pipeline_memory(spec, recipe=_recipe("gpipe", 4, ac="none"), **kw)
    assert one.ranks[0].breakdown.activations_bytes < inter.ranks[0].breakdown.activations_bytes \
        < gpipe.ranks[0].breakdown.activations_bytes


# ---- the API ------------------------------------------------------------------------------------

def test_the_worst_rank_is_named_with_its_stages_and_blocks() -> None:
    spec = get_model("llama-3.1-405b")
    result = pipeline_memory(spec, num_gpus=2048 * 8, seq_len=8192, micro_batch=1,
                             accum_steps=16, recipe=DEFAULT_RECIPE.with_overrides(
                                 ac="full", tp=8, pp=16))
    assert [r.blocks for r in result.ranks][:2] == [((0, 7),), ((7, 15),)]
    assert stage_blocks(126, 16)[0] == 7
    worst = result.ranks[result.worst_rank]
    assert worst.breakdown is result.worst
    assert result.worst.peak_bytes == max(r.breakdown.peak_bytes for r in result.ranks)
    text = worst.describe()
    assert text.startswith(f"pipeline rank {worst.rank}: stage {worst.rank} (blocks ")
    assert "embedding" in result.ranks[0].describe()
    assert "LM head" in result.ranks[15].describe()
    # 1F1B: the first rank holds pp micro-batches, the last one
    assert result.ranks[0].in_flight == (16,) and result.ranks[15].in_flight == (1,)


def test_memory_breakdown_and_max_micro_batch_use_the_worst_rank() -> None:
    spec = _cut("llama-3-8b", 16)
    recipe = _recipe("1f1b", 4, ac="op-sac")
    kw = {"num_gpus": 32, "seq_len": 4096, "accum_steps": 8, "recipe": recipe}
    assert mem.memory_breakdown(spec, micro_batch=2, **kw) == \
        pipeline_memory(spec, micro_batch=2, **kw).worst
    coefficients = mem.memory_coefficients(spec, **kw)
    for m in (1, 2, 3, 5, 8):
        assert coefficients.peak_bytes(m) == mem.memory_breakdown(spec, micro_batch=m,
                                                                  **kw).peak_bytes
    budget = mem.memory_breakdown(spec, micro_batch=3, **kw).peak_bytes + 1
    m = mem.max_micro_batch(spec, gpu_memory_bytes=budget, **kw)
    assert m == 3


def test_one_stage_is_the_fsdp_model() -> None:
    spec = get_model("llama-3-8b")
    result = pipeline_memory(spec, num_gpus=8, seq_len=2048, micro_batch=1, accum_steps=2)
    assert result.worst == mem.memory_breakdown(spec, num_gpus=8, seq_len=2048, micro_batch=1,
                                                accum_steps=2)
    assert result.ranks[0].blocks == ((0, 32),)


def test_states_are_sharded_over_dp_shard() -> None:
    spec = _cut("llama-3-8b", 8)

    def states(dp: int) -> int:
        b = pipeline_memory(spec, num_gpus=4 * dp, seq_len=1024, micro_batch=1, accum_steps=4,
                            recipe=_recipe("1f1b", 4, dp_shard=dp)).ranks[1].breakdown
        return b.sharded_params_bytes + b.optimizer_states_bytes

    tensors = 9 * 2 * 4                 # AdamW's fp32 step count per parameter tensor
    assert states(1) - tensors == 8 * (states(8) - tensors)


@pytest.mark.parametrize(("recipe", "accum", "match"), [
    (_recipe("1f1b", 4), 2, "at least pp micro-batches"),
    (_recipe("interleaved-1f1b", 4, 4), 8, "a stage would hold none"),
])
def test_layouts_that_cannot_run_are_user_errors(recipe: TrainingRecipe, accum: int,
                                                 match: str) -> None:
    with pytest.raises(UserInputError, match=match):
        pipeline_memory(_cut("llama-3-8b", 8), num_gpus=32, seq_len=1024, micro_batch=1,
                        accum_steps=accum, recipe=recipe)


# ---- a live tracker run -------------------------------------------------------------------------

@pytest.mark.torch
@pytest.mark.parametrize("rank", [0, 1])
def test_live_tracker_run_matches_the_model(rank: int) -> None:
    """torch's Schedule1F1B for one rank of pp 2 x dp_shard 2 (tiny model, 4 blocks) under the
    fake process group, tracked now: the peak within 3 %, the in-flight micro-batches and the
    receive buffers exactly."""
    pytest.importorskip("torch")
    from perfmodel.bench.pipeline_memory import PipelineMemoryCase, run_case, with_layers

    spec = with_layers(get_model("tiny-llama"), 4)
    recipe = _recipe("1f1b", 2, dp_shard=2, ac="none")
    row = run_case(PipelineMemoryCase(config_id="tiny-llama", spec=spec, seq_len=64,
                                      micro_batch=2, accum_steps=4, recipe=recipe, rank=rank))
    predicted = pipeline_memory(spec, num_gpus=4, seq_len=64, micro_batch=2, accum_steps=4,
                                recipe=recipe).ranks[rank]
    error = (predicted.breakdown.tracked_bytes - row["peak_bytes"]) / row["peak_bytes"]
    assert abs(error) <= MAPE_GOAL_PCT / 100, (row, predicted)
    assert row["in_flight"] == str(predicted.in_flight[0]) == str(2 - rank)
    assert row["step1_peak_bytes"] == row["peak_bytes"]     # the steady state from step 1
    # one receive buffer per micro-batch: activations into rank 1, gradients into rank 0
    assert row["recv_buffer_bytes"] == 4 * 2 * 64 * spec.hidden_size * 2


@pytest.mark.torch
def test_bench_rows_are_written_once_and_resumed(tmp_path: object) -> None:
    pytest.importorskip("torch")
    from pathlib import Path

    from perfmodel.bench.common import CsvLog
    from perfmodel.bench.pipeline_memory import (
        COLUMNS,
        KEY_COLUMNS,
        PipelineMemoryCase,
        run_cases,
        with_layers,
    )

    out = Path(str(tmp_path)) / "pp.csv"
    case = PipelineMemoryCase(config_id="tiny-llama", spec=with_layers(get_model("tiny-llama"), 2),
                              seq_len=32, micro_batch=1, accum_steps=2,
                              recipe=_recipe("gpipe", 2, dp_shard=1, ac="full"), rank=1)
    assert run_cases([case], out) == {"measured": 1, "skipped": 0}
    assert run_cases([case], out) == {"measured": 0, "skipped": 1}
    rows = CsvLog(out, COLUMNS, KEY_COLUMNS).rows()
    assert len(rows) == 1 and rows[0]["ground_truth"] == "fake-pg-fsdpmemtracker"
    assert (out.parent / "pp.csv.env.json").is_file()


@pytest.mark.torch
def test_the_bench_refuses_what_it_does_not_run() -> None:
    pytest.importorskip("torch")
    from perfmodel.bench.pipeline_memory import PipelineMemoryCase

    spec = get_model("tiny-llama")
    with pytest.raises(UserInputError, match="pp x dp_shard only"):
        PipelineMemoryCase(config_id="x", spec=spec, seq_len=32, micro_batch=1, accum_steps=2,
                           recipe=DEFAULT_RECIPE.with_overrides(pp=2, tp=2, dp_shard=1), rank=0)
    with pytest.raises(UserInputError, match="explicit dp_shard"):
        PipelineMemoryCase(config_id="x", spec=spec, seq_len=32, micro_batch=1, accum_steps=2,
                           recipe=DEFAULT_RECIPE.with_overrides(pp=2), rank=0)
