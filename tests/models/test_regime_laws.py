"""The laws and constraints that label regimes (``attnbayes.models.regime_laws``): the inverse
Wishart against SciPy, the ordered-first-column bijection (round trip, log-Jacobian against
autodiff's determinant) and its law (density a product of its parts, draws inside the
support)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.distributions.transforms import biject_to
from scipy import stats

from attnbayes.models.regime_laws import (
    InverseWishart,
    OrderedFirstColumn,
    OrderedFirstColumnTransform,
    OrderedNormal,
    ordered_first_column,
)


def test_the_inverse_wishart_density_is_scipys():
    scale = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.5]])
    law = InverseWishart(6.0, scale)
    values = stats.invwishart(6.0, scale).rvs(5, random_state=0)
    np.testing.assert_allclose(
        np.asarray(law.log_prob(values)), stats.invwishart(6.0, scale).logpdf(values.T), rtol=1e-10
    )
    np.testing.assert_allclose(np.asarray(law.mean), scale / 2.0, rtol=1e-12)


def test_inverse_wishart_draws_have_its_mean_with_and_without_a_batch():
    """One law, and a batch of two (one per regime, as ``default_priors`` builds them): draws
    of shape (*sample, *batch, d, d) whose mean is Psi / (nu - d - 1) in each batch entry."""
    scale = np.array([[1.0, 0.4], [0.4, 2.0]])
    draws = np.asarray(InverseWishart(8.0, scale).sample(jax.random.key(0), (20000,)))
    assert draws.shape == (20000, 2, 2)
    se = draws.std(axis=0) / np.sqrt(draws.shape[0])
    assert np.all(np.abs(draws.mean(axis=0) - scale / 5.0) < 4 * se)
    batch = np.stack([scale, 3.0 * scale])
    law = InverseWishart(8.0, batch)
    assert law.batch_shape == (2,) and law.sample(jax.random.key(1)).shape == (2, 2, 2)
    draws = np.asarray(law.sample(jax.random.key(2), (20000,)))
    assert draws.shape == (20000, 2, 2, 2)
    se = draws.std(axis=0) / np.sqrt(draws.shape[0])
    assert np.all(np.abs(draws.mean(axis=0) - batch / 5.0) < 4 * se)


def test_the_ordered_first_column_bijection_round_trips_and_its_jacobian_is_autodiffs():
    transform = biject_to(ordered_first_column)
    assert isinstance(transform, OrderedFirstColumnTransform)
    x = jnp.array([[0.3, -1.0, 2.0], [-0.5, 0.7, 0.1], [1.2, 0.0, -0.3]])
    y = transform(x)
    assert bool(ordered_first_column(y)) and not bool(ordered_first_column(y[::-1]))
    np.testing.assert_allclose(transform.inv(y), x, atol=1e-12)
    np.testing.assert_array_equal(y[:, 1:], x[:, 1:])
    jac = jax.jacobian(lambda v: transform(v.reshape(3, 3)).ravel())(x.ravel())
    log_det = np.linalg.slogdet(np.asarray(jac))[1]
    assert float(transform.log_abs_det_jacobian(x, y)) == pytest.approx(log_det, abs=1e-12)


def test_the_ordered_first_column_law_is_its_parts_and_draws_inside_its_support():
    first = OrderedNormal(0.0, 2.0, 3)
    rest = dist.Normal(jnp.zeros((3, 2)), 1.5).to_event(2)
    law = OrderedFirstColumn(first, rest)
    assert law.event_shape == (3, 3) and law.support is ordered_first_column
    draws = law.sample(jax.random.key(1), (100,))
    assert draws.shape == (100, 3, 3) and bool(jnp.all(ordered_first_column(draws)))
    value = draws[0]
    expected = first.log_prob(value[:, 0]) + rest.log_prob(value[:, 1:])
    assert float(law.log_prob(value)) == pytest.approx(float(expected), abs=1e-12)
    only = OrderedFirstColumn(first)
    assert only.event_shape == (3, 1)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: InverseWishart(5.0, np.ones(3)), "scale: expected"),
        (lambda: OrderedFirstColumn(dist.Normal(0.0, 1.0)), "first: expected"),
        (
            lambda: OrderedFirstColumn(OrderedNormal(0.0, 1.0, 3), dist.Normal(0.0, 1.0)),
            "rest: expected",
        ),
        (
            lambda: OrderedFirstColumn(
                OrderedNormal(0.0, 1.0, 3), dist.Normal(jnp.zeros(3), 1.0).to_event(1)
            ),
            "rest: expected a law with event shape \\(3, k - 1\\)",
        ),
        (lambda: InverseWishart(1.0, np.eye(3)), "df: expected > d - 1 = 2"),
    ],
)
def test_bad_laws_name_the_argument(build, match):
    with pytest.raises(ValueError, match=match):
        build()
