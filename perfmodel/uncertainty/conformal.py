"""Split-conformal quantiles of a multiplicative error ratio r = measured / predicted.

Claim: for calibration ratios r_1..r_n and a new ratio r exchangeable with them,
P(r <= upper(q)) >= q with upper(q) = the ceil((n+1)·q)-th smallest r_i, and
P(r >= lower(q)) >= 1 - q with lower(q) = the floor((n+1)·q)-th smallest r_i; so the interval
[lower((1-L)/2), upper((1+L)/2)] covers r with probability >= L, and (r_i continuous) at most
L + 2/(n+1).
Why: the rank of r among r_1..r_n, r is uniform on 1..n+1 under exchangeability (Vovk et al.,
split conformal prediction; Angelopoulos & Bates 2021, "A gentle introduction to conformal
prediction", §1). A prediction p then has the interval [p·lower, p·upper]: the ratio is the
conformity score of a multiplicative model, which is the error that scales with the predicted
figure (a 10 % slower step is 10 % whatever the step).
Checked by: tests/test_uncertainty.py (seeded synthetic exchangeable data: the mean coverage of
many independent calibration/test draws equals ceil((n+1)q)/(n+1) within 4 standard errors;
the multiplier is monotone in q; a level beyond what n rows can certify is infinite).

Library choice: plain numpy, not MAPIE. MAPIE's split-conformal regressors wrap a scikit-learn
estimator and compute the conformity scores from its fit; here the predictions are fixed outputs
of the simulator (nothing to fit), and what remains is one order statistic with the (n+1)
finite-sample correction — two lines, where MAPIE would add a dependency (and its estimator
protocol) around the same `np.sort`.

Extrapolation (`widen`): outside what the residuals cover, the ratios are spread away from their
median in log space by a factor f >= 1: r' = med · (r / med)^f. It is a stated policy, not a fit
(nothing measures the error beyond the data): `perfmodel.uncertainty.intervals` sets f = 1 +
WIDEN_PER_DIMENSION per dimension the query lies outside.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from perfmodel.spec.errors import UserInputError

FloatArray = npt.NDArray[np.float64]


def _checked(ratios: Sequence[float] | FloatArray) -> FloatArray:
    values = np.sort(np.asarray(ratios, dtype=float))
    if values.size == 0:
        raise ValueError("no calibration ratios")
    if not np.all(np.isfinite(values)) or values[0] <= 0:
        raise ValueError("calibration ratios must be finite and > 0")
    return values


def check_quantile(q: float, *, field: str = "quantile") -> float:
    """`q` as a probability strictly between 0 and 1 (a typed error naming `field` else)."""
    if not isinstance(q, int | float) or isinstance(q, bool) or not 0.0 < float(q) < 1.0:
        raise UserInputError(f"{field} {q!r}: not a probability strictly between 0 and 1",
                             hint=f"give {field} as a fraction, e.g. 0.9.")
    return float(q)


def conformal_quantile(ratios: Sequence[float] | FloatArray, q: float) -> float:
    """The split-conformal q-quantile of the ratios: for q >= 0.5 the ceil((n+1)q)-th smallest
    (math.inf when that rank exceeds n: n rows cannot certify q), for q < 0.5 the
    floor((n+1)q)-th smallest (0.0 when that rank is 0)."""
    q = check_quantile(q)
    values = _checked(ratios)
    n = values.size
    if q >= 0.5:
        rank = math.ceil((n + 1) * q - 1e-12)
        return math.inf if rank > n else float(values[rank - 1])
    rank = math.floor((n + 1) * q + 1e-12)
    return 0.0 if rank < 1 else float(values[rank - 1])


def probability_at_most(ratios: Sequence[float] | FloatArray, threshold: float) -> float:
    """P(r <= threshold) for a new exchangeable ratio, the conservative conformal estimate
    #{r_i <= threshold} / (n + 1) (so `conformal_quantile(ratios, q) <= threshold` exactly when
    this is >= q, for q >= 0.5)."""
    values = _checked(ratios)
    return float(np.searchsorted(values, threshold, side="right")) / (values.size + 1)


def widen(ratios: Sequence[float] | FloatArray, factor: float) -> FloatArray:
    """The ratios spread away from their median in log space by `factor` (>= 1)."""
    if not factor >= 1.0:
        raise ValueError(f"widening factor {factor!r} < 1")
    values = _checked(ratios)
    median = float(np.median(values))
    return np.sort(median * (values / median) ** factor)
