"""Smoothers of the switching state-space model against brute force.

kalman_smoother against dense Gaussian conditioning of the joint, exact_smoother against the
NumPy enumeration of ``switching_bruteforce``, kim_smoother (Kim 1994) fed exact filtered
moments: equal to RTS when M = 1, exact mode probabilities in the HMM limit, and close to the
exact smoother on the maneuvering target. Their bad input is refused before tracing, naming
the argument (``switching_inputs``).
"""

import jax
import numpy as np
import pytest
from raising import check_refused
from scipy.special import logsumexp
from switching_bruteforce import enumerate_posterior, random_switching_params
from switching_inputs import (
    P1,
    P2,
    Y,
    entry_point_cases,
    filtered,
    parametrize_cases,
)

from attnbayes.inference.switching.kalman import FilterResult, kalman_filter
from attnbayes.inference.switching.smoothers import (
    SmootherResult,
    exact_smoother,
    fixed_modes_smoother,
    kalman_smoother,
    kim_smoother,
)
from attnbayes.models.switching import SwitchingParams, maneuvering_target, simulate

FIELDS = ("mode_probs", "means", "covs", "mean", "cov")


def exact_filter_numpy(params: SwitchingParams, y) -> FilterResult:
    """Exact filtering by branching every component into M at each step (M^t Gaussians at t,
    log-domain weights p(s_{1:t}, y_{1:t})), with per-mode and overall moment matching."""
    pi0, trans, m0, p0, f, b, q, h, r = (np.asarray(a, dtype=float) for a in params[:9])
    num_modes = pi0.shape[0]
    y = np.asarray(y, dtype=float)
    out = {k: [] for k in FIELDS}
    with np.errstate(divide="ignore"):
        log_pi0, log_trans = np.log(pi0), np.log(trans)
    for t in range(y.shape[0]):
        if t == 0:
            log_w, modes, means, covs = log_pi0, np.arange(num_modes), m0.copy(), p0.copy()
        else:
            log_w = (log_w[:, None] + log_trans[modes]).ravel()
            new = np.tile(np.arange(num_modes), modes.shape[0])
            fm = f[new]
            means = np.einsum("kij,kj->ki", fm, np.repeat(means, num_modes, 0)) + b[new]
            covs = fm @ np.repeat(covs, num_modes, 0) @ np.swapaxes(fm, 1, 2) + q[new]
            modes = new
        if not np.isnan(y[t]).any():
            hm, rm = h[modes], r[modes]
            s = hm @ covs @ np.swapaxes(hm, 1, 2) + rm
            resid = y[t] - np.einsum("kij,kj->ki", hm, means)
            gain = np.swapaxes(np.linalg.solve(s, hm @ covs), 1, 2)
            _, logdet = np.linalg.slogdet(s)
            maha = np.einsum("ki,ki->k", resid, np.linalg.solve(s, resid[..., None])[..., 0])
            log_w = log_w - 0.5 * (maha + logdet + resid.shape[1] * np.log(2 * np.pi))
            means = means + np.einsum("kij,kj->ki", gain, resid)
            covs = covs - gain @ s @ np.swapaxes(gain, 1, 2)
        w = np.exp(log_w - logsumexp(log_w))
        probs = np.array([w[modes == j].sum() for j in range(num_modes)])
        mode_means, mode_covs = [], []
        for j in range(num_modes):
            wj = w[modes == j] / probs[j]
            mj = wj @ means[modes == j]
            dev = means[modes == j] - mj
            mode_means.append(mj)
            mode_covs.append(
                np.einsum("k,kij->ij", wj, covs[modes == j] + dev[:, :, None] * dev[:, None])
            )
        mean = w @ means
        dev = means - mean
        out["mode_probs"].append(probs)
        out["means"].append(np.array(mode_means))
        out["covs"].append(np.array(mode_covs))
        out["mean"].append(mean)
        out["cov"].append(np.einsum("k,kij->ij", w, covs + dev[:, :, None] * dev[:, None]))
    return FilterResult(**{k: np.array(v) for k, v in out.items()}, log_likelihood=logsumexp(log_w))


def smoothed(bf) -> dict:
    """The smoothed fields of a BruteForcePosterior under SmootherResult's names."""
    return {k: getattr(bf, "smoothed_" + k) for k in FIELDS}


def assert_result_close(res, expected: dict, rtol, atol):
    for k, v in expected.items():
        np.testing.assert_allclose(getattr(res, k), v, rtol=rtol, atol=atol, err_msg=k)


def assert_psd(covs, tol=1e-9):
    covs = np.asarray(covs)
    np.testing.assert_allclose(covs, np.swapaxes(covs, -1, -2), rtol=0, atol=1e-12)
    eig = np.linalg.eigvalsh(covs)
    assert np.all(eig > -tol * max(1.0, np.abs(eig).max()))


# ----------------------------------------------------------------------------- M = 1


def one_mode_model(case: str) -> tuple[SwitchingParams, np.ndarray]:
    """d = 3, o = 2, T = 7 random one-mode models: rank-2 Q; NaN rows; P0 = 0 (a degenerate
    start, so the predicted covariance P_2|1 = Q is singular and the RTS gain needs the
    pseudo-inverse)."""
    rng = np.random.default_rng(11)
    params = random_switching_params(rng, M=1, d=3, o=2, singular_q=True)
    y = 3.0 * rng.normal(size=(7, 2))
    if case == "missing":
        y[2] = np.nan
        y[5, 1] = np.nan
        y[6] = np.nan  # the last step too: smoothed = filtered = predicted there
    if case == "degenerate-start":
        params = params._replace(initial_covs=np.zeros_like(params.initial_covs))
    return params, y


@pytest.mark.parametrize("case", ["singular-q", "missing", "degenerate-start"])
def test_kalman_smoother_equals_dense_conditioning(case):
    params, y = one_mode_model(case)
    bf = enumerate_posterior(params, y)  # M = 1: one history, the dense joint conditioned
    res = kalman_smoother(params, y)
    assert isinstance(res, SmootherResult)
    assert res.means.shape == (7, 1, 3) and res.covs.shape == (7, 1, 3, 3)
    assert_result_close(res, smoothed(bf), rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(float(res.log_likelihood), bf.log_likelihood, rtol=1e-11)
    assert_psd(res.cov)
    # Kim's smoother with one mode is the RTS smoother
    kim = kim_smoother(params, y, kalman_filter(params, y))
    assert_result_close(kim, {k: getattr(res, k) for k in FIELDS}, rtol=1e-10, atol=1e-12)


def test_smoothers_vmap_over_a_batch_of_series():
    params, y = one_mode_model("singular-q")
    batch = np.stack([y, y + 1.0])

    kim = jax.vmap(lambda obs: kim_smoother(params, obs, kalman_filter(params, obs)))(batch)
    for i in range(2):
        one = kalman_smoother(params, batch[i])
        for k in FIELDS:
            np.testing.assert_allclose(
                getattr(kim, k)[i], getattr(one, k), rtol=1e-10, atol=1e-12, err_msg=k
            )


# ----------------------------------------------------------------------------- exact


@pytest.fixture(scope="module")
def three_mode_problem():
    """M = 3, d = 2, o = 1, T = 5, rank-1 Q, a missing row, and its brute-force posterior."""
    rng = np.random.default_rng(3)
    params = random_switching_params(rng, M=3, d=2, o=1, singular_q=True)
    y = 2.0 * rng.normal(size=(5, 1))
    y[2] = np.nan
    return params, y, enumerate_posterior(params, y)


def test_exact_smoother_equals_enumeration(three_mode_problem):
    params, y, bf = three_mode_problem
    res = exact_smoother(params, y)
    assert_result_close(res, smoothed(bf), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(float(res.log_likelihood), bf.log_likelihood, rtol=1e-11)
    np.testing.assert_allclose(np.sum(res.mode_probs, axis=1), 1.0, rtol=1e-12)
    assert_psd(res.covs)
    # the test's branching exact filter agrees with the dense enumeration
    filt = exact_filter_numpy(params, y)
    for k in FIELDS:
        np.testing.assert_allclose(
            getattr(filt, k), getattr(bf, "filtered_" + k), rtol=1e-8, atol=1e-10, err_msg=k
        )
    np.testing.assert_allclose(filt.log_likelihood, bf.log_likelihood, rtol=1e-11)


# ----------------------------------------------------------------------------- Kim vs exact


@pytest.fixture(scope="module")
def maneuver():
    """T = 12 steps of the maneuvering target (a turn starting at step 8) and the exact
    filter and smoother."""
    params = maneuvering_target()
    modes, _, y = simulate(jax.random.key(3), params, 12)
    y = np.asarray(y)
    return params, np.asarray(modes), y, exact_filter_numpy(params, y), exact_smoother(params, y)


def rms(a):
    return np.sqrt(np.mean(np.square(np.asarray(a)), axis=0))


def test_kim_smoother_close_to_exact_on_the_maneuvering_target(maneuver):
    params, modes, y, filt, exact = maneuver
    assert 0 < modes.sum() < len(modes)  # both modes visited
    kim = kim_smoother(params, y, filt)
    kim_dev, filt_dev = rms(kim.mean - exact.mean), rms(filt.mean - exact.mean)
    print("\nRMS deviation from the exact smoothed mean, T = 12 (px, vx, py, vy):")
    print("  Kim smoother (exact filtered input): ", np.round(kim_dev, 4))
    print("  exact filter:                        ", np.round(filt_dev, 4))
    prob_dev = np.abs(np.asarray(kim.mode_probs) - np.asarray(exact.mode_probs)).max()
    print(f"  max |P_kim(s_t) - P_exact(s_t)| = {prob_dev:.4f}")
    # positions: measurement sigma 10; the Kim approximation is much closer than the filter
    assert np.all(kim_dev < 0.7 * filt_dev)
    assert np.sqrt(np.mean(kim_dev[[0, 2]] ** 2)) < 0.35 * np.sqrt(np.mean(filt_dev[[0, 2]] ** 2))
    assert kim_dev[0] < 1.5 and kim_dev[2] < 1.5  # vs sigma = 10
    assert prob_dev < 0.15
    np.testing.assert_allclose(kim.mean[-1], exact.mean[-1], rtol=1e-9)  # t = T: filtered
    assert_psd(kim.covs)
    assert_psd(exact.cov)
    np.testing.assert_allclose(float(exact.log_likelihood), filt.log_likelihood, rtol=1e-11)


def kim_backward_numpy(params: SwitchingParams, filt: FilterResult) -> dict:
    """Kim's (1994) backward pass written out with loops (Murphy 1998, "Switching Kalman
    filters"): for each pair (j, k), the RTS step of the mode-k smoothed moment at t + 1 through
    the mode-j filtered moment at t under the dynamics of mode k; joint weights
    P(s_t = j | s_{t+1} = k, y_{1:t}) P(s_{t+1} = k | y_{1:T}); collapse over k into mode j."""
    _, trans, _, _, f, b, q, _, _ = (np.asarray(a, dtype=float) for a in params[:9])
    probs, f_means, f_covs = (np.asarray(a, dtype=float) for a in filt[:3])
    t_max, m, _ = f_means.shape
    sp, sm, sc = probs.copy(), f_means.copy(), f_covs.copy()
    for t in range(t_max - 2, -1, -1):
        pred = probs[t] @ trans  # P(s_{t+1} = k | y_{1:t})
        joint = probs[t][:, None] * trans / pred[None, :] * sp[t + 1][None, :]
        sp[t] = joint.sum(axis=1)
        for j in range(m):
            pair_means, pair_covs = [], []
            for k in range(m):
                pred_mean = f[k] @ f_means[t, j] + b[k]
                pred_cov = f[k] @ f_covs[t, j] @ f[k].T + q[k]
                gain = f_covs[t, j] @ f[k].T @ np.linalg.inv(pred_cov)
                pair_means.append(f_means[t, j] + gain @ (sm[t + 1, k] - pred_mean))
                pair_covs.append(f_covs[t, j] + gain @ (sc[t + 1, k] - pred_cov) @ gain.T)
            w = joint[j] / sp[t, j]
            sm[t, j] = w @ np.array(pair_means)
            dev = np.array(pair_means) - sm[t, j]
            sc[t, j] = np.einsum(
                "k,kij->ij", w, np.array(pair_covs) + dev[:, :, None] * dev[:, None]
            )
    mean = np.einsum("tj,tjd->td", sp, sm)
    dev = sm - mean[:, None]
    cov = np.einsum("tj,tjde->tde", sp, sc + dev[..., :, None] * dev[..., None, :])
    return {"mode_probs": sp, "means": sm, "covs": sc, "mean": mean, "cov": cov}


def test_kim_smoother_equals_the_recursions_written_out(maneuver):
    """M = 2 with different F_j and Q_j (rank 2), from the exact and the IMM filter: the
    vectorised backward pass is Kim's recursion term by term (the RTS pair steps, the joint
    mode weights and the collapse), not just close to the exact smoother."""
    from attnbayes.inference.switching.filters import imm_filter

    params, _, y, filt, _ = maneuver
    for base in (filt, imm_filter(params, y)):
        res = kim_smoother(params, y, base)
        assert_result_close(res, kim_backward_numpy(params, base), rtol=1e-9, atol=1e-9)


def test_fixed_modes_smoother_equals_conditioning_on_that_history(three_mode_problem):
    """Along s = (0, 1, 2, 0, 1): the enumeration of a model whose pi0 and Pi force that cycle
    is dense conditioning on it alone, and log p(y | s) is its log-likelihood."""
    params, y, _ = three_mode_problem
    modes = np.array([0, 1, 2, 0, 1])
    forced = params._replace(
        initial_probs=np.eye(3)[0], transition_matrix=np.roll(np.eye(3), 1, axis=1)
    )
    bf = enumerate_posterior(forced, y)
    res = fixed_modes_smoother(params, y, modes)  # Pi plays no part
    np.testing.assert_allclose(res.mean, bf.smoothed_mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(res.cov, bf.smoothed_cov, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(res.mode_probs, np.eye(3)[modes])
    np.testing.assert_allclose(res.means[np.arange(5), modes], bf.smoothed_mean, rtol=1e-8)
    np.testing.assert_allclose(float(res.log_likelihood), bf.log_likelihood, rtol=1e-11)
    with pytest.raises(ValueError, match="^modes: values must be in"):
        fixed_modes_smoother(params, y, np.array([0, 1, 3, 0, 1]))
    with pytest.raises(ValueError, match=r"^modes: expected shape \(5,\)"):
        fixed_modes_smoother(params, y, modes[:4])
    with pytest.raises(ValueError, match="^modes: expected integers"):
        fixed_modes_smoother(params, y, modes.astype(float))


def test_kim_smoother_mode_probs_exact_in_the_hmm_limit(maneuver):
    """With H = 0 the observations carry no information on x, the modes are a hidden Markov
    chain with emissions N(0, R_j), and Kim's backward recursion for P(s_t | y_{1:T}) is the
    exact HMM smoother: it must match the exact smoother (this pins the orientation of the
    asymmetric Pi)."""
    params = maneuver[0]
    params = params._replace(
        emission_matrices=np.zeros_like(params.emission_matrices),
        emission_covs=params.emission_covs * np.array([1.0, 4.0])[:, None, None],
    )  # y_t ~ N(0, sigma_j^2 I), sigma = 10, 20
    scale = np.array([5, 5, 30, 5, 5, 5, 5, 30, 40, 30, 5, 30.0])
    y = scale[:, None] * np.array([1.0, -1.0])  # the same shape as the maneuver's series
    exact = exact_smoother(params, y)
    filt = exact_filter_numpy(params, y)
    res = kim_smoother(params, y, filt)
    assert np.ptp(np.asarray(exact.mode_probs)[:, 0]) > 0.1  # the data move the modes
    np.testing.assert_allclose(res.mode_probs, exact.mode_probs, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(float(res.log_likelihood), float(exact.log_likelihood), rtol=1e-11)
    np.testing.assert_allclose(res.means[-1], filt.means[-1], rtol=1e-9, atol=1e-12)


def test_kim_smoother_from_the_imm_filter(maneuver):
    """Kim's smoother fed the IMM filter."""
    from attnbayes.inference.switching.filters import imm_filter

    params, _, y, _, exact = maneuver
    imm = imm_filter(params, y)
    kim = kim_smoother(params, y, imm)
    kim_dev, imm_dev = rms(kim.mean - exact.mean), rms(imm.mean - exact.mean)
    print("\nRMS deviation from the exact smoothed mean: Kim(IMM)", np.round(kim_dev, 4))
    print("                                            IMM filter", np.round(imm_dev, 4))
    assert np.all(kim_dev < imm_dev)


def test_smoothers_finite_under_a_300_sigma_outlier(maneuver):
    params, _, y, _, _ = maneuver
    y = y.copy()
    y[6, 0] += 300 * 10.0
    filt = exact_filter_numpy(params, y)
    for res in (exact_smoother(params, y), kim_smoother(params, y, filt)):
        for k in (*FIELDS, "log_likelihood"):
            assert np.all(np.isfinite(np.asarray(getattr(res, k)))), k
        np.testing.assert_allclose(np.sum(res.mode_probs, axis=1), 1.0, rtol=1e-12)
        assert_psd(res.covs)
    assert float(res.log_likelihood) < -1e4


# ----------------------------------------------------------------------------- bad input


def test_smoothers_bad_input(three_mode_problem):
    params, y, _ = three_mode_problem
    one, y1 = one_mode_model("singular-q")
    with pytest.raises(ValueError, match="^params: expected 1 mode"):
        kalman_smoother(params, y)
    with pytest.raises(ValueError, match="^observations: expected shape"):
        kalman_smoother(one, y1[:, :1])
    with pytest.raises(ValueError, match="^observations: contain"):
        exact_smoother(params, np.array([[np.inf]]))
    with pytest.raises(ValueError, match="^observations: T = 11 steps with M = 3"):
        exact_smoother(params, np.zeros((11, 1)))
    with pytest.raises(ValueError, match="^observations: T = 5 steps"):
        exact_smoother(params, y, max_histories=100)
    with pytest.raises(ValueError, match="^max_histories"):
        exact_smoother(params, y, max_histories=0)
    filt = kalman_filter(one, y1)
    with pytest.raises(ValueError, match="^filtered: expected a FilterResult"):
        kim_smoother(one, y1, tuple(filt))
    with pytest.raises(ValueError, match=r"^filtered.mode_probs: expected shape \(6, 1\)"):
        kim_smoother(one, y1[:6], filt)
    with pytest.raises(ValueError, match=r"^filtered.means: expected shape \(7, 1, 3\)"):
        kim_smoother(one, y1, filt._replace(means=filt.means[..., :2]))
    with pytest.raises(ValueError, match="^filtered.covs: contains"):
        kim_smoother(one, y1, filt._replace(covs=np.full((7, 1, 3, 3), np.nan)))
    with pytest.raises(ValueError, match="^filtered.mode_probs: rows"):
        kim_smoother(one, y1, filt._replace(mode_probs=np.full((7, 1), 0.5)))
    with pytest.raises(ValueError, match="^params.transition_matrix"):
        kim_smoother(one._replace(transition_matrix=np.full((1, 1), 2.0)), y1, filt)


# ----------------------------------------------------------------------------- bad input

_FILT = filtered(3, 2)
BAD_INPUT = [
    *entry_point_cases("kim_smoother", lambda p, y: kim_smoother(p, y, filtered(3, 2)), P2),
    *entry_point_cases("exact_smoother", exact_smoother, P2),
    *entry_point_cases("kalman_smoother", kalman_smoother, P1),
    *entry_point_cases(
        "fixed_modes_smoother", lambda p, y: fixed_modes_smoother(p, y, np.zeros(3, int)), P2
    ),
    (
        "kalman_smoother-params-two-modes",
        lambda: kalman_smoother(P2, Y),
        ValueError,
        "^params: expected 1",
    ),
    *(
        (
            f"exact_smoother-max_histories-{h!r}",
            lambda h=h: exact_smoother(P2, Y, max_histories=h),
            ValueError,
            "^max_histories: ",
        )
        for h in (0, -1, 2.5, True)
    ),
    # 2^20 histories > 2^16
    (
        "exact_smoother-too-long",
        lambda: exact_smoother(P2, np.zeros((20, 1))),
        ValueError,
        "^observations: ",
    ),
]
BAD_INPUT += [
    (f"kim_smoother-filtered-{label}", lambda b=bad: kim_smoother(P2, Y, b), ValueError, pattern)
    for label, (bad, pattern) in {
        "tuple": (tuple(_FILT), "^filtered: expected a FilterResult"),
        "none": (None, "^filtered: expected a FilterResult"),
        "wrong-steps": (filtered(4, 2), r"^filtered\.mode_probs: expected shape \(3, 2\)"),
        "wrong-modes": (filtered(3, 1), r"^filtered\.mode_probs: expected shape \(3, 2\)"),
        "nan-covs": (
            _FILT._replace(
                covs=np.where(np.arange(3)[:, None, None, None] == 1, np.nan, _FILT.covs)
            ),
            r"^filtered\.covs: contains 8 non-finite value\(s\) \(NaN or inf\), the first at "
            r"step 2; .*check_filter_result",
        ),
        "probs-rows": (
            _FILT._replace(mode_probs=np.full((3, 2), 0.7)),
            r"^filtered\.mode_probs: rows must be probability vectors",
        ),
        "complex-means": (
            _FILT._replace(means=_FILT.means + 0j),
            r"^filtered\.means: expected real",
        ),
    }.items()
]
BAD_INPUT += [
    (
        f"fixed_modes_smoother-modes-{label}",
        lambda s=modes: fixed_modes_smoother(P2, Y, s),
        ValueError,
        "^modes: ",
    )
    for label, modes in {
        "out-of-range": np.array([0, 2, 0]),
        "negative": np.array([0, -1, 0]),
        "float": np.zeros(3),
        "shape": np.zeros(4, int),
    }.items()
]


@pytest.mark.usefixtures("full_tracebacks")
@parametrize_cases(BAD_INPUT)
def test_bad_input_raises_before_jax(call, error, pattern):
    """Every case refused before tracing (``switching_inputs``), naming the argument."""
    check_refused(call, error, pattern)
