"""The grid stack (version 2): learned empirical Bayes for (x_i, s_i), at linear cost in N.

Model: z_i ~ nu, x_i | z_i ~ N(z_i, s_i^2), each unit its own known standard error s_i (a
number for all is the homoscedastic case). The version-1 stack (``unrolled``) keeps one atom
per data point (K = N: O(N^2) a layer) and knows one sigma; this one keys its attention on a
fixed grid of M points (O(N M) a layer, M = ``grid_size``, 128 by default), takes a standard
error per unit, and reads two classical answers as inputs it learns to trust.

Units. With r = exp(mean_i log s_i) (the geometric mean of the standard errors), the stack
sees u_i = x_i / r and t_i = s_i / r and returns moments in x's units; the grid is
linspace(min u, max u, M) (``kiefer_wolfowitz.default_grid``'s rule), so the estimator is
equivariant: (a x + b, |a| s) gives a E[z | x] + b (tested).

Attention on a grid. With L_ik = exp(-(u_i - g_k)^2 / (2 t_i^2) - m_i) (row maxima m_i: the
NPMLE's likelihood matrix, ``kiefer_wolfowitz``), a layer with weights w on the grid is

    A_ik = softmax_k(log L_ik + a_l log w_k)        (the per-query temperature 1 / t_i^2)
    mass_k = (1/N) sum_i A_ik,    target = (N mass + alpha_l b) / (N + alpha_l)
    w <- (1 - eta_l) w + eta_l target

where b is the normal base measure N(mu_hat, A_hat) discretised on the grid (mu_hat, A_hat
the normal hierarchical model's marginal MLE, as ``shrinkage.normal_eb`` fits it), alpha_l >= 0
a learned pseudo-count (a Dirichlet-process-like pull of the weights towards b that fades as
N grows), a_l the mass exponent and eta_l the step. At a = 1, alpha = 0, eta = 1 the layer is one
Kiefer-Wolfowitz EM step on the grid, w_k <- w_k (1/N) sum_i L_ik / (L w)_i.

Inputs. The start is w_0 = (1 - gamma) / M + gamma w_NPMLE, w_NPMLE the Kiefer-Wolfowitz
NPMLE on the same grid and likelihood matrix (mix-SQP, ``kiefer_wolfowitz.mixsqp_loop``; a
fixed point of the EM layer), gamma in [0, 1] learned ("the classical answer as an input the
stack learns to trust"). Both classical inputs are held constant to the gradient: derivatives
in the parameters are exact; derivatives in x and sigma are those of the stack's rule with
the NPMLE's weights and the normal model's (mu_hat, A_hat) fixed (the NPMLE's solution map is
not differentiable, ``kiefer_wolfowitz.npmle``); the grid moves with min x and max x.

Read-out: attention over priors. Candidate r = 1..R takes the prior
(1 - rho_r) sum_k w_k delta(g_k) + rho_r N(mu_hat, A_hat) on a fixed ladder ``RHO_LADDER``
(rho = 0: the learned discrete measure; rho = 1: the normal model, whose posterior mean is
the parametric EB rule of Efron-Morris and Xie-Kou-Brown), and its exact posterior moments
(m_ir, v_ir): the discrete part from the sums sum_k w_k L_ik g_k^j, the normal part in closed
form. Their Stein unbiased risk estimates, with the prior held fixed (Tweedie: d m / d u =
v / t^2),

    SURE_r = sum_i (m_ir - u_i)^2 + 2 v_ir - t_i^2,

their log-likelihoods l_r = sum_i log p_r(u_i), leave-one-out log-likelihoods (the discrete
part without unit i's share, w^(-i) = (N w - r_i) / (N - 1) with r_i its responsibilities; the
normal part with mu refitted) and degrees of freedom d_r = (1 - rho_r)(2 K - 1) + 2 rho_r (K
the NPMLE's support size) are the features f_r = (-SURE_r / mean t^2, l_r, -d_r, -d_r log N,
l_r^loo), taken relative to the first rung, and the candidates are scored as attention over
priors: pi_r = softmax_r(theta . (f_r - f_1) + b_r + c_r log N), theta, b and c learned
(theta starts at AIC: l_r - d_r). The differences of the features grow like N while their noise
grows like sqrt(N), so the choice sharpens as N grows. (SURE and the leave-one-out
likelihood hold the fitted prior fixed, so both flatter the NPMLE; training sets how much each
counts: the shipped stack leans on l_r, d_r and l_r^loo, see ``MODEL_CARD_V2.md``.) The
output blends the mixture of the candidates' posteriors with the first candidate's by a gate
lambda in [0, 1] (mean m_1 + lambda (sum_r pi_r m_r - m_1), second moments alike), and adds
g t_i^2 (g learned) to the variance for the intervals, capped at the larger of the
posterior variance and the effective prior's variance.

At ``init_grid_stack``'s values (gamma = 0, a = 1, alpha = 0, eta = 1, lambda = 0, g = 0) the
stack is exactly L steps of Kiefer-Wolfowitz EM on the grid from uniform weights
(``kiefer_wolfowitz.npmle(method="em", max_iters=L)``) followed by the posterior mean and
variance under that measure: heteroscedastic EM (tested to 1e-10).

Cost. One N x M likelihood matrix (one exponential per pair), mix-SQP on it (a handful of
iterations), L layers and the read-out as matrix-vector products with it, and the normal
model's O(N) fit: linear in N (``benchmarks/learned_regret.py`` measures it against the NPMLE).

Masks. ``mask`` (N,) marks the real points of a padded task: padded rows of L are ones (a
constant row leaves mix-SQP's optimum unchanged, ``mixsqp_loop``) and are left out of every
other sum, so a padded task gives the unpadded task's answer on its real points: to round-off
when the NPMLE input is unused (gamma = 0), to mix-SQP's tolerance otherwise (the padded rows
change its iterates, not its optimum; tested). Padded rows must hold finite x and positive s
(their values are otherwise ignored); the public functions check every row.

Scalar data only (p = 1): a p-dimensional grid of M^p keys is left for later; ``x`` of shape
(N, p) with p > 1 is refused by name.
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .... import validation
from ..checks import checked_problem
from ..kiefer_wolfowitz import mixsqp_loop, mixsqp_start
from .archive import archive_metadata, archive_version, read_archive, write_archive
from .unrolled import PosteriorMoments, UnrolledEMParams, checked_leaves

FORMAT_VERSION = 2
GRID_SIZE = 128
RHO_LADDER = (0.0, 0.03, 0.1, 0.3, 0.6, 1.0)
NPMLE_TOL = 1e-6
NPMLE_MAX_ITERS = 100
NORMAL_ITERS = 50
# the read-out's score features: -SURE / mean t^2, log-likelihood, -dof, -dof log N and the
# leave-one-out log-likelihood (start: AIC, log-likelihood - dof)
SCORE_WEIGHTS = (0.0, 1.0, 1.0, 0.0, 0.0)


class GridLayerParams(NamedTuple):
    """Parameters of the grid stack's layers, each with a leading layer axis (L,).

    Attributes:
        mass_weight: a_l, the exponent of the weights in the scores (1: EM).
        pseudo_count: alpha_l, the pull towards the normal base measure (used as max(., 0)).
        step: eta_l, the step w <- w + eta (target - w) (used clipped to [0, 1.5]).
    """

    mass_weight: jax.Array
    pseudo_count: jax.Array
    step: jax.Array


class GridReadoutParams(NamedTuple):
    """Parameters of the grid stack's start and read-out.

    Attributes:
        npmle_trust: gamma, the NPMLE's share of the start (clipped to [0, 1]).
        candidate_bias: b_r (R,), one per prior of ``RHO_LADDER``.
        candidate_slope: c_r (R,), the coefficient of log N in the candidates' scores.
        score_weights: theta (5,), the weights of the score features (module docstring).
        gate: lambda, the weight of the candidates' mixture against the first (clipped to
            [0, 1]); 0: the first candidate alone (EM's posterior).
        extra_variance: g, added as g t_i^2 to the posterior variance (the total clipped at 0).
    """

    npmle_trust: jax.Array
    candidate_bias: jax.Array
    candidate_slope: jax.Array
    score_weights: jax.Array
    gate: jax.Array
    extra_variance: jax.Array


class GridStackParams(NamedTuple):
    """A grid stack: ``layers`` (GridLayerParams, leading axis L) and ``readout``."""

    layers: GridLayerParams
    readout: GridReadoutParams

    @property
    def num_layers(self) -> int:
        return int(np.shape(self.layers.step)[0])

    @property
    def dim(self) -> int:
        return 1


def init_grid_stack(num_layers: int, dtype=None) -> GridStackParams:
    """The parameters at which the stack is L Kiefer-Wolfowitz EM steps on the grid from
    uniform weights, then the posterior moments (module docstring)."""
    num_layers = validation.check_positive_int("num_layers", num_layers, minimum=0)
    dtype = jnp.zeros(()).dtype if dtype is None else jnp.dtype(dtype)
    r = len(RHO_LADDER)
    return GridStackParams(
        GridLayerParams(
            mass_weight=jnp.ones((num_layers,), dtype),
            pseudo_count=jnp.zeros((num_layers,), dtype),
            step=jnp.ones((num_layers,), dtype),
        ),
        GridReadoutParams(
            npmle_trust=jnp.zeros((), dtype),
            candidate_bias=jnp.zeros((r,), dtype),
            candidate_slope=jnp.zeros((r,), dtype),
            score_weights=jnp.asarray(SCORE_WEIGHTS, dtype),
            gate=jnp.zeros((), dtype),
            extra_variance=jnp.zeros((), dtype),
        ),
    )


# ----------------------------------------------------------------------------- kernels


def _masked_normal_model(u, v, mask):
    """(mu_hat, A_hat): the normal hierarchical model u_i ~ N(mu, A + v_i) by marginal maximum
    likelihood over the real points, held constant to the gradient.

    The score equation in A gives the fixed point A = sum_i w_i^2 ((u_i - mu)^2 - v_i) /
    sum_i w_i^2 with w_i = 1 / (A + v_i) and mu = sum_i w_i u_i / sum_i w_i (clipped at 0),
    iterated ``NORMAL_ITERS`` times from the method-of-moments start: O(N) a step and no
    logarithms (``shrinkage.normal_eb`` searches the profile likelihood instead)."""
    n = jnp.sum(mask)
    mean = jnp.sum(mask * u) / n
    a0 = jnp.maximum(jnp.sum(mask * (u - mean) ** 2) / n - jnp.sum(mask * v) / n, 0.0)

    def step(_, a):
        w = mask / (a + v)
        mu = jnp.sum(w * u) / jnp.sum(w)
        w2 = w**2
        return jnp.maximum(jnp.sum(w2 * ((u - mu) ** 2 - v)) / jnp.sum(w2), 0.0)

    a = jax.lax.fori_loop(0, NORMAL_ITERS, step, a0)
    w = mask / (a + v)
    return jax.lax.stop_gradient((jnp.sum(w * u) / jnp.sum(w), a))


def _grid(u, mask, size):
    lo = jnp.min(jnp.where(mask, u, jnp.inf))
    hi = jnp.max(jnp.where(mask, u, -jnp.inf))
    return jnp.linspace(lo, hi, size, dtype=u.dtype)


def _npmle_weights(lik, grid):
    """Mix-SQP's weights on the grid (uniform where its start underflows), held constant."""
    w0 = mixsqp_start(grid[:, None])
    tol = jnp.asarray(NPMLE_TOL if lik.dtype == jnp.float64 else 1e-4, lik.dtype)
    target = jnp.asarray(jnp.inf, lik.dtype)
    _, w, _, _, ok = mixsqp_loop(
        lik, lambda idx: lik[:, idx], w0, tol, jnp.asarray(NPMLE_MAX_ITERS), target
    )
    uniform = jnp.full_like(w, 1.0 / w.shape[0])
    return jax.lax.stop_gradient(jnp.where(ok & jnp.all(jnp.isfinite(w)), w, uniform))


def _power(w, a):
    """w^a with 0^a = 0, differentiable in a where w > 0; rescaled to max 1 (cancels in A)."""
    positive = w > 0
    log_w = jnp.log(jnp.where(positive, w, 1.0))
    scaled = a * log_w
    top = jnp.max(jnp.where(positive, scaled, -jnp.inf))
    return jnp.where(positive, jnp.exp(scaled - top), 0.0)


def _layer(w, lik, mask, n, base, layer):
    a, alpha, eta = layer
    v = _power(w, a)
    den = lik @ v  # (N,): (L v)_i, >= 1 entry of L per row is 1
    mass = v * ((mask / den) @ lik) / n  # (1/N) sum_i A_ik
    mass = mass / jnp.sum(mass)
    alpha = jnp.maximum(alpha, 0.0)
    target = (n * mass + alpha * base) / (n + alpha)
    w = w + jnp.clip(eta, 0.0, 1.5) * (target - w)
    w = jnp.maximum(w, 0.0)
    return w / jnp.sum(w)


class _Candidates(NamedTuple):
    mean: jax.Array  # (N, R)
    second: jax.Array  # (N, R): E[z^2 | x]
    sure: jax.Array  # (R,)
    log_likelihood: jax.Array  # (R,)
    loo_log_likelihood: jax.Array  # (R,)


def _candidates(u, t, mask, grid, lik, row_max, w, mu, a):
    """Each rung of ``RHO_LADDER``: posterior mean and second moment, and SURE."""
    # one pass over L for the three sums (the read-out is memory-bound at large N)
    sums = lik @ jnp.stack([w, w * grid, w * grid**2], axis=1)
    den = sums[:, 0]
    m_d = sums[:, 1] / den
    s_d = sums[:, 2] / den
    t2 = t**2
    # log marginal densities of the discrete and the normal part (the common -log sqrt(2 pi)
    # dropped): log (L w)_i + m_i - log t_i and -log(A + t_i^2)/2 - (u_i - mu)^2 / (2(A + t^2))
    log_d = jnp.log(den) + row_max - jnp.log(t)
    log_n = -0.5 * jnp.log(a + t2) - 0.5 * (u - mu) ** 2 / (a + t2)
    shrink = a / (a + t2)
    m_n = mu + shrink * (u - mu)
    s_n = shrink * t2 + m_n**2
    rho = jnp.asarray(RHO_LADDER, u.dtype)
    with_normal = rho > 0
    log_rho = jnp.log(jnp.where(with_normal, rho, 1.0))
    log_rest = jnp.log1p(-jnp.where(rho < 1, rho, 0.0))
    # responsibility of the normal part, per unit and rung: 0 at rho = 0, 1 at rho = 1
    logit = (log_rho[None, :] + log_n[:, None]) - (log_rest[None, :] + log_d[:, None])
    pi = jnp.where(
        with_normal[None, :], jnp.where(rho[None, :] < 1, jax.nn.sigmoid(logit), 1.0), 0.0
    )
    mean = (1.0 - pi) * m_d[:, None] + pi * m_n[:, None]
    second = (1.0 - pi) * s_d[:, None] + pi * s_n[:, None]
    var = jnp.maximum(second - mean**2, 0.0)
    sure = jnp.sum(mask[:, None] * ((mean - u[:, None]) ** 2 + 2.0 * var - t2[:, None]), axis=0)
    log_likelihood = _mixture_log_likelihood(log_d, log_n, rho, mask)
    # leave-one-out: the discrete part without unit i's share, w_k^(-i) = (N w_k - r_ik) / (N - 1)
    # (r_ik its responsibilities: one EM step's removal), so p_-i(x_i) = (N p(x_i) - sum_k w_k
    # phi_ik^2 / p(x_i)) / (N - 1); the normal part with mu refitted without unit i (A kept)
    n = jnp.sum(mask)
    removed = (lik**2 @ w) / den
    # floored at p(x_i) / (N - 1): an isolated point's own atoms would otherwise leave it at 0
    log_d_loo = jnp.log(jnp.maximum(n * den - removed, den) / (n - 1.0)) + row_max - jnp.log(t)
    wn = mask / (a + t2)
    rest = jnp.sum(wn) - wn  # ~0 when one unit carries the whole weight (A = 0, a tiny s_i)
    safe = rest > 1e-12 * jnp.sum(wn)
    mu_loo = jnp.where(safe, (jnp.sum(wn * u) - wn * u) / jnp.where(safe, rest, 1.0), mu)
    log_n_loo = -0.5 * jnp.log(a + t2) - 0.5 * (u - mu_loo) ** 2 / (a + t2)
    loo = _mixture_log_likelihood(log_d_loo, log_n_loo, rho, mask)
    return _Candidates(mean, second, sure, log_likelihood, loo)


def _mixture_log_likelihood(log_d, log_n, rho, mask):
    """(R,) sum_i log((1 - rho_r) p_d(x_i) + rho_r p_n(x_i)) over the real points."""
    log_rho = jnp.log(jnp.where(rho > 0, rho, 1.0))
    log_mix = jnp.logaddexp(
        jnp.log(jnp.where(rho < 1, 1.0 - rho, 1.0))[None, :] + log_d[:, None],
        log_rho[None, :] + log_n[:, None],
    )
    log_mix = jnp.where(rho[None, :] == 0, log_d[:, None], log_mix)
    log_mix = jnp.where(rho[None, :] == 1, log_n[:, None], log_mix)
    return jnp.sum(mask[:, None] * log_mix, axis=0)


class GridStackFit(NamedTuple):
    """What the grid stack computed on one data set, in x's units (a pytree of arrays).

    Attributes:
        mean, variance: (N,) posterior mean and variance of z_i (the variance with g t_i^2).
        grid: (M,) the keys g_k.
        weights: (M,) the learned discrete measure w after the layers.
        npmle_weights: (M,) the NPMLE on the grid (the stack's classical input).
        normal_location, normal_variance: () mu_hat and A_hat of the normal model.
        candidate_probs: (R,) the weight of each prior of ``RHO_LADDER`` in the output,
            (1 - lambda) e_1 + lambda pi.
        prior_weights: (M,) the effective prior on the grid, sum_r candidate_probs_r
            ((1 - rho_r) w + rho_r b): the normal part b discretised on the grid (for plots,
            Wasserstein distances and predictive densities; the posterior moments use the
            normal part exactly).
    """

    mean: jax.Array
    variance: jax.Array
    grid: jax.Array
    weights: jax.Array
    npmle_weights: jax.Array
    normal_location: jax.Array
    normal_variance: jax.Array
    candidate_probs: jax.Array
    prior_weights: jax.Array


def stack_output(params: GridStackParams, u, t, mask, grid_size: int = GRID_SIZE) -> GridStackFit:
    """The stack on standardised (u, t) (N,) with ``mask`` (N,): its ``GridStackFit`` in the
    standardised units. No checks: the traceable kernel beneath ``grid_stack_fit`` and
    ``forward``; differentiable in the parameters."""
    mask_f = mask.astype(u.dtype)
    n = jnp.sum(mask_f)
    grid = _grid(u, mask, grid_size)
    log_phi = -0.5 * ((u[:, None] - grid[None, :]) / t[:, None]) ** 2
    row_max = jnp.max(log_phi, axis=1)
    lik = jnp.where(mask[:, None], jnp.exp(log_phi - row_max[:, None]), 1.0)
    mu, a = _masked_normal_model(u, t**2, mask_f)
    spacing = (grid[-1] - grid[0]) / (grid_size - 1)
    base = jnp.exp(-0.5 * (grid - mu) ** 2 / (a + spacing**2 + jnp.finfo(u.dtype).tiny))
    base = base / jnp.sum(base)
    w_np = _npmle_weights(lik, grid)
    gamma = jnp.clip(params.readout.npmle_trust, 0.0, 1.0)
    w = (1.0 - gamma) / grid_size + gamma * w_np
    layers = (params.layers.mass_weight, params.layers.pseudo_count, params.layers.step)

    def body(w, layer):
        return _layer(w, lik, mask_f, n, base, layer), None

    w, _ = jax.lax.scan(body, w, layers)
    cand = _candidates(u, t, mask_f, grid, lik, row_max, w, mu, a)
    ro = params.readout
    rho = jnp.asarray(RHO_LADDER, u.dtype)
    support = jnp.sum(w_np > 1e-8 * jnp.max(w_np))
    dof = (1.0 - rho) * (2.0 * support - 1.0) + 2.0 * rho
    mean_t2 = jnp.sum(jnp.where(mask, t**2, 0.0)) / n
    features = jnp.stack(
        [
            -cand.sure / mean_t2,
            cand.log_likelihood,
            -dof,
            -dof * jnp.log(n),
            cand.loo_log_likelihood,
        ],
        axis=-1,
    )
    # relative to the first rung, clipped: an infinite feature times a zero weight is not NaN
    features = jnp.nan_to_num(jnp.clip(features - features[:1], -1e6, 1e6), nan=0.0)
    score = features @ ro.score_weights + ro.candidate_bias + ro.candidate_slope * jnp.log(n)
    pi = jax.nn.softmax(score)
    lam = jnp.clip(ro.gate, 0.0, 1.0)
    mean = cand.mean[:, 0] + lam * (cand.mean @ pi - cand.mean[:, 0])
    second = cand.second[:, 0] + lam * (cand.second @ pi - cand.second[:, 0])
    var = jnp.maximum(second - mean**2, 0.0)
    probs = lam * pi + (1.0 - lam) * (jnp.arange(rho.shape[0]) == 0)
    prior = (probs @ (1.0 - rho)) * w + (probs @ rho) * base
    # the effective prior's variance (its normal part exactly), the cap of the widened variance
    prior_mean = (probs @ (1.0 - rho)) * (w @ grid) + (probs @ rho) * mu
    prior_second = (probs @ (1.0 - rho)) * (w @ grid**2) + (probs @ rho) * (a + mu**2)
    prior_var = jnp.maximum(prior_second - prior_mean**2, 0.0)
    return GridStackFit(
        mean=mean,
        variance=jnp.minimum(
            jnp.maximum(var + ro.extra_variance * t**2, 0.0), jnp.maximum(var, prior_var)
        ),
        grid=grid,
        weights=w,
        npmle_weights=w_np,
        normal_location=mu,
        normal_variance=a,
        candidate_probs=probs,
        prior_weights=prior,
    )


def forward(params: GridStackParams, u, t, mask, grid_size: int = GRID_SIZE):
    """(mean, variance) (N,) of z / r from ``stack_output``: what training differentiates."""
    out = stack_output(params, u, t, mask, grid_size)
    return out.mean, out.variance


def standardise(x, s, mask):
    """(u, t, r): x / r, s / r with r the geometric mean of the real points' s."""
    log_s = jnp.where(mask, jnp.log(s), 0.0)
    r = jnp.exp(jnp.sum(log_s) / jnp.sum(mask))
    return x / r, s / r, r


@functools.partial(jax.jit, static_argnames=("grid_size",))
def grid_stack_fit_unchecked(params, x, s, mask, grid_size: int = GRID_SIZE) -> GridStackFit:
    """The kernel of ``grid_stack_fit``: the ``GridStackFit`` in x's units, for x and s (N,),
    a boolean ``mask`` (N,) and parameters already checked (``check_grid_params``)."""
    u, t, r = standardise(x, s, mask)
    out = stack_output(params, u, t, mask, grid_size)
    return out._replace(
        mean=out.mean * r,
        variance=out.variance * r**2,
        grid=out.grid * r,
        normal_location=out.normal_location * r,
        normal_variance=out.normal_variance * r**2,
    )


def grid_stack_moments_unchecked(params, x, s, mask, grid_size: int = GRID_SIZE):
    """(mean, variance) (N,) in x's units: ``grid_stack_fit_unchecked``'s moments."""
    out = grid_stack_fit_unchecked(params, x, s, mask, grid_size)
    return out.mean, out.variance


# ----------------------------------------------------------------------------- validation


def check_grid_params(name: str, params, dtype=None) -> GridStackParams:
    """Validate a grid stack's parameters: the pytree, the shapes, finiteness (concrete)."""
    if isinstance(params, UnrolledEMParams):
        raise ValueError(
            f"{name}: a version-1 unrolled-EM stack (UnrolledEMParams: one sigma, K = N "
            "atoms); the grid stack takes GridStackParams (version 2: init_grid_stack, "
            "train_grid_stack, load_grid_stack, pretrained_grid_stack); run a version-1 stack "
            "with unrolled_em_moments"
        )
    if not isinstance(params, GridStackParams) or not isinstance(params.layers, GridLayerParams):
        raise ValueError(
            f"{name}: expected GridStackParams (from init_grid_stack, train_grid_stack or "
            f"load_grid_stack), got {type(params).__name__}"
        )
    if not isinstance(params.readout, GridReadoutParams):
        raise ValueError(f"{name}.readout: expected GridReadoutParams")
    first = params.layers.mass_weight  # L from the first field: a misshapen other one is named
    num_layers = int(np.shape(first)[0]) if np.ndim(first) == 1 else -1
    for field in GridLayerParams._fields:
        shape = tuple(np.shape(getattr(params.layers, field)))
        if shape != (num_layers,):
            raise ValueError(f"{name}.layers.{field}: expected shape ({num_layers},), got {shape}")
    r = len(RHO_LADDER)
    shapes = {
        "candidate_bias": (r,),
        "candidate_slope": (r,),
        "score_weights": (len(SCORE_WEIGHTS),),
    }
    for field in GridReadoutParams._fields:
        want = shapes.get(field, ())
        shape = tuple(np.shape(getattr(params.readout, field)))
        if shape != want:
            raise ValueError(f"{name}.readout.{field}: expected shape {want}, got {shape}")
    return checked_leaves(name, params, dtype)


def check_mask(mask, n):
    """A boolean (N,) mask with at least two real points (all real when None)."""
    if mask is None:
        return jnp.ones((n,), bool)
    if validation.is_traced(mask):
        if tuple(mask.shape) != (n,):
            raise ValueError(f"mask: expected shape ({n},), got {tuple(mask.shape)}")
        return mask.astype(bool)
    arr = np.asarray(mask)
    if arr.shape != (n,) or arr.dtype != bool:
        raise ValueError(
            f"mask: expected a boolean array of shape ({n},), got {arr.dtype} {arr.shape}"
        )
    if arr.sum() < 2:
        raise ValueError("mask: marks fewer than two points as real")
    return jnp.asarray(arr)


def check_grid_resolution(x, s, grid_size: int) -> None:
    """Refuse a grid too coarse for the data: a spacing (max x - min x) / (M - 1) above the
    smallest standard error cannot resolve that unit's posterior (an outlier far from the bulk
    stretches the grid until the bulk's estimates collapse onto one key). ``x`` and ``s`` are
    the real points' concrete values."""
    spacing = float(np.ptp(x)) / (grid_size - 1)
    smallest = float(np.min(s))
    if spacing > smallest:
        needed = int(np.ceil(float(np.ptp(x)) / smallest)) + 1
        raise ValueError(
            f"grid_size: the grid's spacing (max x - min x) / (grid_size - 1) = {spacing:.3g} "
            f"exceeds the smallest standard error {smallest:.3g} (x spans {float(np.min(x)):.4g}"
            f" to {float(np.max(x)):.4g}): the grid cannot resolve those units' posteriors; "
            f"check x for outliers, or pass grid_size >= {needed} (the shipped stack was "
            f"trained at {GRID_SIZE})"
        )


def _prepare(params, x, sigma, mask, grid_size):
    xs, _, _, s, scalar = checked_problem(x, None, None, sigma)
    if xs.shape[1] != 1:
        raise ValueError(
            f"x: the grid stack is for scalar data (p = 1), got {xs.shape[1]} coordinates per "
            "point; for p-dimensional data use fit_em or npmle"
        )
    n = xs.shape[0]
    if n < 2:
        raise ValueError(f"x: the grid stack needs at least two points, got {n}")
    params = check_grid_params("params", params, dtype=xs.dtype)
    mask = check_mask(mask, n)
    grid_size = validation.check_positive_int("grid_size", grid_size, minimum=2)
    s = jnp.broadcast_to(jnp.reshape(jnp.asarray(s, xs.dtype), (-1,)), (n,))
    if not validation.is_traced(xs) and not validation.is_traced(mask):
        real = np.asarray(xs[:, 0])[np.asarray(mask)]
        if np.ptp(real) == 0:
            raise ValueError("x: all real points are equal; the grid spans no range")
        if not validation.is_traced(s):
            check_grid_resolution(real, np.asarray(s)[np.asarray(mask)], grid_size)
    return params, xs[:, 0], s, mask, grid_size, scalar


# ----------------------------------------------------------------------------- public API


def grid_stack_moments(
    params: GridStackParams, x, sigma, *, mask=None, grid_size: int = GRID_SIZE
) -> PosteriorMoments:
    """Posterior mean and variance of z_i from the grid stack (module docstring).

    Args:
        params: ``GridStackParams`` (version 2; a version-1 stack is refused by name).
        x: (N,) or (N, 1) observations, N >= 2.
        sigma: the known standard errors: a number, or (N,) one per observation.
        mask: optional boolean (N,) marking the real points of a padded task.
        grid_size: M, the number of grid keys (static; the shipped stack was trained at 128).

    Returns:
        ``PosteriorMoments(mean, variance)`` like ``x``.
    """
    params, xs, s, mask, grid_size, scalar = _prepare(params, x, sigma, mask, grid_size)
    mean, var = grid_stack_moments_unchecked(params, xs, s, mask, grid_size)
    if scalar:
        return PosteriorMoments(mean, var)
    return PosteriorMoments(mean[:, None], var[:, None])


def grid_stack_fit(
    params: GridStackParams, x, sigma, *, mask=None, grid_size: int = GRID_SIZE
) -> GridStackFit:
    """Everything the grid stack computed on (x, sigma): ``GridStackFit`` (posterior moments
    like ``x`` (N,) for x (N,) or (N, 1), the grid, the learned and effective priors, the
    NPMLE and normal-model inputs, the candidates' weights). Arguments as
    ``grid_stack_moments``."""
    params, xs, s, mask, grid_size, scalar = _prepare(params, x, sigma, mask, grid_size)
    out = grid_stack_fit_unchecked(params, xs, s, mask, grid_size)
    if scalar:
        return out
    return out._replace(mean=out.mean[:, None], variance=out.variance[:, None])


def grid_stack_mean(params: GridStackParams, x, sigma, *, mask=None, grid_size: int = GRID_SIZE):
    """E[z_i | x] from the grid stack, like ``x`` (see ``grid_stack_moments``)."""
    return grid_stack_moments(params, x, sigma, mask=mask, grid_size=grid_size).mean


# ----------------------------------------------------------------------------- save / load


def save_grid_stack(path, params: GridStackParams, metadata: dict | None = None) -> None:
    """Write a grid stack to ``path`` (.npz, format version 2), atomically.

    Arrays ``layers.<field>`` and ``readout.<field>``, ``format_version``, ``num_layers``,
    ``rho_ladder`` and ``meta.<name>`` for each metadata entry (strings or numbers).
    """
    params = check_grid_params("params", params)
    arrays = {f"layers.{f}": np.asarray(v) for f, v in params.layers._asdict().items()}
    arrays.update({f"readout.{f}": np.asarray(v) for f, v in params.readout._asdict().items()})
    arrays["format_version"] = np.asarray(FORMAT_VERSION)
    arrays["num_layers"] = np.asarray(params.num_layers)
    arrays["rho_ladder"] = np.asarray(RHO_LADDER)
    write_archive(path, arrays, metadata)


def load_grid_stack(path) -> tuple[GridStackParams, dict]:
    """Read a grid stack written by ``save_grid_stack``: ``(params, metadata)``.

    Raises:
        ValueError: naming the path, for a missing or unreadable file, another format version
            (a version-1 unrolled-EM stack is named as such: ``load_unrolled_em`` reads it),
            a read-out ladder other than ``RHO_LADDER``, and missing, non-float, misshapen or
            non-finite arrays.
    """
    path = os.fspath(path)
    arrays = read_archive(path)
    archive_version(arrays, path, FORMAT_VERSION)
    ladder = arrays.get("rho_ladder")
    if ladder is None or ladder.shape != (len(RHO_LADDER),) or not np.allclose(ladder, RHO_LADDER):
        raise ValueError(
            f"path: the read-out ladder in {path!r} is not this attnbayes's {RHO_LADDER}"
        )
    fields = [f"layers.{f}" for f in GridLayerParams._fields]
    fields += [f"readout.{f}" for f in GridReadoutParams._fields]
    for name in fields:
        if name not in arrays:
            raise ValueError(f"path: missing array {name!r} in {path!r}")
        if not np.issubdtype(arrays[name].dtype, np.floating):
            raise ValueError(
                f"path: array {name!r} in {path!r} holds {arrays[name].dtype}, expected floats"
            )
    layers = GridLayerParams(
        **{f: jnp.asarray(arrays[f"layers.{f}"]) for f in GridLayerParams._fields}
    )
    readout = GridReadoutParams(
        **{f: jnp.asarray(arrays[f"readout.{f}"]) for f in GridReadoutParams._fields}
    )
    try:
        params = check_grid_params("path", GridStackParams(layers, readout))
    except ValueError as err:
        raise ValueError(f"{err} (in {path!r})") from None
    return params, archive_metadata(arrays, path)


PRETRAINED_FILE = "grid_stack_v2.npz"


def pretrained_grid_stack(*, metadata: bool = False):
    """The grid stack shipped with attnbayes (``learned/pretrained/MODEL_CARD_V2.md``: scalar
    data, a standard error per unit, trained by ``scripts/train_pretrained_grid_stack.py``).

    Returns the ``GridStackParams`` (float64), or ``(params, metadata)`` with
    ``metadata=True`` (training settings and the recorded held-out regret per family).
    """
    from importlib import resources

    resource = resources.files(__package__) / "pretrained" / PRETRAINED_FILE
    with resources.as_file(resource) as path:
        params, meta = load_grid_stack(path)
    return (params, meta) if metadata else params


__all__ = [
    "FORMAT_VERSION",
    "GRID_SIZE",
    "RHO_LADDER",
    "GridLayerParams",
    "GridReadoutParams",
    "GridStackFit",
    "GridStackParams",
    "check_grid_params",
    "check_grid_resolution",
    "forward",
    "grid_stack_fit",
    "grid_stack_fit_unchecked",
    "grid_stack_mean",
    "grid_stack_moments",
    "grid_stack_moments_unchecked",
    "init_grid_stack",
    "load_grid_stack",
    "pretrained_grid_stack",
    "save_grid_stack",
    "stack_output",
]
