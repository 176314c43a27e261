"""Filters of the switching state-space model against brute force; their bad input (refused
before tracing, naming the argument: ``switching_inputs``) and ``check_filter_result`` on
overflowed results."""

import jax
import numpy as np
import pytest
from raising import check_refused
from scipy.stats import multivariate_normal
from switching_inputs import (
    P1,
    P2,
    Y,
    bad_params,
    entry_point_cases,
    filtered,
    parametrize_cases,
)

from attnbayes.inference.attention import softmax_attention
from attnbayes.inference.switching.filters import (
    FilterResult,
    attention_as_imm_step,
    check_filter_result,
    exact_filter,
    filter_batch,
    gpb1_filter,
    gpb2_filter,
    imm_filter,
    kalman_filter,
    one_step_log_predictive,
)
from attnbayes.inference.switching.kalman import kalman_filter_unchecked
from attnbayes.inference.switching.particle import rbpf
from attnbayes.inference.switching.smoothers import (
    SmootherResult,
    exact_smoother,
    fixed_modes_smoother,
    kalman_smoother,
    kim_smoother,
)
from attnbayes.models.switching import (
    SwitchingParams,
    check_params,
    get_scenario,
    maneuvering_target,
    simulate,
)


def one_mode(params: SwitchingParams, mode: int) -> SwitchingParams:
    """The M = 1 model that always stays in ``mode``."""
    fields = {
        f: np.asarray(v)[mode : mode + 1] for f, v in params._asdict().items() if v is not None
    }
    fields["initial_probs"] = np.ones(1)
    fields["transition_matrix"] = np.ones((1, 1))
    return SwitchingParams(**fields)


def random_model(rng, d=3, o=2):
    a = rng.normal(size=(d, d))
    f = 0.9 * a / np.max(np.abs(np.linalg.eigvals(a)))
    g = rng.normal(size=(d, 1))
    h = rng.normal(size=(o, d))
    rr = rng.normal(size=(o, o))
    p0 = rng.normal(size=(d, d))
    return SwitchingParams(
        initial_probs=np.ones(1),
        transition_matrix=np.ones((1, 1)),
        initial_means=rng.normal(size=(1, d)),
        initial_covs=(p0 @ p0.T + 0.1 * np.eye(d))[None],
        dynamics_matrices=f[None],
        dynamics_biases=rng.normal(size=(1, d)),
        dynamics_covs=(g @ g.T)[None],  # rank 1: singular PSD process noise
        emission_matrices=h[None],
        emission_covs=(rr @ rr.T + 0.5 * np.eye(o))[None],
    )


def dense_filter(params: SwitchingParams, y, inputs=None):
    """Brute force: the joint Gaussian of (x_1..x_T, y_1..y_T), conditioned densely.

    Returns the filtered means (T, d) and covariances (T, d, d), and log p(y) over the observed
    entries (NaN entries dropped). With ``inputs`` (T, k): x_t's mean gains B u_t (t >= 2) and
    y_t's d + D u_t."""
    m0, p0 = params.initial_means[0], params.initial_covs[0]
    f, b, q = params.dynamics_matrices[0], params.dynamics_biases[0], params.dynamics_covs[0]
    h, r = params.emission_matrices[0], params.emission_covs[0]
    t_max, d = y.shape[0], m0.shape[0]
    o = h.shape[0]
    if inputs is None:
        u, big_b, big_d, off = np.zeros((t_max, 0)), np.zeros((d, 0)), np.zeros((o, 0)), 0.0
    else:
        u = np.asarray(inputs, float)
        big_b, big_d = params.dynamics_input_weights[0], params.emission_input_weights[0]
        off = params.emission_biases[0]
    means = [m0]
    for t in range(1, t_max):
        means.append(f @ means[-1] + b + big_b @ u[t])
    # cross covariances Cov(x_t, x_s) = F^(t-s) Cov(x_s, x_s) for t >= s
    var = [p0]
    for _ in range(1, t_max):
        var.append(f @ var[-1] @ f.T + q)
    sx = np.zeros((t_max * d, t_max * d))
    for s in range(t_max):
        block = var[s]
        for t in range(s, t_max):
            sx[t * d : (t + 1) * d, s * d : (s + 1) * d] = block
            sx[s * d : (s + 1) * d, t * d : (t + 1) * d] = block.T
            block = f @ block
    big_h = np.kron(np.eye(t_max), h)
    sy = big_h @ sx @ big_h.T + np.kron(np.eye(t_max), r)
    sxy = sx @ big_h.T
    mx = np.concatenate(means)
    my = big_h @ mx + np.concatenate([off + big_d @ u[t] for t in range(t_max)])
    observed = ~np.isnan(y)
    filt_means, filt_covs = [], []
    for t in range(t_max):
        rows = np.flatnonzero(observed[: t + 1].ravel())
        xs = slice(t * d, (t + 1) * d)
        if rows.size == 0:
            filt_means.append(mx[xs])
            filt_covs.append(sx[xs, xs])
            continue
        gain = sxy[xs][:, rows] @ np.linalg.inv(sy[np.ix_(rows, rows)])
        filt_means.append(mx[xs] + gain @ (y.ravel()[rows] - my[rows]))
        filt_covs.append(sx[xs, xs] - gain @ sxy[xs][:, rows].T)
    rows = np.flatnonzero(observed.ravel())
    log_lik = multivariate_normal(my[rows], sy[np.ix_(rows, rows)]).logpdf(y.ravel()[rows])
    return np.array(filt_means), np.array(filt_covs), log_lik


@pytest.mark.parametrize("missing", [False, True])
def test_kalman_filter_equals_dense_conditioning(missing):
    rng = np.random.default_rng(0)
    params = random_model(rng)
    y = rng.normal(size=(7, 2)) * 3.0
    if missing:
        y[2] = np.nan
        y[5, 1] = np.nan
    res = kalman_filter(params, y)
    means, covs, log_lik = dense_filter(params, y)
    np.testing.assert_allclose(res.mean, means, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(res.cov, covs, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(float(res.log_likelihood), log_lik, rtol=1e-11)
    np.testing.assert_allclose(res.mode_probs, 1.0)
    assert res.means.shape == (7, 1, 3) and res.covs.shape == (7, 1, 3, 3)


def test_kalman_filter_with_inputs_offsets_and_partly_missing_rows_equals_dense_conditioning():
    """Emission offset d, inputs through B (dynamics) and D (emissions), and rows with one of
    two coordinates missing: the one masked Kalman update against dense conditioning on the
    observed entries."""
    rng = np.random.default_rng(1)
    params = random_model(rng)._replace(
        emission_biases=rng.normal(size=(1, 2)),
        dynamics_input_weights=rng.normal(size=(1, 3, 2)),
        emission_input_weights=rng.normal(size=(1, 2, 2)),
    )
    u = rng.normal(size=(8, 2))
    y = rng.normal(size=(8, 2)) * 3.0
    y[1, 0] = np.nan
    y[3] = np.nan
    y[4, 1] = np.nan
    y[6, 0] = np.nan
    res = kalman_filter(params, y, inputs=u)
    means, covs, log_lik = dense_filter(params, y, u)
    np.testing.assert_allclose(res.mean, means, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(res.cov, covs, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(float(res.log_likelihood), log_lik, rtol=1e-11)


def test_kalman_filter_on_the_turning_mode_of_the_scenario():
    """The maneuvering target held in its coordinated-turn mode (singular rank-2 Q)."""
    params = one_mode(maneuvering_target(), 1)
    _, _, y = simulate(jax.random.key(4), params, 12)
    y = np.asarray(y)
    res = kalman_filter(params, y)
    means, covs, log_lik = dense_filter(params, y)
    np.testing.assert_allclose(res.mean, means, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(res.cov, covs, rtol=1e-8, atol=1e-6)
    np.testing.assert_allclose(float(res.log_likelihood), log_lik, rtol=1e-10)
    # Joseph form keeps every covariance symmetric positive semi-definite
    assert np.all(np.linalg.eigvalsh(np.asarray(res.cov)) > -1e-9)
    # batched over series with vmap
    batch = np.stack([y, y + 1.0])
    out = jax.vmap(lambda obs: kalman_filter_jit(params, obs))(batch)
    np.testing.assert_allclose(out.log_likelihood[0], res.log_likelihood, rtol=1e-12)


def kalman_filter_jit(params, obs):
    checked = check_params("params", params)
    return kalman_filter_unchecked(SwitchingParams(*(jax.numpy.asarray(a) for a in checked)), obs)


def test_kalman_filter_bad_input():
    params = one_mode(maneuvering_target(), 0)
    with pytest.raises(ValueError, match="^params: expected 1 mode"):
        kalman_filter(maneuvering_target(), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="^observations: expected shape"):
        kalman_filter(params, np.zeros((3, 3)))
    with pytest.raises(ValueError, match="^observations: contain"):
        kalman_filter(params, np.array([[0.0, np.inf]]))


# ----------------------------------------------------------------------------- switching filters

SWITCHING_FILTERS = {"gpb1": gpb1_filter, "gpb2": gpb2_filter, "imm": imm_filter}


@pytest.fixture(scope="module")
def scenario_series():
    """The maneuvering scenario: params and a T = 60 series (modes, states, y)."""
    params = maneuvering_target()
    modes, states, y = simulate(jax.random.key(2026), params, 60)
    return params, np.asarray(modes), np.asarray(states), np.asarray(y)


@pytest.mark.parametrize("name", [*SWITCHING_FILTERS, "exact"])
def test_one_mode_filters_equal_kalman(name):
    rng = np.random.default_rng(1)
    params = random_model(rng)
    y = rng.normal(size=(6, 2)) * 3.0
    y[3] = np.nan
    ref = kalman_filter(params, y)
    res = (SWITCHING_FILTERS.get(name) or exact_filter)(params, y)
    for field in FilterResult._fields:
        np.testing.assert_allclose(
            getattr(res, field), getattr(ref, field), rtol=1e-10, atol=1e-10, err_msg=field
        )


def filterpy_imm(params, y, x0, p0, mu0):
    """filterpy's IMMEstimator: starts from a prior (x0, P0, mu0) at time 0 and predicts first."""
    from filterpy.kalman import IMMEstimator, KalmanFilter

    kfs = []
    for j in range(len(mu0)):
        kf = KalmanFilter(dim_x=x0.shape[0], dim_z=y.shape[1])
        kf.F = np.asarray(params.dynamics_matrices[j])
        kf.Q = np.asarray(params.dynamics_covs[j])
        kf.H = np.asarray(params.emission_matrices[j])
        kf.R = np.asarray(params.emission_covs[j])
        kf.x = x0.copy()
        kf.P = p0.copy()
        kfs.append(kf)
    imm = IMMEstimator(kfs, mu0.copy(), np.asarray(params.transition_matrix))
    out = {"mean": [], "cov": [], "mode_probs": [], "means": [], "covs": [], "priors": []}
    for obs in y:
        imm.predict()
        out["priors"].append([(kf.x.copy(), kf.P.copy()) for kf in kfs])
        imm.update(obs)
        out["mean"].append(imm.x.copy())
        out["cov"].append(imm.P.copy())
        out["mode_probs"].append(imm.mu.copy())
        out["means"].append([kf.x.copy() for kf in kfs])
        out["covs"].append([kf.P.copy() for kf in kfs])
    return {k: np.asarray(v) if k != "priors" else v for k, v in out.items()}, imm


def filterpy_start(params, x0, p0, mu0):
    """Our initial distribution equal to filterpy's first predict from (x0, P0, mu0):
    pi0 = mu0 Pi, m0_j = F_j x0 + b_j, P0_j = F_j P0 F_j^T + Q_j."""
    f = np.asarray(params.dynamics_matrices)
    return params._replace(
        initial_probs=mu0 @ np.asarray(params.transition_matrix),
        initial_means=f @ x0 + np.asarray(params.dynamics_biases),
        initial_covs=f @ p0 @ np.swapaxes(f, 1, 2) + np.asarray(params.dynamics_covs),
    )


def test_imm_equals_filterpy(scenario_series):
    params, _, _, y = scenario_series
    x0, p0, mu0 = np.array([0.0, 10.0, 0.0, 0.0]), np.diag([100.0, 1.0, 100.0, 1.0]), np.ones(2) / 2
    ref, _ = filterpy_imm(params, y, x0, p0, mu0)
    res = imm_filter(filterpy_start(params, x0, p0, mu0), y)
    np.testing.assert_allclose(res.mode_probs, ref["mode_probs"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(res.mean, ref["mean"], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(res.cov, ref["cov"], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(res.means, ref["means"], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(res.covs, ref["covs"], rtol=1e-8, atol=1e-8)


def test_outlier_keeps_imm_finite_and_mode_probabilities_right(scenario_series):
    """A 300-sigma observation: filterpy's linear-domain likelihoods both underflow to the
    float minimum and its mode probabilities fall back to the prediction; ours stay exact."""
    from scipy.stats import multivariate_normal as mvn

    params, _, _, y = scenario_series
    t_out = 30
    y = y.copy()
    y[t_out] += 300.0 * 10.0
    x0, p0, mu0 = np.array([0.0, 10.0, 0.0, 0.0]), np.diag([100.0, 1.0, 100.0, 1.0]), np.ones(2) / 2
    ref, _ = filterpy_imm(params, y, x0, p0, mu0)
    start = filterpy_start(params, x0, p0, mu0)
    outs = {name: f(start, y) for name, f in SWITCHING_FILTERS.items()}
    outs["exact-free"] = None
    for name, res in outs.items():
        if res is None:
            continue
        for field in FilterResult._fields:
            assert np.all(np.isfinite(np.asarray(getattr(res, field)))), (name, field)
    res = outs["imm"]
    # the right mode probabilities at the outlier: from the (correct, pre-outlier) mixing and
    # prediction, pi_j ~ c_j N(y; H m_j^-, H P_j^- H^T + R), evaluated in the log domain
    prev = ref["mode_probs"][t_out - 1]
    c = prev @ np.asarray(params.transition_matrix)
    log_w = np.log(c) + np.array(
        [
            mvn(
                np.asarray(params.emission_matrices[j]) @ ref["priors"][t_out][j][0],
                np.asarray(params.emission_matrices[j])
                @ ref["priors"][t_out][j][1]
                @ np.asarray(params.emission_matrices[j]).T
                + np.asarray(params.emission_covs[j]),
            ).logpdf(y[t_out])
            for j in range(2)
        ]
    )
    right = np.exp(log_w - np.logaddexp.reduce(log_w))
    np.testing.assert_allclose(res.mode_probs[t_out], right, rtol=1e-8, atol=1e-12)
    assert right.max() > 0.999  # the wider (turning) mode explains the outlier
    # filterpy: both likelihoods pinned at the float minimum, so mu = c (the prediction)
    np.testing.assert_allclose(ref["mode_probs"][t_out], c, rtol=1e-12)
    assert np.abs(ref["mode_probs"][t_out] - right).max() > 0.1


@pytest.mark.slow  # statistical: eight series, the exact filter over 3^12 histories each
def test_filters_close_to_exact_on_short_series(capsys):
    """T = 12, eight series: GPB2 and IMM close to the exact filter, GPB1 farther; the table
    of averages is printed."""
    params = maneuvering_target()
    keys = jax.random.split(jax.random.key(12), 8)
    series = [tuple(np.asarray(a) for a in simulate(k, params, 12)) for k in keys]
    rows = {name: [] for name in SWITCHING_FILTERS}
    for _, states, y in series:
        exact = exact_filter(params, y)
        for name, f in SWITCHING_FILTERS.items():
            res = f(params, y)
            rows[name].append(
                (
                    np.sqrt(np.mean((np.asarray(res.mean) - np.asarray(exact.mean)) ** 2)),
                    np.max(np.abs(np.asarray(res.mode_probs - exact.mode_probs))),
                    float(res.log_likelihood - exact.log_likelihood),
                    np.sqrt(np.mean((np.asarray(res.mean) - states) ** 2)),
                    np.sqrt(np.mean((np.asarray(exact.mean) - states) ** 2)),
                )
            )
    table = {name: np.mean(np.array(r), axis=0) for name, r in rows.items()}
    worst = {name: np.max(np.abs(np.array(r)), axis=0) for name, r in rows.items()}
    with capsys.disabled():
        print("\nT = 12, maneuvering target, mean over 8 series: filter vs exact filter")
        header = ("filter", "rms(mean-exact)", "max|p-exact|", "dloglik", "rmse")
        print("{:7s} {:>15s} {:>12s} {:>8s} {:>6s}".format(*header))
        for name, (dm, dp, dl, rmse, _) in table.items():
            print(f"{name:7s} {dm:15.4f} {dp:12.4f} {dl:8.4f} {rmse:6.3f}")
        print(f"{'exact':7s} {0:15.4f} {0:12.4f} {0:8.4f} {table['imm'][4]:6.3f}")
    assert max(table["gpb2"][0], table["imm"][0]) < 0.25
    assert table["gpb1"][0] > 1.5 * max(table["gpb2"][0], table["imm"][0])
    assert max(table["gpb2"][1], table["imm"][1]) < 0.05
    # the approximate log-likelihoods stay within half a nat of log p(y_{1:12})
    assert all(w[2] < 0.5 for w in worst.values())


def test_filters_batch_with_vmap_and_float32(scenario_series):
    params, _, _, y = scenario_series
    batch = np.stack([y, y + 5.0, y[::-1]])
    for name, f in SWITCHING_FILTERS.items():
        out = jax.vmap(lambda obs, f=f: f(params, obs))(batch)
        for k in range(3):
            one = f(params, batch[k])
            np.testing.assert_allclose(out.mean[k], one.mean, rtol=1e-10, atol=1e-8, err_msg=name)
            np.testing.assert_allclose(out.log_likelihood[k], one.log_likelihood, rtol=1e-12)
    res32 = imm_filter(params, y.astype(np.float32))
    res64 = imm_filter(params, y)
    assert res32.mean.dtype == np.float32
    np.testing.assert_allclose(res32.mean, res64.mean, rtol=1e-3, atol=0.05)


def test_filter_batch_equals_the_filter_of_each_series(scenario_series):
    """Issue 39: three series (padded to four on pytest's two devices) with a missing row,
    GPB2, to 1e-12 against the single-series filter (IMM on 1, 2 and 4 devices:
    ``devices_filters.py``; IMM's overflow: ``test_batched_results_name_the_series``)."""
    params, _, _, y = scenario_series
    batch = np.stack([y, y + 5.0, y[::-1]])
    batch[1, 7] = np.nan
    got = check_filter_result(filter_batch(params, batch, method="gpb2"))
    assert got.log_likelihood.shape == (3,) and got.covs.shape == (3, 60, 2, 4, 4)
    for k in range(3):
        one = gpb2_filter(params, batch[k])
        for field, a, b in zip(FilterResult._fields, got, one, strict=True):
            np.testing.assert_allclose(a[k], b, rtol=1e-12, atol=1e-12, err_msg=field)


def test_exact_filter_refuses_long_series(scenario_series):
    params, _, _, y = scenario_series
    with pytest.raises(ValueError, match="^observations: the exact filter needs M\\^T = 2\\^60"):
        exact_filter(params, y)
    with pytest.raises(ValueError, match="^max_histories"):
        exact_filter(params, y[:3], max_histories=0)


def test_switching_filters_bad_input(scenario_series):
    params, _, _, y = scenario_series
    trans = np.asarray(params.transition_matrix).copy()
    trans[0] = [0.9, 0.2]
    for f in (*SWITCHING_FILTERS.values(), exact_filter):
        with pytest.raises(ValueError, match="^params.transition_matrix: rows"):
            f(params._replace(transition_matrix=trans), y[:4])
        with pytest.raises(ValueError, match="^observations: expected shape"):
            f(params, y[:4, :1])
    bad_r = np.asarray(params.emission_covs).copy()
    bad_r[1] = [[1.0, 2.0], [2.0, 1.0]]
    with pytest.raises(ValueError, match="^params.emission_covs: .*positive semi-definite"):
        imm_filter(params._replace(emission_covs=bad_r), y)
    with pytest.raises(ValueError, match="^params.initial_probs"):
        imm_filter(params._replace(initial_probs=np.array([1.2, -0.2])), y)


def test_attention_as_imm_step_equals_attention():
    rng = np.random.default_rng(3)
    hidden = rng.normal(size=(7, 5))
    w_query, w_key, w_value = (
        rng.normal(size=(5, 4)),
        rng.normal(size=(5, 4)),
        rng.normal(size=(5, 3)),
    )
    out = attention_as_imm_step(hidden, w_query, w_key, w_value)
    # seed 3 eq. 2 literally: A_ij = exp<H_i Wq, H_j Wk> / sum_i', H'_j = sum_i A_ij H_i Wv
    scores = (hidden @ w_query) @ (hidden @ w_key).T
    a = np.exp(scores - scores.max(axis=0))
    a /= a.sum(axis=0)
    np.testing.assert_allclose(out, a.T @ (hidden @ w_value), rtol=1e-12, atol=1e-12)
    # the library's attention sublayer: queries H Wk, keys H Wq, scale 1
    att = softmax_attention(hidden @ w_key, hidden @ w_query, hidden @ w_value, scale=1.0)
    np.testing.assert_allclose(out, att.output, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="^w_value: expected shape"):
        attention_as_imm_step(hidden, w_query, w_key, w_value.T)
    with pytest.raises(ValueError, match="^w_key: 3 columns"):
        attention_as_imm_step(hidden, w_query, w_key[:, :3], w_value)
    with pytest.raises(ValueError, match="^hidden"):
        attention_as_imm_step(np.full((2, 5), np.nan), w_query, w_key, w_value)


@pytest.mark.parametrize("singular_q", [False, True])
def test_exact_filter_equals_enumeration(singular_q):
    """The exact filter against the NumPy enumeration of every history (dense conditioning),
    with a missing row; its log-likelihood also equals the enumeration's log p(y)."""
    from switching_bruteforce import enumerate_posterior, random_switching_params

    rng = np.random.default_rng(5)
    params = random_switching_params(rng, M=2, d=3, o=2, singular_q=singular_q)
    y = rng.normal(size=(6, 2)) * 2.0
    y[2] = np.nan
    ref = enumerate_posterior(params, y)
    res = exact_filter(params, y)
    np.testing.assert_allclose(res.mode_probs, ref.filtered_mode_probs, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(res.means, ref.filtered_means, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(res.covs, ref.filtered_covs, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(res.mean, ref.filtered_mean, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(res.cov, ref.filtered_cov, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(float(res.log_likelihood), ref.log_likelihood, rtol=1e-11)


def test_exact_filter_log_likelihood_equals_the_model_density():
    """log p(y) of the exact filter = log p(x, y) of the NumPyro program (modes summed by its
    forward algorithm) - log p(x | y) (the enumeration), at any x."""
    from numpyro.infer.util import log_density
    from switching_bruteforce import log_posterior_density, random_switching_params

    from attnbayes.models.switching import switching_model

    rng = np.random.default_rng(8)
    params = random_switching_params(rng, M=2, d=2, o=1)
    y = rng.normal(size=(5, 1))
    x = rng.normal(size=(5, 2))
    log_joint, _ = log_density(switching_model, (y,), {"params": params}, {"states": x})
    res = exact_filter(params, y)
    np.testing.assert_allclose(
        float(res.log_likelihood),
        float(log_joint) - log_posterior_density(params, y, x),
        rtol=1e-10,
    )


# ----------------------------------------------------------------------------- bad input

BAD_INPUT = [
    *entry_point_cases("imm_filter", imm_filter, P2),
    *entry_point_cases("gpb1_filter", gpb1_filter, P2),
    *entry_point_cases("gpb2_filter", gpb2_filter, P2),
    *entry_point_cases("exact_filter", exact_filter, P2),
    *entry_point_cases("kalman_filter", kalman_filter, P1),
    *entry_point_cases("one_step_log_predictive", one_step_log_predictive, P2),
    # filter_batch: one series in a list is a batch of one (B, T, o)
    *entry_point_cases("filter_batch", lambda p, y: filter_batch(p, [y]), P2),
    (
        "kalman_filter-params-two-modes",
        lambda: kalman_filter(P2, Y),
        ValueError,
        "^params: expected 1",
    ),
    *(
        (
            f"exact_filter-max_histories-{h!r}",
            lambda h=h: exact_filter(P2, Y, max_histories=h),
            ValueError,
            "^max_histories: ",
        )
        for h in (0, -1, 2.5, True)
    ),
    # 2^20 histories > 2^16
    (
        "exact_filter-too-long",
        lambda: exact_filter(P2, np.zeros((20, 1))),
        ValueError,
        "^observations: ",
    ),
    *(
        (
            f"one_step_log_predictive-method-{method!r}",
            lambda m=method: one_step_log_predictive(P2, Y, method=m),
            ValueError,
            "^method: ",
        )
        for method in ("exact", None, 3, ["imm"])
    ),
]

# filter_batch's own arguments
_INPUTS = P2._replace(
    dynamics_input_weights=np.zeros((2, 2, 1)), emission_input_weights=np.ones((2, 1, 1))
)
_TWO_AXES = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("a", "b"))
BAD_INPUT += [
    (f"filter_batch-{label}", call, error, pattern)
    for label, (call, error, pattern) in {
        "one-series": (
            lambda: filter_batch(P2, Y),
            ValueError,
            r"^observations: expected shape \(B, T, 1\)",
        ),
        "no-series": (lambda: filter_batch(P2, np.zeros((0, 3, 1))), ValueError, "^observations: "),
        "no-steps": (lambda: filter_batch(P2, np.zeros((2, 0, 1))), ValueError, "^observations: "),
        "method": (lambda: filter_batch(P2, [Y], method="exact"), ValueError, "^method: "),
        "method-none": (lambda: filter_batch(P2, [Y], method=None), ValueError, "^method: "),
        "mesh-type": (lambda: filter_batch(P2, [Y], mesh="cpu"), TypeError, "^mesh: "),
        "mesh-axes": (lambda: filter_batch(P2, [Y], mesh=_TWO_AXES), ValueError, "^mesh: "),
        "inputs-missing": (
            lambda: filter_batch(_INPUTS, [Y]),
            ValueError,
            r"^inputs: .*\(1, 3, 1\)",
        ),
        "inputs-one-series": (
            lambda: filter_batch(_INPUTS, [Y], inputs=np.zeros((3, 1))),
            ValueError,
            r"^inputs: expected shape \(1, 3, 1\)",
        ),
        "inputs-nan": (
            lambda: filter_batch(_INPUTS, [Y], inputs=np.full((1, 3, 1), np.nan)),
            ValueError,
            "^inputs: ",
        ),
        "inputs-complex": (
            lambda: filter_batch(_INPUTS, [Y], inputs=np.zeros((1, 3, 1)) + 1j),
            ValueError,
            "^inputs: ",
        ),
        "transition-steps": (
            lambda: filter_batch(P2._replace(transition_matrix=np.full((4, 2, 2), 0.5)), [Y]),
            ValueError,
            r"^params\.transition_matrix: has 4 steps",
        ),
    }.items()
]

# attention_as_imm_step
_EYE = np.eye(2)
BAD_INPUT += [
    (
        f"attention_as_imm_step-hidden-{label}",
        lambda h=h: attention_as_imm_step(h, _EYE, _EYE, _EYE),
        ValueError,
        "^hidden: ",
    )
    for label, h in {
        "rank-1": np.ones(3),
        "rank-3": np.ones((2, 2, 2)),
        "empty": np.zeros((0, 2)),
        "complex": _EYE + 1j,
        "inf": np.array([[np.inf, 0.0], [0.0, 1.0]]),
        "nan": np.full((2, 2), np.nan),
        "none": None,
        "strings": [["a", "b"]],
    }.items()
]
BAD_INPUT += [
    (
        f"attention_as_imm_step-{label}",
        lambda w=weights: attention_as_imm_step(_EYE, *w),
        ValueError,
        pattern,
    )
    for label, (weights, pattern) in {
        "w_query-rows": ((np.ones((3, 2)), _EYE, _EYE), "^w_query: expected shape"),
        "w_query-complex": ((_EYE + 1j, _EYE, _EYE), "^w_query: expected real"),
        "w_query-inf": ((np.full((2, 2), np.inf), _EYE, _EYE), "^w_query: contains"),
        "w_key-rank": ((_EYE, np.ones(2), _EYE), "^w_key: expected shape"),
        "w_key-columns": ((_EYE, np.ones((2, 3)), _EYE), "^w_key: 3 columns"),
        "w_value-rows": ((_EYE, _EYE, np.ones((3, 2))), "^w_value: expected shape"),
        "w_value-nan": ((_EYE, _EYE, np.full((2, 2), np.nan)), "^w_value: contains"),
    }.items()
]

# check_filter_result's own arguments
_FILT = filtered(3, 2)
BAD_INPUT += [
    (
        "check_filter_result-result-tuple",
        lambda: check_filter_result(tuple(_FILT)),
        TypeError,
        "^result: expected a FilterResult or SmootherResult",
    ),
    (
        "check_filter_result-result-none",
        lambda: check_filter_result(None),
        TypeError,
        "^result: expected a FilterResult or SmootherResult",
    ),
    (
        "check_filter_result-name",
        lambda: check_filter_result(_FILT, name=3),
        TypeError,
        "^name: expected a string",
    ),
    (
        "check_filter_result-params",
        lambda: check_filter_result(_FILT, params=bad_params(P2)["transition-rows-sum"][0]),
        ValueError,
        r"^params\.transition_matrix: ",
    ),
    (
        "check_filter_result-params-modes",
        lambda: check_filter_result(_FILT, params=P1),
        ValueError,
        "^params: M = 1 modes and d = 2 do not match the result's M = 2, d = 2",
    ),
    (
        "check_filter_result-shapes",
        lambda: check_filter_result(_FILT._replace(means=np.zeros((4, 2, 2)))),
        ValueError,
        r"^result\.means: ",
    ),
    (
        "check_filter_result-strings",
        lambda: check_filter_result(_FILT._replace(mean=[["a", "b"]] * 3)),
        ValueError,
        r"^result\.mean: expected numbers",
    ),
]


@pytest.mark.usefixtures("full_tracebacks")
@parametrize_cases(BAD_INPUT)
def test_bad_input_raises_before_jax(call, error, pattern):
    """Every case refused before tracing (``switching_inputs``), naming the argument."""
    check_refused(call, error, pattern)


def test_a_partly_missing_row_updates_on_its_observed_coordinate():
    """A NaN coordinate is missing and the other coordinate is used: the step differs from a
    wholly missing (predict-only) row, adds one density term to the log-likelihood, and
    differs from the row observed in full with any value in place of the NaN."""
    params = get_scenario("maneuvering-target")
    y = 10.0 * np.random.default_rng(2).normal(size=(6, 2))
    partly, whole = y.copy(), y.copy()
    partly[3, 1] = np.nan
    whole[3] = np.nan
    for f in (imm_filter, lambda p, o: kalman_smoother(p, o)):
        p = params if f is imm_filter else one_mode(params, 0)
        a, b = f(p, partly), f(p, whole)
        assert not np.allclose(a.mean[3], b.mean[3])
        assert float(a.log_likelihood) < float(b.log_likelihood)  # one more density term
        for stand_in in (0.0, 1e3):
            other = partly.copy()
            other[3, 1] = stand_in
            c = f(p, other)
            assert not np.allclose(c.mean[3], a.mean[3])


# ----------------------------------------------------------------------------- overflow

# Finding 8 of issue 12: on valid but explosive dynamics the filters overflow and, running
# compiled, cannot raise; ``check_filter_result`` raises ``FloatingPointError`` naming the first
# non-finite step. The step is computed independently (a NumPy recursion of the variance that the
# observations do not reach) and checked for every filter, the smoothers and the RBPF. A model that
# is explosive along observed directions stays finite, which is why there is no refusing input
# check on the spectral radius.


def explosive(rate: float, num_modes: int = 2, *, observed: bool = False, p0: float = 4.0):
    """d = 2, o = 1: coordinate 0 grows by ``rate`` per step in every mode, coordinate 1 is
    stable (0.5, -0.5 by mode); the observation sees coordinate 1 (or 0 when ``observed``).

    Everything is diagonal, so the variance of coordinate 0 does not depend on the data when it
    is not observed: v_1 = p0, v_t = rate^2 v_{t-1} + 1 (the law of ``first_overflow_step``).
    """
    m = num_modes
    h = np.array([[1.0, 0.0]]) if observed else np.array([[0.0, 1.0]])
    return SwitchingParams(
        initial_probs=np.full(m, 1.0 / m),
        transition_matrix=np.full((m, m), 1.0 / m),
        initial_means=np.tile([1.0, 0.0], (m, 1)),
        initial_covs=np.tile(np.diag([p0, 1.0]), (m, 1, 1)),
        dynamics_matrices=np.stack([np.diag([rate, 0.5 * (-1) ** j]) for j in range(m)]),
        dynamics_biases=np.zeros((m, 2)),
        dynamics_covs=np.tile(np.diag([1.0, 0.1]), (m, 1, 1)),
        emission_matrices=np.tile(h, (m, 1, 1)),
        emission_covs=np.tile(np.eye(1), (m, 1, 1)),
    )


def first_overflow_step(rate: float, p0: float = 4.0, dtype=np.float64) -> int:
    """The 1-based step at which v_1 = p0, v_t = rate^2 v_{t-1} + 1 leaves ``dtype``'s range,
    by a NumPy loop (independent of the library). The chosen p0 keeps the last finite variance
    below half the largest number, so no rounding in the library's order of operations (it
    symmetrises, P = (P + P^T) / 2) can move the step."""
    rate, v, one = dtype(rate), dtype(p0), dtype(1.0)
    big = np.finfo(dtype).max
    with np.errstate(over="ignore"):
        for t in range(1, 100_000):
            nxt = rate * (rate * v) + one
            if not np.isfinite(nxt):
                assert v < big / 2  # the margin the docstring promises
                return t + 1
            v = nxt
    raise AssertionError("no overflow")


RNG = np.random.default_rng(8)
Y400 = RNG.normal(size=(400, 1))
STEP_10 = first_overflow_step(10.0)  # 155: 4 * 100^154 > 1.8e308
STEP_1E15 = first_overflow_step(1e15)  # 12: 4 * 1e30^11 > 1.8e308


def test_the_independent_overflow_steps():
    assert STEP_10 == 155 and STEP_1E15 == 12
    assert first_overflow_step(10.0, dtype=np.float32) == 20  # 4 * 100^19 > 3.4e38
    # the growth-rate estimate: log(max / p0) / (2 log rate) steps after step 1
    assert STEP_10 == 1 + int(np.ceil(np.log(np.finfo(np.float64).max / 4.0) / (2 * np.log(10))))


FILTERS_10 = {
    "imm": lambda p, y: imm_filter(p, y),
    "gpb1": lambda p, y: gpb1_filter(p, y),
    "gpb2": lambda p, y: gpb2_filter(p, y),
    "rbpf": lambda p, y: rbpf(jax.random.key(1), p, y, 8),
}


@pytest.fixture(scope="module")
def overflowed():
    """(explosive, stable, short): each filter on the explosive model (rate 10, T = 400), each
    on the same series with rate 0.9 (same shapes, so nothing recompiles), and IMM on the
    explosive model one step short of the overflow."""
    runs, stable = {}, {}
    for rate, out in ((10.0, runs), (0.9, stable)):
        params, one = explosive(rate), explosive(rate, 1)
        out |= {name: (f(params, Y400), params) for name, f in FILTERS_10.items()}
        out["kalman"] = (kalman_filter(one, Y400), one)
        out["exact-m1"] = (exact_filter(one, Y400), one)  # M^T = 1 history
    short = imm_filter(explosive(10.0), Y400[: STEP_10 - 1])
    return runs, stable, short


@pytest.mark.parametrize("name", [*FILTERS_10, "kalman", "exact-m1"])
def test_check_filter_result_names_the_first_overflowed_step(overflowed, name):
    result, params = overflowed[0][name]
    with pytest.raises(FloatingPointError) as excinfo:
        check_filter_result(result)
    message = str(excinfo.value)
    assert message.startswith(
        f"filter: non-finite values (NaN or inf) from step {STEP_10} of 400 "
        f"({400 - STEP_10 + 1} step(s) affected), first in "
    )
    assert "covs" in message.split("first in ")[1].split(";")[0]
    assert "check params.dynamics_matrices, params.dynamics_covs, params.emission_covs" in message
    assert "\n" not in message
    # with params: the spectral radius and the unobserved direction
    with pytest.raises(FloatingPointError) as excinfo:
        check_filter_result(result, name=name, params=params)
    message = str(excinfo.value)
    assert message.startswith(f"{name}: non-finite values (NaN or inf) from step {STEP_10} ")
    modes = (
        "dynamics_matrices[0], [1] are"
        if params.initial_probs.shape[0] == 2
        else ("dynamics_matrices[0] is")
    )
    assert f"{modes} 10 > 1 (along a direction the emission matrix does not observe" in message


@pytest.mark.parametrize("name", [*FILTERS_10, "kalman", "exact-m1"])
def test_a_finite_result_passes_silently(overflowed, name):
    result, params = overflowed[1][name]
    assert check_filter_result(result) is result
    assert check_filter_result(result, name=name, params=params) is result


def test_one_step_short_of_the_overflow_passes(overflowed):
    short = overflowed[2]
    assert short.mean.shape == (STEP_10 - 1, 2)
    assert check_filter_result(short, params=explosive(10.0)) is short


def test_exact_filter_and_smoothers_on_explosive_dynamics():
    params = explosive(1e15)
    y = Y400[:STEP_1E15]  # 2^12 histories; the overflow comes at the last step
    filtered = exact_filter(params, y)
    with pytest.raises(FloatingPointError, match=rf"^filter: .* from step {STEP_1E15} of 12 "):
        check_filter_result(filtered, params=params)
    # a smoother carries the overflow back to step 1 and says where to look
    one = explosive(10.0, 1)
    smoothers = {
        "exact_smoother": (exact_smoother(params, y), params),
        "kalman_smoother": (kalman_smoother(one, Y400), one),
        "fixed_modes_smoother": (fixed_modes_smoother(params, y, np.zeros(12, int)), params),
    }
    for name, (result, p) in smoothers.items():
        assert isinstance(result, SmootherResult)
        t = result.mode_probs.shape[0]
        with pytest.raises(FloatingPointError) as excinfo:
            check_filter_result(result, params=p)
        message = str(excinfo.value)
        assert message.startswith(f"smoother: non-finite values (NaN or inf) from step 1 of {t}")
        assert "run check_filter_result on the filter of the same series" in message, name


def test_kim_smoother_refuses_an_overflowed_filter_and_its_result_is_checked(overflowed):
    result, params = overflowed[0]["imm"]
    with pytest.raises(
        ValueError, match=rf"^filtered\.means: contains .* the first at step {STEP_10}; "
    ):
        kim_smoother(params, Y400, result)
    # on a finite filter Kim's smoother is finite and passes; a non-finite one is named
    short = overflowed[2]
    smooth = kim_smoother(params, Y400[: STEP_10 - 1], short)
    assert check_filter_result(smooth) is smooth
    broken = smooth._replace(
        mean=np.where(np.arange(STEP_10 - 1)[:, None] == 9, np.inf, smooth.mean)
    )
    with pytest.raises(
        FloatingPointError,
        match=r"^Kim's smoother: non-finite values .* from step 10 of 154 "
        r"\(1 step\(s\) affected\), first in mean; ",
    ):
        check_filter_result(broken, name="Kim's smoother")


def test_float32_overflows_earlier_and_is_named():
    params = explosive(10.0)
    result = imm_filter(params, Y400[:40].astype(np.float32))
    assert result.mean.dtype == np.float32
    step = first_overflow_step(10.0, dtype=np.float32)
    with pytest.raises(FloatingPointError, match=rf"^filter: .* from step {step} of 40 "):
        check_filter_result(result)


def test_explosive_but_observed_dynamics_stay_finite_and_pass():
    """Spectral radius 10 over 400 steps (10^400 is far past any dtype) along a direction that
    is observed at every step: the filter stays finite. A check refusing radius^T > sqrt(max)
    would refuse this valid model, so none is offered; runs of missing rows do overflow, and the
    message then says so."""
    params = explosive(10.0, observed=True)
    result = imm_filter(params, Y400)
    assert check_filter_result(result, params=params) is result
    missing = Y400.copy()
    missing[100:] = np.nan  # from step 101 on, predict only: the variance grows like 10^(2t)
    with pytest.raises(FloatingPointError) as excinfo:
        check_filter_result(imm_filter(params, missing), params=params)
    message = str(excinfo.value)
    assert message.startswith("filter: non-finite values (NaN or inf) from step ")
    assert (
        "dynamics_matrices[0], [1] are 10 > 1 (the emission matrix observes it, but a run of "
        "missing rows lets the variance grow like 10^(2t))"
    ) in message


def test_a_non_finite_log_likelihood_alone_is_named():
    """An observation 1e160 from the predicted mean: its squared residual overflows, the
    moments stay finite; no dynamics matrix is explosive, so the message points at the data."""
    y = np.array([[0.1], [1e160], [-0.3]])
    result = imm_filter(P2, y)
    assert np.all(np.isfinite(result.mean)) and not np.isfinite(result.log_likelihood)
    with pytest.raises(FloatingPointError) as excinfo:
        check_filter_result(result, params=P2)
    message = str(excinfo.value)
    assert message.startswith("filter: log_likelihood is nan although every step is finite")
    assert "no dynamics matrix has spectral radius > 1" in message


def test_batched_results_name_the_series():
    """A vmapped result: the earliest bad step over the batch and its series."""
    params = explosive(10.0, observed=True)
    missing = np.full((200, 1), np.nan)
    batch = jax.vmap(lambda obs: imm_filter(params, obs))(np.stack([Y400[:200], missing]))
    with pytest.raises(FloatingPointError) as excinfo:
        check_filter_result(batch)
    message = str(excinfo.value)
    assert f"from step {STEP_10} of 200 " in message
    assert "of series 1 (1 of 2 series affected)" in message
    # filter_batch's result, split over pytest's two devices: the same message
    batch = filter_batch(params, np.stack([Y400[:200], missing]))
    with pytest.raises(FloatingPointError, match="^filter: ") as again:
        check_filter_result(batch)
    assert str(again.value) == message


def test_check_filter_result_refuses_traced_results():
    def inside(y):
        return check_filter_result(imm_filter(P2, y)).mean

    with pytest.raises(TypeError, match="^result: holds traced arrays"):
        jax.jit(inside)(Y)
