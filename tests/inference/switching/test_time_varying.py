"""Time-varying transition matrices (T, M, M) in the switching filters and smoothers (issue 36).

Entry t of ``transition_matrix`` is the law of s_t given s_{t-1} (entry 0 unused). Checked
against: the constant matrix broadcast to (T, M, M) (today's numbers to 1e-12), brute-force
enumeration of every mode history with per-step transition probabilities
(``switching_bruteforce``), the exact filter on a model whose collapse is exact (F_j = 0: the
state forgets its past, an HMM with Gaussian emissions, where IMM, GPB1, GPB2 and Kim's smoother
are exact), a deterministic mode path (the RBPF and the simulator follow it), finite
differences for the gradient, and the bad inputs refused before tracing.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from raising import check_refused
from switching_bruteforce import enumerate_posterior, log_joint_density, random_switching_params

from attnbayes.inference.switching.filters import (
    exact_filter,
    gpb1_filter,
    gpb2_filter,
    imm_filter,
    one_step_log_predictive,
)
from attnbayes.inference.switching.gibbs import run_switching_gibbs, switching_gibbs_init
from attnbayes.inference.switching.particle import rbpf
from attnbayes.inference.switching.smoothers import (
    exact_smoother,
    exact_smoother_moments,
    kim_smoother_moments,
)
from attnbayes.models.switching import (
    SwitchingPriors,
    check_params,
    simulate,
    switching_log_joint,
    switching_model,
)

T, M = 6, 2
KEY = jax.random.key(3)


@functools.cache
def problem():
    """A random model (M = 2, d = 1, o = 1, k = 1 input), its series, and a time-varying
    transition matrix with Dirichlet(1) rows at every step."""
    rng = np.random.default_rng(36)
    params = random_switching_params(rng, M=M, d=1, o=1, num_inputs=1)
    inputs = rng.normal(size=(T, 1))
    _, _, y = simulate(KEY, params, T, inputs=inputs)
    trans = rng.dirichlet(np.ones(M), size=(T, M))
    return params, np.asarray(y), inputs, trans


def broadcast(params):
    return params._replace(transition_matrix=np.broadcast_to(params.transition_matrix, (T, M, M)))


def forgetful(params):
    """F_j = 0: x_t | s_t = j ~ N(b_j + B_j u_t, Q_j) whatever the past, so every collapse is
    exact (an HMM with Gaussian emissions)."""
    return params._replace(dynamics_matrices=np.zeros_like(params.dynamics_matrices))


FILTERS = {"imm": imm_filter, "gpb1": gpb1_filter, "gpb2": gpb2_filter, "exact": exact_filter}


def run_all(params, y, inputs):
    """Every filter and smoother's result on one problem (a dict of pytrees). The smoothers
    run through their ``_moments`` forms, whose mode probabilities and per-mode moments are
    those of ``kim_smoother`` and ``exact_smoother`` (the same backward pass and history prior,
    one compiled program fewer each)."""
    out = {name: f(params, y, inputs=inputs) for name, f in FILTERS.items()}
    out["predictive"] = one_step_log_predictive(params, y, inputs=inputs)
    out["kim_moments"] = kim_smoother_moments(params, y, out["imm"], inputs=inputs)
    out["exact_moments"] = exact_smoother_moments(params, y, inputs=inputs)
    out["rbpf"] = rbpf(KEY, params, y, 16, inputs=inputs)
    return out


def test_constant_matrix_broadcast_gives_the_same_numbers():
    params, y, inputs, _ = problem()
    constant, varying = run_all(params, y, inputs), run_all(broadcast(params), y, inputs)
    for name, result in constant.items():
        for a, b in zip(jax.tree.leaves(result), jax.tree.leaves(varying[name]), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12, err_msg=name)
    for p in (params, broadcast(params)):  # the simulator draws the same path
        draws = simulate(KEY, p, T, inputs=inputs)
        for a, b in zip(draws, simulate(KEY, params, T, inputs=inputs), strict=True):
            np.testing.assert_array_equal(a, b)
    x = np.asarray(simulate(KEY, params, T, inputs=inputs)[1])
    np.testing.assert_allclose(
        switching_log_joint(broadcast(params), x, y, inputs=inputs),
        switching_log_joint(params, x, y, inputs=inputs),
        rtol=1e-12,
    )


def test_exact_filter_and_smoother_equal_enumeration_with_time_varying_transitions():
    params, y, inputs, trans = problem()
    varying = params._replace(transition_matrix=trans)
    ref = enumerate_posterior(varying, y, inputs)
    filt = exact_filter(varying, y, inputs=inputs)
    smooth = exact_smoother_moments(varying, y, inputs=inputs)
    np.testing.assert_allclose(filt.log_likelihood, ref.log_likelihood, rtol=1e-10)
    np.testing.assert_allclose(filt.mode_probs, ref.filtered_mode_probs, atol=1e-10)
    np.testing.assert_allclose(filt.means, ref.filtered_means, atol=1e-8)
    np.testing.assert_allclose(smooth.log_likelihood, ref.log_likelihood, rtol=1e-10)
    np.testing.assert_allclose(smooth.mode_probs, ref.smoothed_mode_probs, atol=1e-10)
    np.testing.assert_allclose(smooth.means, ref.smoothed_means, atol=1e-8)
    # the pairs (s_{t-1}, s_t) of the E-step moments, summed over the enumerated histories
    w = np.exp(ref.log_joint - ref.log_likelihood)
    hist = ref.histories
    pair = np.zeros((T - 1, M, M))
    for t in range(1, T):
        np.add.at(pair[t - 1], (hist[:, t - 1], hist[:, t]), w)
    np.testing.assert_allclose(smooth.pair_probs, pair, atol=1e-10)
    # a different matrix at one step changes the answer: the steps are not mixed up
    assert (
        abs(float(filt.log_likelihood) - float(exact_filter(params, y, inputs=inputs)[-1])) > 1e-3
    )
    # the joint density of switching_model's factor
    x = np.asarray(simulate(KEY, varying, T, inputs=inputs)[1])
    np.testing.assert_allclose(
        switching_log_joint(varying, x, y, inputs=inputs),
        log_joint_density(varying, x, y, inputs),
        rtol=1e-10,
    )


def test_collapsing_filters_and_kim_are_exact_when_the_state_forgets():
    params, y, inputs, trans = problem()
    hmm = forgetful(params._replace(transition_matrix=trans))
    ref = enumerate_posterior(hmm, y, inputs)
    exact = exact_filter(hmm, y, inputs=inputs)
    np.testing.assert_allclose(exact.mode_probs, ref.filtered_mode_probs, atol=1e-10)
    for name in ("imm", "gpb1", "gpb2"):
        result = FILTERS[name](hmm, y, inputs=inputs)
        np.testing.assert_allclose(result.log_likelihood, exact.log_likelihood, rtol=1e-10)
        np.testing.assert_allclose(result.mode_probs, exact.mode_probs, atol=1e-10, err_msg=name)
        np.testing.assert_allclose(result.means, exact.means, atol=1e-8, err_msg=name)
    np.testing.assert_allclose(
        np.sum(one_step_log_predictive(hmm, y, inputs=inputs)), exact.log_likelihood, rtol=1e-10
    )
    kim = kim_smoother_moments(hmm, y, imm_filter(hmm, y, inputs=inputs), inputs=inputs)
    exact = exact_smoother_moments(hmm, y, inputs=inputs)
    np.testing.assert_allclose(kim.mode_probs, ref.smoothed_mode_probs, atol=1e-10)
    np.testing.assert_allclose(kim.means, exact.means, atol=1e-8)
    np.testing.assert_allclose(kim.pair_probs, exact.pair_probs, atol=1e-10)


def test_rbpf_and_simulate_follow_a_deterministic_time_varying_path():
    """pi0 and every P_t one-hot: s_{1:T} is the path below, so the RBPF is the Kalman filter
    along it (its log-likelihood the exact filter's, with every particle) and so is every
    draw of the simulator."""
    params, y, inputs, _ = problem()
    path = np.array([0, 0, 1, 1, 0, 1])
    trans = np.zeros((T, M, M))
    trans[:, :, :] = np.eye(M)[path][:, None, :]  # P_t[i, :] = e_{s_t} for every i
    known = params._replace(initial_probs=np.eye(M)[path[0]], transition_matrix=trans)
    result = rbpf(KEY, known, y, 16, inputs=inputs)
    np.testing.assert_allclose(
        result.log_likelihood, exact_filter(known, y, inputs=inputs).log_likelihood, rtol=1e-10
    )
    np.testing.assert_array_equal(result.mode_probs, np.eye(M)[path])
    for key in jax.random.split(KEY, 3):
        np.testing.assert_array_equal(simulate(key, known, T, inputs=inputs)[0], path)


def test_jit_vmap_and_grad_over_the_per_step_matrices():
    params, y, inputs, trans = problem()

    def log_lik(p):
        return imm_filter(params._replace(transition_matrix=p), y, inputs=inputs).log_likelihood

    batch = np.stack([trans, trans[::-1]])
    np.testing.assert_allclose(
        jax.jit(jax.vmap(log_lik))(batch), [log_lik(trans), log_lik(trans[::-1])], rtol=1e-12
    )
    grad = jax.jit(jax.grad(log_lik))(jnp.asarray(trans))
    assert grad.shape == (T, M, M) and np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[0], 0.0)  # entry 0 is not used
    # along a direction that keeps every row on the simplex (rows of the step sum to zero)
    rng = np.random.default_rng(0)
    direction = rng.normal(size=(T, M, M))
    direction -= direction.mean(axis=-1, keepdims=True)
    h = 1e-5
    fd = (log_lik(trans + h * direction) - log_lik(trans - h * direction)) / (2 * h)
    np.testing.assert_allclose(np.sum(grad * direction), fd, rtol=1e-6)


def _bad_matrices():
    _, _, _, trans = problem()
    negative = trans.copy()
    negative[3, 1] = [1.2, -0.2]
    off = trans.copy()
    off[4, 0, 0] += 0.1
    nan = trans.copy()
    nan[2, 1, 0] = np.nan
    return {
        "wrong-T": (trans[:-1], r"^params\.transition_matrix: has 5 steps .* T = 6"),
        "negative": (negative, r"^params\.transition_matrix: rows .*; step 3 row 1 has a negative"),
        "rows-off-one": (off, r"^params\.transition_matrix: rows .*; step 4 row 0 sums to 1\.1"),
        "nan": (nan, r"^params\.transition_matrix: "),
        "rank-4": (trans[None], r"^params\.transition_matrix: expected shape \(2, 2\) or \(T, 2"),
        "rank-1": (trans[0, 0], r"^params\.transition_matrix: expected shape"),
        "empty-T": (trans[:0], r"^params\.transition_matrix: expected shape \(T, 2, 2\)"),
        "wrong-M": (np.ones((T, M, 3)) / 3, r"^params\.transition_matrix: expected shape \(T, "),
    }


CALLS = {
    "imm": lambda p, y, u: imm_filter(p, y, inputs=u),
    "exact": lambda p, y, u: exact_filter(p, y, inputs=u),
    "predictive": lambda p, y, u: one_step_log_predictive(p, y, method="gpb2", inputs=u),
    "exact_smoother": lambda p, y, u: exact_smoother(p, y, inputs=u),
    "rbpf": lambda p, y, u: rbpf(KEY, p, y, 4, inputs=u),
    "simulate": lambda p, y, u: simulate(KEY, p, T, inputs=u),
    "log_joint": lambda p, y, u: switching_log_joint(p, np.zeros((T, 1)), y, inputs=u),
}


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize("case", list(_bad_matrices()))
def test_bad_time_varying_matrix_refused_before_tracing(case):
    params, y, inputs, _ = problem()
    matrix, pattern = _bad_matrices()[case]
    bad = params._replace(transition_matrix=matrix)
    for call in CALLS.values():
        check_refused(lambda call=call: call(bad, y, inputs), ValueError, pattern)
    if case != "wrong-T":
        check_refused(lambda: check_params("params", bad), ValueError, pattern)


@pytest.mark.usefixtures("full_tracebacks")
def test_time_varying_refused_where_one_matrix_is_drawn_or_kept():
    params, y, inputs, trans = problem()
    varying = params._replace(transition_matrix=trans)
    gibbs = r"^params\.transition_matrix: the Gibbs sampler takes a constant \(M, M\)"
    check_refused(lambda: switching_gibbs_init(KEY, varying, y, inputs=inputs), ValueError, gibbs)
    check_refused(lambda: run_switching_gibbs(KEY, varying, y, inputs=inputs), ValueError, gibbs)
    check_refused(
        lambda: switching_model(
            y,
            params=varying,
            priors=SwitchingPriors(transition_concentration=np.ones((M, M))),
            inputs=inputs,
        ),
        ValueError,
        r"^priors\.transition_concentration: a Dirichlet prior draws one constant",
    )
    check_refused(
        lambda: switching_model(None, params=varying, num_steps=T + 1, inputs=np.ones((7, 1))),
        ValueError,
        r"^params\.transition_matrix: has 6 steps .* T = 7",
    )
    # a traced matrix of the wrong length: the static check still refuses, while tracing
    with pytest.raises(ValueError, match=r"^params\.transition_matrix: has 5 steps"):
        jax.jit(lambda p: imm_filter(params._replace(transition_matrix=p), y, inputs=inputs))(
            trans[:-1]
        )
