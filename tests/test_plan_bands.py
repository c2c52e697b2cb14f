"""The p10/p90 band of every plan of `plan` and `pareto` (planner.model.uncertainty.PlanBands).

The error model is the one `--quantile` plans are solved under: one uniform U drives every
residual group, an island's step time is its predicted one times F_g⁻¹(U) of its group. These
tests sample that model (Monte Carlo) over each plan's islands, computing wall time, cost,
tokens/s and energy from the plan's own figures (not through the scaled-table shortcut the band
uses), and check that every reported band end is a p-quantile of the sample.
"""

from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest

from perfmodel.spec.formulas import J_PER_KWH
from planner import api
from planner.model.energy import island_coefficients
from planner.model.evaluate import cost_usd, wall_time_s
from planner.model.island_table import load_island_table
from planner.model.problem import Plan, Problem
from planner.model.uncertainty import ErrorModel, cluster_groups
from planner.schemas import load_schema

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "instances" / "paper-case-study.yaml"
TWO = ROOT / "instances" / "small-two-clusters.yaml"
SAMPLES = 20_000
MIXED = ErrorModel.from_ratios({
    "prior": np.linspace(0.85, 1.60, 19),        # wide and skewed slow: datasheet priors
    "calibrated": np.linspace(0.95, 1.07, 19),   # narrow: calibrated profiles
})


@pytest.fixture(scope="module")
def case_study() -> api.FrontierResult:
    """The case study's time-vs-cost frontier with the shipped residuals' bands."""
    found = api.frontier(api.FrontierRequest(instance_paths=(CASE,)))
    assert isinstance(found, api.FrontierResult)
    return found


@pytest.fixture(scope="module")
def mixed_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """small-two-clusters with a provenance column: cluster A prior, cluster B calibrated."""
    folder = tmp_path_factory.mktemp("bands")
    (folder / "tables").mkdir()
    table = pd.read_csv(ROOT / "instances" / "tables" / "small-two-clusters.csv")
    table["provenance"] = table["cluster"].map({"A": "prior", "B": "calibrated"})
    table.to_csv(folder / "tables" / "small-two-clusters.csv", index=False)
    shutil.copy(TWO, folder / "small-two-clusters.yaml")
    return folder / "small-two-clusters.yaml"


def _sampled(problem: Problem, plan: Plan, groups: dict[str, str], model: ErrorModel,
             uniforms: np.ndarray, scales: dict[str, float]) -> dict[str, np.ndarray]:
    """W, C, tokens/s and energy of `plan` at each U: island step times (divided by the
    multiplier a --quantile table applied to the group, `scales`) times F_g⁻¹(U), σ unscaled,
    every GPU billed and powered for W, the busy energy per step scaled with the step."""
    ratios = [model.sample(groups[i.cluster], uniforms) / scales.get(groups[i.cluster], 1.0)
              for i in plan.islands]
    walls = wall_time_s(problem, np.max([r * i.step_time_s
                                         for r, i in zip(ratios, plan.islands, strict=True)],
                                        axis=0), plan.sync_s)
    joules = np.zeros_like(walls)
    for r, choice in zip(ratios, plan.choices, strict=True):
        a, b = island_coefficients(problem, choice.pair_index, choice.accum_steps)
        joules += a * walls + problem.inner_steps_total * b * r
    with np.errstate(divide="ignore"):  # F⁻¹(U) = 0 below rank 1: W = 0 with σ = 0, D/W = +∞
        tokens_per_s = problem.train_tokens / walls
    return {"wall_time_s": walls, "cost_usd": cost_usd(walls, plan.price_units),
            "tokens_per_s": tokens_per_s, "energy_kwh": joules / J_PER_KWH}


def _assert_quantile(sample: np.ndarray, reported: float, level: float, what: str) -> None:
    """`reported` is a `level`-quantile of `sample`: P(X <= x) >= level and P(X < x) <= level,
    within 4 binomial standard errors."""
    tolerance = 4 * math.sqrt(level * (1 - level) / len(sample))
    close = np.isclose(sample, reported, rtol=1e-9)
    assert float(np.mean((sample <= reported) | close)) >= level - tolerance, what
    assert float(np.mean((sample < reported) & ~close)) <= level + tolerance, what


def _check_bands(problem: Problem, plans: list[Plan], records: list[dict], groups: dict[str, str],
                 model: ErrorModel, scales: dict[str, float] | None = None) -> None:
    uniforms = np.random.default_rng(27).uniform(size=SAMPLES)
    for plan, record in zip(plans, records, strict=True):
        assert record["interval_groups"] == {c: groups[c] for c in sorted(
            {i.cluster for i in plan.islands})}
        sampled = _sampled(problem, plan, groups, model, uniforms, scales or {})
        for key, values in sampled.items():
            for suffix, level in (("p10", 0.1), ("p90", 0.9)):
                _assert_quantile(values, record[f"{key}_{suffix}"], level,
                                 f"{record['label']} {key}_{suffix}")


def test_case_study_bands_agree_with_monte_carlo(case_study: api.FrontierResult) -> None:
    """Every frontier point of the case study: its p10/p90 of time, cost, tokens/s and energy are
    quantiles of the sampled model (the shipped residuals), and the band holds the point."""
    solved = case_study.solved
    points = sorted(solved.frontier.points, key=lambda p: p.wall_time_s)
    groups = cluster_groups(load_island_table(solved.instance))
    assert set(groups.values()) == {"prior"}  # H200 and A100 rest on datasheet priors
    _check_bands(solved.problem, points, case_study.records, groups,
                 ErrorModel.from_residuals())
    for record in case_study.records:
        for key in ("wall_time_s", "cost_usd", "tokens_per_s", "energy_kwh", "co2_kg"):
            assert record[f"{key}_p10"] < record[f"{key}_p90"], key
        assert "power model's own error is not included" in record["interval_note"]


def test_quantile_plan_bands_mix_groups_and_hold_the_quantile(mixed_path: Path) -> None:
    """A --quantile 0.75 frontier mixing a prior and a calibrated cluster: the bands are of the
    same plans under the unscaled table (Monte Carlo), and each point's Q-time lies inside."""
    found = api.frontier(api.FrontierRequest(
        instance_paths=(mixed_path,), options=api.SolveOptions(quantile=0.75,
                                                               error_model=MIXED)))
    assert isinstance(found, api.FrontierResult)
    points = sorted(found.solved.frontier.points, key=lambda p: p.wall_time_s)
    assert any(len({i.cluster for i in p.islands}) == 2 for p in points)
    groups = {"A": "prior", "B": "calibrated"}
    # a quantile plan's islands carry Q-scaled step times; the model samples the predicted ones
    scales = {g: MIXED.multiplier(g, 0.75) for g in set(groups.values())}
    _check_bands(found.solved.problem, points, found.records, groups, MIXED, scales)
    for record in found.records:
        assert record["wall_time_s_p10"] <= record["wall_time_s"] <= record["wall_time_s_p90"]


def test_plan_at_quantile_0_9_is_its_own_p90() -> None:
    """`plan --quantile 0.9` reports the Q0.9 time and cost of its plan: the p90 of its band;
    `--quantile 0.1` its p10."""
    answer = api.query(api.QueryRequest(instance_paths=(CASE,), objective="time",
                                        options=api.SolveOptions(quantile=0.9)))
    assert isinstance(answer, api.PlanAnswer)
    record = answer.record
    assert record["wall_time_s_p90"] == pytest.approx(record["wall_time_s"], rel=1e-12)
    assert record["cost_usd_p90"] == pytest.approx(record["cost_usd"], rel=1e-12)
    assert record["wall_time_s_p10"] < record["wall_time_s"]
    low = api.query(api.QueryRequest(instance_paths=(CASE,), objective="time",
                                     options=api.SolveOptions(quantile=0.1)))
    assert isinstance(low, api.PlanAnswer)  # below the median: the same reading, its p10
    assert low.record["wall_time_s_p10"] == pytest.approx(low.record["wall_time_s"], rel=1e-12)


def test_single_island_plan_band_is_predicts_step_band_times_the_steps(tmp_path: Path) -> None:
    """One formula, one reading (`perfmodel.uncertainty.conformal`, "One convention for every
    output"): small-fsdp with the table ShardMeter builds (a provenance column) plans one island
    (σ = 0); `predict` of the same configuration reports the same step time, no widening and the
    same residual group, and the plan's wall_time_s_p10/_p90 are that prediction's
    step_time_s_p10/_p90 times the step count D/(B·S), on the shipped residuals. The group's
    n + 1 is no multiple of 10, so a p10 read at rank ⌈(n+1)·0.1⌉ (the planner's former
    quantile function) would not pass."""
    from perfmodel.api import WorkloadSpec, predict
    from perfmodel.uncertainty.intervals import ratios

    text = (ROOT / "instances" / "small-fsdp.yaml").read_text(encoding="utf-8")
    kept = [line for line in text.splitlines()
            if not line.startswith(("islands_table:", "parameters:"))]
    path = tmp_path / "one-island.yaml"
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    answer = api.query(api.QueryRequest(instance_paths=(path,), objective="time"))
    assert isinstance(answer, api.PlanAnswer)
    record, (island,) = answer.record, answer.plan.islands
    assert answer.plan.sync_s == 0
    instance, training = answer.solved.instance, answer.solved.instance.training
    steps = training.train_tokens / (training.global_batch_seqs * training.seq_len)
    prediction = predict(WorkloadSpec(
        model_name=instance.model, gpu_name=island.gpu_type, nodes=island.nodes,
        gpus_per_node=island.gpus_per_node, seq_len=training.seq_len,
        micro_batch=island.micro_batch, accum=island.accum_steps)).record
    assert prediction["step_time_s"] == pytest.approx(island.step_time_s, rel=1e-12)
    assert prediction["interval_widened"] == []
    assert "interval_extrapolation" not in record  # inside its residuals, as predict says
    group = record["interval_groups"][island.cluster]
    assert prediction["interval_group"] == group
    assert (len(ratios(group, "step_time_s")) + 1) % 10 != 0
    for suffix in ("p10", "p90"):
        assert record[f"wall_time_s_{suffix}"] == pytest.approx(
            steps * prediction[f"step_time_s_{suffix}"], rel=1e-12), suffix


def test_a_plan_beyond_its_residuals_names_why_as_predict_does(run_cli) -> None:
    """The 405B instance's one island (16,384 H100, a pipeline layout) lies beyond the calibrated
    residuals: the plan names the island and exactly the reasons `predict` widens its band for
    the same configuration, the note says this band is not widened, the table says so, and
    the JSON validates. The case study's two DiLoCo islands are named together, with the outer
    step as the reason."""
    from perfmodel.api import WorkloadSpec, predict
    from perfmodel.spec.layout import ParallelLayout
    from perfmodel.spec.recipe import DEFAULT_RECIPE

    answer = api.query(api.QueryRequest(
        instance_paths=(ROOT / "instances" / "llama-405b-h100.yaml",), objective="time"))
    assert isinstance(answer, api.PlanAnswer)
    record, (island,) = answer.record, answer.plan.islands
    row = dict(island.variant)
    layout = ParallelLayout(tp=int(row["tp"]), pp=int(row["pp"]), cp=int(row["cp"]),
                            dp_replicate=int(row["dp_replicate"]),
                            virtual_stages=int(row["virtual_stages"]),
                            pp_schedule=row["pp_schedule"],
                            sequence_parallel=row["sequence_parallel"] == "true")
    training = answer.solved.instance.training
    prediction = predict(WorkloadSpec(
        model_name=answer.solved.instance.model, gpu_name=island.gpu_type, nodes=island.nodes,
        gpus_per_node=island.gpus_per_node, seq_len=training.seq_len,
        micro_batch=island.micro_batch, accum=island.accum_steps,
        recipe=DEFAULT_RECIPE.with_overrides(ac=row["ac"], parallel=layout))).record
    assert prediction["step_time_s"] == pytest.approx(island.step_time_s, rel=1e-9)
    assert len(prediction["interval_widened"]) == 3
    assert record["interval_extrapolation"] == (
        f"{island.cluster} {island.nodes}x{island.gpus_per_node}: "
        + ", ".join(prediction["interval_widened"]))
    assert "NOT widened" in record["interval_note"]
    shown = run_cli("plan", str(ROOT / "instances" / "llama-405b-h100.yaml")).out
    assert "band not widened beyond its residuals: h100-16k 2048x8" in " ".join(shown.split())
    document = json.loads(run_cli("plan", str(CASE), "--format", "json").out)
    assert list(jsonschema.Draft202012Validator(load_schema("plan")).iter_errors(document)) == []
    text = document["interval_extrapolation"]
    assert text.count("strategy diloco") == 1  # one reason, both islands named before it
    assert all(f"{cluster} " in text.split(":")[0] for cluster in document["interval_groups"])


def test_plan_json_and_csv_carry_the_band(run_cli, mixed_path: Path) -> None:
    """`plan --format json` validates against its schema with the band keys, which the schema
    documents (a band end that is not a number is refused: the schema can fail); the CSV has
    the band columns and the groups."""
    document = json.loads(run_cli("plan", str(CASE), "--format", "json").out)
    schema = load_schema("plan")
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors(document)) == []
    for key in ("wall_time_s_p10", "cost_usd_p90", "tokens_per_s_p10", "energy_kwh_p90",
                "co2_kg_p10", "interval_groups", "interval_note"):
        assert key in document and key in schema["properties"], key
    assert list(validator.iter_errors({**document, "wall_time_s_p10": "soon"})) != []
    frame = pd.read_csv(io.StringIO(run_cli("pareto", str(mixed_path), "--format", "csv").out))
    assert {"wall_time_s_p10", "cost_usd_p90", "tokens_per_s_p10"} <= set(frame.columns)
    assert "A=prior;B=calibrated" in set(frame["interval_groups"])


def test_no_band_is_said_not_dropped(run_cli) -> None:
    """A fixed island table without a provenance column, and the failure model, give no band
    and say why (`interval_note`), and the JSON still validates."""
    for args, reason in (([], "no 'provenance' column"), (["--failures"], "failure model")):
        document = json.loads(run_cli("pareto", str(TWO), *args, "--format", "json").out)
        assert list(jsonschema.Draft202012Validator(load_schema("pareto")).iter_errors(
            document)) == []
        for point in document["frontier"]:
            assert not [k for k in point if k.endswith("_p10")]
            assert point["interval_note"].startswith("no band") and reason in \
                point["interval_note"]


def test_html_report_shows_the_band_of_a_real_plan(tmp_path: Path) -> None:
    """The HTML report prints 'p10–p90 a – b' for the chosen plan of a real instance, and that
    the band is not widened where the plan's islands lie beyond their residuals (the case
    study's two DiLoCo islands)."""
    page = tmp_path / "plan.html"
    api.query(api.QueryRequest(instance_paths=(CASE,), objective="time", html_path=page))
    text = page.read_text(encoding="utf-8")
    assert "p10–p90" in text
    assert "Band not widened beyond its residuals: A 8x8, B 8x8: strategy diloco" in text
    assert "Track record: prior band held for" in text  # how far such bands held before


def test_plan_table_states_its_groups_track_record(run_cli) -> None:
    """The plan's band line is followed by its residual groups' record on held-out data."""
    out = " ".join(run_cli("plan", str(CASE)).out.split())
    assert "track record: prior band held for" in out and "held-out cases" in out


def test_interval_adds_lo_hi_or_is_refused(run_cli, mixed_path: Path) -> None:
    """`--interval 0.95` adds `*_lo`/`*_hi` outside the p10/p90 band and `interval_level`; a level
    the residuals cannot certify, a plan without a band (alone or as a scenario of a study)
    refuse it, and a scenario study refuses --quantile (exit 2, with a fix)."""
    document = json.loads(run_cli("pareto", str(mixed_path), "--interval", "0.95", "--format",
                                  "json").out)
    assert list(jsonschema.Draft202012Validator(load_schema("pareto")).iter_errors(
        document)) == []
    for point in document["frontier"]:
        assert point["interval_level"] == 0.95
        for key in ("wall_time_s", "cost_usd", "tokens_per_s", "energy_kwh"):
            assert point[f"{key}_lo"] <= point[f"{key}_p10"] < point[f"{key}_p90"] \
                <= point[f"{key}_hi"], key
    for args, said in ((["plan", str(mixed_path), "--interval", "0.999"], "too few"),
                       (["plan", str(TWO), "--interval", "0.9"], "no 'provenance' column"),
                       (["plan", str(TWO), "--interval", "1.5"], "strictly between 0 and 1"),
                       (["pareto", str(TWO), "--vary", "training.inner_steps=50,100",
                         "--interval", "0.9"], "scenario training.inner_steps=50: --interval"),
                       (["pareto", str(mixed_path), "--vary", "training.inner_steps=50,100",
                         "--quantile", "0.9"], "scenario studies")):
        result = run_cli(*args)
        assert result.code == 2 and said in result.err and "To fix:" in result.err, result.err


def test_plan_table_states_the_band_within_80_columns(run_cli, mixed_path: Path) -> None:
    """The answer of `plan` (table) states the p10–p90 time and cost and the residual groups,
    wrapped at 80 columns; a plan without a band says why."""
    shown = run_cli("plan", str(mixed_path)).out
    assert "p10–p90: " in shown and "residual groups" in shown
    assert max(len(line) for line in shown.splitlines()) <= 80
    assert "no band: the island table has no 'provenance' column" in run_cli("plan",
                                                                             str(TWO)).out


# ---- scenario studies (planner.analysis.scenarios, "Bands") ----------------------------------

BAND_KEYS = tuple(f"{figure}_{suffix}" for figure in ("wall_time_s", "cost_usd", "tokens_per_s",
                                                      "energy_kwh", "co2_kg")
                  for suffix in ("p10", "p90", "lo", "hi"))


def _band_of(record: dict) -> dict:
    return {k: record[k] for k in (*BAND_KEYS, "interval_groups", "interval_note",
                                   "interval_level") if k in record}


def test_plan_study_scenarios_carry_plans_band(run_cli, mixed_path: Path) -> None:
    """`plan --vary training.train_tokens=...`: each scenario's summary row has the band fields
    of `plan`'s record, equal to `plan` on a file that sets the same value (with --interval, the
    lo/hi too); the JSON validates against the study schema; the CSV has the band columns and
    the groups in one cell; the table states each scenario's p10–p90 within 80 columns."""
    text = mixed_path.read_text(encoding="utf-8")
    args = ["--objective", "cost", "--interval", "0.9"]
    study = json.loads(run_cli("plan", str(mixed_path), "--vary",
                               "training.train_tokens=1e9,3e9", *args, "--format", "json").out)
    assert list(jsonschema.Draft202012Validator(load_schema("study")).iter_errors(study)) == []
    rows = study["summary"]
    assert [r["scenario"] for r in rows] == ["training.train_tokens=1e9",
                                             "training.train_tokens=3e9"]
    for row, tokens in zip(rows, ("1.0e9", "3.0e9"), strict=True):
        alone = mixed_path.with_name(f"tokens-{tokens}.yaml")
        alone.write_text(text.replace("train_tokens: 1.0e9", f"train_tokens: {tokens}"),
                         encoding="utf-8")
        record = json.loads(run_cli("plan", str(alone), *args, "--format", "json").out)
        assert record["label"] == row["label"]
        expected = _band_of(record)
        assert {"wall_time_s_p10", "cost_usd_hi", "interval_groups"} <= set(expected)
        assert _band_of(row) == expected
    assert rows[1]["wall_time_s_p90"] > rows[0]["wall_time_s_p90"]  # the scenarios differ
    frame = pd.read_csv(io.StringIO(run_cli("plan", str(mixed_path), "--vary",
                                            "training.train_tokens=1e9,3e9", "--format",
                                            "csv").out))
    assert {"wall_time_s_p10", "wall_time_s_p90", "cost_usd_p90"} <= set(frame.columns)
    assert set(frame["interval_groups"]) <= {"A=prior", "B=calibrated", "A=prior;B=calibrated"}
    shown = run_cli("plan", str(mixed_path), "--vary", "training.train_tokens=1e9,3e9").out
    assert "s0 p10–p90: " in shown and "s1 p10–p90: " in shown
    assert max(len(line) for line in shown.splitlines()) <= 80


def test_pareto_study_frontiers_carry_paretos_band(run_cli, mixed_path: Path) -> None:
    """`pareto --vary`: each scenario's frontier records are pareto's points, bands included
    (the base scenario's equal `pareto` of the file), and the summary row gives the band of the
    frontier's fastest time and cheapest cost from those records."""
    study = json.loads(run_cli("pareto", str(mixed_path), "--vary",
                               "clusters.A.price_scale=0.5,1", "--format", "json").out)
    assert list(jsonschema.Draft202012Validator(load_schema("study")).iter_errors(study)) == []
    pareto = load_schema("pareto")
    point = jsonschema.Draft202012Validator({"$defs": pareto["$defs"],
                                             "$ref": "#/$defs/point"})
    (section,) = study["instances"]
    alone = json.loads(run_cli("pareto", str(mixed_path), "--format", "json").out)["frontier"]
    for scenario, row in zip(section["scenarios"], study["summary"], strict=True):
        frontier = scenario["frontier"]
        for record in frontier:
            assert list(point.iter_errors(record)) == []
            assert "wall_time_s_p10" in record and "interval_groups" in record
        fast = min(frontier, key=lambda r: r["wall_time_s"])
        cheap = min(frontier, key=lambda r: r["cost_usd"])
        assert row["fastest_h_p10"] == pytest.approx(fast["wall_time_s_p10"] / 3600, rel=1e-12)
        assert row["fastest_h_p90"] == pytest.approx(fast["wall_time_s_p90"] / 3600, rel=1e-12)
        assert row["cheapest_usd_p10"] == cheap["cost_usd_p10"]
        assert row["cheapest_usd_p90"] == cheap["cost_usd_p90"]
        if scenario["scenario"].endswith("=1"):
            assert [_band_of(r) for r in frontier] == [_band_of(r) for r in alone]
    cheap_ends = [row["cheapest_usd_p90"] for row in study["summary"]]
    assert cheap_ends[0] < cheap_ends[1]  # cluster A at half price: a cheaper band


def test_a_scenario_without_a_band_says_why(run_cli, mixed_path: Path) -> None:
    """A scenario with the failure model on has no band (its figures are expectations over
    failures) and says so; its sibling without failures has one."""
    study = json.loads(run_cli("plan", str(mixed_path), "--vary", "failures.enabled=false,true",
                               "--format", "json").out)
    assert list(jsonschema.Draft202012Validator(load_schema("study")).iter_errors(study)) == []
    off, on = study["summary"]
    assert "wall_time_s_p10" in off and off["interval_note"].startswith("80 % band")
    assert not [k for k in on if k.endswith(("_p10", "_p90"))]
    assert on["interval_note"].startswith("no band") and "failure model" in on["interval_note"]
    shown = run_cli("plan", str(mixed_path), "--vary", "failures.enabled=false,true").out
    assert "s0 p10–p90: " in shown and "1 scenario: no band: under the failure model" in shown
