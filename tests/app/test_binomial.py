"""Brown's transform of binomial counts (``attnbayes.app.binomial``) in closed form."""

import numpy as np

from attnbayes.app import binomial


def test_brown_transform_and_its_inverse():
    """x = arcsin(sqrt((H + 1/4) / (T + 1/2))) and s = 1 / (2 sqrt(T)) in closed form;
    sin(x)^2 maps x back; the transform stabilises the variance at 1 / (4 T)."""
    hits, trials = np.array([0, 1, 3, 12, 100]), np.array([1, 1, 4, 45, 100])
    x, s = binomial.brown_transform(hits, trials)
    np.testing.assert_allclose(x[0], np.arcsin(1 / np.sqrt(6)), rtol=1e-15)  # (1/4) / (3/2)
    np.testing.assert_allclose(x[1], np.arcsin(np.sqrt(5 / 6)), rtol=1e-15)  # (5/4) / (3/2)
    np.testing.assert_allclose(s, [0.5, 0.5, 0.25, 1 / (2 * np.sqrt(45)), 0.05], rtol=1e-15)
    np.testing.assert_allclose(
        binomial.proportion_scale(x), (hits + 0.25) / (trials + 0.5), rtol=1e-14
    )
    p = np.linspace(0, 1, 11)
    np.testing.assert_allclose(binomial.proportion_scale(np.arcsin(np.sqrt(p))), p, atol=1e-15)
    # outside [0, pi/2] z is clipped: increasing everywhere, so intervals map end to end
    z = np.linspace(-1, 3, 401)
    mapped = binomial.proportion_scale(z)
    assert np.all(np.diff(mapped) >= 0) and mapped[0] == 0 and mapped[-1] == 1
    rng = np.random.default_rng(0)
    for t, prob in ((100, 0.3), (400, 0.05)):
        draws, sd = binomial.brown_transform(rng.binomial(t, prob, size=40_000), np.full(1, t))
        np.testing.assert_allclose(draws.std(), sd[0], rtol=0.05)
        np.testing.assert_allclose(draws.mean(), np.arcsin(np.sqrt(prob)), atol=0.2 * sd[0])
