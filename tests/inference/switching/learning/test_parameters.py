"""theta's checks (``attnbayes.inference.switching.learning.parameters``): a spec whose theta is
not a valid model is refused naming the theta entry the user gave (``init.theta['variances']``),
not the ``SwitchingParams`` fields the model builds from it, before any tracing."""

import jax
import numpy as np
import pytest

from attnbayes.inference.switching import fit_switching
from attnbayes.inference.switching.learning.parameters import check_spec, check_theta
from attnbayes.models.markov_switching import markov_switching_ar

SERIES = np.sin(np.arange(40.0)) + 0.3 * np.cos(3.0 * np.arange(40.0))

# {case: (theta entries replaced in an MS-AR(1) spec, the parameters left free, message)}
BAD_THETA = {
    "rows-sum-to-1.1": (
        {"transition_matrix": np.array([[0.9, 0.2], [0.1, 0.9]])},
        ("means",),
        r"^init\.theta\['transition_matrix'\]: outside its support Simplex\(\): row 0 sums to "
        r"1\.1, not 1 \(a vector of probabilities\)$",
    ),
    "negative-probability": (
        {"transition_matrix": np.array([[0.9, 0.1], [1.1, -0.1]])},
        ("means",),
        r"^init\.theta\['transition_matrix'\]: .*: row 1 has a negative entry -0\.1",
    ),
    "fixed-variance-of-minus-1": (
        {"variances": np.asarray(-1.0)},
        ("transition_matrix",),
        r"^init\.theta\['variances'\]: outside its support Positive\(lower_bound=0\.0\): is -1, "
        r"not > 0$",
    ),
    "nan-means": (
        {"means": np.array([np.nan, 1.0])},
        ("transition_matrix",),
        r"^init\.theta\['means'\]: contains 1 non-finite value",
    ),
    "missing-entry": (
        {"variances": None},
        ("transition_matrix",),
        r"^init\.theta: expected the parameters .* missing \['variances'\]",
    ),
}


@pytest.mark.parametrize("method", ["mle", "em"])
@pytest.mark.parametrize("case", list(BAD_THETA))
def test_fit_switching_names_the_theta_entry_the_user_gave(case, method):
    change, free, message = BAD_THETA[case]
    spec = markov_switching_ar(SERIES, 1)
    theta = {k: v for k, v in (spec.theta | change).items() if v is not None}
    bad = spec._replace(theta=theta)
    with pytest.raises(ValueError, match=message):
        check_spec("init", bad)
    with pytest.raises(ValueError, match=message):
        fit_switching(jax.random.key(0), bad, method=method, free=free)


def test_a_switching_variance_names_its_entry():
    spec = markov_switching_ar(SERIES, 1, switching_variance=True)
    bad = spec._replace(theta=spec.theta | {"variances": np.array([0.5, 0.0])})
    with pytest.raises(ValueError, match=r"^init\.theta\['variances'\]: .*: entry \[1\] is 0,"):
        fit_switching(jax.random.key(0), bad, free=("transition_matrix",))


def test_a_valid_model_passes_by_the_rules_of_the_model():
    """Unordered regime means are a valid model and a valid theta (the order is the fits'
    labelling convention, not a property of the model: any labelling is evaluated as given),
    and probability rows pass to ``check_params``' tolerance (1e-5), as ``--params`` reads
    them."""
    spec = markov_switching_ar(SERIES, 1)
    unordered = spec._replace(theta=spec.theta | {"means": np.array([1.0, 0.5])})
    assert check_spec("init", unordered) is unordered
    checked = check_theta("theta", unordered, unordered.theta)
    np.testing.assert_array_equal(checked["means"], [1.0, 0.5])
    rounded = np.array([[0.33333, 0.66666], [0.5, 0.5]])  # sums to 0.99999
    check_spec("init", spec._replace(theta=spec.theta | {"transition_matrix": rounded}))
