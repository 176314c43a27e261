"""compare_switching: every filter, smoother and sampler on one short series; NUTS and Gibbs
against the exact smoothing posterior; bad input refused before tracing (``switching_inputs``)."""

import arviz as az
import jax
import numpy as np
import pytest
from raising import check_refused
from switching_bruteforce import enumerate_posterior, random_switching_params
from switching_inputs import P2, Y, entry_point_cases, parametrize_cases

from attnbayes.inference.switching import compare_switching, filters, particle
from attnbayes.inference.switching.comparison import SWITCHING_METHODS, default_switching_methods
from attnbayes.models.switching import get_scenario, maneuvering_target, simulate

NUM_STEPS = 6
# the Gibbs sampler at test_gibbs.py's sizes (M = 2, d = 2, o = 1, T = 6, 4 x 2000):
# on the same worker, compiled once
XDIST_GROUP = "switching-gibbs"


FAST_METHODS = tuple(m for m in SWITCHING_METHODS if m != "nuts")


def short_series():
    """A random M = 2, d = 2, o = 1 model with PD Q and T = 6 simulated steps."""
    params = random_switching_params(np.random.default_rng(21), M=2, d=2, o=1)
    modes, states, y = (np.asarray(a) for a in simulate(jax.random.key(5), params, NUM_STEPS))
    return params, modes, states, y


@pytest.fixture(scope="module")
def short_comparison():
    """Every method but NUTS on the short series (NUTS: the slow test below)."""
    params, modes, states, y = short_series()
    comparison = compare_switching(
        jax.random.key(9),
        params,
        y,
        states_true=states,
        modes_true=modes,
        methods=FAST_METHODS,
        num_particles=500,
        gibbs_kwargs={"num_warmup": 200, "num_samples": 2000, "num_chains": 4},
    )
    return params, y, modes, comparison


@pytest.fixture(scope="module")
def nuts_comparison():
    params, modes, states, y = short_series()
    comparison = compare_switching(
        jax.random.key(9),
        params,
        y,
        states_true=states,
        methods=("exact-smoother", "nuts"),
        nuts_kwargs={"num_warmup": 500, "num_samples": 1500, "num_chains": 4},
    )
    return params, y, modes, comparison


def test_table_has_every_method_and_metric(short_comparison):
    _, _, _, comparison = short_comparison
    table = comparison.table
    assert set(table["method"]) == set(FAST_METHODS)
    assert comparison.references == {"filter": "exact", "smoother": "exact-smoother"}
    metrics = table.groupby("method")["metric"].apply(set)
    for method in FAST_METHODS:
        assert {"wall_time_s", "state_rmse", "coverage_50", "coverage_90"} <= metrics[method]
    for method in ("gpb1", "gpb2", "imm", "rbpf", "kim-imm", "kim-gpb2", "gibbs"):
        assert {"reference_rms", "reference_mode_dev"} <= metrics[method], method
    assert {"max_rhat_states", "min_ess_bulk_states", "min_ess_tail_states"} <= metrics["gibbs"]
    assert "log_likelihood" in metrics["imm"]
    value = table.set_index(["method", "metric"])["value"]
    assert value[("known-modes", "mode_accuracy")] == 1.0
    # GPB2 at T = 6 is close to exact; the exact filter's log p(y) is the reference's
    assert value[("gpb2", "reference_mode_dev")] < 0.05
    assert np.isfinite(table["value"]).all()


@pytest.mark.parametrize("sampler", ["gibbs", pytest.param("nuts", marks=pytest.mark.slow)])
def test_samplers_agree_with_the_exact_smoother(request, sampler):
    """Posterior means of every x_t coordinate within 4 MCSE of the exact smoothing means, and
    posterior sds within 10%; NUTS and Gibbs therefore agree with each other too."""
    fixture = "nuts_comparison" if sampler == "nuts" else "short_comparison"
    params, y, _, comparison = request.getfixturevalue(fixture)
    if sampler == "nuts":
        value = comparison.table.set_index(["method", "metric"])["value"]
        assert value[("nuts", "divergences")] == 0
        print("NUTS, T = 6: max R-hat", value[("nuts", "max_rhat_states")])
    exact = enumerate_posterior(params, y)
    tree = comparison.fits[sampler].result
    draws = np.asarray(tree["posterior"]["states"])
    ess = np.asarray(az.ess(tree, var_names=["states"], method="mean")["states"])
    mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
    z = (mean - exact.smoothed_mean) / (sd / np.sqrt(ess))
    assert np.max(np.abs(z)) < 4.0, (sampler, np.max(np.abs(z)))
    exact_sd = np.sqrt(np.diagonal(exact.smoothed_cov, axis1=1, axis2=2))
    np.testing.assert_allclose(sd, exact_sd, rtol=0.1)
    if sampler == "gibbs":
        probs = comparison.fits["gibbs"].mode_probs
        modes = np.asarray(tree["posterior"]["modes"])
        ess_m = np.asarray(az.ess(tree, var_names=["modes"], method="mean")["modes"])
        se = np.sqrt(probs[:, 1] * (1 - probs[:, 1]) / ess_m) + 1e-3
        assert np.max(np.abs(probs[:, 1] - exact.smoothed_mode_probs[:, 1]) / se) < 4.0
        assert modes.dtype.kind == "i"


def test_default_methods_and_bad_input():
    params = maneuvering_target()
    assert "exact" in default_switching_methods(2, 10) and "nuts" in default_switching_methods(
        2, 10
    )
    long = default_switching_methods(2, 200)
    assert "exact" not in long and "exact-smoother" not in long and "nuts" not in long
    y = np.zeros((20, 2))
    with pytest.raises(ValueError, match="^methods: unknown"):
        compare_switching(None, params, y, methods=("imm", "kalman"))
    with pytest.raises(ValueError, match="^methods: the exact methods need"):
        compare_switching(None, params, np.zeros((13, 2)), methods=("exact",))
    with pytest.raises(ValueError, match="^key: a jax.random key"):
        compare_switching(None, params, y, methods=("rbpf",))
    with pytest.raises(ValueError, match="^modes_true: required"):
        compare_switching(None, params, y, methods=("known-modes",))
    with pytest.raises(ValueError, match="^states_true: expected shape"):
        compare_switching(None, params, y, states_true=np.zeros((20, 3)), methods=("imm",))
    with pytest.raises(ValueError, match="^modes_true: expected integer"):
        compare_switching(None, params, y, modes_true=np.zeros(20), methods=("imm",))


# ----------------------------------------------------------------------------- bad input


def _compare(key=None, **kwargs):
    """``compare_switching`` on the tiny model, IMM only unless ``kwargs`` say otherwise."""
    return lambda: compare_switching(key, P2, Y, **({"methods": ("imm",)} | kwargs))


BAD_INPUT = [
    *entry_point_cases(
        "compare_switching", lambda p, y: compare_switching(None, p, y, methods=("imm",)), P2
    ),
]
# what it refuses today (see the report for what it does not)
BAD_INPUT += [
    (f"compare_switching-{label}", call, ValueError, pattern)
    for label, (call, pattern) in {
        "methods-unknown": (_compare(methods=("bogus",)), "^methods: "),
        "methods-empty": (_compare(methods=()), "^methods: "),
        "methods-exact-too-long": (_compare(methods=("exact",), max_histories=4), "^methods: "),
        "key-missing": (_compare(methods=("rbpf",)), "^key: "),
        "key-int": (_compare(methods=("rbpf",), key=0), "^key: "),
        "states_true-shape": (_compare(states_true=np.zeros((3, 3))), "^states_true: "),
        "states_true-nan": (_compare(states_true=np.full((3, 2), np.nan)), "^states_true: "),
        "states_true-strings": (_compare(states_true=[["a", "b"]] * 3), "^states_true: "),
        "modes_true-float": (_compare(modes_true=np.zeros(3)), "^modes_true: "),
        "modes_true-shape": (_compare(modes_true=np.zeros(4, int)), "^modes_true: "),
        "known-modes-without-modes": (_compare(methods=("known-modes",)), "^modes_true: "),
        "num_particles-0": (_compare(num_particles=0), "^num_particles: "),
    }.items()
]


@pytest.mark.usefixtures("full_tracebacks")
@parametrize_cases(BAD_INPUT)
def test_bad_input_raises_before_jax(call, error, pattern):
    """Every case refused before tracing (``switching_inputs``), naming the argument."""
    check_refused(call, error, pattern)


def _raiser(exc):
    def stub(*args, **kwargs):
        raise exc

    return stub


# ----------------------------------------------------------------------------- bad arguments


@pytest.fixture(scope="module")
def explosive_series():
    """The maneuvering target with dynamics scaled by 10, observed twice then lost for 200
    steps: every filter overflows from about step 155 (variance ~ 10^(2t))."""
    params = get_scenario("maneuvering-target")
    params = params._replace(dynamics_matrices=10.0 * np.asarray(params.dynamics_matrices))
    y = np.full((202, 2), np.nan)
    y[:2] = [[0.0, 0.0], [1.0, 1.0]]
    return params, y


COMPARE_SWITCHING_CASES = {
    "modes-out-of-range": (
        {"modes_true": np.array([0, 5, 0]), "methods": ("imm",)},
        "^modes_true: ",
    ),
    "modes-negative": ({"modes_true": np.array([0, -1, 0]), "methods": ("imm",)}, "^modes_true: "),
    "max-histories-text": ({"max_histories": "a"}, "^max_histories: "),
    "max-histories-float": ({"max_histories": 2.5}, "^max_histories: "),
    "gibbs-kwargs-int": ({"gibbs_kwargs": 3}, "^gibbs_kwargs: expected a dict"),
    "gibbs-kwargs-unknown": ({"gibbs_kwargs": {"bogus": 1}}, r"^gibbs_kwargs: unknown .*bogus"),
    "nuts-kwargs-list": ({"nuts_kwargs": [1]}, "^nuts_kwargs: expected a dict"),
    "progress-int": ({"progress": 3}, "^progress: "),
    "gibbs-too-few-draws": (
        {"methods": ("gibbs",), "gibbs_kwargs": {"num_samples": 2}},
        "^num_samples/num_chains: gibbs: ",
    ),
}


@pytest.mark.parametrize("case", list(COMPARE_SWITCHING_CASES))
def test_compare_switching_refuses_bad_arguments_before_running(case, monkeypatch):
    for module, name in (
        (filters, "imm_filter"),
        (filters, "gpb1_filter"),
        (filters, "gpb2_filter"),
        (filters, "exact_filter"),
        (particle, "rbpf"),
    ):
        monkeypatch.setattr(module, name, _raiser(AssertionError("ran")), raising=True)
    params = get_scenario("maneuvering-target")
    kwargs, pattern = COMPARE_SWITCHING_CASES[case]
    key = kwargs.pop("key", jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=pattern):
        compare_switching(key, params, np.zeros((3, 2)), **kwargs)


def test_compare_switching_refuses_to_tabulate_an_overflowed_filter(explosive_series):
    params, y = explosive_series
    with pytest.raises(FloatingPointError, match=r"^imm: non-finite .* from step 15\d"):
        compare_switching(None, params, y, methods=("imm",))
    with pytest.raises(FloatingPointError, match=r"^gpb2: non-finite .* dynamics_matrices"):
        compare_switching(None, params, y, methods=("kim-gpb2",))
