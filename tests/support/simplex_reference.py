"""An independent NPMLE optimum for tests: SciPy's SLSQP on the simplex."""

import numpy as np
from scipy.optimize import minimize


def slsqp_simplex(log_phi, ftol):
    """argmax over w on the simplex of mean_i log sum_j w_j phi_ij, from the (N, G) log
    likelihoods log phi_ij, by SLSQP with tolerance ``ftol`` (rows shifted by their maxima)."""
    lik = np.exp(log_phi - log_phi.max(axis=1, keepdims=True))
    g = lik.shape[1]
    res = minimize(
        lambda w: -np.mean(np.log(lik @ w)),
        np.full(g, 1.0 / g),
        jac=lambda w: -(lik / (lik @ w)[:, None]).mean(axis=0),
        method="SLSQP",
        bounds=[(0.0, 1.0)] * g,
        constraints=[{"type": "eq", "fun": lambda w: np.sum(w) - 1.0, "jac": lambda w: np.ones(g)}],
        options={"ftol": ftol, "maxiter": 1000},
    )
    assert res.success, res.message
    w = np.clip(res.x, 0.0, None)
    return w / w.sum()
