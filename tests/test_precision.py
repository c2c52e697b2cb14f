"""FP8 and torch.compile as recipe fields (`perfmodel.costs.precision`, issue 26 item 4).

FP8 is refused with a fix on GPUs without FP8 (A100); the bf16 eager recipe uses the profile
itself, so default predictions are unchanged to the last bit; FP8 is faster than bf16 on H100
but by less than the datasheet rate ratio; fp8_all_gather halves the linears' all-gather payload
and shrinks the gathered buffers; the compile flag is validated; recipe mappings, instances and
CLI flags parse the fields; the layout space enumerates compute_dtype when listed."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from perfmodel.api.predict import predict
from perfmodel.api.workload import WorkloadSpec
from perfmodel.costs.memory import memory_breakdown
from perfmodel.costs.precision import (
    block_linear_params,
    compute_effect,
    fp8_features,
    gathered_bytes,
    load_precision_catalog,
    recipe_cost_model,
)
from perfmodel.profiles.profile import default_profile
from perfmodel.sim.fsdp import unit_durations
from perfmodel.sim.layouts import island_layout_rows
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.errors import ConfigError, UserInputError
from perfmodel.spec.formulas import dtype_bytes
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout_space import LayoutSpace
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe, recipe_from_mapping
from planner.model.instance import Instance
from planner.model.island_table import table_arguments
from scripts.validate_fp8 import load_fp8_rows
from scripts.validate_layouts import load_runs

H100 = "H100-SXM5-80GB"
FP8 = DEFAULT_RECIPE.with_overrides(compute_dtype="fp8-tensorwise")


def _island(gpu_name: str, gpus: int = 8) -> IslandSpec:
    gpu = get_gpu(gpu_name)
    return IslandSpec(gpu=gpu, num_nodes=1, gpus_per_node=gpus, intra_link=gpu.intra_node_link,
                      inter_link=gpu.inter_node_link, nics_per_node=gpu.nics_per_node)


def _step_s(recipe: TrainingRecipe, gpu: str = H100, model: str = "llama-3.1-8b") -> float:
    return predict(WorkloadSpec(model_name=model, gpu_name=gpu, seq_len=4096,
                                recipe=recipe)).step_time_s


@pytest.mark.parametrize("dtype", ["fp8-tensorwise", "fp8-rowwise", "mxfp8"])
def test_fp8_is_refused_on_a100_with_a_fix(dtype: str) -> None:
    recipe = DEFAULT_RECIPE.with_overrides(compute_dtype=dtype)
    with pytest.raises(ConfigError) as err:
        _step_s(recipe, gpu="A100-SXM4-80GB")
    text = str(err.value)
    assert "A100-SXM4-80GB" in text and dtype in text and "To fix:" in text
    assert "--compute-dtype bf16" in text


def test_mxfp8_needs_blackwell() -> None:
    with pytest.raises(ConfigError, match="mxfp8 needs B200"):
        _step_s(DEFAULT_RECIPE.with_overrides(compute_dtype="mxfp8"))
    assert _step_s(DEFAULT_RECIPE.with_overrides(compute_dtype="mxfp8"), gpu="B200") > 0


def test_bf16_eager_uses_the_profile_itself() -> None:
    """Bit for bit: no scaled copy, and the all-gather payload is the old product."""
    profile = default_profile(H100)
    assert recipe_cost_model(profile, DEFAULT_RECIPE, get_gpu(H100)) is profile
    model = get_model("llama-3.1-8b")
    params = float(model.fsdp_units(4096)[0].params)
    assert gathered_bytes(params, block_linear_params(model), DEFAULT_RECIPE) == \
        params * dtype_bytes("bf16")


def test_fp8_is_faster_than_bf16_on_h100_but_by_less_than_the_rate_ratio() -> None:
    gpu = get_gpu(H100)
    assert gpu.fp8_flops_per_s is not None
    rate_ratio = gpu.fp8_flops_per_s / gpu.bf16_flops_per_s
    bf16, fp8 = _step_s(DEFAULT_RECIPE), _step_s(FP8)
    assert 1.0 < bf16 / fp8 < rate_ratio
    # the matmul factor is the datasheet rate ratio over the catalog's measured speedup
    effect = compute_effect(FP8, gpu)
    assert 1.0 / rate_ratio < effect.matmul_scale < 1.0 and effect.compile_scale == 1.0


@pytest.mark.parametrize(("dtype", "gpu", "lm_head"), [("fp8-tensorwise", H100, True),
                                                       ("fp8-rowwise", H100, True),
                                                       ("mxfp8", "B200", False)])
def test_only_the_linear_matmul_coefficients_change(dtype: str, gpu: str, lm_head: bool) -> None:
    """Attention and elementwise features keep their coefficients; the LM head goes float8
    except under mxfp8 (torchtitan's converters' default filters)."""
    assert ("tok_lm_head" in fp8_features(dtype)) is lm_head
    profile = default_profile(gpu)
    scaled = recipe_cost_model(profile, DEFAULT_RECIPE.with_overrides(compute_dtype=dtype),
                               get_gpu(gpu))
    assert scaled is not profile and scaled.provenance == "prior"
    changed = set()
    for phase in ("forward", "backward"):
        old, new = profile.compute[phase].coefficients, scaled.compute[phase].coefficients
        for name, value in old.items():
            if new[name] != value:
                assert new[name] < value
                changed.add(name)
    assert "tok_block_matmul" in changed and changed <= set(fp8_features(dtype))
    assert ("tok_lm_head" in changed) is lm_head
    assert scaled.compute["optimizer"] == profile.compute["optimizer"]


def test_fp8_all_gather_halves_the_linears_all_gather_payload() -> None:
    model = get_model("llama-3.1-8b")
    linears = block_linear_params(model)
    ag = FP8.with_overrides(fp8_all_gather=True)
    assert gathered_bytes(linears, linears, ag) == gathered_bytes(linears, linears, FP8) / 2
    island = _island(H100)
    plain = unit_durations(model, default_profile(H100), island, seq_len=4096, micro_batch=1,
                           recipe=FP8)
    halved = unit_durations(model, default_profile(H100), island, seq_len=4096, micro_batch=1,
                            recipe=ag)
    assert halved.block_all_gather_s < plain.block_all_gather_s
    assert halved.block_reduce_scatter_s == plain.block_reduce_scatter_s
    peak = {r.fp8_all_gather: memory_breakdown(model, num_gpus=8, seq_len=4096, micro_batch=1,
                                               recipe=r).peak_bytes for r in (FP8, ag)}
    assert peak[True] < peak[False]


def test_fp8_all_gather_needs_an_fp8_compute_dtype() -> None:
    with pytest.raises(UserInputError, match="fp8_all_gather") as err:
        DEFAULT_RECIPE.with_overrides(fp8_all_gather=True)
    assert "--compute-dtype" in str(err.value)


@pytest.mark.parametrize(("field", "value"), [("compile", "yes"), ("compile", 1),
                                              ("fp8_all_gather", "true"),
                                              ("compute_dtype", "fp8"), ("compute_dtype", "fp16")])
def test_bad_values_are_refused_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(UserInputError) as err:
        recipe_from_mapping({field: value}, source="r.yaml")
    assert "r.yaml" in str(err.value) and field in str(err.value) and "To fix:" in str(err.value)


def test_compile_is_a_sourced_prior_on_gpus_and_refused_on_the_cpu_device() -> None:
    compiled = DEFAULT_RECIPE.with_overrides(compile=True)
    effect = compute_effect(compiled, get_gpu(H100))
    row = next(r for r in load_precision_catalog() if r.effect == "compile")
    assert effect.compile_scale == 1.0 / row.speedup and effect.matmul_scale == 1.0
    assert row.source_url.startswith("https://")
    assert _step_s(compiled) < _step_s(DEFAULT_RECIPE)
    with pytest.raises(ConfigError, match="compile on CPU"):
        compute_effect(compiled, get_gpu("CPU-x86-2core"))


def test_every_catalog_row_names_its_source() -> None:
    rows = load_precision_catalog()
    assert {r.compute_dtype for r in rows if r.effect == "fp8_linear"} == {
        "fp8-tensorwise", "fp8-rowwise", "mxfp8"}
    assert all(r.source_url.startswith("https://") and r.speedup > 1 for r in rows)


def test_a_recipe_mapping_parses_the_fields() -> None:
    recipe = recipe_from_mapping({"compute_dtype": "fp8-rowwise", "fp8_all_gather": True,
                                  "compile": True}, source="r.yaml")
    assert (recipe.compute_dtype, recipe.fp8_all_gather, recipe.compile) == (
        "fp8-rowwise", True, True)


def test_the_cli_flags_reach_the_prediction(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("predict", "tiny-llama", "--gpu", H100, "--gpus-per-node", "2",
                     "--seq-len", "256", "--compute-dtype", "fp8-tensorwise",
                     "--fp8-all-gather", "--compile", "--format", "json")
    assert result.code == 0, result.err
    record = json.loads(result.out)
    record = record[0] if isinstance(record, list) else record
    assert record["compute_dtype"] == "fp8-tensorwise" and record["fp8_all_gather"] is True
    assert record["compile"] is True and record["provenance"] == "prior"
    assert record["compute_provenance"].startswith("prior")
    refused = run_cli("predict", "tiny-llama", "--gpu", "A100-SXM4-80GB", "--gpus-per-node",
                      "2", "--seq-len", "256", "--compute-dtype", "fp8-rowwise")
    assert refused.code == 2 and "A100-SXM4-80GB" in refused.err and "To fix:" in refused.err


def _instance(**training: object) -> Instance:
    return Instance.model_validate({
        "name": "t", "model": "tiny-llama",
        "training": {"seq_len": 256, "global_batch_seqs": 64, "train_tokens": 1e9,
                     "inner_steps": 10, **training},
        "clusters": [{"name": "a", "gpu": H100, "num_nodes": 1, "gpus_per_node": 8,
                      "price_usd_per_gpu_hour": 1.0, "wan_gbit_s": 1, "wan_latency_ms": 100}]})


def test_an_instance_pins_or_lists_compute_dtype() -> None:
    pinned = table_arguments(_instance(compute_dtype="fp8-tensorwise"))
    assert pinned["recipe"] == {"compute_dtype": "fp8-tensorwise"} and "parallel" not in pinned
    listed = table_arguments(_instance(compute_dtype=["bf16", "fp8-tensorwise"]))
    assert listed["parallel"]["compute_dtype"] == ["bf16", "fp8-tensorwise"]
    space = LayoutSpace.parse(listed["parallel"])
    assert space.compute_dtypes == ("bf16", "fp8-tensorwise") and space.tp == (1,)


def test_layout_space_parses_compute_dtype_and_names_bad_values() -> None:
    assert LayoutSpace.parse({"compute_dtype": "mxfp8"}).compute_dtypes == ("mxfp8",)
    assert LayoutSpace.parse(None, compute_dtype=["bf16"]).compute_dtypes == ("bf16",)
    with pytest.raises(UserInputError, match="training.parallel.compute_dtype") as err:
        LayoutSpace.parse({"compute_dtype": ["fp4"]})
    assert "To fix:" in str(err.value)


@pytest.mark.parametrize(("gpu", "expected"), [(H100, {"bf16", "fp8-tensorwise"}),
                                               ("A100-SXM4-80GB", {"bf16"})])
def test_the_layout_enumeration_includes_compute_dtype_when_allowed(gpu: str,
                                                                    expected: set[str]) -> None:
    model = get_model("tiny-llama")
    space = replace(LayoutSpace.fsdp(), compute_dtypes=("bf16", "fp8-tensorwise"))
    found = island_layout_rows(model, default_profile(gpu), _island(gpu, 2), seq_len=256,
                               space=space, recipe=DEFAULT_RECIPE, max_micro_batches=2)
    labels = set(found.rows["layout"])
    seen = {"fp8-tensorwise" if label.endswith("fp8-tensorwise") else "bf16" for label in labels}
    assert seen == expected
    assert len(found.rows) == len(found.rows[["layout", "ac", "micro_batch"]].drop_duplicates())


def test_every_fp8_validation_row_names_a_published_run_and_its_source() -> None:
    runs = {r["run_id"]: r for r in load_runs()}
    rows = load_fp8_rows()
    assert rows
    for row in rows:
        assert runs[row.run_id]["precision"] in ("fp8", "mxfp8"), row.run_id
        assert row.source_url.startswith("https://github.com/") and "/blob/" in row.source_url
        if row.bf16_run_id:
            partner = runs[row.bf16_run_id]
            assert partner["precision"] == "bf16" and partner["source_id"] == \
                runs[row.run_id]["source_id"]
