"""Bad input to the switching state-space model (issue 12): refused before any JAX tracing.

The project's standard: a ``ValueError`` (or ``TypeError``) raised before tracing whose message
starts with the argument's name; never a cryptic traceback, a silent NaN or a wrong answer.
The catalogue below runs every public switching function of the README's tour (the scenarios
and the simulator, every filter and smoother, the RBPF, ``attention_as_imm_step``,
``one_step_log_predictive``, ``run_switching_gibbs`` and ``compare_switching``) against
wrong-rank, wrong-width, complex, infinite, empty and non-numeric observations, invalid
parameters and bad scalars. Every array is tiny and every case is refused before tracing, so
each runs in milliseconds.

Also here, finding 8 of issue 12: on valid but explosive dynamics the filters overflow and,
running compiled, cannot raise; ``attnbayes.inference.switching.filters.check_filter_result`` raises
``FloatingPointError`` naming the first non-finite step. The step is computed independently
(a NumPy recursion of the variance that the observations do not reach) and checked for every
filter, the smoothers and the RBPF. A model that is explosive along observed directions stays
finite, which is why there is no refusing input check on the spectral radius.
"""

import jax
import numpy as np
import pytest
from raising import jax_frames

from attnbayes.inference.switching.comparison import compare_switching
from attnbayes.inference.switching.filters import (
    FilterResult,
    SmootherResult,
    attention_as_imm_step,
    check_filter_result,
    exact_filter,
    exact_smoother,
    fixed_modes_smoother,
    gpb1_filter,
    gpb2_filter,
    imm_filter,
    kalman_filter,
    kalman_smoother,
    kim_smoother,
    one_step_log_predictive,
    rbpf,
)
from attnbayes.inference.switching.gibbs import run_switching_gibbs
from attnbayes.models.switching import (
    SwitchingParams,
    SwitchingPriors,
    get_scenario,
    simulate,
    switching_model,
)

KEY = jax.random.key(0)
Y = np.array([[0.1], [0.2], [-0.3]])  # T = 3, o = 1


def tiny(num_modes: int = 2) -> SwitchingParams:
    """M modes, d = 2, o = 1: a stable, valid model."""
    m = num_modes
    return SwitchingParams(
        initial_probs=np.full(m, 1.0 / m),
        transition_matrix=np.full((m, m), 1.0 / m),
        initial_means=np.zeros((m, 2)),
        initial_covs=np.tile(np.eye(2), (m, 1, 1)),
        dynamics_matrices=np.tile(0.9 * np.eye(2), (m, 1, 1)),
        dynamics_biases=np.zeros((m, 2)),
        dynamics_covs=np.tile(0.1 * np.eye(2), (m, 1, 1)),
        emission_matrices=np.tile(np.array([[1.0, 0.0]]), (m, 1, 1)),
        emission_covs=np.tile(np.eye(1), (m, 1, 1)),
    )


P2, P1 = tiny(2), tiny(1)


def _filtered(num_steps: int, num_modes: int) -> FilterResult:
    """A valid FilterResult of the tiny model's shapes, built without running a filter."""
    t, m = num_steps, num_modes
    return FilterResult(
        mode_probs=np.full((t, m), 1.0 / m),
        means=np.zeros((t, m, 2)),
        covs=np.tile(np.eye(2), (t, m, 1, 1)),
        mean=np.zeros((t, 2)),
        cov=np.tile(np.eye(2), (t, 1, 1)),
        log_likelihood=np.float64(0.0),
    )


# ----------------------------------------------------------------------------- the catalogue

# entry points taking (params, observations): name -> (call, the valid params it needs)
ENTRY_POINTS = {
    "imm_filter": (imm_filter, P2),
    "gpb1_filter": (gpb1_filter, P2),
    "gpb2_filter": (gpb2_filter, P2),
    "exact_filter": (exact_filter, P2),
    "kalman_filter": (kalman_filter, P1),
    "rbpf": (lambda p, y: rbpf(KEY, p, y, 4), P2),
    "kim_smoother": (lambda p, y: kim_smoother(p, y, _filtered(3, 2)), P2),
    "exact_smoother": (exact_smoother, P2),
    "kalman_smoother": (kalman_smoother, P1),
    "fixed_modes_smoother": (lambda p, y: fixed_modes_smoother(p, y, np.zeros(3, int)), P2),
    "one_step_log_predictive": (one_step_log_predictive, P2),
    "run_switching_gibbs": (
        lambda p, y: run_switching_gibbs(KEY, p, y, num_warmup=1, num_samples=1, num_chains=1),
        P2,
    ),
    "compare_switching": (lambda p, y: compare_switching(None, p, y, methods=("imm",)), P2),
}

BAD_OBSERVATIONS = {
    "rank-1": Y[:, 0],
    "rank-3": Y[None],
    "wrong-columns": np.zeros((3, 2)),
    "complex": Y + 1j,
    "plus-inf": np.array([[0.1], [np.inf], [0.0]]),
    "minus-inf": np.array([[0.1], [-np.inf], [0.0]]),
    "empty": np.zeros((0, 1)),
    "strings": [["a"], ["b"]],
    "none": None,
    "ragged": [[1.0], [1.0, 2.0]],
}


def _bad_params(params: SwitchingParams) -> dict:
    """label -> (invalid params, the anchored pattern of the refusal)."""
    m = params.initial_probs.shape[0]
    trans_sum = np.asarray(params.transition_matrix).copy()
    trans_sum[0, 0] += 0.2
    trans_neg = np.asarray(params.transition_matrix).copy()
    trans_neg[0] = [-1.0] if m == 1 else [-0.5, 1.5]  # M = 2: a negative entry, sums to one
    asym = np.tile(np.array([[1.0, 0.5], [0.0, 1.0]]), (m, 1, 1))
    return {
        "tuple": (tuple(params), "^params: expected a SwitchingParams"),
        "none": (None, "^params: expected a SwitchingParams"),
        "transition-rows-sum": (
            params._replace(transition_matrix=trans_sum),
            r"^params\.transition_matrix: rows must be probability vectors",
        ),
        "transition-negative": (
            params._replace(transition_matrix=trans_neg),
            r"^params\.transition_matrix: rows must be probability vectors",
        ),
        "initial-probs-sum": (
            params._replace(initial_probs=np.full(m, 0.7)),
            r"^params\.initial_probs: must sum to 1",
        ),
        "emission-covs-not-pd": (
            params._replace(emission_covs=-np.ones((m, 1, 1))),
            r"^params\.emission_covs: covariance matrices must be positive semi-definite",
        ),
        "dynamics-covs-not-psd": (
            params._replace(dynamics_covs=np.tile(-np.eye(2), (m, 1, 1))),
            r"^params\.dynamics_covs: covariance matrices must be positive semi-definite",
        ),
        "initial-covs-asymmetric": (
            params._replace(initial_covs=asym),
            r"^params\.initial_covs: covariance matrices must be symmetric",
        ),
        "dynamics-nan": (
            params._replace(dynamics_matrices=np.full((m, 2, 2), np.nan)),
            r"^params\.dynamics_matrices: contains \d+ non-finite",
        ),
        "dynamics-shape": (
            params._replace(dynamics_matrices=np.zeros((m, 3, 3))),
            r"^params\.dynamics_matrices: expected shape",
        ),
        "emission-complex": (
            params._replace(emission_matrices=np.asarray(params.emission_matrices) + 0j),
            r"^params\.emission_matrices: expected real numbers",
        ),
    }


def _catalogue():
    """(id, call, exception type, anchored pattern)."""
    cases = []
    for fn, (call, params) in ENTRY_POINTS.items():
        for label, y in BAD_OBSERVATIONS.items():
            case = lambda c=call, p=params, y=y: c(p, y)  # noqa: E731
            cases.append((f"{fn}-observations-{label}", case, ValueError, "^observations: "))
        for label, (bad, pattern) in _bad_params(params).items():
            case = lambda c=call, b=bad: c(b, Y)  # noqa: E731
            cases.append((f"{fn}-params-{label}", case, ValueError, pattern))
    for fn in ("kalman_filter", "kalman_smoother"):
        call = ENTRY_POINTS[fn][0]
        cases.append(
            (f"{fn}-params-two-modes", lambda c=call: c(P2, Y), ValueError, "^params: expected 1")
        )

    # the RBPF's own arguments
    for n in (0, -1, 2.5, True, None):
        cases.append(
            (
                f"rbpf-num_particles-{n!r}",
                lambda n=n: rbpf(KEY, P2, Y, n),
                ValueError,
                "^num_particles: ",
            )
        )
    for e in (-0.1, 1.5, np.nan, "half"):
        cases.append(
            (
                f"rbpf-ess_threshold-{e!r}",
                lambda e=e: rbpf(KEY, P2, Y, 4, ess_threshold=e),
                ValueError,
                "^ess_threshold: ",
            )
        )
    bad_keys = {
        "int": 0,
        "none": None,
        "float-array": np.zeros(2),
        "key-array": jax.random.split(KEY, 2),
    }
    for label, key in bad_keys.items():
        cases.append((f"rbpf-key-{label}", lambda k=key: rbpf(k, P2, Y, 4), ValueError, "^key: "))

    # exact methods, one_step_log_predictive, the smoothers' own arguments
    long_y = np.zeros((20, 1))  # 2^20 histories > 2^16
    for fn, call in (("exact_filter", exact_filter), ("exact_smoother", exact_smoother)):
        for h in (0, -1, 2.5, True):
            cases.append(
                (
                    f"{fn}-max_histories-{h!r}",
                    lambda c=call, h=h: c(P2, Y, max_histories=h),
                    ValueError,
                    "^max_histories: ",
                )
            )
        cases.append(
            (f"{fn}-too-long", lambda c=call: c(P2, long_y), ValueError, "^observations: ")
        )
    for method in ("exact", None, 3, ["imm"]):
        cases.append(
            (
                f"one_step_log_predictive-method-{method!r}",
                lambda m=method: one_step_log_predictive(P2, Y, method=m),
                ValueError,
                "^method: ",
            )
        )
    filt = _filtered(3, 2)
    bad_filtered = {
        "tuple": (tuple(filt), "^filtered: expected a FilterResult"),
        "none": (None, "^filtered: expected a FilterResult"),
        "wrong-steps": (_filtered(4, 2), r"^filtered\.mode_probs: expected shape \(3, 2\)"),
        "wrong-modes": (_filtered(3, 1), r"^filtered\.mode_probs: expected shape \(3, 2\)"),
        "nan-covs": (
            filt._replace(covs=np.where(np.arange(3)[:, None, None, None] == 1, np.nan, filt.covs)),
            r"^filtered\.covs: contains 8 non-finite value\(s\) \(NaN or inf\), the first at "
            r"step 2; .*check_filter_result",
        ),
        "probs-rows": (
            filt._replace(mode_probs=np.full((3, 2), 0.7)),
            r"^filtered\.mode_probs: rows must be probability vectors",
        ),
        "complex-means": (filt._replace(means=filt.means + 0j), r"^filtered\.means: expected real"),
    }
    for label, (bad, pattern) in bad_filtered.items():
        case = lambda b=bad: kim_smoother(P2, Y, b)  # noqa: E731
        cases.append((f"kim_smoother-filtered-{label}", case, ValueError, pattern))
    for label, modes in {
        "out-of-range": np.array([0, 2, 0]),
        "negative": np.array([0, -1, 0]),
        "float": np.zeros(3),
        "shape": np.zeros(4, int),
    }.items():
        cases.append(
            (
                f"fixed_modes_smoother-modes-{label}",
                lambda s=modes: fixed_modes_smoother(P2, Y, s),
                ValueError,
                "^modes: ",
            )
        )

    # attention_as_imm_step
    eye = np.eye(2)
    bad_hidden = {
        "rank-1": np.ones(3),
        "rank-3": np.ones((2, 2, 2)),
        "empty": np.zeros((0, 2)),
        "complex": eye + 1j,
        "inf": np.array([[np.inf, 0.0], [0.0, 1.0]]),
        "nan": np.full((2, 2), np.nan),
        "none": None,
        "strings": [["a", "b"]],
    }
    for label, h in bad_hidden.items():
        cases.append(
            (
                f"attention_as_imm_step-hidden-{label}",
                lambda h=h: attention_as_imm_step(h, eye, eye, eye),
                ValueError,
                "^hidden: ",
            )
        )
    bad_weights = {
        "w_query-rows": ((np.ones((3, 2)), eye, eye), "^w_query: expected shape"),
        "w_query-complex": ((eye + 1j, eye, eye), "^w_query: expected real"),
        "w_query-inf": ((np.full((2, 2), np.inf), eye, eye), "^w_query: contains"),
        "w_key-rank": ((eye, np.ones(2), eye), "^w_key: expected shape"),
        "w_key-columns": ((eye, np.ones((2, 3)), eye), "^w_key: 3 columns"),
        "w_value-rows": ((eye, eye, np.ones((3, 2))), "^w_value: expected shape"),
        "w_value-nan": ((eye, eye, np.full((2, 2), np.nan)), "^w_value: contains"),
    }
    for label, (weights, pattern) in bad_weights.items():
        cases.append(
            (
                f"attention_as_imm_step-{label}",
                lambda w=weights: attention_as_imm_step(eye, *w),
                ValueError,
                pattern,
            )
        )

    # scenarios, the simulator, the NumPyro program
    for label, name in {"unknown": "bogus", "int": 3, "list": ["x"], "none": None}.items():
        cases.append(
            (f"get_scenario-name-{label}", lambda n=name: get_scenario(n), ValueError, "^name: ")
        )
    bad_options = {
        "measurement_sigma": (0.0, -1.0, np.nan, np.inf, "10"),
        "dt": (0.0, -1.0, np.nan),
        "sigma_a": ((0.1,), (0.1, -1.0), (0.1, np.nan), "ab", 0.5),
        "turn_rate_deg": (np.nan, "3"),
        "turn_rates_deg": ((3.0, np.inf), "3", 3.0),
        "process_noise": ("bogus", None),
    }
    for option, values in bad_options.items():
        for value in values:
            cases.append(
                (
                    f"get_scenario-{option}-{value!r}",
                    lambda o=option, v=value: get_scenario("maneuvering-target", **{o: v}),
                    ValueError,
                    f"^{option}: ",
                )
            )
    cases.append(
        (
            "get_scenario-unknown-option",
            lambda: get_scenario("maneuvering-target", bogus=1),
            TypeError,
            "^bogus: not an option of scenario 'maneuvering-target'",
        )
    )
    for label, key in bad_keys.items():
        cases.append(
            (f"simulate-key-{label}", lambda k=key: simulate(k, P2, 3), ValueError, "^key: ")
        )
    for n in (0, -3, 2.0, True, None):
        cases.append(
            (
                f"simulate-num_steps-{n!r}",
                lambda n=n: simulate(KEY, P2, n),
                ValueError,
                "^num_steps: ",
            )
        )
    for label, (bad, pattern) in _bad_params(P2).items():
        cases.append(
            (f"simulate-params-{label}", lambda b=bad: simulate(KEY, b, 3), ValueError, pattern)
        )
    cases.append(
        (
            "switching_model-params-transition",
            lambda: switching_model(Y, params=_bad_params(P2)["transition-rows-sum"][0]),
            ValueError,
            r"^params\.transition_matrix: ",
        )
    )

    # run_switching_gibbs: its own arguments
    def gibbs(**kwargs):
        sizes = {"num_warmup": 1, "num_samples": 1, "num_chains": 1} | kwargs
        params, key = sizes.pop("params", P2), sizes.pop("key", KEY)
        return lambda: run_switching_gibbs(key, params, Y, **sizes)

    singular = P2._replace(dynamics_covs=np.zeros((2, 2, 2)))
    gibbs_cases = {
        "key": (gibbs(key=0), "^key: "),
        "num_samples-0": (gibbs(num_samples=0), "^num_samples: "),
        "num_samples-float": (gibbs(num_samples=2.0), "^num_samples: "),
        "num_chains-0": (gibbs(num_chains=0), "^num_chains: "),
        "num_warmup-negative": (gibbs(num_warmup=-1), "^num_warmup: "),
        "mode_sampler": (gibbs(mode_sampler="x"), "^mode_sampler: "),
        "init_modes-name": (gibbs(init_modes="x"), "^init_modes: "),
        "init_modes-range": (gibbs(init_modes=[0, 5, 0]), "^init_modes: "),
        "init_modes-shape": (gibbs(init_modes=[0, 1]), "^init_modes: "),
        "init_modes-fraction": (gibbs(init_modes=[0.5, 0, 0]), "^init_modes: "),
        "init_modes-bool": (gibbs(init_modes=np.array([True, False, True])), "^init_modes: "),
        "priors-type": (gibbs(priors="x"), "^priors: "),
        "priors-shape": (
            gibbs(priors=SwitchingPriors(np.ones((3, 3)))),
            r"^priors\.transition_concentration: ",
        ),
        "conditional-singular-q": (
            gibbs(params=singular, mode_sampler="conditional"),
            r"^params\.dynamics_covs: ",
        ),
    }
    for label, (call, pattern) in gibbs_cases.items():
        cases.append((f"run_switching_gibbs-{label}", call, ValueError, pattern))

    # compare_switching: what it refuses today (see the report for what it does not)
    def compare(key=None, **kwargs):
        return lambda: compare_switching(key, P2, Y, **({"methods": ("imm",)} | kwargs))

    compare_cases = {
        "methods-unknown": (compare(methods=("bogus",)), "^methods: "),
        "methods-empty": (compare(methods=()), "^methods: "),
        "methods-exact-too-long": (compare(methods=("exact",), max_histories=4), "^methods: "),
        "key-missing": (compare(methods=("rbpf",)), "^key: "),
        "key-int": (compare(methods=("rbpf",), key=0), "^key: "),
        "states_true-shape": (compare(states_true=np.zeros((3, 3))), "^states_true: "),
        "states_true-nan": (compare(states_true=np.full((3, 2), np.nan)), "^states_true: "),
        "states_true-strings": (compare(states_true=[["a", "b"]] * 3), "^states_true: "),
        "modes_true-float": (compare(modes_true=np.zeros(3)), "^modes_true: "),
        "modes_true-shape": (compare(modes_true=np.zeros(4, int)), "^modes_true: "),
        "known-modes-without-modes": (compare(methods=("known-modes",)), "^modes_true: "),
        "num_particles-0": (compare(num_particles=0), "^num_particles: "),
    }
    for label, (call, pattern) in compare_cases.items():
        cases.append((f"compare_switching-{label}", call, ValueError, pattern))

    # check_filter_result's own arguments
    cases += [
        (
            "check_filter_result-result-tuple",
            lambda: check_filter_result(tuple(filt)),
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
            lambda: check_filter_result(filt, name=3),
            TypeError,
            "^name: expected a string",
        ),
        (
            "check_filter_result-params",
            lambda: check_filter_result(filt, params=_bad_params(P2)["transition-rows-sum"][0]),
            ValueError,
            r"^params\.transition_matrix: ",
        ),
        (
            "check_filter_result-params-modes",
            lambda: check_filter_result(filt, params=P1),
            ValueError,
            "^params: M = 1 modes and d = 2 do not match the result's M = 2, d = 2",
        ),
        (
            "check_filter_result-shapes",
            lambda: check_filter_result(filt._replace(means=np.zeros((4, 2, 2)))),
            ValueError,
            r"^result\.means: ",
        ),
        (
            "check_filter_result-strings",
            lambda: check_filter_result(filt._replace(mean=[["a", "b"]] * 3)),
            ValueError,
            r"^result\.mean: expected numbers",
        ),
    ]
    return cases


CASES = _catalogue()


@pytest.mark.usefixtures("full_tracebacks")
@pytest.mark.parametrize(
    ("call", "error", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_raises_before_jax(call, error, pattern):
    with pytest.raises(error, match=pattern) as excinfo:
        call()
    # a plain ValueError / TypeError raised by the argument checks, not by JAX while tracing
    assert type(excinfo.value) is error
    assert "\n" not in str(excinfo.value)
    assert not jax_frames(excinfo)


def test_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


def test_scenario_options_still_work():
    """The checks on maneuvering_target's options leave valid values alone."""
    three = get_scenario("maneuvering-target", turn_rates_deg=[3.0, -3.0], sigma_a=[0.2, 0.0])
    assert np.asarray(three.transition_matrix).shape == (3, 3)
    np.testing.assert_allclose(
        three.dynamics_covs[0],
        0.04 * get_scenario("maneuvering-target", sigma_a=(1.0, 1.0)).dynamics_covs[0],
    )
    one = get_scenario("maneuvering-target-cwna", turn_rates_deg=(), dt=np.float64(0.5))
    assert np.asarray(one.initial_probs).shape == (1,)


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
        p = params if f is imm_filter else _one_mode(params)
        a, b = f(p, partly), f(p, whole)
        assert not np.allclose(a.mean[3], b.mean[3])
        assert float(a.log_likelihood) < float(b.log_likelihood)  # one more density term
        for stand_in in (0.0, 1e3):
            other = partly.copy()
            other[3, 1] = stand_in
            c = f(p, other)
            assert not np.allclose(c.mean[3], a.mean[3])


def _one_mode(params: SwitchingParams) -> SwitchingParams:
    fields = {f: np.asarray(v)[:1] for f, v in params._asdict().items() if v is not None}
    return SwitchingParams(
        **fields | {"initial_probs": np.ones(1), "transition_matrix": np.ones((1, 1))}
    )


# ----------------------------------------------------------------------------- finding 8


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


def test_check_filter_result_refuses_traced_results():
    def inside(y):
        return check_filter_result(imm_filter(P2, y)).mean

    with pytest.raises(TypeError, match="^result: holds traced arrays"):
        jax.jit(inside)(Y)
