"""Issue 27: split-conformal prediction intervals, P(fits) and the coverage table
(perfmodel.uncertainty, scripts.make_residuals, part (d) of docs/VALIDATION.md)."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from perfmodel import api
from perfmodel.costs.memory import max_micro_batch
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.errors import UserInputError
from perfmodel.uncertainty import coverage as coverage_module
from perfmodel.uncertainty.conformal import (
    conformal_quantile,
    probability_at_most,
    quantile_function,
    widen,
)
from perfmodel.uncertainty.intervals import (
    ErrorModel,
    Query,
    calibration_ratios,
    error_model,
    extrapolation,
    largest_fitting,
    multiplier,
    p_fits,
    ratios,
)
from perfmodel.uncertainty.residuals import COLUMNS, GROUPS

ROOT = Path(__file__).resolve().parent.parent
RESIDUALS = ROOT / "catalogs" / "uncertainty" / "residuals.csv"
PREDICT = ["predict", "Llama-3-8B", "--gpu", "H100-SXM5-80GB", "--seq-len", "8192"]
MEMORY = ["memory", "Llama-3-8B", "--gpu", "H100-SXM5-80GB", "--seq-len", "8192"]


# ---- the conformal quantile: a statistical test on exchangeable data ----------------------------

def _coverage_trials(rng: np.random.Generator, n: int, q: float, trials: int,
                     quantile: object) -> tuple[float, float]:
    """Mean and standard error of the coverage P(new <= quantile(calibration, q)) over
    independent lognormal calibration / test draws."""
    covered = np.empty(trials)
    for i in range(trials):
        calibration = rng.lognormal(0.0, 0.2, n)
        test = rng.lognormal(0.0, 0.2, 400)
        bound = quantile(calibration, q)  # type: ignore[operator]
        covered[i] = np.mean(test <= bound)
    return float(covered.mean()), float(covered.std(ddof=1) / math.sqrt(trials))


@pytest.mark.parametrize(("n", "q"), [(9, 0.9), (50, 0.9), (30, 0.8)])
def test_conformal_coverage_is_the_finite_sample_level(n: int, q: float) -> None:
    """E[coverage] = ceil((n+1)q)/(n+1) exactly for continuous exchangeable data: the seeded
    Monte Carlo mean lies within 4 standard errors of it (and so at or above q)."""
    rng = np.random.default_rng(27 + n)
    mean, se = _coverage_trials(rng, n, q, 1500, conformal_quantile)
    exact = math.ceil((n + 1) * q) / (n + 1)
    assert abs(mean - exact) < 4 * se, (mean, exact, se)
    assert mean > q - 4 * se


def test_the_coverage_test_catches_an_uncorrected_quantile() -> None:
    """The test above has power: numpy's plain quantile (no (n+1) correction) under-covers at
    n = 9 by more than 4 standard errors."""
    rng = np.random.default_rng(9)
    mean, se = _coverage_trials(rng, 9, 0.9, 1500, lambda x, q: np.quantile(x, q))
    assert 0.9 - mean > 4 * se, (mean, se)


def test_two_sided_interval_covers_its_level() -> None:
    rng = np.random.default_rng(80)
    n, level, trials = 40, 0.8, 1500
    inside = np.empty(trials)
    for i in range(trials):
        calibration, test = rng.lognormal(0, 0.3, n), rng.lognormal(0, 0.3, 400)
        lo = conformal_quantile(calibration, (1 - level) / 2)
        hi = conformal_quantile(calibration, (1 + level) / 2)
        inside[i] = np.mean((test >= lo) & (test <= hi))
    exact = (math.ceil((n + 1) * 0.9) - math.floor((n + 1) * 0.1)) / (n + 1)
    se = inside.std(ddof=1) / math.sqrt(trials)
    assert abs(inside.mean() - exact) < 4 * se and exact >= level


def test_multiplier_is_monotone_in_the_quantile() -> None:
    qs = np.linspace(0.01, 0.99, 99)
    for group, quantity in (("calibrated", "step_time_s"), ("prior", "step_time_s"),
                            ("measured", "step_time_s"), ("memory", "peak_memory_bytes")):
        values = [multiplier(group, quantity, float(q)) for q in qs]
        assert all(a <= b for a, b in zip(values, values[1:], strict=False)), group
    sample = np.random.default_rng(1).lognormal(0, 0.5, 25)
    assert [conformal_quantile(sample, q) for q in (0.6, 0.8, 0.9)] == sorted(
        conformal_quantile(sample, q) for q in (0.6, 0.8, 0.9))


def test_a_level_n_rows_cannot_certify_is_infinite() -> None:
    assert conformal_quantile([1.0, 1.1, 0.9, 1.2, 1.05], 0.95) == math.inf
    assert conformal_quantile([1.0, 1.1, 0.9, 1.2, 1.05], 0.05) == 0.0
    with pytest.raises(UserInputError, match="quantile 1.5"):
        conformal_quantile([1.0], 1.5)
    with pytest.raises(UserInputError, match="quantile nan"):
        conformal_quantile([1.0], float("nan"))


@pytest.mark.parametrize("n", [4, 9, 19, 191, 278])
def test_quantile_function_is_the_scalar_reading_and_nondecreasing(n: int) -> None:
    """`quantile_function` (what the planner's error model samples) is `conformal_quantile` at
    every level, nondecreasing across the median (so G(p) is a p-quantile of G(U)), with the open
    ends 0 and +inf at 0 and 1; a level outside [0, 1] is refused."""
    sample = np.random.default_rng(n).lognormal(0, 0.3, n)
    levels = np.concatenate((np.linspace(0.001, 0.999, 997), np.arange(1, n + 1) / (n + 1)))
    got = quantile_function(sample, levels)
    assert got.tolist() == [conformal_quantile(sample, float(u)) for u in levels]
    ordered = got[np.argsort(levels, kind="stable")]
    assert np.all(ordered[1:] >= ordered[:-1])
    assert quantile_function(sample, [0.0, 1.0]).tolist() == [0.0, math.inf]
    with pytest.raises(UserInputError, match="quantile level"):
        quantile_function(sample, [0.5, float("nan")])


def test_probability_at_most_agrees_with_the_quantile() -> None:
    sample = np.random.default_rng(3).lognormal(0, 0.2, 60)
    for q in (0.5, 0.8, 0.9, 0.95):
        m = conformal_quantile(sample, q)
        assert probability_at_most(sample, m) >= q
        assert probability_at_most(sample, np.nextafter(m, 0)) < q


# ---- the shipped residuals --------------------------------------------------------------------

def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_residuals_csv_has_the_contract_columns_and_groups() -> None:
    with RESIDUALS.open() as handle:
        assert tuple(handle.readline().strip().split(",")) == COLUMNS
    rows = _rows(RESIDUALS)
    assert {r["group"] for r in rows} == set(GROUPS)
    assert {r["role"] for r in rows} == {"calibration", "holdout", "in-sample"}
    for r in rows:
        assert float(r["predicted"]) > 0 and float(r["measured"]) > 0
    for group in GROUPS:  # every group forms intervals; memory groups have no untouched rows
        mine = {r["role"] for r in rows if r["group"] == group}
        expected = ({"calibration", "in-sample"} if group.startswith("memory")
                    else {"calibration", "holdout"})
        assert mine == expected, group
    # the grids the memory model was designed against never form a band
    assert {r["source"].rsplit("/", 1)[1] for r in rows if r["role"] == "in-sample"} == {
        "memory-tracker.csv", "memory-tracker-layouts.csv", "memory-tracker-pipeline.csv",
        "memory-tracker-moe.csv", "memory-tracker-moe-pipeline.csv"}
    prior_holdout = {r["case"].split(":", 1)[1].split("/")[0]
                     for r in rows if r["group"] == "prior" and r["role"] == "holdout"
                     and "llm-foundry" in r["source"]}
    assert prior_holdout == {"H100-SXM5-80GB"}  # leave-one-GPU-out: the held-out GPU


def test_residuals_csv_is_current() -> None:
    """The generator reproduces the shipped files (compute-loao read from the cache only)."""
    from scripts import make_residuals

    assert make_residuals.main(["--check"]) == 0


def test_holdout_rows_never_form_a_multiplier(tmp_path: Path) -> None:
    """Moving every holdout row (scaling its measurement tenfold, dropping half of them)
    changes no calibration ratio; moving one calibration row does (the check can fail)."""
    rows = _rows(RESIDUALS)
    base = calibration_ratios(RESIDUALS)

    def write(name: str, edited: list[dict[str, str]]) -> Path:
        path = tmp_path / name
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(COLUMNS), lineterminator="\n")
            writer.writeheader()
            writer.writerows(edited)
        return path

    moved = [dict(r, measured=str(float(r["measured"]) * 10)) if r["role"] == "holdout" else r
             for i, r in enumerate(rows) if r["role"] != "holdout" or i % 2]
    other = calibration_ratios(write("moved.csv", moved))
    assert other.keys() == base.keys()
    assert all(np.array_equal(other[k], base[k]) for k in base)
    first = next(i for i, r in enumerate(rows) if r["role"] == "calibration")
    changed = [dict(r, measured=str(float(r["measured"]) * 10)) if i == first else r
               for i, r in enumerate(rows)]
    assert not all(np.array_equal(calibration_ratios(write("c.csv", changed))[k], base[k])
                   for k in base)


def test_the_fresh_cpu_holdout_joins_as_holdout_rows(tmp_path: Path) -> None:
    """Once catalogs/profiles/data/cpu-holdout.csv exists, its steps (predicted by the shipped
    profile) are measured holdout rows; the calibration rows stay as they were."""
    from perfmodel.profiles.cache import ResultCache
    from perfmodel.uncertainty.residuals import COMPUTE_DATA, measured_residuals

    lines = COMPUTE_DATA.read_text().splitlines()
    fresh = tmp_path / "cpu-holdout.csv"
    fresh.write_text("\n".join([lines[0], *[x for x in lines[1:] if x.startswith("Phi-1.5,")]])
                     + "\n")
    cache = ResultCache(folder=ROOT / "catalogs" / "cv-cache", mode="check")
    before = measured_residuals(cache, holdout_path=tmp_path / "absent.csv")
    after = measured_residuals(cache, holdout_path=fresh)
    added = after[len(before):]
    assert after[:len(before)] == before and added
    assert {r.role for r in added} == {"holdout"} and {r.source for r in added} == {str(fresh)}
    assert all(r.case.startswith("Phi-1.5/") and r.predicted > 0 for r in added)


def test_coverage_counts_inside_and_outside(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    lines = [",".join(COLUMNS)]
    lines += [f"prior,step_time_s,c{i},src,1.0,{1 + i / 100},calibration" for i in range(19)]
    # the 80 % band of 1.00..1.18 (n = 19): ranks floor(2) = 2 and ceil(18) = 18 -> 1.01..1.17
    lines += [f"prior,step_time_s,h{i},held,1.0,{x},holdout"
              for i, x in enumerate([1.05] * 8 + [2.0] * 2 + [0.5] * 2)]
    path.write_text("\n".join(lines) + "\n")
    (row,) = coverage_module.coverage(path)
    assert (row.lower, row.upper) == (1.01, 1.17)
    assert row.holdout_rows == 12 and row.covered == pytest.approx(8 / 12)
    assert row.verdict == "missed"  # 66.7 % < 70 %
    assert coverage_module.CoverageRow(
        group="g", quantity="q", source="s", calibration_rows=5, holdout_rows=9, covered=0.5,
        lower=1, upper=1).verdict.startswith("n/a")


def test_cross_conformal_never_scores_a_row_on_its_own_fold(tmp_path: Path) -> None:
    """A group without holdout rows is scored by folds: an outlier that would widen its own
    band (n = 10: the 0.9 rank is the largest) lies outside the band of the other folds."""
    alone = [c for c in (f"c{i}" for i in range(40))
             if coverage_module._fold(c) != coverage_module._fold("outlier")][:9]
    pairs = [("s", c, 1.0) for c in alone] + [("s", "outlier", 2.0)]
    inside = coverage_module.cross_conformal_inside(pairs, level=0.8)
    assert inside[-1] is False and all(inside[:-1])
    path = tmp_path / "r.csv"
    lines = [",".join(COLUMNS)]
    lines += [f"memory,peak_memory_bytes,{c},s,1.0,{r},calibration" for _, c, r in pairs]
    lines += ["memory,peak_memory_bytes,grid,g,1.0,9.0,in-sample"]  # neither forms nor scored
    path.write_text("\n".join(lines) + "\n")
    (row,) = coverage_module.coverage(path)
    assert row.method == coverage_module.CROSS and row.holdout_rows == 10
    assert row.covered == pytest.approx(0.9) and row.upper == 2.0  # the shipped band: all ten
    loso = coverage_module.leave_one_source_out(path, "memory")
    assert loso == []  # one source: nothing to leave out against


def test_coverage_ci_is_the_exact_binomial_interval() -> None:
    row = coverage_module.CoverageRow(group="g", quantity="q", source="s", calibration_rows=50,
                                      holdout_rows=10, covered=1.0, lower=1, upper=1)
    low, high = row.covered_ci()
    assert high == 1.0 and low == pytest.approx(0.025 ** (1 / 10))  # P(10 of 10 | p) = p^10
    half = coverage_module.CoverageRow(group="g", quantity="q", source="s", calibration_rows=50,
                                       holdout_rows=20, covered=0.5, lower=1, upper=1)
    low, high = half.covered_ci()
    assert low == pytest.approx(1 - high) and 0.25 < low < 0.3  # symmetric about one half


def _printed(case: str, source: str, measured: float, *, group: str = "calibrated",
             widened: bool = False) -> coverage_module.PrintedCase:
    return coverage_module.PrintedCase(group=group, source=source, case=case, measured=measured,
                                       lower=90.0, upper=110.0, point=100.0, widened=widened)


def test_printed_coverage_scores_each_run_on_its_own_band() -> None:
    """Inside, below and above counted apart, per group with an 'all' row only where the group
    has several sources, widths relative to each run's own point."""
    cases = [_printed("a1", "A", 100.0), _printed("a2", "A", 80.0, widened=True),
             _printed("a3", "A", 120.0), _printed("b1", "B", 110.0),
             _printed("p1", "P", 95.0, group="prior"),
             coverage_module.PrintedCase(group="prior", source="P", case="p2", measured=1.0,
                                         lower=1.0, upper=3.0, point=2.0, widened=False)]
    rows = {(r.group, r.source): r for r in coverage_module.printed_coverage(cases)}
    assert list(rows) == [("calibrated", "all"), ("calibrated", "A"), ("calibrated", "B"),
                          ("prior", "P")]
    every, a = rows[("calibrated", "all")], rows[("calibrated", "A")]
    assert (every.cases, every.covered, every.below, every.above, every.widened) == (
        4, 0.5, 1, 1, 1)
    assert (a.cases, a.covered, a.below, a.above) == (3, pytest.approx(1 / 3), 1, 1)
    assert rows[("calibrated", "B")].covered == 1.0  # the upper end itself is inside
    assert rows[("prior", "P")].median_width == pytest.approx((0.2 + 1.0) / 2)
    assert every.verdict.startswith("n/a") and every.covered_ci()[0] < 0.5 < every.covered_ci()[1]


@pytest.mark.parametrize("lower, point, upper, measured",
                         [(110.0, 100.0, 120.0, 100.0), (90.0, 100.0, 95.0, 100.0),
                          (0.0, 100.0, 110.0, 100.0), (90.0, 100.0, 110.0, float("nan"))])
def test_a_printed_case_refuses_a_band_that_is_not_one(lower: float, point: float, upper: float,
                                                       measured: float) -> None:
    with pytest.raises(ValueError, match="To fix"):
        coverage_module.PrintedCase(group="g", source="s", case="c", measured=measured,
                                    lower=lower, upper=upper, point=point, widened=False)


def test_a_moe_peak_uses_the_moe_memory_group() -> None:
    from perfmodel.uncertainty.intervals import memory_group

    assert memory_group(0) == "memory" and memory_group(8) == "memory-moe"
    dense, moe = (error_model(memory_group(e), "peak_memory_bytes") for e in (0, 8))
    assert moe.quantile(0.9) > dense.quantile(0.9)  # the shipped residuals: percents vs permille


def test_rotating_gpu_coverage_holds_each_gpu_out(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    lines = [",".join(COLUMNS)]
    lines += [f"prior,step_time_s,from-B:A/{i},s,1.0,{1 + i / 100},calibration" for i in range(19)]
    lines += [f"prior,step_time_s,from-A:B/{i},s,1.0,{2 + i / 100},holdout" for i in range(19)]
    path.write_text("\n".join(lines) + "\n")
    a, b = coverage_module.rotating_gpu_coverage(path)
    assert (a.source, a.calibration_rows, a.holdout_rows) == ("held-out GPU A", 19, 19)
    assert (b.lower, b.upper) == (1.01, 1.17)  # formed from A's pairs only
    assert b.covered == 0.0 and a.covered == 0.0  # each GPU's errors lie outside the other's


# ---- widening ---------------------------------------------------------------------------------

def test_a_query_beyond_the_residuals_widens_and_says_why() -> None:
    inside = Query(num_gpus=64, seq_len=2048, params=7_000_000_000, layout="fsdp")
    assert extrapolation("calibrated", inside) == []
    outside = Query(num_gpus=16_384, seq_len=2048, params=405_000_000_000, layout="pp")
    reasons = extrapolation("calibrated", outside)
    assert len(reasons) == 3
    assert any("GPUs 16,384" in r for r in reasons) and any("layout pp" in r for r in reasons)
    narrow, wide = error_model("calibrated", "step_time_s", inside), error_model(
        "calibrated", "step_time_s", outside)
    assert narrow.widened == () and wide.widened == tuple(reasons)
    assert wide.quantile(0.9) > narrow.quantile(0.9) and wide.quantile(0.1) < narrow.quantile(0.1)
    sample = ratios("calibrated", "step_time_s")
    assert np.median(widen(sample, 2.0)) == pytest.approx(np.median(sample))


def test_predict_names_the_widening(run_cli) -> None:
    out = run_cli("predict", "Llama-3-8B", "--gpu", "H200-SXM-141GB", "--seq-len", "8192",
                  "--nodes", "64", "--format", "json")
    assert out.code == 0, out.err
    record = json.loads(out.out)
    assert record["interval_group"] == "prior"
    assert any("GPUs 512" in r for r in record["interval_widened"])


# ---- JSON keys and --interval -----------------------------------------------------------------

def test_predict_json_carries_every_band(run_cli) -> None:
    out = run_cli(*PREDICT, "--format", "json")
    assert out.code == 0, out.err
    record = json.loads(out.out)
    for key in ("step_time_s", "inner_step_time_s", "tokens_per_s", "tokens_per_s_per_gpu",
                "mfu", "peak_gib"):
        assert record[f"{key}_p10"] <= record[f"{key}_p50"] <= record[f"{key}_p90"], key
        keys = list(record)
        assert keys.index(f"{key}_p10") == keys.index(key) + 1  # next to the point value
    assert record["interval_group"] == "calibrated" and record["memory_interval_group"] == "memory"
    m = multiplier("calibrated", "step_time_s", 0.9)
    assert record["step_time_s_p90"] == pytest.approx(record["step_time_s"] * m)
    assert record["tokens_per_s_p10"] == pytest.approx(record["tokens_per_s"] / m)
    assert 0.0 < record["p_fits"] <= 1.0
    assert "interval_level" not in record and "step_time_s_lo" not in record


def test_failures_figures_carry_bands(run_cli) -> None:
    out = run_cli(*PREDICT, "--failures", "--train-tokens", "1e9", "--usd-per-gpu-hour", "3",
                  "--format", "json")
    record = json.loads(out.out)
    for key in ("wall_time_s", "cost_usd", "expected_wall_time_s", "expected_cost_usd"):
        assert record[f"{key}_p10"] < record[key] < record[f"{key}_p90"], key


def test_interval_flag_adds_lo_hi_at_its_level(run_cli) -> None:
    record = json.loads(run_cli(*PREDICT, "--interval", "0.9", "--format", "json").out)
    assert record["interval_level"] == 0.9
    assert record["step_time_s_lo"] <= record["step_time_s_p10"]
    assert record["step_time_s_hi"] >= record["step_time_s_p90"]
    assert record["tokens_per_s_lo"] <= record["tokens_per_s_p10"]
    memory = json.loads(run_cli(*MEMORY, "--interval", "0.9", "--format", "json").out)
    assert memory["interval_group"] == "memory" and memory["interval_level"] == 0.9
    assert memory["peak_gib_lo"] <= memory["peak_gib_p10"] <= memory["peak_gib_p90"] \
        <= memory["peak_gib_hi"]
    bad = run_cli(*PREDICT, "--interval", "1.5")
    assert bad.code == 2 and "--interval 1.5" in bad.err and "To fix:" in bad.err
    bad = run_cli(*MEMORY, "--fit-probability", "0")
    assert bad.code == 2 and "--fit-probability 0" in bad.err


# ---- P(fits) and --fit-probability ------------------------------------------------------------

def test_p_fits_just_under_the_limit_is_below_one_far_under_near_one() -> None:
    memory = error_model("memory", "peak_memory_bytes")
    n = memory.sample.size
    usable = 80e9
    far = p_fits(memory, peak_bytes=usable / 2, usable_bytes=usable)
    assert far == n / (n + 1)  # the most n calibration rows can certify
    just_under = p_fits(memory, peak_bytes=usable / 1.0001, usable_bytes=usable)
    assert just_under < far and just_under < 0.99
    over = p_fits(memory, peak_bytes=usable * 1.01, usable_bytes=usable)
    assert over == 0.0


def test_memory_report_p_fits_of_a_configuration() -> None:
    spec = api.WorkloadSpec(model_name="Llama-3-8B", gpu_name="H100-SXM5-80GB", seq_len=8192)
    record = api.memory_report(spec).record
    assert record["fits"] and record["peak_gib"] < 0.6 * record["usable_memory_gib"]
    n = error_model("memory", "peak_memory_bytes").sample.size
    assert record["p_fits"] == n / (n + 1)  # far under: the most the rows can certify


def test_fit_probability_sets_max_micro_batch() -> None:
    """--fit-probability p: the largest micro-batch whose predicted peak stays within usable /
    the memory ratio's p-quantile (the model's own bisection at that budget)."""
    spec = api.WorkloadSpec(model_name="Llama-3-8B", gpu_name="H100-SXM5-80GB", seq_len=8192)
    plain = api.memory_report(spec).record
    asked = api.memory_report(spec, fit_probability=0.95).record
    assert asked["fit_probability"] == 0.95 and "fit_probability" not in plain
    keys = list(asked)
    assert keys.index("fit_probability") == keys.index("max_micro_batch") + 1
    gpu, model = get_gpu("H100-SXM5-80GB"), get_model("Llama-3-8B")
    m95 = multiplier("memory", "peak_memory_bytes", 0.95)
    recipe = spec.recipe
    expected = max_micro_batch(model, gpu_memory_bytes=int(gpu.usable_memory_bytes / m95),
                               num_gpus=8, seq_len=8192, recipe=recipe, accum_steps=1,
                               ac=plain["ac"])
    assert asked["max_micro_batch"] == expected
    assert asked["max_micro_batch"] <= plain["max_micro_batch"]  # m95 > 1: a smaller budget
    # a memory model 20 % optimistic at the asked probability leaves a 1/1.2 budget
    budgets: list[float] = []

    def fits_within(budget: float) -> int:
        budgets.append(budget)
        return 3

    strict = ErrorModel(group="memory", quantity="peak_memory_bytes",
                        sample=np.full(50, 1.2), widened=())
    assert largest_fitting(fits_within, strict, usable_bytes=1.2e9, probability=0.95) == 3
    assert budgets == [pytest.approx(1e9)]


def test_fit_probability_flag_through_the_cli(run_cli) -> None:
    for args in (PREDICT, MEMORY):
        plain = json.loads(run_cli(*args, "--format", "json").out)
        asked = json.loads(run_cli(*args, "--fit-probability", "0.95", "--format", "json").out)
        assert asked["fit_probability"] == 0.95 and "fit_probability" not in plain
        assert asked["max_micro_batch"] <= plain["max_micro_batch"]
        assert asked["p_fits"] == plain["p_fits"]  # the configuration itself is unchanged


def test_uncertainty_module_reads_a_catalog_copy(tmp_catalogs: Path) -> None:
    """The residuals are read from the catalog folder (SHARDMETER_CATALOGS honoured)."""
    assert (tmp_catalogs / "uncertainty" / "residuals.csv").is_file()
    shutil.rmtree(tmp_catalogs / "uncertainty")
    from perfmodel.spec.errors import DatasetError

    with pytest.raises(DatasetError, match="residuals are missing"):
        ratios("calibrated", "step_time_s")


@pytest.mark.parametrize(("row", "says"), [
    ("prior,step_time_s,c1,src,1.0,abc,calibration", "line 3: not a residual row"),
    ("prior,step_time_s,c1,src,0.0,1.0,calibration", "line 3: measured '1.0' / predicted '0.0'"),
    ("prior,step_time_s,c1,src,nan,1.0,calibration", "not a ratio of two positive finite"),
])
def test_a_malformed_residuals_file_is_named_not_a_traceback(tmp_path: Path, row: str,
                                                             says: str) -> None:
    """A hand-edited residuals.csv (or ranges.json) under SHARDMETER_CATALOGS is a
    DatasetError naming the file and line with the regenerating command."""
    from perfmodel.spec.errors import DatasetError
    from perfmodel.uncertainty.intervals import _read_ranges, calibration_ratios

    path = tmp_path / "residuals.csv"
    path.write_text("\n".join([",".join(COLUMNS), "prior,step_time_s,c0,src,1.0,1.1,calibration",
                               row]) + "\n")
    with pytest.raises(DatasetError, match=says) as err:
        calibration_ratios(path)
    assert "make_residuals" in (err.value.hint or "")
    for text in ("{", "[1, 2]"):
        ranges = tmp_path / f"ranges{len(text)}.json"
        ranges.write_text(text)
        with pytest.raises(DatasetError, match="ranges"):
            _read_ranges(ranges)
