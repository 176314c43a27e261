"""Bad input to the switching reading (issue 12), shared by the bad-input tests beside each module.

The project's standard: a ``ValueError`` (or ``TypeError``) raised before tracing whose message
starts with the argument's name; never a cryptic traceback, a silent NaN or a wrong answer. Each
test module builds its catalogue of (id, call, exception type, anchored pattern) for the public
functions it tests (``entry_point_cases``: every wrong-rank, wrong-width, complex, infinite,
empty and non-numeric observation and every invalid parameter, against an entry point taking
(params, observations)) and runs it through ``check_refused``. Every array is tiny and every case
is refused before tracing, so each runs in milliseconds.
"""

import jax
import numpy as np
import pytest

from attnbayes.inference.switching.kalman import FilterResult
from attnbayes.models.switching import SwitchingParams

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


def filtered(num_steps: int, num_modes: int) -> FilterResult:
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

BAD_KEYS = {
    "int": 0,
    "none": None,
    "float-array": np.zeros(2),
    "key-array": jax.random.split(KEY, 2),
}


def bad_params(params: SwitchingParams) -> dict:
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


def entry_point_cases(name: str, call, params: SwitchingParams) -> list:
    """The cases of an entry point ``call(params, observations)``: every bad observation of
    ``BAD_OBSERVATIONS`` (refused naming ``observations``) and every invalid parameter of
    ``bad_params(params)`` (``params`` valid for the entry point)."""
    cases = []
    for label, y in BAD_OBSERVATIONS.items():
        case = lambda c=call, p=params, y=y: c(p, y)  # noqa: E731
        cases.append((f"{name}-observations-{label}", case, ValueError, "^observations: "))
    for label, (bad, pattern) in bad_params(params).items():
        case = lambda c=call, b=bad: c(b, Y)  # noqa: E731
        cases.append((f"{name}-params-{label}", case, ValueError, pattern))
    return cases


def parametrize_cases(cases: list):
    """``pytest.mark.parametrize`` over (call, error, pattern) with the cases' ids, which must
    be unique."""
    ids = [c[0] for c in cases]
    assert len(ids) == len(set(ids)), "bad-input case ids repeat"
    return pytest.mark.parametrize(("call", "error", "pattern"), [c[1:] for c in cases], ids=ids)
