"""Koenker & Mizera (2014), Table 2: GMLEB risk on the Johnstone-Silverman design (slow).

n = 1000 means, k of them equal to mu and the rest 0, sigma = 1. GMLEB = NPMLE on 300 equally
spaced grid points over [min x, max x], then the posterior mean; loss = total squared error.
Four cells of their table are checked against their interior-point values.

Tolerance. Our mean over R = 40 replications has Monte Carlo standard error s / sqrt(R), s the
replicates' standard deviation. Their published value is itself a Monte Carlo mean; we assume
at least 100 replications (the design of Johnstone & Silverman 2004 and Jiang & Zhang 2009),
so its error is at most s / sqrt(100), and it is rounded to an integer (+-0.5). The test allows
4 standard errors of the difference plus the rounding: 4 s sqrt(1/R + 1/100) + 0.5. The
replicates are deterministic (fixed keys), so the test does not flicker; at 4 standard
errors a correct rule fails it with probability below 1e-4 per cell for a fresh seed.
"""

import jax
import numpy as np
import pytest

from attnbayes.inference.deconvolution.kiefer_wolfowitz import npmle, npmle_posterior

N, REPS = 1000, 40
# (k, mu): GMLEB by interior point, Koenker & Mizera (2014), Table 2
CELLS = {(5, 4): 30, (50, 3): 153, (50, 5): 51, (500, 7): 18}


@pytest.mark.slow
@pytest.mark.parametrize(("k", "mu"), sorted(CELLS))
def test_gmleb_risk_matches_koenker_mizera(k, mu):
    z = np.where(np.arange(N) < k, float(mu), 0.0)
    key = jax.random.fold_in(jax.random.PRNGKey(2014), 1000 * k + mu)
    losses = []
    for rep in range(REPS):
        x = z + np.asarray(jax.random.normal(jax.random.fold_in(key, rep), (N,)))
        fit = npmle(x, 1.0)
        assert fit.converged and fit.kkt_gap <= 1e-6
        z_hat, _ = npmle_posterior(x, 1.0, fit, probs=())
        losses.append(float(np.sum((np.asarray(z_hat) - z) ** 2)))
    losses = np.asarray(losses)
    sd = losses.std(ddof=1)
    tolerance = 4.0 * sd * np.sqrt(1.0 / REPS + 1.0 / 100) + 0.5
    assert abs(losses.mean() - CELLS[(k, mu)]) <= tolerance, (losses.mean(), sd, tolerance)
