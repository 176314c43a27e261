"""The normal hierarchical model (Rubin's eight schools): units' effects drawn from one normal.

    mu ~ N(mu_loc, mu_scale^2),   tau ~ half-Cauchy(tau_scale),
    theta_i ~ N(mu, tau^2),       x_i | theta_i ~ N(theta_i, s_i^2),  s_i known,  i = 1..N.

Rubin (1981), Gelman et al. (2013, "Bayesian Data Analysis", Section 5.5): x_i is school i's
estimated coaching effect and s_i its standard error. The priors are those of the eight-schools
example of NumPyro's and PyMC's documentation (mu ~ N(0, 5^2), tau ~ half-Cauchy(5); Gelman
2006 recommends the half-Cauchy for a group-level scale when the number of groups is small).

Parametrisation. Non-centred by default: theta_i = mu + tau * theta_t_i with theta_t_i ~ N(0, 1)
(Papaspiliopoulos, Roberts and Skold 2007). With few, noisy units the data say little about
tau, the posterior has a funnel (theta's scale shrinks with tau) and NUTS on the centred form
diverges near tau = 0; the non-centred form removes the funnel. ``centered=True`` samples
theta_i ~ N(mu, tau^2) directly (the better form when the data are informative about every
theta_i).

Sites, named as ArviZ's ``centered_eight`` / ``non_centered_eight`` example data name them so
that summaries read alike: ``mu``, ``tau``, ``theta`` (N,) (a deterministic site when
non-centred), ``theta_t`` (N,) (non-centred only), and the observed ``x`` (N,). ``DIMS`` gives
their ArviZ dimensions (``run_nuts(..., dims=DIMS)``).

The parametric empirical-Bayes fit of the same model (mu, tau^2 by marginal maximum likelihood)
is ``attnbayes.inference.deconvolution.shrinkage.normal_eb``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from .. import validation

DIMS = {"theta": ["unit"], "theta_t": ["unit"], "x": ["unit"]}


def _check_sigma(sigma, num_points):
    """sigma a number or (N,), finite and > 0 (values checked when concrete); returns N or None."""
    if validation.is_traced(sigma):
        if sigma.ndim > 1:
            raise ValueError(f"sigma: expected a number or shape (N,), got {sigma.aval}")
        return sigma.shape[0] if sigma.ndim == 1 else num_points
    arr = validation.as_scale_array("sigma", sigma)
    if arr.ndim > 1:
        raise ValueError(f"sigma: expected a number or shape (N,), got shape {tuple(arr.shape)}")
    validation.check_finite("sigma", arr)
    if arr.size == 0 or not np.all(arr > 0):
        raise ValueError("sigma: every value must be a finite number > 0")
    return arr.shape[0] if arr.ndim == 1 else num_points


def normal_hierarchical_model(
    x=None,
    *,
    sigma,
    centered: bool = False,
    num_points: int | None = None,
    mu_loc: float = 0.0,
    mu_scale: float = 5.0,
    tau_scale: float = 5.0,
):
    """The eight-schools model as a NumPyro program (module docstring).

    Args:
        x: (N,) observed effects, or None to sample from the prior predictive.
        sigma: their known standard errors: a number (all equal) or (N,).
        centered: sample theta directly (True) or as mu + tau * theta_t (False, default).
        num_points: N when x is None and sigma is a number.
        mu_loc, mu_scale: the normal prior of mu.
        tau_scale: the scale of tau's half-Cauchy prior.
    """
    rows = _check_sigma(sigma, num_points)
    if x is not None:
        x = validation.as_float_array("x", x)
        if x.ndim != 1:
            raise ValueError(f"x: expected shape (N,), got {tuple(x.shape)}")
        validation.check_finite("x", x)
        if rows is not None and rows != x.shape[0]:
            raise ValueError(f"sigma: has {rows} values but x has {x.shape[0]}")
        rows = x.shape[0]
    if rows is None:
        raise ValueError("num_points: required when x is None and sigma is a number")
    if num_points is not None and num_points != rows:
        raise ValueError(f"num_points: {num_points} does not match the {rows} units")
    for name, value in (("mu_scale", mu_scale), ("tau_scale", tau_scale)):
        validation.check_positive_scalar(name, value)
    validation.check_finite("mu_loc", validation.check_real_scalar("mu_loc", mu_loc, "a number"))

    mu = numpyro.sample("mu", dist.Normal(mu_loc, mu_scale))
    tau = numpyro.sample("tau", dist.HalfCauchy(tau_scale))
    with numpyro.plate("unit", rows):
        if centered:
            theta = numpyro.sample("theta", dist.Normal(mu, tau))
        else:
            theta_t = numpyro.sample("theta_t", dist.Normal(0.0, 1.0))
            theta = numpyro.deterministic("theta", mu + tau * theta_t)
        numpyro.sample("x", dist.Normal(theta, jnp.asarray(sigma)), obs=x)


__all__ = ["DIMS", "normal_hierarchical_model"]
