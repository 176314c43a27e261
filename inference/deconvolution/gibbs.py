"""Gibbs sampling for the finite-mixture deconvolution model, exact and "approximate".

Model (``deconvolution_model`` with ``prior="dirichlet"``), with assignments c_i made explicit:

    w ~ Dirichlet(alpha 1_K),   mu_k ~ N(m0, s0^2 I_p) iid,   c_i | w ~ Cat(w),
    x_i | c_i, mu ~ N(mu_{c_i}, sigma^2 I_p).

Blocked Gibbs (``run_gibbs``) sweeps the three conjugate conditionals, with n_k = #{i: c_i = k}
and S_k = sum_{i: c_i = k} x_i:

    c_i | mu, w, x   ~ Cat(A_i.),   A_ik = softmax_k(beta <x_i, mu_k> + log w_k - beta |mu_k|^2 / 2)
    w | c            ~ Dirichlet(alpha + n)
    mu_k | c, x      ~ N(m_k, v_k I_p),   1 / v_k = 1 / s0^2 + n_k / sigma^2,
                                           m_k = v_k (m0 / s0^2 + S_k / sigma^2)

with beta = 1 / sigma^2. The assignment step samples from the E-step's attention map (queries
x, keys mu, key bias log w_k - beta |mu_k|^2 / 2; see ``attnbayes.inference.deconvolution.em``).

Heteroscedastic noise (issue 35), x_i | c_i, mu ~ N(mu_{c_i}, diag(s_i1^2, ..., s_ip^2)) with
sigma given as (N,) (s_ic = s_i) or (N, p): with precisions b_ic = 1 / s_ic^2 the assignment
scores are sum_c b_ic (x_ic mu_kc - mu_kc^2 / 2) + log w_k (attention with the per-query
temperature s_i^2 scaling the key bias but not log w_k), and the atoms' conditional is the
precision-weighted normal posterior, coordinate by coordinate,

    mu_kc | c, x ~ N(m_kc, v_kc),   1 / v_kc = 1 / s0^2 + sum_{i: c_i = k} b_ic,
                                     m_kc = v_kc (m0_c / s0^2 + sum_{i: c_i = k} b_ic x_ic).

A number sigma runs exactly the homoscedastic code above (the same draws from the same key).

Approximate Gibbs (``approximate_gibbs``; "Attention as GPB2/IMM message passing", section 4.1)
replaces every draw by its expectation: c_i by the responsibilities A_i. (an attention map), then
mu_k by the responsibility-weighted mean of the x_i (and optionally w_k by the mean responsibility).
That is the flat-prior limit (s0 -> inf, alpha -> 0) of the conditional means above with expected
counts in place of counts, i.e. one EM step (with per-unit noise the precision-weighted mean
sum_i A_ik b_ic x_ic / sum_i A_ik b_ic, ``estep.m_step``); iterating it is a stack of attention
layers with tied weights. The residual (skip-connection) variant mu <- mu + eta (update - mu) is
a preconditioned gradient-ascent step on the log-likelihood l(mu) (update_kc - mu_kc =
grad_{mu_kc} l / sum_i A_ik b_ic, i.e. sigma^2 / N_k * grad_{mu_k} l with one sigma,
N_k = sum_i A_ik), and ``relaxation_stability`` gives the step sizes for which the fixed point
survives.

Over 800 lines: the exact sampler and the note's approximate Gibbs (with the stability of its
relaxation) stay together because the second is derived from the first: approximate Gibbs is
the flat-prior limit of the exact conditional means above, with expected counts for counts.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, ndtri

from ... import validation
from ...models.deconvolution import model_dims
from .. import sampling
from .checks import check_sigma, checked_problem
from .estep import e_step_attention_unchecked, m_step

if TYPE_CHECKING:  # xarray is imported where used: importing the algorithms stays lean
    import xarray as xr

INITS = ("data", "prior")


# ----------------------------------------------------------------------------- conditionals


def _scores(x_c, atoms_c, log_weights, beta):
    """(..., N, K) attention scores beta <x_i - c, mu_k - c> + log w_k - beta |mu_k - c|^2 / 2.

    ``x_c`` (N, p), ``atoms_c`` (..., K, p), ``log_weights`` (..., K); leading axes are chains.
    Centred at c = mean(x) like ``attnbayes.inference.deconvolution.em.e_step_attention``: softmax
    over k gives the responsibilities, logsumexp over k the row log-normaliser. ``beta`` is a
    number, or row precisions b (N, 1) / (N, p): then the scores are
    sum_d b_id ((x_id - c_d)(mu_kd - c_d) - (mu_kd - c_d)^2 / 2) + log w_k, which differ from the
    uncentred ones by a constant per row.
    """
    if jnp.ndim(beta) == 0:
        key_bias = log_weights - 0.5 * beta * jnp.sum(atoms_c**2, axis=-1)
        return beta * jnp.einsum("nd,...kd->...nk", x_c, atoms_c) + key_bias[..., None, :]
    beta = jnp.broadcast_to(beta, x_c.shape)
    cross = jnp.einsum("nd,...kd->...nk", beta * x_c, atoms_c)
    bias = jnp.einsum("nd,...kd->...nk", beta, atoms_c**2)
    return cross - 0.5 * bias + log_weights[..., None, :]


def _point_log_likelihood(x_c, scores, sigma):
    """(..., N) log sum_k w_k N(x_i; mu_k, diag(s_i^2)) from centred scores (see ``_scores``);
    ``sigma`` a number or row scales (N, 1) / (N, p)."""
    p = x_c.shape[1]
    lse = jax.nn.logsumexp(scores, axis=-1)
    if jnp.ndim(sigma) == 0:
        return (
            lse
            - 0.5 * jnp.sum(x_c**2, axis=-1) / sigma**2
            - 0.5 * p * jnp.log(2.0 * jnp.pi * sigma**2)
        )
    variance = jnp.broadcast_to(sigma**2, x_c.shape)
    return lse - 0.5 * jnp.sum(x_c**2 / variance + jnp.log(2.0 * jnp.pi * variance), axis=-1)


def _atoms_conditional(x_c, labels, num_atoms, sigma, loc_c, atom_scale):
    """Mean (..., K, p) (centred) and sd of mu_k | c, x, and the counts (..., K).

    ``labels`` (..., N) are the assignments c (leading axes are chains); ``loc_c`` = m0 - c.
    One sigma: the sd is (..., K) (isotropic); row scales (N, 1) / (N, p): the sd is
    (..., K, p), the precision-weighted posterior of each coordinate (module docstring).
    """
    one_hot = jax.nn.one_hot(labels, num_atoms, dtype=x_c.dtype)  # (..., N, K)
    counts = jnp.sum(one_hot, axis=-2)
    if jnp.ndim(sigma) == 0:
        sums = jnp.einsum("...nk,np->...kp", one_hot, x_c)
        precision = 1.0 / atom_scale**2 + counts / sigma**2
        mean = (loc_c / atom_scale**2 + sums / sigma**2) / precision[..., None]
        return mean, jax.lax.rsqrt(precision), counts
    beta = jnp.broadcast_to(1.0 / sigma**2, x_c.shape)
    sums = jnp.einsum("...nk,np->...kp", one_hot, beta * x_c)
    precision = 1.0 / atom_scale**2 + jnp.einsum("...nk,np->...kp", one_hot, beta)
    mean = (loc_c / atom_scale**2 + sums) / precision
    return mean, jax.lax.rsqrt(precision), counts


def _log_prior(atoms, log_weights, concentration, atom_loc, atom_scale):
    """(...,) log Dirichlet(w; alpha 1_K) + sum_k log N(mu_k; m0, s0^2 I_p), as NumPyro has it."""
    k = log_weights.shape[-1]
    dirichlet = (
        gammaln(k * concentration)
        - k * gammaln(concentration)
        + jnp.sum(jnp.where(concentration == 1.0, 0.0, (concentration - 1.0) * log_weights), -1)
    )
    z = (atoms - atom_loc) / atom_scale
    normal = jnp.sum(-0.5 * z**2 - jnp.log(atom_scale) - 0.5 * jnp.log(2.0 * jnp.pi), (-2, -1))
    return dirichlet + normal


class _Problem(NamedTuple):
    """Chain-independent inputs of a sweep: centred data and the prior, in x's dtype."""

    x_c: jax.Array  # (N, p) x - c
    centre: jax.Array  # (p,) c = mean of x
    sigma: jax.Array  # () or row scales (N, 1) / (N, p)
    concentration: jax.Array
    atom_loc: jax.Array  # (p,)
    atom_scale: jax.Array


def _sweep(problem: _Problem, atoms, log_weights, key):
    """One blocked-Gibbs sweep c | (mu, w); w | c; mu | c, x, for C chains at once.

    ``atoms`` (C, K, p), ``log_weights`` (C, K). Returns the new state and the statistics of
    the *incoming* state (mu, w): per-point log-likelihood (C, N), log joint lp (C,), and the
    number of atoms occupied by the assignments c drawn from it (C,). Recording the incoming
    state lets one E-step serve both the log-likelihood and the assignment draw. The chains
    are batched by hand (no vmap): random numbers are drawn flat, which compiles faster.
    """
    x_c, centre, sigma = problem.x_c, problem.centre, problem.sigma
    num_chains, num_atoms, _ = atoms.shape
    key_c, key_w, key_mu = jax.random.split(key, 3)
    beta = 1.0 / sigma**2
    scores = _scores(x_c, atoms - centre, log_weights, beta)  # (C, N, K)
    point_ll = _point_log_likelihood(x_c, scores, sigma)
    lp = jnp.sum(point_ll, axis=-1) + _log_prior(
        atoms, log_weights, problem.concentration, problem.atom_loc, problem.atom_scale
    )
    labels = jax.random.categorical(key_c, scores.reshape(-1, num_atoms), axis=-1)
    labels = labels.reshape(num_chains, -1)
    mean_c, sd, counts = _atoms_conditional(
        x_c, labels, num_atoms, sigma, problem.atom_loc - centre, problem.atom_scale
    )
    log_gamma = sampling.log_gamma(key_w, problem.concentration + counts)
    new_log_weights = log_gamma - jax.nn.logsumexp(log_gamma, axis=-1, keepdims=True)
    noise = ndtri(sampling.uniform_positive(key_mu, atoms.shape, atoms.dtype))
    new_atoms = centre + mean_c + (sd[..., None] if sd.ndim < mean_c.ndim else sd) * noise
    stats = (point_ll, lp, jnp.sum(counts > 0, axis=-1).astype(jnp.int32))
    return (new_atoms, new_log_weights), stats


def _run_chains(problem, atoms, log_weights, key, num_warmup, num_samples):
    """num_warmup + num_samples sweeps in one loop (one compiled copy of the sweep).

    Sweep i records the statistics of its incoming state into slot i - num_warmup once that
    is >= 0; ``num_warmup`` may be traced, ``num_samples`` fixes the buffers' shapes.
    Returns atoms (C, S, K, p), log weights (C, S, K), point log-likelihoods (C, S, N),
    lp (C, S) and occupied-atom counts (C, S).
    """
    num_chains, n = atoms.shape[0], problem.x_c.shape[0]
    dtype = problem.x_c.dtype
    buffers = (
        jnp.zeros((num_samples, *atoms.shape), dtype),
        jnp.zeros((num_samples, *log_weights.shape), dtype),
        jnp.zeros((num_samples, num_chains, n), dtype),
        jnp.zeros((num_samples, num_chains), dtype),
        jnp.zeros((num_samples, num_chains), jnp.int32),
    )

    def body(i, carry):
        state, buffers = carry
        new_state, stats = _sweep(problem, *state, jax.random.fold_in(key, i))
        slot = i - num_warmup
        keep = slot >= 0
        slot = jnp.maximum(slot, 0)
        record = (*state, *stats)
        buffers = tuple(
            b.at[slot].set(jnp.where(keep, r, b[slot]))
            for b, r in zip(buffers, record, strict=True)
        )
        return new_state, buffers

    total = num_warmup + num_samples
    _, buffers = jax.lax.fori_loop(0, total, body, ((atoms, log_weights), buffers))
    return tuple(jnp.moveaxis(b, 0, 1) for b in buffers)


def _sort_draws(atoms, log_weights):
    """Sort each draw's scalar atoms ascending and permute the weights along."""
    order = jnp.argsort(atoms[..., 0], axis=-1)
    atoms = jnp.take_along_axis(atoms, order[..., None], axis=-2)
    return atoms, jnp.take_along_axis(log_weights, order, axis=-1)


def _predict(key, atoms, log_weights, sigma, num_points):
    """Replicate data sets x_rep (C, S, N, p), one per draw, from the mixture at (mu, w).

    ``atoms`` (C, S, K, p), ``log_weights`` (C, S, K); ``sigma`` a number or row scales (N, 1) /
    (N, p) (broadcasting against the (C, S, N, p) draws). Labels by inversion of the weights'
    CDF (c = #{k < K - 1: F_k < u}), noise by the normal quantile of uniforms.
    """
    key_c, key_e = jax.random.split(key)
    dtype = atoms.dtype
    cdf = jnp.cumsum(jnp.exp(log_weights), axis=-1)[..., None, :-1]  # (C, S, 1, K - 1)
    u = sampling.uniform_positive(key_c, (*log_weights.shape[:-1], num_points), dtype)
    labels = jnp.sum(u[..., None] > cdf, axis=-1)
    chosen = jnp.take_along_axis(atoms, labels[..., None], axis=-2)
    return chosen + sigma * ndtri(sampling.uniform_positive(key_e, chosen.shape, dtype))


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _gibbs(
    x,
    init_atoms,
    init_log_weights,
    key_chains,
    key_pred,
    sigma,
    concentration,
    atom_loc,
    atom_scale,
    num_warmup,
    num_samples,
    ordered,
):
    """All chains in one loop over their warmup and kept sweeps, then sorting and prediction."""
    centre = jnp.mean(x, axis=0)
    problem = _Problem(x - centre, centre, sigma, concentration, atom_loc, atom_scale)
    atoms, log_weights, point_ll, lp, occupied = _run_chains(
        problem, init_atoms, init_log_weights, key_chains, num_warmup, num_samples
    )
    sorted_atoms, sorted_log_weights = _sort_draws(atoms, log_weights)
    atoms = jnp.where(ordered, sorted_atoms, atoms)
    log_weights = jnp.where(ordered, sorted_log_weights, log_weights)
    lp = lp + jnp.where(ordered, gammaln(atoms.shape[-2] + 1.0), 0.0)  # SortedNormal's log K!
    x_rep = _predict(key_pred, atoms, log_weights, sigma, x.shape[0])
    return atoms, jnp.exp(log_weights), point_ll, lp, occupied, x_rep


# ----------------------------------------------------------------------------- validation


def _check_loc(atom_loc, dim, scalar):
    loc = validation.as_float_array("atom_loc", atom_loc)
    validation.check_finite("atom_loc", loc)
    allowed = [()] if scalar else [(), (dim,)]
    if tuple(loc.shape) not in allowed:
        raise ValueError(
            f"atom_loc: expected a scalar{'' if scalar else f' or shape ({dim},)'}, "
            f"got shape {tuple(loc.shape)}"
        )
    return np.broadcast_to(loc, (dim,))


def _check_init(init, points, num_atoms, num_chains, scalar):
    """Validate ``init``; return it as a mode name, or as starting atoms (C, K, p)."""
    n, p = points.shape
    if isinstance(init, str):
        if init not in INITS:
            raise ValueError(f"init: unknown initialisation {init!r}; known: {list(INITS)}")
        if init == "data" and num_atoms > n:
            raise ValueError(
                f"num_atoms: init='data' needs num_atoms <= N = {n} (distinct data points), "
                f"got {num_atoms}; use init='prior'"
            )
        return init
    start = validation.as_float_array("init", init)
    one = (num_atoms,) if scalar else (num_atoms, p)
    if tuple(start.shape) not in (one, (num_chains, *one)):
        raise ValueError(
            f"init: expected initial atoms of shape {one} or {(num_chains, *one)}, "
            f"got {tuple(start.shape)}"
        )
    validation.check_finite("init", start)
    return np.broadcast_to(start.reshape(-1, num_atoms, p), (num_chains, num_atoms, p))


@functools.partial(jax.jit, static_argnames=("num_atoms", "num_chains", "mode"))
def _initial_state(key, x, concentration, atom_loc, atom_scale, num_atoms, num_chains, mode):
    """(atoms (C, K, p), log weights (C, K)) for every chain.

    "data": per chain, K distinct data points drawn at random (the first K of a random
    permutation), weights 1/K: the chains start dispersed. "prior": a draw from the prior.
    """
    n, p = x.shape
    dtype = x.dtype
    key_a, key_b = jax.random.split(key)
    if mode == "data":
        order = jnp.argsort(sampling.uniform_positive(key_a, (num_chains, n), dtype), axis=-1)
        log_weights = jnp.full((num_chains, num_atoms), -jnp.log(num_atoms), dtype)
        return x[order[:, :num_atoms]], log_weights
    log_gamma = sampling.log_gamma(key_a, jnp.full((num_chains, num_atoms), concentration, dtype))
    log_weights = log_gamma - jax.nn.logsumexp(log_gamma, axis=-1, keepdims=True)
    eps = ndtri(sampling.uniform_positive(key_b, (num_chains, num_atoms, p), dtype))
    return atom_loc + atom_scale * eps, log_weights


# ----------------------------------------------------------------------------- public API: Gibbs


class GibbsState(NamedTuple):
    """One chain of the blocked Gibbs sampler (``gibbs_init``, ``gibbs_step``).

    Attributes:
        atoms: (K,) for scalar data or (K, p): mu.
        log_weights: (K,) log w (logs, so that tiny weights keep their precision).
    """

    atoms: jax.Array
    log_weights: jax.Array


class GibbsInfo(NamedTuple):
    """What one sweep computed at the state it started from (one E-step serves both).

    Attributes:
        log_likelihood: (N,) log sum_k w_k N(x_i; mu_k, diag(s_i^2)), pointwise.
        lp: () the log joint log p(x, mu, w) of the marginal model (``run_gibbs``'s ``lp``).
        num_occupied: () int32, atoms occupied by the assignments c drawn in the sweep.
    """

    log_likelihood: jax.Array
    lp: jax.Array
    num_occupied: jax.Array


def _check_prior(concentration, atom_loc, atom_scale, dim, scalar, dtype):
    """The prior's arrays in x's dtype (value checks on concrete values only)."""
    if not validation.any_traced(concentration, atom_loc, atom_scale):
        concentration = validation.check_positive_scalar("concentration", concentration)
        atom_scale = validation.check_positive_scalar("atom_scale", atom_scale)
        atom_loc = _check_loc(atom_loc, dim, scalar)
    return (
        jnp.asarray(concentration, dtype),
        jnp.broadcast_to(jnp.asarray(atom_loc, dtype), (dim,)),
        jnp.asarray(atom_scale, dtype),
    )


def gibbs_init(
    key: jax.Array,
    x,
    sigma,
    *,
    num_atoms: int,
    concentration: float = 1.0,
    atom_loc=0.0,
    atom_scale: float = 5.0,
    init: str = "data",
) -> GibbsState:
    """The starting state of one chain (BlackJAX style: ``init`` then ``step``).

    "data": K distinct data points drawn at random, weights 1/K; "prior": a draw from the
    prior w ~ Dirichlet(alpha 1_K), mu_k ~ N(m0, s0^2 I_p). ``num_atoms`` and ``init`` are
    static; with concrete arguments everything is validated as in ``run_gibbs``.
    """
    num_atoms = validation.check_positive_int("num_atoms", num_atoms)
    if not isinstance(init, str) or init not in INITS:
        raise ValueError(f"init: expected one of {list(INITS)}, got {init!r}")
    if not validation.any_traced(key, x, sigma):
        validation.check_key("key", key)
        points, _, _, _, scalar = checked_problem(x, None, None, sigma)
        _check_init(init, points, num_atoms, 1, scalar)
    elif not validation.any_traced(key, x):
        points, scalar = validation.as_points("x", x)
        check_sigma(points, sigma, scalar=scalar)  # the shape of a traced sigma
    else:
        scalar = jnp.ndim(x) == 1
        points = jnp.asarray(x)[:, None] if scalar else jnp.asarray(x)
    prior = _check_prior(concentration, atom_loc, atom_scale, points.shape[1], scalar, points.dtype)
    atoms, log_weights = _initial_state(key, points, *prior, num_atoms, 1, init)
    return GibbsState(validation.restore_shape(atoms[0], scalar), log_weights[0])


@jax.jit
def _one_sweep(key, atoms, log_weights, x, sigma, concentration, atom_loc, atom_scale):
    centre = jnp.mean(x, axis=0)
    problem = _Problem(x - centre, centre, sigma, concentration, atom_loc, atom_scale)
    (new_atoms, new_log_weights), (point_ll, lp, occupied) = _sweep(
        problem, atoms[None], log_weights[None], key
    )
    return (new_atoms[0], new_log_weights[0]), (point_ll[0], lp[0], occupied[0])


def gibbs_step(
    key: jax.Array,
    state: GibbsState,
    x,
    sigma,
    *,
    concentration: float = 1.0,
    atom_loc=0.0,
    atom_scale: float = 5.0,
) -> tuple[GibbsState, GibbsInfo]:
    """One blocked sweep c | (mu, w); w | c; mu | c, x (module docstring) -> (state, info).

    Pure and jit-able (compiled once per shape); ``jax.vmap`` it over keys and states for
    several chains, as ``run_gibbs`` does in one loop. ``sigma`` is a number, (N,) or, for
    (N, p) data, (N, p) (module docstring: the heteroscedastic conditionals). With concrete
    arguments ``x``, ``sigma``, the prior and the state are validated; under ``jax.jit``
    those value checks are skipped, and a non-finite ``info.lp`` then means bad input (call
    ``gibbs_step`` once on concrete values to see which).
    """
    if not isinstance(state, GibbsState):
        raise ValueError(f"state: expected a GibbsState, got {type(state).__name__}")
    if not validation.any_traced(key, state, x, sigma):
        validation.check_key("key", key)
        weights = np.exp(np.asarray(state.log_weights, dtype=np.float64))
        points, atoms, _, sigma, scalar = checked_problem(
            x,
            state.atoms,
            weights / weights.sum(),
            sigma,
            names=("state.atoms", "state.log_weights"),
        )
        if np.shape(state.log_weights) != (atoms.shape[0],):
            raise ValueError(
                f"state.log_weights: expected shape ({atoms.shape[0]},), "
                f"got {np.shape(state.log_weights)}"
            )
    else:
        scalar = jnp.ndim(x) == 1
        points = jnp.asarray(x)[:, None] if scalar else jnp.asarray(x)
        atoms = jnp.asarray(state.atoms)
        atoms = atoms[:, None] if scalar else atoms
        _, sigma = check_sigma(points, sigma, scalar=scalar)  # shapes only; rows (N, 1)
    dtype = points.dtype
    prior = _check_prior(concentration, atom_loc, atom_scale, points.shape[1], scalar, dtype)
    (new_atoms, new_log_weights), (point_ll, lp, occupied) = _one_sweep(
        key,
        jnp.asarray(atoms, dtype),
        jnp.asarray(state.log_weights, dtype),
        points,
        jnp.asarray(sigma, dtype),
        *prior,
    )
    new_state = GibbsState(validation.restore_shape(new_atoms, scalar), new_log_weights)
    return new_state, GibbsInfo(point_ll, lp, occupied)


def run_gibbs(
    key: jax.Array,
    x,
    sigma,
    *,
    num_atoms: int,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    num_chains: int = 2,
    concentration: float = 1.0,
    atom_loc=0.0,
    atom_scale: float = 5.0,
    ordered: bool = False,
    init="data",
) -> xr.DataTree:
    """Blocked conjugate Gibbs on ``deconvolution_model(prior="dirichlet")``, as a DataTree.

    Each sweep draws c | (mu, w) from the E-step's attention map, then w | c ~ Dirichlet
    (alpha + counts), then mu | c, x from its normal conditional (module docstring). Chains
    advance together (batched), in one loop over the sweeps; the sampler is compiled once per
    (N, p, K, num_chains, num_samples) and reused (``num_warmup`` and ``ordered`` are traced).

    Args:
        key: a ``jax.random`` key (split for the initialisation, the chains and the
            posterior predictive).
        x: (N,) or (N, p) observations.
        sigma: known noise scale: a number, (N,) (one per observation) or, for (N, p) data,
            (N, p) (one per observation and coordinate).
        num_atoms: K.
        num_warmup: sweeps discarded per chain; draw s is the state after num_warmup + s
            sweeps (so with ``num_warmup=0`` the first draw is the initial state).
        num_samples: draws kept per chain.
        num_chains: independent chains.
        concentration: alpha of the symmetric Dirichlet prior on the weights.
        atom_loc, atom_scale: m0 (scalar or (p,)) and s0 of the atoms' prior; the defaults
            are ``deconvolution_model``'s.
        ordered: the posterior of ``deconvolution_model(..., ordered=True)`` (scalar data
            only). Its prior on the atoms, ``SortedNormal``, is the iid prior pushed through
            sorting, and the Dirichlet prior and the likelihood are invariant under relabelling,
            so the ordered model's posterior is exactly the exchangeable posterior with each
            draw's atoms sorted ascending and its weights permuted along; that is what is
            returned (``lp`` then includes SortedNormal's log K!).
        init: "data" (per chain, K distinct data points drawn at random, weights 1/K: the
            chains start dispersed), "prior" (a draw from the prior), or initial atoms of
            shape (K[, p]) for all chains or (num_chains, K[, p]), weights 1/K.

    Returns:
        A DataTree with the groups, variable names and dims of ``run_nuts`` on
        ``deconvolution_model`` with ``dims=model_dims(scalar)``: posterior ``weights``
        (chain, draw, atom) and ``atoms`` (chain, draw, atom[, coord]); log_likelihood ``x``
        (chain, draw, point), the per-point marginal log sum_k w_k N(x_i; mu_k, diag(s_i^2))
        (for ``az.loo``); posterior_predictive ``x``; observed_data ``x``; sample_stats
        ``lp`` and ``num_occupied``. ``lp`` is the log joint of the marginal model on the
        constrained space, what ``numpyro.infer.util.log_density`` returns for
        ``deconvolution_model``; NUTS's ``lp`` is minus its potential energy on the
        unconstrained space, which adds the log-Jacobians of the simplex (and ordering)
        transforms, so the two differ by that term. ``num_occupied`` counts the atoms that
        assignments drawn at that state occupy. ``posterior.attrs``: sampling_time (wall
        seconds, compilation included on a shape's first call), sampler, chain_method,
        num_warmup.
    """
    validation.check_key("key", key)
    points, scalar = validation.as_points("x", x)
    p = points.shape[1]
    num_atoms = validation.check_positive_int("num_atoms", num_atoms)
    num_warmup = validation.check_positive_int("num_warmup", num_warmup, minimum=0)
    num_samples = validation.check_positive_int("num_samples", num_samples)
    num_chains = validation.check_positive_int("num_chains", num_chains)
    concentration = validation.check_positive_scalar("concentration", concentration)
    atom_scale = validation.check_positive_scalar("atom_scale", atom_scale)
    loc = _check_loc(atom_loc, p, scalar)
    if not isinstance(ordered, bool | np.bool_):
        raise ValueError(f"ordered: expected True or False, got {ordered!r}")
    if ordered and not scalar:
        raise ValueError("ordered: only available for scalar data passed as shape (N,)")
    # the EM checks of sigma (1 / sigma^2 finite in x's dtype) and of the data's spread
    dtype, s = check_sigma(points, sigma, scalar=scalar)
    validation.check_scaled_spread("x", points, s, dtype)
    xs, s = jnp.asarray(points, dtype), jnp.asarray(s, dtype)

    start_atoms = _check_init(init, points, num_atoms, num_chains, scalar)
    start = time.perf_counter()
    key_init, key_chains, key_pred = jax.random.split(key, 3)
    prior = (
        jnp.asarray(concentration, dtype),
        jnp.asarray(loc, dtype),
        jnp.asarray(atom_scale, dtype),
    )
    if isinstance(start_atoms, str):
        atoms0, log_w0 = _initial_state(key_init, xs, *prior, num_atoms, num_chains, start_atoms)
    else:
        atoms0 = jnp.asarray(start_atoms, dtype)
        log_w0 = jnp.full((num_chains, num_atoms), -np.log(num_atoms), dtype)
    atoms, weights, point_ll, lp, occupied, x_rep = _gibbs(
        xs,
        atoms0,
        log_w0,
        key_chains,
        key_pred,
        s,
        *prior,
        jnp.asarray(num_warmup, jnp.int32),
        num_samples,
        jnp.asarray(bool(ordered)),
    )
    jax.block_until_ready(x_rep)
    elapsed = time.perf_counter() - start

    restore = (lambda a: a[..., 0]) if scalar else (lambda a: a)
    dims = model_dims(scalar)
    import arviz as az

    return az.from_dict(
        {
            "posterior": {"weights": np.asarray(weights), "atoms": restore(np.asarray(atoms))},
            "sample_stats": {"lp": np.asarray(lp), "num_occupied": np.asarray(occupied)},
            "log_likelihood": {"x": np.asarray(point_ll)},
            "posterior_predictive": {"x": restore(np.asarray(x_rep))},
            "observed_data": {"x": restore(np.asarray(xs))},
        },
        dims=dims,
        attrs={
            "posterior": {
                "sampling_time": elapsed,
                "sampler": "gibbs",
                "chain_method": "vectorized",
                "num_warmup": num_warmup,
            }
        },
    )


# ----------------------------------------------------------------------------- approximate Gibbs


class ApproximateGibbsTrace(NamedTuple):
    """The states and scalar summaries of an approximate-Gibbs (relaxed EM) run.

    Index t = 0 is the starting measure; t = 1..num_iters the state after t updates. From
    the first non-finite state on, every entry is NaN (explicitly, not by accident).

    Attributes:
        atoms: (num_iters + 1, K) for scalar data or (num_iters + 1, K, p).
        weights: (num_iters + 1, K).
        log_likelihood: (num_iters + 1,) l_t = sum_i log sum_k w_k N(x_i; mu_k, diag(s_i^2)).
        log_normalizer: (num_iters + 1,) sum_i log sum_k exp(s_ik) with the E-step's scores
            s_ik = beta <x_i, mu_k> + log w_k - beta |mu_k|^2 / 2 (beta = 1 / sigma^2, not
            centred): the summed row log-normaliser of the responsibilities. It equals
            l_t + beta sum_i |x_i|^2 / 2 + N p log(2 pi sigma^2) / 2, so it moves with l_t.
            With per-unit noise, s_ik = sum_c b_ic (x_ic mu_kc - mu_kc^2 / 2) + log w_k
            (b_ic = 1 / s_ic^2) and the terms are sum_ic (b_ic x_ic^2 + log(2 pi s_ic^2)) / 2.
        log_partition: (num_iters + 1,) sum_i log G(beta x_i), G(q) = sum_k w_k exp(<mu_k, q>):
            the exponential-family log-partition of the message-passing note's eq. (3) (keys mu_k,
            natural parameter beta x_i, base measure w), i.e. the row normaliser of the attention
            *without* the key bias -beta |mu_k|^2 / 2 (the linear link of its eq. (15)). It
            grows like beta max_k <x_i, mu_k> when the atoms run off, while l_t falls. Per-unit
            noise: the natural parameters are (b_ic x_ic)_c.
        diverged: () bool array, True when some state or summary became non-finite. A run
            that oscillates or drifts off while staying finite is not flagged: read
            ``log_likelihood``.
        first_nonfinite: () int array, the first such index t, or -1.

    A pytree of arrays: it can be returned from ``jax.jit`` and batched by ``jax.vmap``.
    """

    atoms: jax.Array
    weights: jax.Array
    log_likelihood: jax.Array
    log_normalizer: jax.Array
    log_partition: jax.Array
    diverged: jax.Array
    first_nonfinite: jax.Array


@functools.partial(jax.jit, static_argnames=("num_iters", "update_weights"))
def _approximate_gibbs(x, atoms, weights, sigma, step_size, num_iters, update_weights):
    n, p = x.shape
    beta = 1.0 / sigma**2
    centre = jnp.mean(x, axis=0)
    if jnp.ndim(sigma) == 0:
        sq_dev = beta * jnp.sum((x - centre) ** 2)
        log_norm_const = n * p * jnp.log(2.0 * jnp.pi * sigma**2)
        shift = 0.5 * n * beta * jnp.sum(centre**2)  # centred -> uncentred normaliser, summed
        queries = beta * x  # the natural parameters beta x_i
    else:  # row scales (N, 1) / (N, p): every sum weighted by the precisions b_ic
        b = jnp.broadcast_to(beta, x.shape)
        x_c = x - centre
        sq_dev = jnp.sum(b * x_c**2)
        log_norm_const = -jnp.sum(jnp.log(b / (2.0 * jnp.pi)))
        shift = jnp.sum(b * (x_c * centre + 0.5 * centre**2))
        queries = b * x
    nan = jnp.asarray(jnp.nan, x.dtype)

    def body(carry, _):
        atoms, weights, bad = carry
        att = e_step_attention_unchecked(x, atoms, weights, sigma)
        lse_sum = jnp.sum(att.log_normalizer)  # centred scores, see e_step_attention
        ll = lse_sum - 0.5 * sq_dev - 0.5 * log_norm_const
        log_norm = lse_sum + shift
        log_part = jnp.sum(jax.nn.logsumexp(queries @ atoms.T + jnp.log(weights)[None, :], axis=-1))
        finite = (
            jnp.all(jnp.isfinite(atoms))
            & jnp.all(jnp.isfinite(weights))
            & jnp.isfinite(ll)
            & jnp.isfinite(log_norm)
            & jnp.isfinite(log_part)
        )
        bad = bad | ~finite
        record = (atoms, weights, ll, log_norm, log_part)
        record = tuple(jnp.where(bad, nan, r) for r in record)
        target, new_weights = m_step(x, att.weights, atoms, weights, update_weights, sigma)
        new_atoms = atoms + step_size * (target - atoms)
        return (new_atoms, new_weights, bad), (*record, bad)

    init = (atoms, weights, jnp.asarray(False))
    _, (atoms, weights, ll, log_norm, log_part, bad) = jax.lax.scan(
        body, init, None, length=num_iters + 1
    )
    first = jnp.where(jnp.any(bad), jnp.argmax(bad), -1).astype(jnp.int32)
    return atoms, weights, ll, log_norm, log_part, first


def _check_step_size(step_size):
    """eta: a finite number > 0 (or a 0-d array); a 0-d tracer is returned unchecked."""
    eta = validation.check_real_scalar("step_size", step_size, "a finite number > 0")
    if validation.is_traced(eta):
        return eta
    if not np.isfinite(eta) or eta <= 0:
        raise ValueError(f"step_size: must be a finite number > 0, got {step_size!r}")
    return eta


def approximate_gibbs(
    x,
    sigma,
    atoms,
    weights=None,
    *,
    num_iters: int,
    step_size: float = 1.0,
    update_weights: bool = False,
) -> ApproximateGibbsTrace:
    """Approximate Gibbs ("Attention as GPB2/IMM message passing", section 4.1): every draw replaced
    by its expectation.

    Iterates, with tied "weights" (sigma, and the data as queries) like stacked attention
    layers,

        A = softmax_k(beta <x_i, mu_k> + log w_k - beta |mu_k|^2 / 2)     (attention / E-step)
        u_k = sum_i A_ik x_i / sum_i A_ik                                (expected mean)
        mu <- mu + eta (u - mu)                                          (residual, eta = step)
        w_k <- sum_i A_ik / N                                            (if update_weights)

    eta = 1 is exactly EM (``attnbayes.inference.deconvolution.em.em_step``). The residual step is
    preconditioned gradient ascent on the log-likelihood l: u_k - mu_k = sigma^2 / N_k * grad_{mu_k}
    l (N_k = sum_i A_ik).

    Where it converges and where it blows up. EM's surrogate Q(mu' | mu) = const -
    sum_k N_k |mu'_k - u_k|^2 / (2 sigma^2) is an isotropic quadratic around u, and
    mu' - u = (1 - eta)(mu - u), so Q does not decrease iff |1 - eta| <= 1: for every
    0 < eta <= 2 the log-likelihood never decreases (a generalised EM). Near a fixed point the
    EM map's Jacobian has eigenvalues lambda in [0, 1) and the relaxed map's are
    1 - eta (1 - lambda): the fixed point stays attracting up to eta* = 2 / (1 - lambda_min)
    >= 2 (``relaxation_stability``). Past eta* the iteration settles on a 2-cycle of lower
    likelihood (period doubling), and for larger eta the atoms are thrown out geometrically
    until the squared distances overflow: the log-likelihood runs to -inf while the
    linear-link log-partition (``log_partition``) runs to +inf, and the first non-finite
    state is flagged. A lone atom (K = 1) obeys mu_t - mean(x) = (1 - eta)^t (mu_0 - mean(x))
    exactly; with several atoms, one far from all data has zero mass (exp underflows) and
    stays put, so the atoms take turns holding the mass and each is thrown out only on its
    turn.

    The weights, when updated, take the plain expectation step (a relaxed step could leave the
    simplex for eta > 1).

    Args:
        x: (N,) or (N, p) observations.
        sigma: known noise scale: a number, (N,) or, for (N, p) data, (N, p). Per-unit noise
            gives the scores beta_i <x_i, mu_k> + log w_k - beta_i |mu_k|^2 / 2 (per-query
            temperature, beta_i = 1 / s_i^2; per coordinate with (N, p)) and the precision-
            weighted expected mean u_kc = sum_i A_ik x_ic / s_ic^2 / sum_i A_ik / s_ic^2
            (``estep.m_step``); the monotonicity bound below holds as stated (Q is then a
            quadratic with diagonal, not isotropic, curvature around u, and the same argument
            applies coordinate by coordinate).
        atoms: (K,) or (K, p) starting atoms, in the convention of ``x``.
        weights: (K,) starting weights; default 1/K.
        num_iters: number of updates (>= 0).
        step_size: eta > 0.
        update_weights: also update the weights.

    Returns:
        ``ApproximateGibbsTrace`` (see its docstring for exactly what is recorded).

    Traceable: one ``lax.scan`` of ``num_iters + 1`` steps (``num_iters`` and
    ``update_weights`` static), so ``jax.jit``, ``jax.vmap`` and ``jax.grad`` (reverse mode
    through the scan) apply to ``x``, ``sigma``, ``atoms``, ``weights`` and ``step_size``; the
    states and summaries are differentiable, ``diverged`` and ``first_nonfinite`` are not.
    Under ``jax.jit`` only the static checks run: inputs that
    ``attnbayes.inference.deconvolution.em.check_problem`` refuses give a trace that is NaN
    from the first state they affect on (``diverged`` True, ``first_nonfinite`` that index,
    usually 0), and a step size <= 0 is not refused (it steps away from the EM update); call
    ``check_problem(x, sigma, atoms=atoms, weights=weights)`` and this function on the
    concrete inputs first.
    """
    k = np.shape(atoms)[0] if np.ndim(atoms) >= 1 else 0
    if weights is None:
        weights = np.full((max(k, 1),), 1.0 / max(k, 1))
    xs, mus, ws, s, scalar = checked_problem(x, atoms, weights, sigma)
    num_iters = validation.check_positive_int("num_iters", num_iters, minimum=0)
    eta = _check_step_size(step_size)
    a, w, ll, log_norm, log_part, first = _approximate_gibbs(
        xs, mus, ws, s, jnp.asarray(eta, xs.dtype), num_iters, bool(update_weights)
    )
    return ApproximateGibbsTrace(
        atoms=validation.restore_shape(a, scalar),
        weights=w,
        log_likelihood=ll,
        log_normalizer=log_norm,
        log_partition=log_part,
        diverged=first >= 0,
        first_nonfinite=first,
    )


class RelaxationStability(NamedTuple):
    """Linear stability of mu <- mu + eta (EM(mu) - mu) at given atoms (weights fixed).

    Attributes:
        em_eigenvalues: (K p,) eigenvalues lambda of the Jacobian of the atoms' EM map,
            ascending (real parts; at a fixed point they are real and lie in [0, 1)).
        critical_step_size: 2 / (1 - lambda_min): the relaxed map's eigenvalues
            1 - eta (1 - lambda) stay inside the unit circle iff 0 < eta < this value.
    """

    em_eigenvalues: np.ndarray
    critical_step_size: float


@jax.jit
def _em_jacobian(x, atoms, weights, sigma):
    def em_map(flat):
        mu = flat.reshape(atoms.shape)
        att = e_step_attention_unchecked(x, mu, weights, sigma)
        return m_step(x, att.weights, mu, weights, False, sigma)[0].reshape(-1)

    return jax.jacfwd(em_map)(atoms.reshape(-1))


def relaxation_stability(x, sigma, atoms, weights=None) -> RelaxationStability:
    """Eigenvalues of the EM map's Jacobian at ``atoms`` and the critical residual step size.

    At a fixed point mu* of EM (e.g. ``fit_em``'s result) the Jacobian is
    J = I - I_complete^{-1} I_observed, similar to a symmetric matrix with eigenvalues in
    [0, 1) at a strict local maximum (the fractions of missing information). The relaxed map
    has Jacobian I - eta (I - J), so mu* is linearly stable iff 0 < eta < 2 / (1 - lambda_min).
    The weights are held fixed (``update_weights=False``).
    """
    k = np.shape(atoms)[0] if np.ndim(atoms) >= 1 else 0
    if weights is None:
        weights = np.full((max(k, 1),), 1.0 / max(k, 1))
    xs, mus, ws, s, _ = checked_problem(x, atoms, weights, sigma)
    jac = np.asarray(_em_jacobian(xs, mus, ws, s), dtype=np.float64)
    eigenvalues = np.sort(np.linalg.eigvals(jac).real)
    lam_min = float(eigenvalues[0])
    critical = 2.0 / (1.0 - lam_min) if lam_min < 1.0 else float("inf")
    return RelaxationStability(em_eigenvalues=eigenvalues, critical_step_size=critical)


__all__ = [
    "INITS",
    "ApproximateGibbsTrace",
    "GibbsInfo",
    "GibbsState",
    "RelaxationStability",
    "approximate_gibbs",
    "gibbs_init",
    "gibbs_step",
    "relaxation_stability",
    "run_gibbs",
]
