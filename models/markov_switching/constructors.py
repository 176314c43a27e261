"""The constructors of parametrised switching models, each a ``SwitchingSpec`` with start
values from the data: the Markov-switching regression (``markov_switching_regression``),
Hamilton's MS-AR(p) (``markov_switching_ar``), Krolzig's MS(I)AH-VAR(p)
(``markov_switching_var``) and a generic ``SwitchingParams`` with free fields
(``switching_state_space``). Conventions: the package docstring.
"""

from __future__ import annotations

import numpy as np
from numpyro.distributions import constraints

from ... import validation
from ...constants import STATE_SPACE_FREE  # the default free set, shared with the command line
from ..regime_laws import ordered_first_column
from ..switching import SwitchingParams, as_float_field, check_input_series, check_params
from .structure import TRENDS, SwitchingSpec, SwitchingStructure


def _check_regimes(num_regimes) -> int:
    """M >= 1 (M = 1 is the model without switching, the baseline of a comparison)."""
    return validation.check_positive_int("num_regimes", num_regimes)


def _series(name: str, value) -> np.ndarray:
    arr = validation.as_float_array(name, value)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1 or arr.shape[0] < 3:
        raise ValueError(f"{name}: expected a series of shape (T,) with T >= 3, got {arr.shape}")
    validation.check_finite(name, arr)
    return arr


def _persistent_transition(m: int) -> np.ndarray:
    """A start value: stay with probability 0.9, leave evenly (1 for M = 1)."""
    if m == 1:
        return np.ones((1, 1))
    return np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))


def _identified(theta: dict) -> tuple:
    """The free parameters by default: every non-empty one, but not a 1 x 1 transition."""
    return tuple(
        n
        for n, v in theta.items()
        if np.size(v) > 0 and not (n == "transition_matrix" and np.size(v) == 1)
    )


def _transition_names(m: int) -> list[str]:
    return [f"p[{i}->{j}]" for i in range(m) for j in range(m)]


def _check_exog_tvtp(value, num_rows: int) -> np.ndarray:
    """The TVTP covariates (T, k_tvtp) (a (T,) series is one column), one row per endog row,
    finite; else a ``ValueError`` naming ``exog_tvtp``."""
    z = validation.as_float_array("exog_tvtp", value)
    if z.ndim == 1:
        z = z[:, None]
    if z.ndim != 2 or z.shape[0] != num_rows or z.shape[1] < 1:
        raise ValueError(
            f"exog_tvtp: expected shape ({num_rows}, k_tvtp) with k_tvtp >= 1 (one row per "
            f"endog value, as statsmodels' exog_tvtp), got {z.shape}"
        )
    validation.check_finite("exog_tvtp", z)
    return np.asarray(z, dtype=float)


def _constant_column(z: np.ndarray) -> int | None:
    """The first column of z that is a nonzero constant (an intercept), or None."""
    for c in range(z.shape[1]):
        if z[0, c] != 0 and np.all(z[:, c] == z[0, c]):
            return c
    return None


def _tvtp_start(z: np.ndarray, m: int) -> np.ndarray:
    """Start coefficients (M, M - 1, k_tvtp): where z has a constant column c, its
    coefficients give the persistent start matrix (stay 0.9) at every step,
    gamma_ijc = log(P[i, j] / P[i, M-1]) / c, and the other coefficients are 0; without a
    constant column every coefficient is 0 (P_t uniform, statsmodels' start)."""
    gamma = np.zeros((m, m - 1, z.shape[1]))
    c = _constant_column(z)
    if c is not None and m > 1:
        persistent = _persistent_transition(m)
        gamma[:, :, c] = np.log(persistent[:, :-1] / persistent[:, -1:]) / z[0, c]
    return gamma


def _tvtp_names(m: int, k: int) -> list[str]:
    """statsmodels' names of the TVTP coefficients, in C order of (M, M - 1, k_tvtp)."""
    return [f"p[{i}->{j}].tvtp{c}" for i in range(m) for j in range(m - 1) for c in range(k)]


def _transition_part(z, m: int) -> tuple[dict, dict, dict]:
    """(theta, support, names) of the transition: a constant matrix (``z`` None) or the TVTP
    coefficients on the covariates ``z``."""
    if z is None:
        return (
            {"transition_matrix": _persistent_transition(m)},
            {"transition_matrix": constraints.simplex},
            {"transition_matrix": _transition_names(m)},
        )
    return (
        {"transition_coefficients": _tvtp_start(z, m)},
        {"transition_coefficients": constraints.real},
        {"transition_coefficients": _tvtp_names(m, z.shape[1])},
    )


def _ols(y, x):
    """OLS of y on x: (coefficients, residual variance, the coefficients' standard errors)."""
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    var = float(resid @ resid / max(len(y) - x.shape[1], 1))
    if x.shape[1] == 0:
        return coef, var, np.zeros(0)
    se = np.sqrt(var * np.diag(np.linalg.pinv(x.T @ x)))
    return coef, var, se


def _check_trend(trend) -> str:
    if not isinstance(trend, str) or trend not in TRENDS:
        raise ValueError(
            f"trend: expected 'c' (a switching intercept) or 'n' (none), got {trend!r}"
        )
    return trend


def _switching_flags(name: str, value, width: int, what: str) -> bool | tuple:
    """True, False, or one flag per column (``width`` of them, each True or False); a
    sequence whose flags agree becomes that one flag."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    flags = list(value) if isinstance(value, list | tuple | np.ndarray) else None
    if (
        flags is None
        or len(flags) != width
        or not all(isinstance(f, bool | np.bool_) for f in flags)
    ):
        raise ValueError(
            f"{name}: expected True, False or one True/False per {what} ({width}), got {value!r}"
        )
    flags = tuple(bool(f) for f in flags)
    return flags[0] if len(set(flags)) == 1 else flags


def _coefficient_part(name, coef, se, flags, m, labels, ordered):
    """(theta, support, names) of regression / AR coefficients ``coef`` (k,) under the
    switching ``flags``: "name" (M, k), (k,), or (M, k_s) with "common_name" (k - k_s,)
    (``coefficient_matrix``). ``ordered``: the regimes are labelled by the first switching
    column (support ``ordered_first_column``), whose start spreads over +-2 standard errors
    ``se`` of the OLS fit (at least 0.05)."""
    k = coef.shape[0]
    mask = np.array((flags,) * k if isinstance(flags, bool) else flags, bool)
    if mask.all() or not mask.any():
        switching = bool(mask.all()) or k == 0
        value = np.tile(coef, (m, 1)) if switching else coef.copy()
        theta = {name: value}
        names = {
            name: (
                [f"{labels[c]}[{j}]" for j in range(m) for c in range(k)]
                if switching
                else list(labels)
            )
        }
    else:
        on, off = np.flatnonzero(mask), np.flatnonzero(~mask)
        theta = {name: np.tile(coef[on], (m, 1)), "common_" + name: coef[off].copy()}
        names = {
            name: [f"{labels[c]}[{j}]" for j in range(m) for c in on],
            "common_" + name: [labels[c] for c in off],
        }
    support = {n: constraints.real for n in theta}
    if ordered:
        first = int(np.flatnonzero(mask)[0])
        theta[name] = theta[name].copy()
        theta[name][:, 0] += max(2.0 * float(se[first]), 0.05) * np.linspace(-1.0, 1.0, m)
        support[name] = ordered_first_column
    return theta, support, names


def _variance_part(var, m, switching, ordered):
    """(theta, support, names) of the variances: one, or one per regime; ``ordered``: they
    label the regimes (support ``positive_ordered_vector``), starting spread by a factor
    e^(+-0.5)."""
    if not switching:
        return (
            {"variances": np.asarray(var)},
            {"variances": constraints.positive},
            {"variances": ["sigma2"]},
        )
    value = np.full(m, var) * (np.exp(np.linspace(-0.5, 0.5, m)) if ordered else 1.0)
    support = constraints.positive_ordered_vector if ordered else constraints.positive
    return (
        {"variances": value},
        {"variances": support},
        {"variances": [f"sigma2[{j}]" for j in range(m)]},
    )


def _label_by(trend: str, flags, switching_variance: bool, m: int) -> str:
    """What labels the regimes: "trend" (the intercept / mean), "coefficients" (the first
    switching coefficient column, trend "n"), "variances", or "none" (M = 1); a
    ``ValueError`` when nothing differs between regimes."""
    if m == 1:
        return "none"
    if trend == "c":
        return "trend"
    if flags is True or (isinstance(flags, tuple) and any(flags)):
        return "coefficients"
    if switching_variance:
        return "variances"
    raise ValueError(
        "trend: with trend='n' and neither coefficients nor the variance switching, the "
        f"{m} regimes would be the same model; switch something or use num_regimes=1"
    )


def _exog(exog, t: int) -> np.ndarray:
    if exog is None:
        return np.zeros((t, 0))
    x = validation.as_float_array("exog", exog)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] != t:
        raise ValueError(f"exog: expected shape ({t}, k) (one row per endog value), got {x.shape}")
    validation.check_finite("exog", x)
    return x


def markov_switching_regression(
    endog,
    exog=None,
    *,
    num_regimes: int = 2,
    trend: str = "c",
    switching_coefficients=True,
    switching_variance: bool = True,
    exog_tvtp=None,
) -> SwitchingSpec:
    """Markov-switching regression y_t = mu_{s_t} + x_t' beta_{s_t} + e_t,
    e_t ~ N(0, sigma^2_{s_t}) (Hamilton 1989; Kim and Nelson 1999, ch. 4), statsmodels'
    ``MarkovRegression(endog, k_regimes, trend=, exog=, switching_exog=,
    switching_variance=)``.

    theta: "transition_matrix" (M, M) (row-from); "intercepts" (M,) with trend "c" (ordered:
    the regimes are labelled by increasing intercept); "coefficients" (M, k) when every
    regressor switches, (k,) when none does, else (M, k_s) for the switching columns (in
    order) and "common_coefficients" (k - k_s,) for the others; "variances" (M,) or ().
    Without an intercept (trend "n") the regimes are labelled by the first switching
    coefficient (support ``ordered_first_column``), else by the variance
    (``positive_ordered_vector``); ``regime_ordering`` states which.
    With ``exog_tvtp`` (time-varying transition probabilities, statsmodels' ``exog_tvtp``;
    module docstring) "transition_coefficients" (M, M - 1, k_tvtp) replaces
    "transition_matrix": P_t[i, j] = softmax_j(z_t' gamma_ij), gamma_{i, M-1} = 0.
    The start values are statsmodels' in spirit: OLS coefficients, the labelling parameter
    spread over its OLS scale (intercepts over the residual scale, a slope over +-2 standard
    errors), the OLS residual variance, persistent regimes (0.9 on the diagonal; with TVTP
    through the coefficients of a constant column of ``exog_tvtp``, the others 0).

    Args:
        endog: (T,) the series.
        exog: (T, k) regressors (without a constant), or None.
        num_regimes: M >= 1 (1: no switching, the baseline).
        trend: "c" (a switching intercept) or "n" (no intercept).
        switching_coefficients: beta differs by regime: True, False, or one flag per exog
            column (statsmodels' ``switching_exog``).
        switching_variance: sigma^2 differs by regime (else one sigma^2).
        exog_tvtp: (T, k_tvtp) the covariates z_t of the transition probabilities (include a
            column of ones for a constant), or None (a constant transition matrix).

    Returns:
        ``SwitchingSpec`` with observations (T, 1) and inputs (T, k) = exog, or with TVTP
        (T, k + k_tvtp) = [exog, exog_tvtp].
    """
    y = _series("endog", endog)
    t = y.shape[0]
    m = _check_regimes(num_regimes)
    trend = _check_trend(trend)
    x = _exog(exog, t)
    k = x.shape[1]
    flags = _switching_flags("switching_coefficients", switching_coefficients, k, "exog column")
    switching_variance = validation.check_flag("switching_variance", switching_variance)
    if trend == "n" and k == 0:
        raise ValueError("exog: required with trend='n' (the model would have no mean at all)")
    label = _label_by(trend, flags, switching_variance, m)
    z = None if exog_tvtp is None else _check_exog_tvtp(exog_tvtp, t)
    design = np.column_stack([np.ones(t), x]) if trend == "c" else x
    coef, var, se = _ols(y, design)
    slopes, slope_se = (coef[1:], se[1:]) if trend == "c" else (coef, se)
    structure = SwitchingStructure(
        "regression",
        m,
        0,
        k,
        flags,
        switching_variance,
        0 if z is None else z.shape[1],
        trend,
    )
    theta, support, names = _transition_part(z, m)
    if trend == "c":
        theta["intercepts"] = coef[0] + np.sqrt(var) * np.linspace(-1.0, 1.0, m)
        support["intercepts"] = constraints.ordered_vector
        names["intercepts"] = [f"const[{j}]" for j in range(m)]
    labels = [f"x{c + 1}" for c in range(k)]
    parts = (
        _coefficient_part(
            "coefficients", slopes, slope_se, flags, m, labels, label == "coefficients"
        ),
        _variance_part(var, m, switching_variance, label == "variances"),
    )
    for th, su, na in parts:
        theta, support, names = theta | th, support | su, names | na
    inputs = x if z is None else np.column_stack([x, z])
    return SwitchingSpec(structure, theta, support, _identified(theta), y[:, None], inputs, names)


def markov_switching_ar(
    endog,
    order: int,
    *,
    num_regimes: int = 2,
    trend: str = "c",
    switching_ar=False,
    switching_variance: bool = False,
    exog_tvtp=None,
) -> SwitchingSpec:
    """Hamilton's (1989) Markov-switching AR(p) with switching mean:
    y_t - mu_{s_t} = sum_{k=1..p} phi_k (y_{t-k} - mu_{s_{t-k}}) + e_t, e_t ~ N(0, sigma^2),
    statsmodels' ``MarkovAutoregression(endog, k_regimes, order, trend=, switching_ar=,
    switching_variance=)``.

    The filter's modes are the regime tuples (s_t, ..., s_{t-p}) (module docstring); the
    first p observations are conditioned on. theta: "transition_matrix" (M, M), "means" (M,)
    (ordered; trend "c" only), "ar_coefficients" (p,), (M, p), or with per-lag switching
    (M, p_s) and "common_ar_coefficients" (p - p_s,), "variances" () or (M,) (of s_t).
    Without a mean (trend "n": y_t = sum_k phi_k(s_t) y_{t-k} + e_t) the regimes are
    labelled by the first switching AR coefficient, else by the variance. With ``exog_tvtp``
    (statsmodels' ``exog_tvtp``, one row per endog row: its first p rows give the law of the
    first regime tuple, as in statsmodels; module docstring) "transition_coefficients"
    (M, M - 1, k_tvtp) replaces "transition_matrix". Start values: the AR(p) OLS fit, the
    labelling parameter spread over its OLS scale, persistent regimes (with TVTP as
    ``markov_switching_regression``'s).

    Args:
        endog: (T,) the series, T > p + 2.
        order: p >= 1.
        num_regimes: M >= 1 (1: the plain AR(p), the baseline).
        trend: "c" (a switching mean) or "n" (none).
        switching_ar: phi differs by regime: True, False, or one flag per lag.
        switching_variance: sigma^2 differs by regime (that of s_t; see the module docstring
            for statsmodels' convention when p >= 2).
        exog_tvtp: (T, k_tvtp) the covariates z_t of the transition probabilities, one row
            per endog row (include a column of ones for a constant), or None.

    Returns:
        ``SwitchingSpec`` with observations (T - p, 1) = y_{p+1:T} and inputs (T - p, p), row
        t = (y_{t-1}, ..., y_{t-p}); with TVTP (T - p, p + (p + 1) k_tvtp), row t =
        (y_{t-1}, ..., y_{t-p}, z_{t-p}, ..., z_{t-1}, z_t).
    """
    y = _series("endog", endog)
    p = validation.check_positive_int("order", order)
    m = _check_regimes(num_regimes)
    trend = _check_trend(trend)
    flags = _switching_flags("switching_ar", switching_ar, p, "lag")
    switching_variance = validation.check_flag("switching_variance", switching_variance)
    label = _label_by(trend, flags, switching_variance, m)
    t = y.shape[0]
    if t <= p + 2:
        raise ValueError(f"endog: an AR({p}) model needs more than {p + 2} values, got {t}")
    z = None if exog_tvtp is None else _check_exog_tvtp(exog_tvtp, t)
    lags = np.column_stack([y[p - k : t - k] for k in range(1, p + 1)])
    obs = y[p:]
    design = np.column_stack([np.ones(t - p), lags]) if trend == "c" else lags
    coef, var, se = _ols(obs, design)
    phi, phi_se = (coef[1:], se[1:]) if trend == "c" else (coef, se)
    structure = SwitchingStructure(
        "ar", m, p, p, flags, switching_variance, 0 if z is None else z.shape[1], trend
    )
    theta, support, names = _transition_part(z, m)
    if trend == "c":
        mean = coef[0] / max(1.0 - float(np.sum(phi)), 1e-3)
        theta["means"] = mean + np.sqrt(var) * np.linspace(-1.0, 1.0, m)
        support["means"] = constraints.ordered_vector
        names["means"] = [f"const[{j}]" for j in range(m)]
    labels = [f"ar.L{c + 1}" for c in range(p)]
    parts = (
        _coefficient_part(
            "ar_coefficients", phi, phi_se, flags, m, labels, label == "coefficients"
        ),
        _variance_part(var, m, switching_variance, label == "variances"),
    )
    for th, su, na in parts:
        theta, support, names = theta | th, support | su, names | na
    inputs = lags
    if z is not None:  # z_{t-p}, ..., z_t in time order (row t of the inputs is row t + p of endog)
        inputs = np.column_stack([lags, *(z[c : t - p + c] for c in range(p + 1))])
    return SwitchingSpec(structure, theta, support, _identified(theta), obs[:, None], inputs, names)


def markov_switching_var(
    endog,
    order: int,
    *,
    num_regimes: int = 2,
    switching_ar: bool = True,
    switching_covariance: bool = True,
    exog_tvtp=None,
) -> SwitchingSpec:
    """The Markov-switching vector autoregression MS(I)AH-VAR(p) of Krolzig (1997, ch. 1 and
    sec. 9.2): intercepts, autoregressive matrices and covariance all switching,

        y_t = nu_{s_t} + sum_{l=1..p} A_{l, s_t} y_{t-l} + e_t,   e_t ~ N(0, Sigma_{s_t}),

    y_t in R^o, s_t a Markov chain on M regimes (row-from P; with ``exog_tvtp`` the TVTP
    logits of ``markov_switching_regression``). The emission depends on s_t alone (the lags
    are inputs), so Hamilton's filter runs on the M regimes; the first p observations are
    conditioned on. For o = 1 it is ``markov_switching_regression`` on the lags (statsmodels'
    ``MarkovRegression(y[p:], exog=lags)``), not Hamilton's mean-adjusted MS-AR.

    theta: "transition_matrix" (M, M) (or "transition_coefficients" (M, M - 1, k_tvtp));
    "intercepts" (M, o), the regimes labelled by increasing intercept of the first series
    (support ``ordered_first_column``); "ar_coefficients" (M, o, o p) or (o, o p): row i is
    equation i, columns (y_{t-1}, ..., y_{t-p}), each o wide, so A_{l, j} =
    ar_coefficients[j][:, (l - 1) o : l o]; "covariances" (M, o, o) or (o, o). Start values:
    the equation-by-equation OLS fit of the VAR(p), the first intercept spread over its
    residual scale, the OLS residual covariance, persistent regimes.

    Args:
        endog: (T, o) the series (one column per variable), T >= (o + 1)(p + 1).
        order: p >= 1.
        num_regimes: M >= 1 (1: the VAR(p), the baseline).
        switching_ar: the autoregressive matrices differ by regime.
        switching_covariance: Sigma differs by regime.
        exog_tvtp: (T, k_tvtp) TVTP covariates, one row per endog row (the first p rows are
            dropped with the observations, as statsmodels does for a regression), or None.

    Returns:
        ``SwitchingSpec`` with observations (T - p, o) = y_{p+1:T} and inputs (T - p, o p),
        row t = (y_{t-1}, ..., y_{t-p}); with TVTP (T - p, o p + k_tvtp), z_t last.
    """
    y = validation.as_float_array("endog", endog)
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[1] == 0:
        raise ValueError(f"endog: expected a (T, o) array, one column per series, got {y.shape}")
    validation.check_finite("endog", y)
    p = validation.check_positive_int("order", order)
    m = _check_regimes(num_regimes)
    switching_ar = validation.check_flag("switching_ar", switching_ar)
    switching_covariance = validation.check_flag("switching_covariance", switching_covariance)
    t, o = y.shape
    if t - p - (1 + o * p) < o:  # the OLS start's residual covariance needs o degrees of freedom
        raise ValueError(
            f"endog: a VAR({p}) of {o} series needs at least {(o + 1) * (p + 1)} rows (p to "
            f"condition on, 1 + o p coefficients and o residual degrees of freedom per "
            f"equation), got {t}"
        )
    z = None if exog_tvtp is None else _check_exog_tvtp(exog_tvtp, t)
    if z is not None:
        z = z[p:]
    lags = np.column_stack([y[p - k : t - k] for k in range(1, p + 1)])  # (T - p, o p)
    obs = y[p:]
    design = np.column_stack([np.ones(t - p), lags])
    coef, *_ = np.linalg.lstsq(design, obs, rcond=None)  # (1 + o p, o)
    resid = obs - design @ coef
    cov = resid.T @ resid / max(t - p - design.shape[1], 1)
    cov = 0.5 * (cov + cov.T)
    eig = np.linalg.eigvalsh(cov)
    if eig[0] <= 1e-10 * max(eig[-1], 1e-300):
        raise ValueError(
            "endog: the series are collinear (the VAR's residual covariance is singular)"
        )
    structure = SwitchingStructure(
        "var",
        m,
        p,
        o * p,
        switching_ar,
        switching_covariance,
        0 if z is None else z.shape[1],
        "c",
        o,
    )
    theta, support, names = _transition_part(z, m)
    intercepts = np.tile(coef[0], (m, 1))
    intercepts[:, 0] += np.sqrt(cov[0, 0]) * np.linspace(-1.0, 1.0, m)
    a = coef[1:].T  # (o, o p)
    series = [f"y{i + 1}" for i in range(o)]
    columns = [f"L{lag}.{v}" for lag in range(1, p + 1) for v in series]
    ar_names = [f"{series[i]}.{c}" for i in range(o) for c in columns]
    cov_names = [f"sigma[{series[i]},{series[c]}]" for i in range(o) for c in range(o)]
    theta |= {
        "intercepts": intercepts,
        "ar_coefficients": np.tile(a, (m, 1, 1)) if switching_ar else a.copy(),
        "covariances": np.tile(cov, (m, 1, 1)) if switching_covariance else cov.copy(),
    }
    support |= {
        "intercepts": ordered_first_column,
        "ar_coefficients": constraints.real,
        "covariances": constraints.positive_definite,
    }
    names |= {
        "intercepts": [f"const.{v}[{j}]" for j in range(m) for v in series],
        "ar_coefficients": (
            [f"{n}[{j}]" for j in range(m) for n in ar_names] if switching_ar else ar_names
        ),
        "covariances": (
            [f"{n}[{j}]" for j in range(m) for n in cov_names]
            if switching_covariance
            else cov_names
        ),
    }
    inputs = lags if z is None else np.column_stack([lags, z])
    return SwitchingSpec(structure, theta, support, _identified(theta), obs, inputs, names)


def switching_state_space(params: SwitchingParams, observations, *, inputs=None) -> SwitchingSpec:
    """A generic ``SwitchingParams`` as a ``SwitchingSpec``: every field is a parameter, plus the
    scales c_j, r_j of Q_j = c_j Q0_j and R_j = r_j R0_j (start 1; Q0, R0 the given
    covariances). Modes whose fixed fields are the same are exchangeable; fits label them by
    increasing noise scale (``regime_ordering``). Free by default: the transition matrix and
    the noise scales (``STATE_SPACE_FREE``, the set the conjugate Gibbs sampler learns). The
    biases b_j, d_j are not free by default because they are not identified in general: a
    constant d_j trades
    against the initial state x_1 and against b_j wherever F_j integrates a coordinate (e.g. a
    position driven by a velocity), which left NUTS over them mixing poorly (R-hat 1.3-1.8 at
    T = 80 on the maneuvering target). Free any field by passing ``free=`` to the fit
    (covariance fields get the positive-definite constraint, probabilities simplex rows).

    Args:
        params: ``SwitchingParams`` (checked).
        observations: (T, o), NaN entries missing.
        inputs: (T, k) when ``params`` has input weights.
    """
    params = check_params("params", params)
    obs = as_float_field("observations", observations)
    o = params.emission_matrices.shape[1]
    if obs.ndim != 2 or obs.shape[1] != o:
        raise ValueError(f"observations: expected shape (T, {o}), got {tuple(obs.shape)}")
    inputs = check_input_series("inputs", inputs, params, obs.shape[0])
    m = params.initial_probs.shape[0]
    theta = {f: np.asarray(getattr(params, f)) for f in SwitchingParams._fields}
    theta["dynamics_cov_scale"] = np.ones(m)
    theta["emission_cov_scale"] = np.ones(m)
    support = {f: constraints.real for f in theta}
    support |= {
        "initial_probs": constraints.simplex,
        "transition_matrix": constraints.simplex,
        "initial_covs": constraints.positive_definite,
        "dynamics_covs": constraints.positive_definite,
        "emission_covs": constraints.positive_definite,
        "dynamics_cov_scale": constraints.positive,
        "emission_cov_scale": constraints.positive,
    }
    names = {f: [f"{f}{list(i)}" for i in np.ndindex(np.shape(v))] for f, v in theta.items()}
    names["transition_matrix"] = _transition_names(m)
    structure = SwitchingStructure("state_space", m, 0, params.num_inputs)
    return SwitchingSpec(
        structure, theta, support, STATE_SPACE_FREE, np.asarray(obs), np.asarray(inputs), names
    )


__all__ = [
    "STATE_SPACE_FREE",
    "markov_switching_ar",
    "markov_switching_regression",
    "markov_switching_var",
    "switching_state_space",
]
