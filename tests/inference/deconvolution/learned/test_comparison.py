"""The learned stack against EM, the NPMLE and James-Stein on the same tasks, the Efron-Morris
batting averages, and the comparison's argument checks."""

import jax
import numpy as np
import pytest

from attnbayes.inference.deconvolution.kiefer_wolfowitz import npmle, npmle_posterior
from attnbayes.inference.deconvolution.learned import comparison as lc
from attnbayes.inference.deconvolution.learned import training
from attnbayes.inference.deconvolution.learned.unrolled import init_unrolled_em, unrolled_em

# ----------------------------------------------------------------------------- evaluation


def test_comparison_rows_are_the_methods_on_the_same_tasks(perturbed):
    params = perturbed(2, 1, seed=9, scale=0.05)
    methods = ("learned", "em-steps", "npmle", "james-stein")
    result = lc.compare_learned_attention(
        jax.random.PRNGKey(4),
        params,
        families=("three-atoms",),
        num_tasks=2,
        num_points=25,
        methods=methods,
    )
    table = result.regret.set_index("method")
    assert list(table.index) == list(methods)
    tasks = training.heldout_tasks(
        jax.random.fold_in(jax.random.PRNGKey(4), training.HELDOUT_FAMILIES.index("three-atoms")),
        "three-atoms",
        2,
        25,
    )
    oracle = training.oracle_posterior_mean(tasks)[..., 0]
    z = tasks.z[..., 0]

    def regret(est):
        return float(np.mean(np.mean((est - z) ** 2, 1) - np.mean((oracle - z) ** 2, 1)))

    learned = np.stack([unrolled_em(params, x[:, 0], 1.0) for x in tasks.x])
    steps = np.stack([unrolled_em(init_unrolled_em(2), x[:, 0], 1.0) for x in tasks.x])
    npmle_mean = np.stack(
        [npmle_posterior(x[:, 0], 1.0, npmle(x[:, 0], 1.0))[0] for x in np.asarray(tasks.x)]
    )
    x = np.asarray(tasks.x[..., 0])
    centre = x.mean(1, keepdims=True)
    shrink = np.minimum(1, (25 - 3) / ((x - centre) ** 2).sum(1, keepdims=True))
    js = centre + (1 - shrink) * (x - centre)
    for method, est in [("learned", learned), ("em-steps", steps), ("npmle", npmle_mean)]:
        assert abs(table.loc[method, "regret"] - regret(est)) < 1e-10, method
    assert abs(table.loc["james-stein", "regret"] - regret(js)) < 1e-10
    cov = result.coverage
    assert set(cov["method"]) == {"learned", "npmle"} and set(cov["prob"]) == {0.5, 0.9}
    assert np.all((cov["coverage"] >= 0) & (cov["coverage"] <= 1))


def test_batting_averages_table():
    table = lc.batting_averages_comparison(
        jax.random.PRNGKey(0), init_unrolled_em(2), methods=("learned", "james-stein")
    ).set_index("method")
    y = np.asarray(lc.EFRON_MORRIS_HITS) / 45
    truth = np.asarray(lc.EFRON_MORRIS_REST_OF_SEASON)
    # the raw averages' error, as in Efron and Morris's paper (about 0.075)
    np.testing.assert_allclose(table.loc["mle", "sse_average"], np.sum((y - truth) ** 2))
    x = lc.arcsine_transform(y)
    np.testing.assert_allclose(lc.inverse_arcsine_transform(x), y, rtol=1e-12)
    learned = np.asarray(unrolled_em(init_unrolled_em(2), x, 1.0))
    np.testing.assert_allclose(
        table.loc["learned", "Clemente"], lc.inverse_arcsine_transform(learned[0]), rtol=1e-12
    )
    assert table.loc["james-stein", "sse_average"] < 0.5 * table.loc["mle", "sse_average"]


def test_comparison_arguments_are_checked():
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="methods: unknown"):
        lc.compare_learned_attention(key, init_unrolled_em(1), methods=("magic",))
    with pytest.raises(ValueError, match="families: unknown"):
        lc.compare_learned_attention(key, init_unrolled_em(1), families=("gamma",))
    with pytest.raises(ValueError, match="params: a stack for 2-dimensional"):
        lc.compare_learned_attention(key, init_unrolled_em(1, 2))
    with pytest.raises(ValueError, match="methods: 'em' and 'nuts-dp'"):
        lc.length_generalisation(key, init_unrolled_em(1), methods=("em",))


def test_a_bad_mesh_is_refused_by_name():
    key = jax.random.PRNGKey(0)
    with pytest.raises(TypeError, match="^mesh: expected a jax.sharding.Mesh"):
        lc.compare_learned_attention(key, init_unrolled_em(1), mesh="cpu")
    with pytest.raises(TypeError, match="^mesh: expected a jax.sharding.Mesh"):
        lc.length_generalisation(key, init_unrolled_em(1), mesh="cpu")
