"""Forecasts of a fitted switching model: k-step-ahead predictive distributions of
y_{T+1..T+H} given y_{1:T} and theta, by simulation from the filtered distribution at T, with
central intervals and the exact regime probabilities (the filtered ones times Pi^h, or
Pi_{T+1} ... Pi_{T+h} with time-varying transition probabilities, given the future
covariates). statsmodels has no out-of-sample forecast for its Markov-switching models (it
raises NotImplementedError, with or without TVTP).

``forecast_switching`` is a Python-level driver (validation, quantiles in NumPy) over a compiled
kernel, not traceable.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .... import validation
from ....models.markov_switching import SwitchingSpec, build_params, regime_probabilities
from ....models.switching import psd_factor, step_offsets
from ..kalman import log_probabilities
from .likelihood import check_likelihood, filter_unchecked, hamilton_filter
from .parameters import check_data, check_spec, check_theta, register_spec, registered_spec


class SwitchingForecast(NamedTuple):
    """k-step-ahead predictive distributions of y_{T+1..T+H} given y_{1:T} and theta.

    Attributes:
        mean: (H, o) E[y_{T+h} | y_{1:T}] (Monte Carlo).
        levels: (L,) the central interval levels, e.g. (0.5, 0.9).
        lower, upper: (L, H, o) the interval bounds (the (1 -+ level) / 2 quantiles of the
            draws).
        regime_probs: (H, M) P(s_{T+h} = j | y_{1:T}) (exact: filtered mode probabilities
            propagated by Pi^h, summed over the modes of each regime).
        draws: (num_draws, H, o) the simulated paths.
    """

    mean: np.ndarray
    levels: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    regime_probs: np.ndarray
    draws: np.ndarray


def _future_rows(structure, future):
    """The model's input rows over the horizon (H, ``input_width``) from ``future``: the given
    rows, or for MS-AR zeros in the lag columns (each path fills its y lags; the covariates'
    lags only enter the first regime tuple of a series) and the TVTP covariates z_{T+h}
    last; for MS-VAR zeros in its o p lag columns, then z_{T+h}."""
    if structure.kind not in ("ar", "var"):
        return future
    pad = jnp.zeros((future.shape[0], structure.input_width - future.shape[1]), future.dtype)
    return jnp.concatenate([pad, future], axis=1)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _forecast_paths(spec_key, likelihood, horizon, num_draws, key, theta, obs, u, future):
    spec = registered_spec(spec_key)
    structure = spec.structure
    params = build_params(structure, theta, u)
    rows = _future_rows(structure, future)
    # the mode transition matrix of each future step: P_{T+h} from z_{T+h} with TVTP
    ahead = build_params(structure, theta, rows).transition_matrix if structure.num_tvtp else None
    if likelihood == "exact" and structure.kind != "state_space":
        _, probs = hamilton_filter(params, obs, u)
        m = params.initial_probs.shape[0]
        d = params.initial_means.shape[1]
        means, covs = jnp.zeros((m, d), obs.dtype), jnp.zeros((m, d, d), obs.dtype)
        last_probs = probs[-1]
    else:
        res = filter_unchecked(params, obs, u, likelihood)
        last_probs, means, covs = res.mode_probs[-1], res.means[-1], res.covs[-1]
    # the lag columns the paths fill: p for MS-AR, o p for MS-VAR (y_{t-1}, ..., y_{t-p}, each
    # o wide), none otherwise; the last p values of the series (most recent first): y_T, then
    # u_T's first (p - 1) o lag columns
    o = obs.shape[1]
    order = structure.order * o if structure.kind in ("ar", "var") else 0
    history = jnp.concatenate([obs[-1], u[-1, : max(order - o, 0)]])[:order]

    chol_q, chol_r, chol_p = (
        psd_factor(params.dynamics_covs),
        psd_factor(params.emission_covs),
        psd_factor(covs),
    )

    def one_path(key):
        key_s, key_x, key_steps = jax.random.split(key, 3)
        s = jax.random.categorical(key_s, log_probabilities(last_probs))
        x = means[s] + chol_p[s] @ jax.random.normal(key_x, means.shape[1:], obs.dtype)

        def step(carry, inp):
            s, x, lags = carry
            key, u_future, trans = inp
            k_s, k_x, k_y = jax.random.split(key, 3)
            u_t = u_future.at[:order].set(lags) if order else u_future
            dyn, emi = step_offsets(params, u_t)
            trans = params.transition_matrix if trans is None else trans
            s = jax.random.categorical(k_s, log_probabilities(trans[s]))
            x = params.dynamics_matrices[s] @ x + dyn[s]
            x = x + chol_q[s] @ jax.random.normal(k_x, x.shape, obs.dtype)
            eps = jax.random.normal(k_y, (obs.shape[1],), obs.dtype)
            y = params.emission_matrices[s] @ x + emi[s] + chol_r[s] @ eps
            lags = jnp.concatenate([y, lags[: order - o]]) if order else lags
            return (s, x, lags), y

        keys = jax.random.split(key_steps, horizon)
        _, ys = jax.lax.scan(step, (s, x, history), (keys, rows, ahead))
        return ys

    def propagate(probs, trans):
        probs = probs @ (params.transition_matrix if trans is None else trans)
        return probs, probs

    paths = jax.vmap(one_path)(jax.random.split(key, num_draws))
    trans_h = jax.lax.scan(propagate, last_probs, ahead, length=horizon)[1]
    return paths, regime_probabilities(structure, trans_h)


def forecast_switching(
    key,
    spec: SwitchingSpec,
    theta=None,
    horizon: int = 8,
    *,
    future_inputs=None,
    likelihood: str | None = None,
    num_draws: int = 4000,
    levels=(0.5, 0.9),
) -> SwitchingForecast:
    """k-step-ahead forecasts of y_{T+1..T+H} with central intervals, by simulation from the
    filtered distribution at T.

    Each path draws (s_T, x_T) from the filter's mode probabilities and per-mode Gaussians at
    T (exact for the econometric models; the named filter's approximation otherwise), then
    runs the model forward: s_{t+1} ~ Pi[s_t], x_{t+1} = F x_t + b + B u_{t+1} + noise,
    y_{t+1} = H x_{t+1} + d + D u_{t+1} + noise. For MS-AR the inputs are the lags, taken from
    the series and then from the path itself (so the intervals carry the regime and the
    autoregressive uncertainty), and for MS-VAR the o p lags of the vector series likewise;
    other models with inputs need ``future_inputs`` (H, k).
    The regime probabilities are exact: the filtered ones times Pi^h. (statsmodels has no
    out-of-sample forecast for its Markov-switching models.)

    Time-varying transition probabilities (TVTP, ``exog_tvtp``): the step into T + h draws
    s_{T+h} from P_{T+h} = ``tvtp_transition_matrices``(gamma, z_{T+h}) on the future
    covariates, and the regime probabilities are the filtered ones times
    P_{T+1} ... P_{T+h}; the future covariates are future inputs: a regression's
    ``future_inputs`` rows are [x_{T+h}, z_{T+h}] (the spec's input columns), an MS-AR's or an
    MS-VAR's the covariates z_{T+h} alone (H, k_tvtp) (the lags come from the paths).

    Args:
        key: a ``jax.random`` key.
        spec: ``SwitchingSpec`` with its data (the forecast origin is its last step).
        theta: the parameters (default ``spec.theta``, e.g. ``fit.theta``).
        horizon: H >= 1.
        future_inputs: (H, k) u_{T+1..T+H} for a regression or state-space model with inputs
            (with TVTP the covariates last); for MS-AR with TVTP (H, k_tvtp) the covariates
            z_{T+1..T+H}; nothing for MS-AR without TVTP.
        likelihood: the filter at T ("exact", "gpb2", "imm", "gpb1", "kalman"); default
            "exact" for the econometric models (Hamilton's filter) and "imm" for a
            state-space model, as ``fit_switching``.
        num_draws: simulated paths.
        levels: central interval levels in (0, 1).

    Not traceable: a Python-level driver (validation, quantiles in NumPy) over the compiled
    kernel ``_forecast_paths``; ``jit``/``vmap`` the filters or ``switching_log_likelihood``
    instead.
    """
    validation.check_key("key", key)
    spec = check_spec("spec", spec)
    theta = check_theta("theta", spec, theta)
    obs, u = check_data(spec, None, None)
    if likelihood is None:
        likelihood = "imm" if spec.structure.kind == "state_space" else "exact"
    likelihood = check_likelihood(likelihood, spec.structure, obs.shape[0])
    horizon = validation.check_positive_int("horizon", horizon)
    num_draws = validation.check_positive_int("num_draws", num_draws)
    levels_arr = validation.as_float_array("levels", levels).reshape(-1)
    if levels_arr.size == 0 or np.any((levels_arr <= 0) | (levels_arr >= 1)):
        raise ValueError(f"levels: expected numbers in (0, 1), got {levels}")
    future = _check_future_inputs(spec, future_inputs, horizon, obs.dtype)
    paths, regimes = _forecast_paths(
        register_spec(spec), likelihood, horizon, num_draws, key, theta, obs, u, future
    )
    paths = np.asarray(paths)
    lower = np.stack([np.quantile(paths, (1 - lv) / 2, axis=0) for lv in levels_arr])
    upper = np.stack([np.quantile(paths, (1 + lv) / 2, axis=0) for lv in levels_arr])
    return SwitchingForecast(
        mean=paths.mean(axis=0),
        levels=levels_arr,
        lower=lower,
        upper=upper,
        regime_probs=np.asarray(regimes),
        draws=paths,
    )


def _check_future_inputs(spec: SwitchingSpec, future_inputs, horizon: int, dtype) -> np.ndarray:
    """The future inputs a forecast needs, checked: (H, k) rows of the spec's inputs for a
    regression or state-space model with inputs (TVTP covariates last), (H, k_tvtp) covariates
    for MS-AR with TVTP, nothing otherwise (zeros (H, 0) or (H, p) returned); a ``ValueError``
    naming ``future_inputs`` for a wrong shape, a NaN or an inf."""
    structure = spec.structure
    if structure.kind in ("ar", "var"):
        k, what = (
            structure.num_tvtp,
            "the TVTP covariates z_{T+1..T+H} (the lags come from the paths)",
        )
        if k == 0:
            if future_inputs is not None:
                raise ValueError(
                    f"future_inputs: an MS-{structure.kind.upper()} model's inputs are its own lags"
                )
            return np.zeros((horizon, structure.num_inputs), dtype)
    else:
        k, what = spec.inputs.shape[1], "the spec's input columns over the horizon"
        if k == 0:
            if future_inputs is not None:
                raise ValueError("future_inputs: the model has no inputs")
            return np.zeros((horizon, 0), dtype)
    if future_inputs is None:
        raise ValueError(f"future_inputs: required (shape ({horizon}, {k}): {what})")
    future = validation.as_float_array("future_inputs", future_inputs)
    if future.shape != (horizon, k):
        raise ValueError(
            f"future_inputs: expected shape ({horizon}, {k}) ({what}), got {future.shape}"
        )
    validation.check_finite("future_inputs", future)
    return np.asarray(future, dtype)


__all__ = ["SwitchingForecast", "forecast_switching"]
