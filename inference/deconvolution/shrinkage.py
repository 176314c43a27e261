"""Parametric shrinkage for heteroscedastic normal means: x_i ~ N(theta_i, s_i^2), s_i known.

Every rule here is linear in x_i given its hyperparameters and shrinks toward a location m:

    theta_hat_i = m + (1 - b_i) (x_i - m),    b_i in [0, 1] the shrinkage factor of unit i,

which is the posterior mean of theta_i under a normal prior N(m, A) when b_i = s_i^2 / (s_i^2 + A).
They differ in how A (or b) and m are chosen:

- ``sure_shrinkage``: Xie, Kou and Brown (2012, JASA 107, "SURE estimates for a heteroscedastic
  hierarchical model"): b_i = s_i^2 / (s_i^2 + A) with A >= 0 minimising Stein's unbiased risk
  estimate of the squared-error risk (their Sections 2-3):

      toward a fixed m:  SURE(A) = (1/N) sum_i [b_i^2 (x_i - m)^2 + s_i^2 - 2 b_i s_i^2],
      SURE-G (m = xbar): SURE(A) = (1/N) sum_i [b_i^2 (x_i - xbar)^2 + s_i^2
                                                 - 2 (1 - 1/N) b_i s_i^2],
      SURE-M:            (A, m) minimise the fixed-m SURE jointly, m(A) = sum b_i^2 x_i / sum b_i^2.

  (the grand-mean form is unbiased for the risk of the rule at a fixed A, xbar's dependence on
  x included; SURE-M's value is the fixed-m formula at the fitted m, so it is optimistic).
  Unlike empirical Bayes by marginal likelihood, A targets the squared error of these very
  estimates: XKB show it asymptotically optimal among the rules of this form whether or not the
  normal prior holds, and robust when the means depend on s_i, where the marginal-likelihood
  estimate of A misleads (their Sections 2-3 and simulations).
- ``sure_monotone``: XKB's semiparametric SURE (SURE-SG): any b_i in [0, 1] non-decreasing in
  s_i, chosen to minimise SURE (isotonic regression, by pooling adjacent violators); no normal
  prior assumed, only that noisier units shrink at least as much.
- ``james_stein``: the positive-part James-Stein rule in whitened coordinates x_i / s_i (the
  heteroscedastic James-Stein estimator XKB compare against): one factor B for all units,

      B = min(1, (N - 3) / sum_i (x_i - m)^2 / s_i^2),   m = sum_i (x_i / s_i^2) / sum_i 1 / s_i^2

  toward the precision-weighted grand mean (the projection onto the constants in the whitened
  coordinates, which costs one degree of freedom), or B = min(1, (N - 2) / sum_i x_i^2 / s_i^2)
  toward 0. It is minimax for the loss sum_i (theta_hat_i - theta_i)^2 / s_i^2 (James and Stein
  1961 after whitening), but shrinks every unit by the same factor, so noisy units are
  under-shrunk and precise ones over-shrunk compared with the Bayes rule. With one sigma it is
  the homoscedastic positive-part James-Stein (Efron and Morris 1973).
- ``normal_eb``: the normal hierarchical model theta_i ~ N(mu, tau^2) by parametric empirical
  Bayes (Efron and Morris 1975; Morris 1983): (mu, tau^2) maximise the marginal likelihood
  x_i ~ N(mu, tau^2 + s_i^2), with mu profiled out in closed form,

      mu(tau^2) = sum_i w_i x_i / sum_i w_i,   w_i = 1 / (tau^2 + s_i^2),

  and tau^2 >= 0 found by a one-dimensional search; then the plug-in posterior
  theta_i | x ~ N(mu + (1 - b_i)(x_i - mu), (1 - b_i) s_i^2), b_i = s_i^2 / (s_i^2 + tau^2).
  The maximum can sit on the boundary tau^2 = 0 (Rubin's eight schools do: complete pooling,
  every theta_i estimated by the precision-weighted mean), which ``at_boundary`` reports.
  The plug-in intervals ignore the uncertainty in (mu, tau^2), so they are too short, most of
  all at the boundary where they have zero width; Morris (1983) adds the variance of mu and a
  correction for tau^2's, and the fully Bayesian model (``attnbayes.models.hierarchical``,
  by NUTS) integrates them out.

Each rule returns its estimates with the plug-in normal posterior standard deviation
sqrt((1 - b_i) s_i^2) (for SURE and James-Stein the posterior under the normal prior that makes
the rule a Bayes rule: A = s_i^2 (1 - B) / B per unit for James-Stein), from which the
comparison forms intervals and predictive densities.

Sigma. ``sigma`` is a number, one scale per unit (N,), or (x of shape (N, p)) one per unit and
coordinate (N, p) (the convention of ``attnbayes.inference.deconvolution``). For p > 1,
``sure_shrinkage`` and ``normal_eb`` work coordinate by coordinate (each coordinate its own A
and location, since these are univariate models); ``james_stein`` pools every (unit,
coordinate) pair in one whitened vector of N p entries with one factor B (the p-variate rule
of today's homoscedastic James-Stein: N p - p - 2 in place of N - 3).

Search. The one-dimensional minimisations over A (SURE, minus the profile log-likelihood) run
in ``lax``: the objective on a grid of 128 points over [0, U] (0 and a geometric grid from
1e-12 U), then 64 bisections of its derivative on the bracket around the grid's best point,
keeping the best of the grid point, the bisection's end point and A = 0. U bounds the
minimiser: beyond it every term's derivative is positive (SURE-G: U = N/(N-1) max_i (x_i -
xbar)^2; fixed m: max_i (x_i - m)^2; SURE-M and the marginal likelihood: (max x - min x)^2).
Traceable: every function here can be ``jax.jit``-ted and ``jax.vmap``-ped over x and sigma
(the location too when a number); the location's kind, grid size and iteration counts are
static. Derivatives: ``jax.grad`` of ``sure_shrinkage`` and ``normal_eb`` is that with the
fitted A held fixed (m as the rule computes it from x and A): the search passes no derivative
(a ``stop_gradient``), so it is not the total derivative through A(x); ``sure_monotone``'s
while loop has no reverse-mode rule; James-Stein's factor is closed form, so its derivative is
exact (its SURE uses it).

Checked fronts: ``name`` checks x and sigma on concrete values (a ValueError naming the
argument) and calls the traceable ``name_unchecked`` on (N, p) x and sigma broadcast to (N, p).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ... import validation
from .checks import check_data

LOCATIONS = ("grand-mean", "sure")
GRID_SIZE = 128
BISECTIONS = 64


class ShrinkageResult(NamedTuple):
    """A shrinkage rule's estimates and fitted hyperparameters.

    Attributes:
        z_hat: (N,) or (N, p) estimates theta_hat_i, like x.
        posterior_sd: like x: sqrt((1 - b_i) s_i^2), the plug-in normal posterior sd.
        shrinkage: like x: b_i, the weight on the location (0: x_i kept, 1: fully pooled).
        location: m, () for x (N,) or (p,) (one per coordinate).
        prior_variance: A (tau^2), () or (p,); James-Stein: its factor's A per unit in
            whitened units, A / s_i^2 = (1 - B) / B (inf when B = 0).
        sure: Stein's unbiased risk estimate (1/N) sum_i E|theta_hat_i - theta_i|^2 at the fitted
            hyperparameters, () or (p,) (per coordinate; James-Stein: () summed over them).
    """

    z_hat: jax.Array
    posterior_sd: jax.Array
    shrinkage: jax.Array
    location: jax.Array
    prior_variance: jax.Array
    sure: jax.Array


class NormalEBResult(NamedTuple):
    """The normal hierarchical model fitted by marginal maximum likelihood (plug-in posterior).

    Attributes:
        z_hat: (N,) or (N, p) posterior means E[theta_i | x, mu_hat, tau_hat].
        posterior_sd: like x: plug-in posterior sd sqrt((1 - b_i) s_i^2) (ignores the
            uncertainty in mu and tau).
        shrinkage: like x: b_i = s_i^2 / (s_i^2 + tau_hat^2).
        location: mu_hat, () or (p,).
        location_se: the standard error of mu_hat given tau_hat, (sum_i w_i)^-1/2.
        prior_variance: tau_hat^2, () or (p,).
        log_likelihood: the maximised marginal log-likelihood, () or (p,).
        at_boundary: tau_hat^2 == 0 (complete pooling), () or (p,) booleans.
    """

    z_hat: jax.Array
    posterior_sd: jax.Array
    shrinkage: jax.Array
    location: jax.Array
    location_se: jax.Array
    prior_variance: jax.Array
    log_likelihood: jax.Array
    at_boundary: jax.Array


# ----------------------------------------------------------------------------- checks


def _checked(x, sigma):
    """x as (N, p), sigma broadcast to (N, p), both in x's dtype, and the (N,) flag."""
    points, scalar, dtype, sigma = check_data(x, sigma)  # sigma: a number, (N, 1) or (N, p)
    s = jnp.broadcast_to(jnp.asarray(sigma, dtype), points.shape)
    return jnp.asarray(points, dtype), s, scalar


def _check_location(location):
    if isinstance(location, str):
        if location not in LOCATIONS:
            raise ValueError(
                f"location: unknown {location!r}; choose from {list(LOCATIONS)} or a number"
            )
        return location
    value = validation.check_real_scalar("location", location, "'grand-mean', 'sure' or a number")
    if not validation.is_traced(value):
        validation.check_finite("location", value)
    return value


def _restore(result, scalar):
    """Per-unit fields back to x's convention; per-coordinate fields to () for x (N,)."""
    return type(result)(
        *(
            validation.restore_shape(v, scalar) if v.ndim == 2 else (v[0] if scalar else v)
            for v in result
        )
    )


# ----------------------------------------------------------------------------- the search


def _minimise(objective, upper, dtype):
    """argmin of ``objective`` over [0, upper] (the module docstring's grid + bisection)."""
    grid = upper * jnp.concatenate(
        [jnp.zeros(1, dtype), jnp.geomspace(1e-12, 1.0, GRID_SIZE - 1, dtype=dtype)]
    )
    values = jax.vmap(objective)(grid)
    values = jnp.where(jnp.isnan(values), jnp.inf, values)
    best = jnp.argmin(values)
    lo = grid[jnp.maximum(best - 1, 0)]
    hi = grid[jnp.minimum(best + 1, GRID_SIZE - 1)]
    slope = jax.grad(objective)

    def bisect(_, bracket):
        a, b = bracket
        mid = 0.5 * (a + b)
        rising = slope(mid) > 0
        return jnp.where(rising, a, mid), jnp.where(rising, mid, b)

    lo, hi = jax.lax.fori_loop(0, BISECTIONS, bisect, (lo, hi))
    candidates = jnp.stack([jnp.zeros((), dtype), grid[best], 0.5 * (lo + hi)])
    scores = jax.vmap(objective)(candidates)
    scores = jnp.where(jnp.isnan(scores), jnp.inf, scores)
    # ties: the earlier candidate (0, then the grid's); no derivative through the search
    return jax.lax.stop_gradient(candidates[jnp.argmin(scores)])


# ----------------------------------------------------------------------------- SURE


def _sure_objective(a, x, v, location):
    """(SURE(A), m(A)) for one coordinate: x (N,), v = s^2 (N,), A >= 0 (module docstring)."""
    n = x.shape[0]
    b = v / (v + a)
    if location == "grand-mean":
        m = jnp.mean(x)
        sure = jnp.mean(b**2 * (x - m) ** 2 + v - 2.0 * (1.0 - 1.0 / n) * b * v)
        return sure, m
    if location == "sure":
        m = jnp.sum(b**2 * x) / jnp.sum(b**2)
    else:
        m = jnp.asarray(location, x.dtype)
    return jnp.mean(b**2 * (x - m) ** 2 + v - 2.0 * b * v), m


def _sure_column(x, s, location):
    v = s**2
    n = x.shape[0]
    if location == "grand-mean":
        upper = jnp.max((x - jnp.mean(x)) ** 2) * n / max(n - 1, 1)
    elif location == "sure":
        upper = (jnp.max(x) - jnp.min(x)) ** 2
    else:
        upper = jnp.max((x - location) ** 2)
    a = _minimise(lambda t: _sure_objective(t, x, v, location)[0], upper, x.dtype)
    sure, m = _sure_objective(a, x, v, location)
    b = v / (v + a)
    z_hat = m + (1.0 - b) * (x - m)
    return z_hat, jnp.sqrt((1.0 - b) * v), b, m, a, sure


def sure_shrinkage_unchecked(x, sigma, location="grand-mean") -> ShrinkageResult:
    """``sure_shrinkage`` on x (N, p) and sigma (N, p) (checked, broadcast); results per
    coordinate ((N, p) and (p,))."""
    if isinstance(location, str):
        return _sure_jit(x, sigma, location, jnp.zeros((), x.dtype))
    return _sure_jit(x, sigma, "fixed", jnp.asarray(location, x.dtype))


@functools.partial(jax.jit, static_argnames="kind")
def _sure_jit(x, sigma, kind, value):
    loc = kind if kind != "fixed" else value
    columns = jax.vmap(lambda xc, sc: _sure_column(xc, sc, loc), in_axes=1, out_axes=-1)
    return ShrinkageResult(*columns(x, sigma))


def sure_shrinkage(x, sigma, *, location="grand-mean") -> ShrinkageResult:
    """Xie-Kou-Brown SURE shrinkage: theta_hat_i = m + (1 - b_i)(x_i - m), b_i = s_i^2 /
    (s_i^2 + A), A >= 0 (and m for SURE-M) minimising SURE (module docstring).

    Args:
        x: (N,) or (N, p) observations (p > 1: coordinate by coordinate).
        sigma: known noise scale(s): a number, (N,) or (N, p).
        location: "grand-mean" (SURE-G, XKB Section 3: m = mean of x), "sure" (SURE-M: m
            and A minimise SURE jointly) or a number (a fixed m, e.g. 0: XKB Section 2).

    Returns:
        ``ShrinkageResult`` (z_hat and the per-unit fields like x; per coordinate fields ()
        for x (N,), else (p,)).
    """
    location = _check_location(location)
    points, s, scalar = _checked(x, sigma)
    if location == "grand-mean" and points.shape[0] < 2:
        raise ValueError(f"x: SURE-G needs at least 2 observations, got {points.shape[0]}")
    return _restore(sure_shrinkage_unchecked(points, s, location), scalar)


# ----------------------------------------------------------------------------- SURE-SG


def _pava(weight, linear, num_groups):
    """Minimise sum_g (weight_g b_g^2 - 2 linear_g b_g) over b non-decreasing in g (groups
    0..num_groups-1 of the (N,) arrays; linear > 0, weight >= 0): pool adjacent violators on
    blocks (W, C) with value C / W (+inf when W = 0). Returns the (N,) value of each group's
    block (entries past num_groups are meaningless)."""
    n = weight.shape[0]

    def violates(state):
        bw, bc, _, top = state  # c1 / w1 > c2 / w2, cross-multiplied (w >= 0, c > 0)
        return (top > 0) & (bc[top - 1] * bw[top] > bc[top] * bw[top - 1])

    def merge(state):
        bw, bc, first, top = state
        return bw.at[top - 1].add(bw[top]), bc.at[top - 1].add(bc[top]), first, top - 1

    def push(g, state):
        bw, bc, first, top = state
        top = top + 1
        state = (bw.at[top].set(weight[g]), bc.at[top].set(linear[g]), first.at[top].set(g), top)
        return jax.lax.while_loop(violates, merge, state)

    zeros = jnp.zeros_like(weight)
    init = (zeros, zeros, jnp.zeros(n, jnp.int32), jnp.asarray(-1, jnp.int32))
    bw, bc, first, top = jax.lax.fori_loop(0, num_groups, push, init)
    starts = jnp.where(jnp.arange(n) <= top, first, n)  # sorted: live blocks, then n
    block = jnp.searchsorted(starts, jnp.arange(n), side="right") - 1
    safe = jnp.where(bw > 0, bw, 1.0)
    value = jnp.where(bw > 0, bc / safe, jnp.inf)
    return value[block]


def _monotone_column(x, s, location):
    n = x.shape[0]
    v = s**2
    if location == "grand-mean":
        m = jnp.mean(x)
        c = (1.0 - 1.0 / n) * v
    else:
        m = jnp.asarray(location, x.dtype)
        c = v
    d2 = (x - m) ** 2
    order = jnp.argsort(s)
    s_sorted = s[order]
    group = jnp.cumsum(jnp.concatenate([jnp.zeros(1, jnp.int32), s_sorted[1:] != s_sorted[:-1]]))
    weight = jax.ops.segment_sum(d2[order], group, num_segments=n)
    linear = jax.ops.segment_sum(c[order], group, num_segments=n)
    per_group = _pava(weight, linear, group[-1] + 1)
    b = jnp.zeros_like(x).at[order].set(jnp.minimum(per_group[group], 1.0))
    sure = jnp.mean(b**2 * d2 + v - 2.0 * b * c)
    z_hat = m + (1.0 - b) * (x - m)
    return z_hat, jnp.sqrt((1.0 - b) * v), b, m, jnp.full((), jnp.nan, x.dtype), sure


@functools.partial(jax.jit, static_argnames="kind")
def _monotone_jit(x, sigma, kind, value):
    loc = kind if kind != "fixed" else value
    columns = jax.vmap(lambda xc, sc: _monotone_column(xc, sc, loc), in_axes=1, out_axes=-1)
    return ShrinkageResult(*columns(x, sigma))


def sure_monotone_unchecked(x, sigma, location="grand-mean") -> ShrinkageResult:
    """``sure_monotone`` on x (N, p) and sigma (N, p) (checked, broadcast)."""
    if isinstance(location, str):
        return _monotone_jit(x, sigma, location, jnp.zeros((), x.dtype))
    return _monotone_jit(x, sigma, "fixed", jnp.asarray(location, x.dtype))


def sure_monotone(x, sigma, *, location="grand-mean") -> ShrinkageResult:
    """Xie-Kou-Brown semiparametric SURE shrinkage (SURE-SG toward the grand mean; toward a
    fixed m with a number): theta_hat_i = m + (1 - b_i)(x_i - m) with any b_i in [0, 1]
    non-decreasing in s_i (units with equal s_i share one b), minimising SURE:

        SURE(b) = (1/N) sum_i [b_i^2 (x_i - m)^2 + s_i^2 - 2 c b_i s_i^2],

    c = 1 - 1/N toward the grand mean, 1 toward a fixed m. The minimiser is the isotonic
    regression (in the order of s_i) of c s_i^2 / (x_i - m)^2 with weights (x_i - m)^2, clipped
    at 1 (XKB 2012, the semiparametric family: no normal prior assumed, only that noisier units
    shrink at least as much); computed by pooling adjacent violators in ``lax`` (O(N) amortised
    after an O(N log N) sort; jit and vmap, not reverse-mode differentiable: a while loop).

    Args:
        x: (N,) or (N, p) observations (p > 1: coordinate by coordinate).
        sigma: a number, (N,) or (N, p) (a number: one b for all, the SURE-optimal common
            factor min(1, c N s^2 / sum (x_i - m)^2)).
        location: "grand-mean" or a number.

    Returns:
        ``ShrinkageResult`` with ``prior_variance`` NaN (no common A: b_i implies
        A_i = s_i^2 (1 - b_i) / b_i per unit; ``posterior_sd`` is sqrt((1 - b_i) s_i^2) under
        those).
    """
    if isinstance(location, str) and location == "sure":
        raise ValueError("location: sure_monotone takes 'grand-mean' or a number")
    location = _check_location(location)
    points, s, scalar = _checked(x, sigma)
    if location == "grand-mean" and points.shape[0] < 2:
        raise ValueError(f"x: SURE-SG needs at least 2 observations, got {points.shape[0]}")
    return _restore(sure_monotone_unchecked(points, s, location), scalar)


# ----------------------------------------------------------------------------- James-Stein


@functools.partial(jax.jit, static_argnames="location")
def james_stein_unchecked(x, sigma, location="grand-mean") -> ShrinkageResult:
    """``james_stein`` on x (N, p) and sigma (N, p) (checked, broadcast; N p - p > 2 toward
    the grand mean, N p > 2 toward 0); ``location`` "grand-mean" or "zero" (static)."""
    n, p = x.shape
    v = sigma**2
    w = 1.0 / v
    if location == "grand-mean":
        m = jnp.sum(w * x, axis=0) / jnp.sum(w, axis=0)  # (p,) precision-weighted means
        share = w / jnp.sum(w, axis=0)  # d m_c / d x_ic
        dof = n * p - p
    else:
        m = jnp.zeros(p, x.dtype)
        share = jnp.zeros_like(x)
        dof = n * p
    resid = x - m
    quad = jnp.sum(resid**2 * w)
    c = dof - 2.0
    safe = jnp.where(quad > 0, quad, 1.0)
    big = quad > c  # B = c / Q < 1: the rule shrinks partly
    shrink = jnp.where(big, c / safe, 1.0)
    z_hat = m + (1.0 - shrink) * resid
    # SURE = sum_ic [(z_hat - x)^2 + 2 s^2 d z_hat_ic / d x_ic - s^2] / N (Stein 1981)
    deriv = share + (1.0 - shrink) * (1.0 - share)
    deriv = deriv + jnp.where(big, 2.0 * c * resid**2 * w / safe**2, 0.0)
    sure = jnp.sum(shrink**2 * resid**2 + 2.0 * v * deriv - v) / n
    ratio = jnp.where(shrink > 0, (1.0 - shrink) / shrink, jnp.inf)
    b = jnp.broadcast_to(shrink, x.shape)
    return ShrinkageResult(
        z_hat,
        jnp.sqrt((1.0 - shrink) * v),
        b,
        m,
        jnp.broadcast_to(ratio, (p,)),
        sure,
    )


def james_stein(x, sigma, *, location="grand-mean") -> ShrinkageResult:
    """The heteroscedastic positive-part James-Stein rule (module docstring).

    Args:
        x: (N,) or (N, p) observations; all N p entries share one factor B.
        sigma: a number, (N,) or (N, p).
        location: "grand-mean" (the precision-weighted mean per coordinate; needs
            N p - p > 2) or 0 (needs N p > 2).

    Returns:
        ``ShrinkageResult``: ``shrinkage`` is B (like x, every entry equal), ``sure`` the
        total over coordinates ().
    """
    if not (isinstance(location, str) and location == "grand-mean"):
        if validation.check_real_scalar("location", location, "'grand-mean' or 0") != 0.0:
            raise ValueError(f"location: expected 'grand-mean' or 0, got {location!r}")
        location = "zero"
    points, s, scalar = _checked(x, sigma)
    n, p = points.shape
    dof = n * p - (p if location == "grand-mean" else 0)
    if dof <= 2:
        raise ValueError(
            f"x: James-Stein needs N p{' - p' if location == 'grand-mean' else ''} > 2, got "
            f"N = {n}, p = {p}"
        )
    result = james_stein_unchecked(points, s, location)
    return result._replace(
        z_hat=validation.restore_shape(result.z_hat, scalar),
        posterior_sd=validation.restore_shape(result.posterior_sd, scalar),
        shrinkage=validation.restore_shape(result.shrinkage, scalar),
        location=result.location[0] if scalar else result.location,
        prior_variance=result.prior_variance[0] if scalar else result.prior_variance,
    )


# ----------------------------------------------------------------------------- normal EB


def _profile(a, x, v):
    """(profile log-likelihood, mu(A), sum w) of x_i ~ N(mu, A + v_i) at A, one coordinate."""
    w = 1.0 / (a + v)
    mu = jnp.sum(w * x) / jnp.sum(w)
    ll = -0.5 * jnp.sum(jnp.log(2.0 * jnp.pi / w) + w * (x - mu) ** 2)
    return ll, mu, jnp.sum(w)


def _normal_eb_column(x, s):
    v = s**2
    upper = (jnp.max(x) - jnp.min(x)) ** 2  # beyond it the score in A is negative
    a = _minimise(lambda t: -_profile(t, x, v)[0], upper, x.dtype)
    ll, mu, total = _profile(a, x, v)
    b = v / (v + a)
    z_hat = mu + (1.0 - b) * (x - mu)
    return z_hat, jnp.sqrt((1.0 - b) * v), b, mu, 1.0 / jnp.sqrt(total), a, ll, a == 0


@jax.jit
def normal_eb_unchecked(x, sigma) -> NormalEBResult:
    """``normal_eb`` on x (N, p) and sigma (N, p) (checked, broadcast)."""
    return NormalEBResult(*jax.vmap(_normal_eb_column, in_axes=1, out_axes=-1)(x, sigma))


def normal_eb(x, sigma) -> NormalEBResult:
    """The normal hierarchical model theta_i ~ N(mu, tau^2), x_i | theta_i ~ N(theta_i, s_i^2)
    by marginal maximum likelihood, and its plug-in posterior (module docstring).

    Args:
        x: (N,) or (N, p) observations (p > 1: coordinate by coordinate).
        sigma: a number, (N,) or (N, p).

    Returns:
        ``NormalEBResult``.
    """
    points, s, scalar = _checked(x, sigma)
    return _restore(normal_eb_unchecked(points, s), scalar)


__all__ = [
    "LOCATIONS",
    "NormalEBResult",
    "ShrinkageResult",
    "james_stein",
    "james_stein_unchecked",
    "normal_eb",
    "normal_eb_unchecked",
    "sure_monotone",
    "sure_monotone_unchecked",
    "sure_shrinkage",
    "sure_shrinkage_unchecked",
]
