"""The switching state-space model as a NumPyro program over its parameters alone.

    theta ~ priors (constrained form: Dirichlet rows, positive variances and scales, ordered
            regime means (or the ordered noise scale of exchangeable modes,
            ``regime_ordering``), normal coefficients; ``attnbayes.models.markov_switching``)
    factor "log_likelihood" = log p(y_{1:T} | theta)

with the states and modes integrated out by a filter (``likelihood``): "exact" (Hamilton's
filter for the econometric models, whose state is constant; all M^T histories for a
state-space model, short series), "gpb2", "imm", "gpb1" (the collapsed approximations) or
"kalman" (M = 1). NUTS then samples theta alone, in any T. The program lives with the switching
inference, not in ``attnbayes.models``, because its likelihood is a filter.

``switching_model`` (``attnbayes.models.switching``) is the other program: it samples the
states x_{1:T} too, with the modes marginalised by a forward algorithm, for short series.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpyro

from ....models.markov_switching import (
    SwitchingSpec,
    build_params,
    default_priors,
    regime_transition_matrix,
)
from ....models.switching import simulate
from ..kalman import check_inputs
from .likelihood import check_likelihood, mode_filter
from .parameters import check_free, check_spec


def switching_marginal_model(
    observations=None,
    *,
    spec: SwitchingSpec,
    likelihood: str = "imm",
    priors: dict | None = None,
    inputs=None,
    free=None,
    num_steps: int | None = None,
):
    """NumPyro program: the free parameters of ``spec`` under ``priors``, and the filter's
    log-likelihood added once with ``numpyro.factor("log_likelihood", ...)``.

    Sites: one per free parameter, named as in ``spec.theta`` (e.g. "transition_matrix",
    "means", "ar_coefficients", "variances"), in constrained form; the others stay at
    ``spec.theta``. With ``observations=None`` the program simulates instead (needs a PRNG
    key, e.g. under ``numpyro.infer.Predictive``): deterministic sites "modes" (T,) and
    "observations" (T, o) hold a draw of the model at the sampled theta.

    Args:
        observations: (T, o) y, NaN entries missing; ``None`` to simulate (then
            ``num_steps`` or ``inputs`` gives T; default the spec's own length).
        spec: ``SwitchingSpec`` (``markov_switching_regression``, ``markov_switching_ar``,
            ``switching_state_space``).
        likelihood: "exact", "gpb2", "imm" (default), "gpb1" or "kalman".
        priors: {name: NumPyro distribution} overriding ``default_priors(spec, free)`` (whose
            law of the noise scale that labels exchangeable modes is ordered,
            ``regime_ordering``).
        inputs: (T, k) u_{1:T} when the model has inputs (default: the spec's own when
            ``observations`` is None or has the spec's length); with time-varying transition
            probabilities (``exog_tvtp``) they carry the covariates (their last columns) and
            are required.
        free: the parameters to sample (default ``spec.free``); the others are fixed.
        num_steps: T when simulating.

    The log density is a pure JAX function of the unconstrained parameters (NUTS,
    ``numpyro.infer.util.log_density`` and its gradient; tested against finite differences).
    """
    spec = check_spec("spec", spec)
    free = check_free(spec, free)
    chosen = default_priors(spec, free) | dict(priors or {})
    missing = [n for n in free if n not in chosen]
    if missing:
        raise ValueError(f"priors: no prior for the free parameter(s) {missing}")
    if observations is None:
        t = spec.observations.shape[0] if num_steps is None else num_steps
    else:
        t = observations.shape[0]
    if inputs is None and t == spec.inputs.shape[0]:
        inputs = spec.inputs
    if inputs is None and spec.structure.num_tvtp:
        raise ValueError(
            f"inputs: required (shape ({t}, {spec.structure.input_width})): the model has "
            "time-varying transition probabilities, whose covariates are the inputs' last "
            "columns"
        )
    dtype = jnp.result_type(float)
    theta = {n: jnp.asarray(v, dtype) for n, v in spec.theta.items()}
    for name in free:
        theta[name] = numpyro.sample(name, chosen[name])
    params = build_params(spec.structure, theta, inputs)
    if observations is None:
        key = numpyro.prng_key()
        if key is None:
            raise ValueError(
                "observations: with observations=None the program simulates and needs a PRNG "
                "key; run it under numpyro.handlers.seed or numpyro.infer.Predictive"
            )
        modes, _, obs = simulate(key, params, t, inputs=inputs)
        numpyro.deterministic("modes", modes)
        numpyro.deterministic("observations", obs)
        return
    likelihood = check_likelihood(likelihood, spec.structure, t)
    params, obs, u = check_inputs(params, observations, inputs=inputs)
    regimes = None
    if spec.structure.kind == "ar":
        regimes = regime_transition_matrix(spec.structure, theta, u)
    log_lik, _ = mode_filter(spec.structure, likelihood, params, obs, u, regimes)
    numpyro.factor("log_likelihood", log_lik)


__all__ = ["switching_marginal_model"]
