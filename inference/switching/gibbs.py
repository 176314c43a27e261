"""Gibbs sampling for the switching linear-Gaussian state-space model: the public sampler.

Carter and Kohn (1994) for the states, Kim and Nelson (1999, ch. 9) for the modes; the exact
sampler the note "Attention as GPB2/IMM message passing" (section 4) approximates.

Model (``attnbayes.models.switching``), M modes, t = 1..T, known inputs u_t (k = 0: none):

    s_1 ~ Cat(pi0),                    s_t | s_{t-1} = i ~ Cat(Pi[i, :]),
    x_1 | s_1 = j ~ N(m0_j, P0_j),     x_t | x_{t-1}, s_t = j ~ N(F_j x_{t-1} + b_tj, c_j Q_j),
    y_t | x_t, s_t = j ~ N(H_j x_t + e_tj, r_j R_j),
    b_tj = b_j + B_j u_t,  e_tj = d_j + D_j u_t      (``models.switching.step_offsets``)

One sweep draws the modes (``"collapsed"``, Gerlach, Carter and Kohn 2000, the default, or the
blocked ``"conditional"`` s | x, theta, y), then x | s, theta, y by Kalman forward filtering,
backward sampling, then with ``priors`` theta | x, s, y (Dirichlet rows of Pi, inverse-gamma
scales c_j, r_j). The conditional laws, with their equations, and the sweep are in
``attnbayes.inference.switching.gibbs_conditionals``; this module holds what a user calls, as
BlackJAX's kernels do: ``switching_gibbs_init`` and ``switching_gibbs_step`` (one chain, pure,
``SwitchingGibbsState`` and ``SwitchingGibbsInfo``), and ``run_switching_gibbs`` (the chains
vmapped in one compiled loop, an ArviZ DataTree). Each validates its arguments on concrete
values at the boundary (``ValueError`` naming the argument) and hands the compiled sweeps the
per-step offsets b_tj, e_tj, not the inputs, so one compiled sampler serves models with and
without inputs of the same T, M, d and o. The transition matrix is constant (M, M): a
time-varying (T, M, M) one is refused (``ValueError`` naming ``params.transition_matrix``).
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import validation
from ...models.switching import (
    SwitchingParams,
    SwitchingPriors,
    check_priors,
    step_offsets,
    switching_dims,
)
from .gibbs_conditionals import (
    KEEP_MODES,
    MODE_INDEX,
    GibbsPriors,
    prepare_model,
    prior_modes,
    sweep,
)
from .kalman import check_inputs

if TYPE_CHECKING:  # xarray is imported where used: importing the algorithms stays lean
    import xarray as xr

MODE_SAMPLERS = ("collapsed", "conditional")
INITS = ("prior",)


class SwitchingGibbsState(NamedTuple):
    """State of one chain of the switching Gibbs sampler.

    Attributes:
        modes: (T,) int32 s_t in 0..M-1.
        states: (T, d) x_t.
        transition_matrix: (M, M) Pi.
        dynamics_cov_scale: (M,) c_j (Q_j = c_j params.dynamics_covs[j]); ones when fixed.
        emission_cov_scale: (M,) r_j (R_j = r_j params.emission_covs[j]); ones when fixed.
        lp: () log p(x, s, y, theta).
    """

    modes: jax.Array
    states: jax.Array
    transition_matrix: jax.Array
    dynamics_cov_scale: jax.Array
    emission_cov_scale: jax.Array
    lp: jax.Array


class SwitchingGibbsInfo(NamedTuple):
    """What one sweep of ``switching_gibbs_step`` did.

    Attributes:
        num_mode_changes: () int32, the steps t whose mode s_t the sweep changed (a measure of
            how far the mode sequence moves per sweep).
    """

    num_mode_changes: jax.Array


# ----------------------------------------------------------------------------- kernel


def _initial_state(modes, p: SwitchingParams) -> SwitchingGibbsState:
    """modes (T,), states 0 (to be drawn by a sweep that keeps the modes), theta at
    ``params`` (scales 1), lp 0."""
    m = p.initial_probs.shape[0]
    dtype = p.initial_means.dtype
    return SwitchingGibbsState(
        modes=modes.astype(jnp.int32),
        states=jnp.zeros((modes.shape[0], p.initial_means.shape[1]), dtype),
        transition_matrix=p.transition_matrix,
        dynamics_cov_scale=jnp.ones(m, dtype),
        emission_cov_scale=jnp.ones(m, dtype),
        lp=jnp.zeros((), dtype),
    )


@jax.jit
def _step_jit(key, state, data, priors, mode_index, update_theta):
    """One sweep on ``data`` = (params, observations, dynamics_offsets, emission_offsets) of
    ``_check_data``."""
    return sweep(key, state, prepare_model(*data), priors, mode_index, update_theta)


# ----------------------------------------------------------------------------- checks


def _check_mode_sampler(mode_sampler) -> str:
    if not isinstance(mode_sampler, str) or mode_sampler not in MODE_SAMPLERS:
        raise ValueError(f"mode_sampler: unknown {mode_sampler!r}; known: {list(MODE_SAMPLERS)}")
    return mode_sampler


def _check_emission_definite(emission_covs) -> None:
    """The Gibbs sampler needs PD R_j: its r_j update and backward messages use R_j^-1."""
    eig = np.linalg.eigvalsh(np.asarray(emission_covs, dtype=np.float64))
    singular = np.any(eig <= 1e-12 * np.maximum(eig[..., -1:], 1e-300), axis=-1)
    if np.any(singular):
        raise ValueError(
            "params.emission_covs: the Gibbs sampler needs positive definite emission "
            "covariances R_j (its r_j update and backward messages use R_j^-1); R_j is "
            f"singular for mode(s) {np.flatnonzero(singular).tolist()} (the filters and "
            "smoothers accept positive semi-definite R_j)"
        )


@jax.jit
def _offsets_over_time(params: SwitchingParams, inputs):
    """(b_tj (T, M, d), e_tj (T, M, o)) = ``models.switching.step_offsets`` at every u_t."""
    return jax.vmap(step_offsets, in_axes=(None, 0))(params, inputs)


def _check_data(params, observations, inputs=None):
    """The public boundary: ``kalman.check_inputs`` (value checks when concrete), PD R_j (when
    concrete), and the per-step offsets. Returns (params with the optional fields None,
    observations (T, o), dynamics_offsets (T, M, d), emission_offsets (T, M, o)), the arguments
    of ``prepare_model``: the compiled sweeps see the offsets, not the inputs and their weights, so
    one compiled sampler serves models with and without inputs (any k) of the same shapes."""
    params, obs, inputs = check_inputs(params, observations, inputs=inputs)
    if np.ndim(params.transition_matrix) == 3:
        raise ValueError(
            "params.transition_matrix: the Gibbs sampler takes a constant (M, M) transition "
            f"matrix, got a time-varying one of shape {tuple(np.shape(params.transition_matrix))}"
            " (its chain state holds one Pi, drawn under a Dirichlet prior); use the filters "
            "and smoothers (imm_filter, exact_smoother, ...) for time-varying transitions"
        )
    if not validation.any_traced(params.emission_covs):
        _check_emission_definite(params.emission_covs)
    dynamics_offsets, emission_offsets = _offsets_over_time(params, inputs)
    required = params._replace(
        emission_biases=None, dynamics_input_weights=None, emission_input_weights=None
    )
    return required, obs, dynamics_offsets, emission_offsets


def _check_definite(params: SwitchingParams) -> None:
    """The conditional mode sampler needs densities of x: PD Q_j and P0_j."""
    for field in ("dynamics_covs", "initial_covs"):
        covs = np.asarray(getattr(params, field), dtype=np.float64)
        eig = np.linalg.eigvalsh(covs)
        if np.any(eig <= 1e-12 * np.maximum(eig[..., -1:], 1e-300)):
            raise ValueError(
                f"params.{field}: mode_sampler='conditional' needs positive definite "
                "covariances (given the states, a singular Q_j fixes the modes, so s | x "
                "cannot mix); use mode_sampler='collapsed'"
            )


def _check_priors(priors, m: int, dtype) -> GibbsPriors:
    """``SwitchingPriors`` (or None), checked by ``attnbayes.models.switching.check_priors``, as
    ``GibbsPriors`` of arrays in ``dtype`` (shape and rate broadcast to (M,))."""
    checked = check_priors("priors", priors, m)

    def pair(value):
        if value is None:
            return jnp.ones((2, m), dtype)
        return jnp.stack([jnp.broadcast_to(jnp.asarray(v, dtype), (m,)) for v in value])

    alpha = checked.transition_concentration
    return GibbsPriors(
        jnp.ones((m, m), dtype) if alpha is None else jnp.asarray(alpha, dtype),
        pair(checked.dynamics_cov_scale),
        pair(checked.emission_cov_scale),
        jnp.asarray([f is not None for f in checked]),
    )


def _check_modes(name: str, modes, shape: tuple[int, ...], m: int):
    if validation.is_traced(modes):  # static checks only: the labels are unknown
        if not jnp.issubdtype(modes.dtype, jnp.integer):
            raise ValueError(f"{name}: expected integer mode labels, got dtype {modes.dtype}")
        if tuple(modes.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {tuple(modes.shape)}")
        return modes.astype(jnp.int32)
    arr = np.asarray(modes)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(f"{name}: expected integer mode labels, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(
        np.isfinite(arr) & (arr == np.round(arr))
    ):
        raise ValueError(f"{name}: expected integer mode labels")
    if arr.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {arr.shape}")
    if np.any(arr < 0) or np.any(arr >= m):
        raise ValueError(f"{name}: labels must be in 0..{m - 1}")
    return arr.astype(np.int32)


# ----------------------------------------------------------------------------- public kernel


def switching_gibbs_init(
    key: jax.Array,
    params: SwitchingParams,
    observations,
    *,
    modes=None,
    priors: SwitchingPriors | None = None,
    inputs=None,
) -> SwitchingGibbsState:
    """Initial state of one chain: x ~ p(x | s, y) at ``modes`` (default: s drawn from the
    Markov prior (pi0, Pi)), Pi = ``params.transition_matrix``, scales c = r = 1.

    Args:
        key: a ``jax.random`` key.
        params: ``SwitchingParams`` (PD ``emission_covs``).
        observations: (T, o); a NaN coordinate is missing (a NaN row: the whole step).
        modes: optional (T,) integer labels in 0..M-1.
        priors: optional ``attnbayes.models.switching.SwitchingPriors`` (for ``lp``).
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights.

    ``jit``- and ``vmap``-able over the key, ``params``, ``observations``, ``inputs`` and
    ``modes`` (only the static checks run on what is traced: call ``check_params`` on concrete
    values first); not differentiable (the state is a random draw).
    """
    validation.check_key("key", key)
    data = _check_data(params, observations, inputs)
    params, obs = data[:2]
    m = params.initial_probs.shape[0]
    prior = _check_priors(priors, m, obs.dtype)
    key_s, key_x = jax.random.split(key)
    if modes is None:
        s = prior_modes(key_s, params.initial_probs, params.transition_matrix, obs.shape[0])
    else:
        s = jnp.asarray(_check_modes("modes", modes, (obs.shape[0],), m))
    state = _initial_state(s, jax.tree.map(jnp.asarray, params))
    # the sweep that keeps the modes and theta: the same compiled function as the steps
    return _step_jit(key_x, state, data, prior, KEEP_MODES, False)


def switching_gibbs_step(
    key: jax.Array,
    state: SwitchingGibbsState,
    params: SwitchingParams,
    observations,
    *,
    priors: SwitchingPriors | None = None,
    mode_sampler: str = "collapsed",
    inputs=None,
) -> tuple[SwitchingGibbsState, SwitchingGibbsInfo]:
    """One Gibbs sweep (``gibbs_conditionals``): modes, then states x | s, theta, y, then (with
    ``priors``) theta | x, s, y; returns (state, info), as BlackJAX kernels do. Pure and
    jit-able; ``mode_sampler`` is static.

    ``params``, ``observations`` and ``inputs`` are validated on every call (as in
    ``run_switching_gibbs``); under ``jax.jit`` or ``jax.vmap`` only the static checks (shapes,
    dtypes) run on what is traced, so call ``attnbayes.models.switching.check_params`` on
    concrete parameters first. Not differentiable: the modes, states and parameters are
    random draws (the mode samplers draw discrete modes).

    Args:
        key: a ``jax.random`` key.
        state: ``SwitchingGibbsState`` (from ``switching_gibbs_init`` or a previous step).
        params, observations: as for ``run_switching_gibbs``.
        priors: optional ``attnbayes.models.switching.SwitchingPriors``; without it theta stays
            fixed.
        mode_sampler: "collapsed" (default) or "conditional" (needs PD Q_j).
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights.
    """
    mode_sampler = _check_mode_sampler(mode_sampler)
    if not isinstance(state, SwitchingGibbsState):
        raise ValueError(f"state: expected a SwitchingGibbsState, got {type(state).__name__}")
    validation.check_key("key", key)
    data = _check_data(params, observations, inputs)  # value checks when concrete
    params, observations = data[:2]
    if mode_sampler == "conditional" and not validation.any_traced(
        params.dynamics_covs, params.initial_covs
    ):
        _check_definite(params)
    m = np.shape(params.initial_probs)[0]
    t_max, d = np.shape(observations)[0], np.shape(params.initial_means)[1]
    if np.shape(state.modes) != (t_max,) or np.shape(state.states) != (t_max, d):
        raise ValueError(
            f"state: expected modes ({t_max},) and states ({t_max}, {d}), got "
            f"{np.shape(state.modes)} and {np.shape(state.states)}"
        )
    prior = _check_priors(priors, m, jnp.asarray(observations).dtype)
    new = _step_jit(key, state, data, prior, MODE_INDEX[mode_sampler], True)
    changes = jnp.sum(new.modes != jnp.asarray(state.modes)).astype(jnp.int32)
    return new, SwitchingGibbsInfo(changes)


# ----------------------------------------------------------------------------- public run


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _run_chains(key, init_modes, from_prior, data, priors, num_warmup, num_samples, mode_index):
    """All chains (vmapped) in one fori_loop: sweep 0 keeps the initial modes and draws
    x | s, y; sweeps 1..num_warmup + num_samples are Gibbs sweeps, the state after sweep i
    recorded into slot i - 1 - num_warmup once that is >= 0. The chains start at
    ``init_modes`` (C, T), or at draws from the Markov prior when ``from_prior``. Everything
    but the sizes is traced (the mode sampler too), so one compiled sampler serves every run
    of the same shapes (``data`` of ``_check_data``: the offsets, not the inputs). Returns the
    recorded ``SwitchingGibbsState`` with leading axes (chain, draw)."""
    model = prepare_model(*data)
    num_chains, num_steps = init_modes.shape
    key_loop, key_prior = jax.random.split(key)
    from_prior_modes = jax.vmap(prior_modes, (0, None, None, None))(
        jax.random.split(key_prior, num_chains),
        model.params.initial_probs,
        model.params.transition_matrix,
        num_steps,
    )
    init_modes = jnp.where(from_prior, from_prior_modes, init_modes)
    state = jax.vmap(_initial_state, (0, None))(init_modes, model.params)
    buffers = jax.tree.map(lambda a: jnp.zeros((num_samples, *a.shape), a.dtype), state)
    sweeps = jax.vmap(sweep, (0, 0, None, None, None, None))

    def body(i, carry):
        state, buffers = carry
        keys = jax.random.split(jax.random.fold_in(key_loop, i), num_chains)
        index = jnp.where(i == 0, KEEP_MODES, mode_index)
        state = sweeps(keys, state, model, priors, index, i > 0)
        slot = i - 1 - num_warmup
        keep = slot >= 0
        slot = jnp.maximum(slot, 0)
        buffers = jax.tree.map(
            lambda b, s: b.at[slot].set(jnp.where(keep, s, b[slot])), buffers, state
        )
        return state, buffers

    total = 1 + num_warmup + num_samples
    _, buffers = jax.lax.fori_loop(0, total, body, (state, buffers))
    return jax.tree.map(lambda b: jnp.moveaxis(b, 0, 1), buffers)


def run_switching_gibbs(
    key: jax.Array,
    params: SwitchingParams,
    observations,
    *,
    priors: SwitchingPriors | None = None,
    num_warmup: int = 500,
    num_samples: int = 1000,
    num_chains: int = 4,
    mode_sampler: str = "collapsed",
    init_modes=None,
    inputs=None,
) -> xr.DataTree:
    """Gibbs sampling of p(s, x, theta | y) for the switching state-space model, as a DataTree.

    Each sweep draws the modes (collapsed single-site by default, see ``gibbs_conditionals``
    for why), then x | s, theta, y by Kalman FFBS, then theta | x, s, y when ``priors`` are
    given. The chains are independent and start from different modes; they run vmapped in one
    ``fori_loop``, compiled once per (shapes, num_chains, num_samples) and reused: the mode
    sampler, the priors and ``num_warmup`` are traced.

    Args:
        key: a ``jax.random`` key.
        params: ``SwitchingParams`` (Q_j may be singular PSD for the collapsed sampler; R_j
            must be positive definite).
        observations: (T, o); a NaN coordinate is missing (the terms of y_t use its observed
            coordinates; a NaN row is a missing observation).
        priors: optional ``attnbayes.models.switching.SwitchingPriors``: Dirichlet rows of Pi and
            inverse-gamma scales c_j, r_j of Q_j = c_j params.dynamics_covs[j] and
            R_j = r_j params.emission_covs[j]; a field that is None stays fixed.
        num_warmup: sweeps discarded per chain; draw k is the state after num_warmup + k + 1
            sweeps (after the initial draw of the states at the initial modes).
        num_samples: draws kept per chain.
        num_chains: independent chains.
        mode_sampler: "collapsed" (default) or "conditional" (HMM FFBS of s | x; needs PD
            ``params.dynamics_covs`` and ``params.initial_covs``).
        init_modes: None or "prior" (each chain's modes drawn from the Markov prior), or
            integer labels of shape (T,) for every chain or (num_chains, T). The states start
            at a draw of x | s, y, theta at ``params``.
        inputs: (T, k) u_{1:T}, required when ``params`` has input weights (offsets
            b_j + B_j u_t of the step into x_t and d_j + D_j u_t of y_t).

    Returns:
        A DataTree with posterior ``states`` (chain, draw, time, state_dim) and ``modes``
        (chain, draw, time) int32, and for the parameters with a prior ``transition_matrix``
        (chain, draw, mode_from, mode_to), ``dynamics_cov_scale`` and ``emission_cov_scale``
        (chain, draw, mode); sample_stats ``lp`` = log p(x, s, y, theta) (on the constrained
        space; degenerate Gaussian densities on their support for singular Q_j, P0_j);
        observed_data ``observations`` (time, obs_dim). ``posterior.attrs``: sampling_time
        (wall seconds, compilation included on a shape's first call), sampler, mode_sampler,
        chain_method, num_warmup.

    Raises:
        ValueError: bad arguments, before any tracing.
        FloatingPointError: the draws of the states are not finite (explosive dynamics or
            extreme inputs), naming the first step; nothing is returned.
    """
    validation.check_key("key", key)
    data = _check_data(params, observations, inputs)
    params, obs = data[:2]
    m = params.initial_probs.shape[0]
    t_max = obs.shape[0]
    num_warmup = validation.check_positive_int("num_warmup", num_warmup, minimum=0)
    num_samples = validation.check_positive_int("num_samples", num_samples)
    num_chains = validation.check_positive_int("num_chains", num_chains)
    mode_sampler = _check_mode_sampler(mode_sampler)
    if mode_sampler == "conditional":
        _check_definite(params)
    prior = _check_priors(priors, m, obs.dtype)
    start = time.perf_counter()
    from_prior = init_modes is None or (isinstance(init_modes, str) and init_modes == "prior")
    if from_prior:
        modes0 = np.zeros((num_chains, t_max), np.int32)
    elif isinstance(init_modes, str):
        raise ValueError(f"init_modes: unknown {init_modes!r}; known: {list(INITS)} or labels")
    else:
        arr = np.asarray(init_modes)
        shape = (t_max,) if arr.ndim == 1 else (num_chains, t_max)
        arr = _check_modes("init_modes", arr, shape, m)
        modes0 = np.broadcast_to(arr, (num_chains, t_max))
    draws = _run_chains(
        key,
        modes0,
        np.asarray(from_prior),
        data,
        prior,
        jnp.asarray(num_warmup, jnp.int32),
        num_samples,
        jnp.asarray(MODE_INDEX[mode_sampler], jnp.int32),
    )
    jax.block_until_ready(draws)
    elapsed = time.perf_counter() - start

    posterior = {"states": np.asarray(draws.states), "modes": np.asarray(draws.modes)}
    bad_steps = ~np.isfinite(posterior["states"]).all(axis=(0, 1, 3))
    if bad_steps.any():
        raise FloatingPointError(
            f"run_switching_gibbs: non-finite state draws (NaN or inf) from step "
            f"{int(np.argmax(bad_steps)) + 1} of {t_max} ({int(bad_steps.sum())} step(s) "
            "affected); the dynamics may be explosive or the inputs extreme for the dtype: "
            "check params.dynamics_matrices, params.dynamics_covs, params.emission_covs and "
            "the scale of the observations (attnbayes.inference.switching.filters."
            "check_filter_result on a filter of the same series names the step where it "
            "overflows)"
        )
    names = ("transition_matrix", "dynamics_cov_scale", "emission_cov_scale")
    for name, sampled in zip(names, np.asarray(prior.sampled), strict=True):
        if sampled:
            posterior[name] = np.asarray(getattr(draws, name))
    import arviz as az

    return az.from_dict(
        {
            "posterior": posterior,
            "sample_stats": {"lp": np.asarray(draws.lp)},
            "observed_data": {"observations": np.asarray(obs)},
        },
        dims=switching_dims(priors) | {"modes": ["time"], "observations": ["time", "obs_dim"]},
        attrs={
            "posterior": {
                "sampling_time": elapsed,
                "sampler": "switching-gibbs",
                "mode_sampler": mode_sampler,
                "chain_method": "vectorized",
                "num_warmup": num_warmup,
            }
        },
    )


__all__ = [
    "INITS",
    "MODE_SAMPLERS",
    "SwitchingGibbsInfo",
    "SwitchingGibbsState",
    "run_switching_gibbs",
    "switching_gibbs_init",
    "switching_gibbs_step",
]
