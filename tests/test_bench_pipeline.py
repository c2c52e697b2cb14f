"""Pipeline benchmark: the stage split computes the model, the case plan, a real 2-rank gloo run
with resume, and the comparison through `perfmodel.api.predict`."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.hf_config import spec_from_hf_config
from perfmodel.spec.paths import catalog_dir

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from perfmodel.bench import pipeline  # noqa: E402
from perfmodel.bench.model import build_model, random_tokens  # noqa: E402
from perfmodel.bench.pipeline_stages import (  # noqa: E402
    scaled_loss,
    shifted_labels,
    stage_modules,
)
from perfmodel.spec.arch import ModelSpec  # noqa: E402

TINY = """
seq_len: 16
micro_batches: [1]
schedules:
  - {pp_schedule: gpipe, grad_accum: [2]}
  - {pp_schedule: interleaved-1f1b, virtual_stages: 2, grad_accum: [2]}
shapes:
  - {model: tiny-llama, name: t-llama, num_hidden_layers: 4}
"""


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize(("pp", "v"), [(2, 1), (2, 2), (3, 1), (2, 3)])
def test_the_stages_in_order_compute_the_whole_model(pp: int, v: int) -> None:
    """Chaining every stage (embedding on the first, head on the last, the simulator's block
    cut) gives the unsplit model's loss; the scaled loss over k micro-batches sums to it."""
    spec = ModelSpec(name="t", hidden_size=32, num_layers=7, num_heads=4, num_kv_heads=2,
                     intermediate_size=64, vocab_size=128)
    model = build_model(spec, seed=0)
    tokens = random_tokens(spec, 4, 16, seed=3)
    stages = {}
    for rank in range(pp):
        stages.update(stage_modules(model, pp, v, rank))
    assert sorted(stages) == list(range(pp * v))
    assert sum(len(m.layers) for m in stages.values()) == spec.num_layers
    with torch.no_grad():
        h = tokens
        for s in sorted(stages):
            h = stages[s](h)
        k = 2
        labels = shifted_labels(tokens)
        split = sum(scaled_loss(k)(logits, target)
                    for logits, target in zip(h.chunk(k), labels.chunk(k), strict=True))
        whole = model(tokens)
    assert torch.allclose(split, whole, rtol=1e-5)


def test_a_tied_head_is_refused() -> None:
    model = build_model(get_model("tiny-gqa"), seed=0)   # tie_word_embeddings: true
    with pytest.raises(UserInputError, match="tied"):
        stage_modules(model, 2, 1, 0)


def test_load_cases_expands_shapes_and_schedules(tmp_path: Path) -> None:
    space = tmp_path / "p.yaml"
    space.write_text(TINY)
    cases = pipeline.load_cases(space)
    assert [(c.config_id, c.pp_schedule, c.virtual_stages, c.grad_accum) for c in cases] == [
        ("t-llama", "gpipe", 1, 2), ("t-llama", "interleaved-1f1b", 2, 2)]
    assert pipeline.PipelineCase.from_json(cases[1].to_json()) == cases[1]
    shipped = pipeline.load_cases(catalog_dir() / "spaces" / "pipeline-cpu.yaml")
    assert len(shipped) == 18
    assert {c.pp_schedule for c in shipped} == {"gpipe", "1f1b", "interleaved-1f1b"}
    for case in shipped:
        case.check(2, "shipped space")


@pytest.mark.parametrize(("text", "match"), [
    ("schedules: [{pp_schedule: zigzag, grad_accum: [2]}]", "zigzag"),
    ("schedules: [{pp_schedule: 1f1b, grad_accum: [2], extra: 1}]", "extra"),
    ("schedules: [{pp_schedule: 1f1b}]", "grad_accum"),
])
def test_load_cases_errors(tmp_path: Path, text: str, match: str) -> None:
    space = tmp_path / "bad.yaml"
    space.write_text(text + "\nshapes: [{model: tiny-llama}]\n")
    with pytest.raises(UserInputError, match=match):
        pipeline.load_cases(space)


def test_cases_that_cannot_run_name_the_rule(tmp_path: Path) -> None:
    space = tmp_path / "p.yaml"
    space.write_text(TINY.replace("gpipe, grad_accum: [2]", "1f1b, grad_accum: [1]"))
    case = pipeline.load_cases(space)[0]
    with pytest.raises(UserInputError, match="at least pp micro-batches") as err:
        case.check(2, "p.yaml")
    assert "--accum 2" in err.value.hint
    tied = pipeline.PipelineCase("tied", get_model("tiny-gqa"), 16, 1, 2, "gpipe")
    with pytest.raises(UserInputError, match="tied"):
        tied.check(2, "p.yaml")


def test_llama_config_round_trips_the_shape() -> None:
    for spec in (get_model("small-llama"), ModelSpec(
            name="x", hidden_size=96, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=32,
            intermediate_size=160, vocab_size=300)):
        back = spec_from_hf_config(pipeline.llama_config(spec), name=spec.name)
        assert back == spec


def test_bench_pipeline_bad_input_exits_2(run_cli, tmp_path: Path) -> None:
    space = tmp_path / "p.yaml"
    space.write_text(TINY)
    out = tmp_path / "p.csv"
    result = run_cli("bench", "pipeline", "--space", str(space), "-o", str(out), "--nproc", "1")
    assert result.code == 2 and "To fix:" in result.err and "2 ranks" in result.err
    # 3 ranks x 2 virtual stages = 6 stages for 4 blocks
    result = run_cli("bench", "pipeline", "--space", str(space), "-o", str(out), "--nproc", "3")
    assert result.code == 2 and "hold none" in result.err and "To fix:" in result.err
    assert not out.exists()


@pytest.mark.slow
def test_bench_pipeline_gloo_two_ranks_runs_and_resumes(run_cli, tmp_path: Path) -> None:
    space = tmp_path / "p.yaml"
    space.write_text(TINY)
    out = tmp_path / "p.csv"
    args = ["bench", "pipeline", "--space", str(space), "--nproc", "2", "-o", str(out),
            "--iters", "2", "--warmup", "1", "--param-dtype", "fp32", "--reduce-dtype", "fp32",
            "--ac", "none"]
    first = run_cli(*args)
    assert first.code == 0, first.err
    rows = _rows(out)
    assert list(rows[0]) == list(pipeline.COLUMNS) and len(rows) == 2
    assert [(r["pp_schedule"], r["virtual_stages"], r["pp"]) for r in rows] == [
        ("gpipe", "1", "2"), ("interleaved-1f1b", "2", "2")]
    assert all(float(r["step_time_s"]) > 0 for r in rows)
    recipe = json.loads(rows[1]["recipe"])
    assert recipe["parallel"]["pp"] == 2 and recipe["parallel"]["dp_shard"] == 1
    assert recipe["parallel"]["pp_schedule"] == "interleaved-1f1b" and recipe["ac"] == "none"
    second = run_cli(*args)  # everything is there: nothing is measured again
    assert second.code == 0, second.err
    assert _rows(out) == rows
    env = json.loads(Path(f"{out}.env.json").read_text())
    assert env["sessions"][-1]["benchmark"] == "pipeline"


def test_compare_predicts_every_row_through_predict(tmp_path: Path) -> None:
    """The comparison is the prediction API's step (`perfmodel.api.predict.simulate`) of the
    row's model, layout and profile: the figure a direct call gives (the measured times here are
    placeholders, 1 s)."""
    from perfmodel.api.predict import simulate
    from perfmodel.api.workload import WorkloadSpec
    from perfmodel.profiles.fsdp_compare import recipe_cell
    from perfmodel.spec.layout import ParallelLayout
    from perfmodel.spec.recipe import DEFAULT_RECIPE

    spec = get_model("small-llama")
    data = tmp_path / "p.csv"
    recipe = DEFAULT_RECIPE.with_overrides(param_dtype="fp32", reduce_dtype="fp32", ac="none")
    rows = []
    for schedule, v, k in (("gpipe", 1, 2), ("1f1b", 1, 4), ("interleaved-1f1b", 2, 4)):
        r = replace(recipe, parallel=ParallelLayout(dp_shard=1, pp=2, virtual_stages=v,
                                                    pp_schedule=schedule))
        rows.append({
            "model": "pp-small-llama", "family": "llama", "hidden_size": spec.hidden_size,
            "num_hidden_layers": spec.num_layers, "num_attention_heads": spec.num_heads,
            "num_key_value_heads": spec.num_kv_heads, "head_dim": spec.d,
            "intermediate_size": spec.intermediate_size, "vocab_size": spec.vocab_size,
            "tie_word_embeddings": "false", "seq_len": 128, "micro_batch": 1, "grad_accum": k,
            "pp": 2, "virtual_stages": v, "pp_schedule": schedule, "world_size": 2,
            "backend": "gloo", "link": "gloo-loopback", "device": "cpu", "dtype": "float32",
            "threads": 1, "step_time_s": 1.0, "step_time_iqr_s": 0.0, "iters": 1,
            "recipe": recipe_cell(r)})
    with data.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(pipeline.COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    profile = str(catalog_dir() / "profiles" / "cpu-x86-2core.yaml")
    out = pipeline.compare_pipeline(data, profile)
    assert len(out) == 3
    for row, got in zip(rows, out, strict=True):
        layout = ParallelLayout(dp_shard=1, pp=2, virtual_stages=int(row["virtual_stages"]),
                                pp_schedule=str(row["pp_schedule"]))
        direct = simulate(WorkloadSpec(
            model_name="small-llama", gpu_name="CPU-x86-2core", nodes=1, gpus_per_node=2,
            seq_len=128, micro_batch=1, accum=int(row["grad_accum"]), profile_name=profile,
            recipe=replace(recipe, parallel=layout)))
        assert got["predicted_s"] == pytest.approx(direct.step.step_time_s, rel=1e-12)
        assert got["ratio"] == pytest.approx(direct.step.step_time_s)
        assert got["worst_stage"] == direct.summary["worst_stage"]
    summary = pipeline.pipeline_summary(out)
    assert summary["rows"] == 3
