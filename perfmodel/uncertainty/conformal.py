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

One convention for every output (issue 27: one home for the conformal quantile)
-------------------------------------------------------------------------------
`conformal_quantile(ratios, q)` is the only order statistic any output reads, and it is read
the same way everywhere: `predict`'s *_p10/_p90 and --interval bounds
(`perfmodel.uncertainty.intervals`), the coverage tables (`perfmodel.uncertainty.coverage`), and
the planner's error model (`planner.model.uncertainty`: the plan bands, `plan`/`pareto
--quantile Q` and its Monte Carlo), through `quantile_function`, its vectorised form.
Claim: G(u) = conformal_quantile(ratios, u) — r_(floor((n+1)u)) for u < 0.5 (0.0 below rank 1),
r_(ceil((n+1)u)) for u >= 0.5 (+inf above rank n) — is nondecreasing in u, so it is the quantile
function of a distribution (that of G(U), U ~ U(0, 1): mass 1/(n+1) on each r_i, with the mass
of the two open ends at 0 and +inf and the middle rank's shares merged), and every figure read
from it carries the conformal guarantee on its outward side: G(q) for q >= 0.5 is exceeded by a
new exchangeable ratio with probability <= 1 - q, G(q) for q < 0.5 undercut with probability
<= q.
Why: within each half the rank is nondecreasing in u; across the halves, u < 0.5 <= v gives
floor((n+1)u) <= (n+1)u < (n+1)v <= ceil((n+1)v). A nondecreasing G makes G(p) a p-quantile of
G(U) for every p (P(G(U) <= G(p)) >= P(U <= p) = p and P(G(U) < G(p)) <= P(U < p) = p), so a
model that draws G(U) (the planner's comonotone error model) has exactly these figures as its
quantiles, and a plan's p10/p90 equal `predict`'s for the same step (both read G at 0.1/0.9).
The guarantee is the module's claim above applied to each end. Why not r_(ceil((n+1)u)) for
every u (the planner's former quantile function): below the median it rounds inward, so a p10
read from it is undercut with probability ceil((n+1)·0.1)/(n+1), more than 0.1 whenever
(n+1)·0.1 is not an integer (n = 5: 1/6) — a lower band end without its guarantee. The price of
the one convention: a level q < 0.5 is read as a lower end (P(true >= G(q)) >= 1 - q), not as
"holds with probability >= q"; `plan --quantile Q` therefore certifies "finishes within" only for
Q >= 0.5 (`planner.model.uncertainty` says so).
Checked by: tests/test_uncertainty.py (the two-sided interval covers its level; G is
nondecreasing and equals the scalar reading at every level; the ranks of a small sample) and
tests/test_plan_bands.py (a single-island plan's p10/p90 wall time is `predict`'s step-time band
times the step count, on the shipped residuals).

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


def check_quantile(q: object, field: str = "quantile") -> float:
    """`q` as a probability strictly between 0 and 1 (booleans are not numbers; NaN and
    infinities are refused), else a typed error naming `field`. The one check of every quantile
    and interval level (planner and predictions)."""
    if isinstance(q, bool) or not isinstance(q, int | float) or not math.isfinite(q) \
            or not 0.0 < float(q) < 1.0:
        raise UserInputError(f"{field} {q!r}: not a probability strictly between 0 and 1",
                             hint=f"give {field} as a fraction such as 0.9 (the level the "
                                  "answer holds at: 90 % of cases under the error model).")
    return float(q)


def conformal_quantile(ratios: Sequence[float] | FloatArray, q: float) -> float:
    """The split-conformal q-quantile of the ratios: for q >= 0.5 the ceil((n+1)q)-th smallest
    (math.inf when that rank exceeds n: n rows cannot certify q), for q < 0.5 the
    floor((n+1)q)-th smallest (0.0 when that rank is 0). The one reading of the module's
    "One convention for every output"."""
    level = check_quantile(q)
    return float(_read(_checked(ratios), np.array([level]))[0])


def quantile_function(ratios: Sequence[float] | FloatArray,
                      levels: Sequence[float] | FloatArray) -> FloatArray:
    """`conformal_quantile` at every level of `levels` (each in [0, 1]; 0 gives 0.0, 1 gives
    +inf, as the formula does): the quantile function G a Monte Carlo of the error draws G(U)
    from (module docstring: a nondecreasing G, so G(p) is a p-quantile of G(U))."""
    u = np.asarray(levels, dtype=float)
    if not np.all((u >= 0.0) & (u <= 1.0)):  # also refuses nan
        bad = u[~((u >= 0.0) & (u <= 1.0))].ravel()[0]
        raise UserInputError(f"quantile level {bad!r}: not a probability in [0, 1]",
                             hint="give the levels as fractions, e.g. 0.9.")
    return _read(_checked(ratios), u)


def _read(values: FloatArray, levels: FloatArray) -> FloatArray:
    """G(levels) of the sorted `values` (the rank rule of `conformal_quantile`; the 1e-12 keeps
    (n+1)q that lands a rounding error off an integer on that integer)."""
    n = values.size
    upper = np.ceil((n + 1) * levels - 1e-12).astype(int)
    lower = np.floor((n + 1) * levels + 1e-12).astype(int)
    rank = np.where(levels >= 0.5, upper, lower)
    padded: FloatArray = np.concatenate(([0.0], values, [math.inf]))  # ranks 0 and n + 1
    out: FloatArray = padded[np.clip(rank, 0, n + 1)]
    return out


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
