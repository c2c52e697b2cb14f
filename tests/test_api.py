"""The typed public API (`perfmodel.api.predict`) against facts computed independently of it: the
graph
simulation, the MFU definition, DiLoCo amortisation, the memory model and the CLI's own output."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from perfmodel import api
from perfmodel.profiles.profile import default_profile
from perfmodel.sim.fsdp import simulate_step, step_costs
from perfmodel.spec import catalog
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.recipe import named_recipe

MODEL, GPU, SEQ = "Llama-3.2-1B", "A100-PCIe-80GB", 1024


def _spec(**overrides: object) -> api.WorkloadSpec:
    values: dict[str, object] = {
        "model_name": MODEL, "gpu_name": GPU, "gpus_per_node": 8, "seq_len": SEQ, "micro_batch": 2,
        "accum": 2,
    }
    values.update(overrides)
    return api.WorkloadSpec(**values)  # type: ignore[arg-type]


def _direct_step_s(
    *, nodes: int = 1, gpus_per_node: int = 8, micro_batch: int = 2, accum: int = 2
) -> float:
    """The FSDP step makespan straight from the graph simulation, without the API."""
    model, gpu = catalog.get_model(MODEL), catalog.get_gpu(GPU)
    island = IslandSpec(
        gpu=gpu, num_nodes=nodes, gpus_per_node=gpus_per_node, intra_link=gpu.intra_node_link,
        inter_link=gpu.inter_node_link, nics_per_node=gpu.nics_per_node,
    )
    costs = step_costs(
        model, default_profile(gpu.name), island, seq_len=SEQ, micro_batch=micro_batch,
        recipe=named_recipe("torchtitan"),
    )
    return simulate_step(costs, accum_steps=accum).step_time_s


def test_fsdp_prediction_is_the_graph_makespan() -> None:
    p = api.predict(_spec())
    assert p.step_time_s == pytest.approx(_direct_step_s(), rel=1e-12)
    assert p.record["inner_step_time_s"] == p.step_time_s == p.record["step_time_s"]
    assert p.islands == 1 and p.strategy == "fsdp"


def test_mfu_is_model_flops_over_time_times_peak() -> None:
    p = api.predict(_spec(nodes=2))
    model, gpu = catalog.get_model(MODEL), catalog.get_gpu(GPU)
    gpus = 2 * 8
    tokens = 2 * 2 * SEQ * gpus  # m · k · S per GPU, every GPU
    expected = (
        model.model_flops_per_token(SEQ) * tokens / (p.step_time_s * gpu.bf16_flops_per_s * gpus)
    )
    assert p.mfu == pytest.approx(expected, rel=1e-9)
    assert p.tokens_per_s == pytest.approx(tokens / p.step_time_s, rel=1e-12)
    assert 0 < p.mfu < 1


def test_diloco_amortises_the_outer_step_over_h() -> None:
    fsdp = api.predict(_spec())
    h10 = api.predict(_spec(), api.OuterSpec(strategy="diloco", inner_steps=10))
    h1000 = api.predict(_spec(), api.OuterSpec(strategy="diloco", inner_steps=1000))
    # the same inner step; the outer sync + optimizer step cost (sync + opt) / H per step
    assert h10.record["inner_step_time_s"] == pytest.approx(fsdp.step_time_s)
    outer_10 = h10.step_time_s - fsdp.step_time_s
    outer_1000 = h1000.step_time_s - fsdp.step_time_s
    assert outer_10 == pytest.approx(
        h10.record["outer_sync_s"] / 10 + h10.record["outer_optimizer_s"] / 10
    )
    assert outer_10 == pytest.approx(100 * outer_1000, rel=1e-9)
    assert h10.islands == 2  # DiLoCo defaults to two islands
    # two islands train twice the tokens of one in (nearly) the same time
    assert h1000.tokens_per_s == pytest.approx(
        2 * fsdp.tokens_per_s * fsdp.step_time_s / h1000.step_time_s
    )


def test_faster_wan_never_slows_streaming() -> None:
    slow = api.predict(_spec(), api.OuterSpec(strategy="streaming-diloco", wan_gbit_s=0.1))
    fast = api.predict(_spec(), api.OuterSpec(strategy="streaming-diloco", wan_gbit_s=100.0))
    assert fast.step_time_s <= slow.step_time_s
    assert 0 < slow.record["compute_utilisation"] <= fast.record["compute_utilisation"] <= 1
    assert fast.step_time_s == pytest.approx(
        fast.record["inner_step_time_s"] / fast.record["compute_utilisation"]
    )


def test_memory_matches_the_prediction_and_fits_rule() -> None:
    p = api.predict(_spec())
    fit = api.memory(p.workload)
    assert (
        p.record["peak_gib"] == fit.peak_gib and p.record["max_micro_batch"] == fit.max_micro_batch
    )
    assert fit.fits == (fit.peak_gib <= fit.usable_memory_gib)
    bigger = api.memory(
        api.WorkloadSpec(model_name=MODEL, gpu_name=GPU, seq_len=SEQ, micro_batch=8).resolve()
    )
    assert bigger.peak_gib > fit.peak_gib  # more activations per GPU


def test_long_accumulation_is_linear_in_k() -> None:
    # beyond SIMULATED_ACCUM_MAX the API extends in closed form; it must equal a full simulation
    p = api.predict(_spec(accum=20))
    assert p.step_time_s == pytest.approx(_direct_step_s(accum=20), rel=1e-9)


def test_simulate_fsdp_agrees_with_predict() -> None:
    sim = api.simulate(_spec())
    assert sim.summary["step_time_s"] == pytest.approx(api.predict(_spec()).step_time_s)
    assert sim.spans and sim.summary["compute_busy_s"] <= sim.summary["step_time_s"]


def test_simulate_diloco_outer_step() -> None:
    sim = api.simulate(_spec(), api.OuterSpec(strategy="diloco", inner_steps=5))
    s = sim.summary
    assert s["inner_steps"] == 5
    assert s["amortised_step_s"] == pytest.approx(s["outer_step_s"] / 5)
    assert s["outer_step_s"] >= 5 * s["inner_step_time_s"]


def test_sweep_rows_match_single_predictions() -> None:
    result = api.sweep(
        [MODEL], gpu_name=GPU, nodes=[1], gpus_per_node=[4, 8], seq_len=SEQ, micro_batches=[1, 2]
    )
    assert len(result.table) == 4 and len(result.summary) == len(result.workloads) == 2
    row = result.table[(result.table.gpus == 8) & (result.table.micro_batch == 2)].iloc[0]
    assert row.step_time_s == pytest.approx(_direct_step_s(accum=1), rel=1e-9)


def test_streaming_examples_and_user_case() -> None:
    recipe = named_recipe("torchtitan")
    study = api.streaming(
        MODEL,
        api.OuterSpec(strategy="streaming-diloco", islands=2),
        gpu_name=None,
        recipe=recipe,
        example="all",
    )
    assert [r["case"] for r in study.records] == ["A", "B", "C", "D"]
    assert len(study.panels) == 4
    user = api.streaming(MODEL, api.OuterSpec(strategy="streaming-diloco", islands=2), gpu_name=GPU,
                         seq_len=SEQ, recipe=recipe)
    assert [r["case"] for r in user.records] == ["user"]
    assert user.records[0]["fragments"] == 3 and user.records[0]["delay_steps"] == 2  # CLI defaults


def test_bandwidth_reaches_its_targets() -> None:
    table = api.bandwidth_for_utilisation(
        MODEL, api.OuterSpec(islands=2), targets=[0.5, 0.9], gpu_name=None,
        recipe=named_recipe("torchtitan"), step_time_s=0.5,
    )
    assert [r["utilisation"] for r in table.rows] == [0.5, 0.9]
    reached = [r for r in table.rows if r["gbit_s"] is not None]
    assert reached and all(r["reached_utilisation"] >= r["utilisation"] - 1e-6 for r in reached)
    if len(reached) == 2:
        assert reached[0]["gbit_s"] <= reached[1]["gbit_s"]


def test_invalid_input_names_the_flag() -> None:
    with pytest.raises(UserInputError, match="--islands 3 with --strategy fsdp"):
        api.predict(_spec(), api.OuterSpec(islands=3))
    with pytest.raises(UserInputError, match="--micro-batch 0"):
        api.predict(_spec(micro_batch=0))


def test_cli_predict_json_is_the_api_record(run_cli: Callable[..., Any]) -> None:
    out = run_cli(
        "predict", MODEL, "--gpu", GPU, "--seq-len", str(SEQ), "--micro-batch", "2", "--accum", "2",
        "--format", "json",
    )
    assert out.code == 0, out.err
    printed = json.loads(out.out)
    record = api.predict(_spec()).record
    assert printed["step_time_s"] == pytest.approx(record["step_time_s"])
    assert printed["mfu"] == pytest.approx(record["mfu"])
    assert printed["schema_version"] == 3  # the only key the CLI adds (2: issue 29, 3: issue 27)
    assert [k for k in printed if k not in ("recipe", "schema_version")] == list(record)
