"""Synthetic compute datasets with known coefficients, which the regression tests recover (a test
helper: the datasets are made, not measured)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from perfmodel.costs.features import phase_features, unit_feature_matrix
from perfmodel.spec.arch import ModelSpec


def synthetic_compute_dataset(models: Sequence[ModelSpec],
                              coefficients: Mapping[str, Mapping[str, float]], *,
                              seq_lens: Sequence[int] = (512,),
                              micro_batches: Sequence[int] = (1, 2, 4),
                              units: Sequence[str] = ("model",), noise: float = 0.02,
                              seed: int = 0) -> pd.DataFrame:
    """Rows in the compute-dataset format with times from known coefficients, times a log-normal
    multiplicative noise of relative size `noise` (seeded)."""
    rng = np.random.default_rng(seed)
    m = np.asarray(micro_batches, dtype=float)
    records = []
    for model, seq_len, unit in itertools.product(models, seq_lens, units):
        shape = {"model": model.name, "family": model.family, "hidden_size": model.hidden_size,
                 "num_hidden_layers": model.num_layers, "num_attention_heads": model.num_heads,
                 "num_key_value_heads": model.num_kv_heads, "head_dim": model.head_dim,
                 "intermediate_size": model.intermediate_size, "vocab_size": model.vocab_size,
                 "tie_word_embeddings": model.tie_word_embeddings, "seq_len": seq_len}
        for phase, coefs in coefficients.items():
            X = unit_feature_matrix(model, seq_len, m, unit, phase)
            t = X @ np.array([coefs.get(n, 0.0) for n in phase_features(phase)])
            t *= np.exp(rng.normal(0.0, noise, len(t)))
            records += [{**shape, "micro_batch": int(mb), "phase": phase, "unit": unit,
                         "num_shards": 1, "time_s": float(ts)} for mb, ts in zip(m, t, strict=True)]
    return pd.DataFrame.from_records(records)
