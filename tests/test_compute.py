"""Compute regression: recovery of known coefficients, feature selection, leave-one-model-out."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import synthetic_compute_dataset

from perfmodel.costs.compute import (
    PhaseRegressor,
    fit_phases,
    leave_one_model_out,
    mape_pct,
    mape_table,
)
from perfmodel.costs.features import REGRESSION_CANDIDATES, candidate_columns, unit_feature_matrix
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.catalog import get_model

PASS_FEATURES = REGRESSION_CANDIDATES["forward"]
"""The forward candidates (the regression never selects outside its phase's candidates)."""

TRUE = {
    "forward": {"tok_block_matmul": 2.0e-15, "tok_attn": 6.0e-15, "tok_lm_head": 3.0e-15,
                "layers": 1.5e-4},
    "backward": {"tok_block_matmul": 4.0e-15, "tok_attn": 1.2e-14, "tok_lm_head": 6.0e-15,
                 "layers": 3.0e-4},
    "optimizer": {"shard_params": 3.0e-11, "const": 2.0e-3},
}


def random_models(n: int, seed: int) -> list[ModelSpec]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        heads = int(rng.choice([8, 16, 32]))
        h = heads * int(rng.choice([64, 128]))
        out.append(
            ModelSpec(
                name=f"rand{i}",
                hidden_size=h,
                num_layers=int(rng.integers(2, 33)),
                num_heads=heads,
                num_kv_heads=int(rng.choice([1, 2, 4, 8])),
                intermediate_size=int(h * rng.uniform(2, 5)),
                vocab_size=int(rng.choice([32000, 50304, 128256])),
            )
        )
    return out


def _xy(frame, phase):
    from perfmodel.costs.features import dataset_features

    rows = frame[frame["phase"] == phase]
    X = dataset_features(rows, phase)[:, candidate_columns("forward")]
    return X, rows["time_s"].to_numpy(), rows["model"].to_numpy()


def test_recovers_coefficients_exactly_without_noise() -> None:
    frame = synthetic_compute_dataset(random_models(8, 1), {"forward": TRUE["forward"]},
                                      seq_lens=(256, 2048), micro_batches=(1, 4), noise=0.0)
    X, y, groups = _xy(frame, "forward")
    reg = PhaseRegressor(PASS_FEATURES).fit(X, y, groups)
    assert set(reg.selected_features_) == set(TRUE["forward"])
    for name, value in TRUE["forward"].items():
        assert reg.coefficients[name] == pytest.approx(value, rel=1e-6)
    assert reg.train_mape_ < 1e-6


def test_noisy_fit_matches_closed_form_weighted_least_squares() -> None:
    frame = synthetic_compute_dataset(random_models(10, 2), {"backward": TRUE["backward"]},
                                      seq_lens=(512, 4096), micro_batches=(1, 2, 8), noise=0.02,
                                      seed=3)
    X, y, groups = _xy(frame, "backward")
    names = list(TRUE["backward"])
    cols = [PASS_FEATURES.index(n) for n in names]
    reg = PhaseRegressor(names, selection="none").fit(X[:, cols], y, groups)
    # closed form: minimise sum((Xw - y)/y)^2 -> least squares on rows scaled by 1/y
    closed, *_ = np.linalg.lstsq(X[:, cols] / y[:, None], np.ones(len(y)), rcond=None)
    assert np.all(closed > 0)  # so the non-negative solution is the unconstrained one
    np.testing.assert_allclose(reg.coef_, closed, rtol=1e-6)
    for name, value in TRUE["backward"].items():
        assert reg.coefficients[name] == pytest.approx(value, rel=0.1)
    # 2% log-normal noise: E|noise| = 0.02·sqrt(2/pi) ≈ 1.6%
    assert reg.train_mape_ == pytest.approx(mape_pct(y, reg.predict(X[:, cols])))
    assert 0.8 < reg.train_mape_ < 2.5
    assert reg.cv_mape_ < 3.0


@pytest.mark.parametrize("selection", ["exhaustive", "forward"])
def test_selection_picks_generating_features(selection: str) -> None:
    frame = synthetic_compute_dataset(random_models(12, 4), {"forward": TRUE["forward"]},
                                      seq_lens=(256, 4096), micro_batches=(1, 4), noise=0.01,
                                      seed=5)
    X, y, groups = _xy(frame, "forward")
    reg = PhaseRegressor(PASS_FEATURES, selection=selection).fit(X, y, groups)
    assert set(reg.selected_features_) == set(TRUE["forward"])
    assert reg.cv_scheme_ == "leave-one-model-out"
    unused = [n for n in PASS_FEATURES if n not in TRUE["forward"]]
    assert all(reg.coef_[PASS_FEATURES.index(n)] == 0 for n in unused)
    assert np.all(reg.coef_ >= 0)


def test_estimator_conventions() -> None:
    reg = PhaseRegressor(PASS_FEATURES, tolerance=0.1)
    params = reg.get_params()
    assert params["tolerance"] == 0.1 and params["feature_names"] == PASS_FEATURES
    assert reg.set_params(n_splits=3) is reg and reg.n_splits == 3
    assert not hasattr(reg, "coef_")
    model = get_model("tiny-llama")
    X = unit_feature_matrix(model, 64, np.arange(1, 9))[:, candidate_columns("forward")]
    coef = np.zeros(len(PASS_FEATURES))
    coef[[PASS_FEATURES.index("tok_block_matmul"), PASS_FEATURES.index("layers")]] = 1e-12, 1e-5
    y = X @ coef
    assert reg.fit(X, y) is reg
    assert reg.cv_scheme_ == "3-fold"
    assert reg.predict(X).shape == y.shape
    with pytest.raises(ValueError, match="positive"):
        reg.fit(X, -y)


def test_leave_one_model_out_table_one() -> None:
    names = ("SmolLM-360M", "Llama-3.2-1B", "Phi-1.5", "Gemma-2B", "Yi-6B", "Llama-3-8B")
    models = [get_model(n) for n in names]
    frame = synthetic_compute_dataset(models, TRUE, seq_lens=(512, 2048), micro_batches=(1, 2),
                                      noise=0.01)
    pred = leave_one_model_out(frame)
    assert not np.isnan(pred).any()
    table = mape_table(frame, pred)
    assert list(table["model"]) == [*names, "all"]
    for col in ("forward_mape_pct", "backward_mape_pct", "optimizer_mape_pct", "step_mape_pct"):
        assert table[col].notna().all()
    # 1% noise: passes generalise to unseen models; the optimizer has one point per model
    assert (table["forward_mape_pct"] < 5).all() and (table["backward_mape_pct"] < 5).all()
    assert (table["optimizer_mape_pct"] < 15).all() and (table["step_mape_pct"] < 10).all()
    assert table.loc[0, "params_b"] == pytest.approx(models[0].total_params / 1e9)
    # with selection fixed, the pooled held-out error is the regressor's own LOMO CV MAPE
    fixed = leave_one_model_out(frame, selection="none")
    fitted = fit_phases(frame, selection="none")
    assert fitted["forward"].cv_mape_ == pytest.approx(
        mape_table(frame, fixed).iloc[-1]["forward_mape_pct"], rel=1e-9)


def test_held_out_model_predictions_equal_leave_one_model_out_on_one_frame() -> None:
    """`validate`'s refit against the fitting data is the nested CV when both frames are one."""
    from perfmodel.costs.compute import held_out_model_predictions

    frame = synthetic_compute_dataset(random_models(5, 3), TRUE, seq_lens=(256, 1024),
                                      micro_batches=(1, 4), noise=0.02, seed=2)
    np.testing.assert_array_equal(held_out_model_predictions(frame, frame),
                                  leave_one_model_out(frame))


def test_mape_pct() -> None:
    assert mape_pct(np.array([1.0, 2.0]), np.array([1.1, 1.0])) == pytest.approx(30.0)


def test_fit_on_single_units_predicts_whole_models() -> None:
    """Per-unit rows (one block, the root) and whole-model rows share one set of coefficients."""
    truth = {"forward": {"tok_block_matmul": 2e-15, "tok_lm_head": 3e-15, "tok_vocab": 1e-11,
                         "layers": 1e-4, "const": 5e-4}}
    models = random_models(8, 6)
    units = synthetic_compute_dataset(models, truth, seq_lens=(1024,), micro_batches=(1, 2, 4),
                                      units=("block", "root"), noise=0.01, seed=1)
    regs = fit_phases(units)
    whole = synthetic_compute_dataset(models, truth, seq_lens=(1024,), noise=0.0)
    from perfmodel.costs.features import dataset_features

    pred = regs["forward"].predict(
        dataset_features(whole, "forward")[:, candidate_columns("forward")]
    )
    assert mape_pct(whole["time_s"], pred) < 2.0


def test_is_a_scikit_learn_estimator() -> None:
    """clone / cross_val_score work, so the regressor composes with sklearn.model_selection."""
    from sklearn.base import clone
    from sklearn.model_selection import GroupKFold, cross_val_score

    frame = synthetic_compute_dataset(random_models(6, 7), {"forward": TRUE["forward"]},
                                      seq_lens=(256, 1024), micro_batches=(1, 4), noise=0.0)
    X, y, groups = _xy(frame, "forward")
    reg = PhaseRegressor(list(PASS_FEATURES), selection="forward", tolerance=0.1)
    twin = clone(reg)
    assert twin is not reg and twin.get_params() == reg.get_params()
    scores = cross_val_score(reg, X, y, groups=groups, cv=GroupKFold(n_splits=3),
                             params={"groups": groups})
    assert scores.shape == (3,) and np.all(scores > 0.999)  # R² on noiseless held-out models
    assert not hasattr(reg, "coef_")  # cross_val_score fitted clones, not reg itself


def test_cv_mape_equals_brute_force_loops() -> None:
    """cv_mape_ against plain loops (one model held out / seeded folds) with numpy lstsq."""
    frame = synthetic_compute_dataset(random_models(7, 8), {"backward": TRUE["backward"]},
                                      seq_lens=(512, 2048), micro_batches=(1, 2, 4), noise=0.02,
                                      seed=9)
    X, y, groups = _xy(frame, "backward")
    cols = [PASS_FEATURES.index(n) for n in TRUE["backward"]]
    X = X[:, cols]

    def held_out_errors(folds):
        errors = []
        for test in folds:
            train = np.setdiff1d(np.arange(len(y)), test)
            w, *_ = np.linalg.lstsq(X[train] / y[train, None], np.ones(len(train)), rcond=None)
            assert np.all(w > 0)  # so NNLS equals unconstrained least squares
            errors.extend(np.abs(X[test] @ w / y[test] - 1.0) * 100.0)
        return float(np.mean(errors))

    lomo = PhaseRegressor(list(TRUE["backward"]), selection="none").fit(X, y, groups)
    assert lomo.cv_scheme_ == "leave-one-model-out"
    by_model = [np.flatnonzero(groups == g) for g in dict.fromkeys(groups)]
    assert lomo.cv_mape_ == pytest.approx(held_out_errors(by_model), rel=1e-9)
    kfold = PhaseRegressor(list(TRUE["backward"]), selection="none", n_splits=4).fit(X, y)
    assert kfold.cv_scheme_ == "4-fold"
    order = np.random.default_rng(0).permutation(len(y))
    assert kfold.cv_mape_ == pytest.approx(held_out_errors(np.array_split(order, 4)), rel=1e-9)
