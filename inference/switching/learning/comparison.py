"""Learning the parameters of a switching model four ways, scored against the truth and on a
held-out continuation: ``compare_switching_learning``.

The priors, the free parameters theta (``GIBBS_FREE`` by default) and the samplers are those of
``posteriors``. ``compare_switching_learning`` learns theta from a training series y_{1:T} and
scores it on a held-out continuation y_{T+1:T+H}:

- "mle": ``fit_switching(method="mle")``, argmax_theta log p(y_{1:T} | theta) by L-BFGS, the
  likelihood a filter's (``likelihood``: "exact", "gpb2" (Kim 1994), "imm" (Blom and
  Bar-Shalom 1988), "gpb1");
- "em": ``fit_switching(method="em")`` (Dempster, Laird and Rubin 1977; Hamilton 1990);
- "nuts": NUTS (Hoffman and Gelman 2014) on ``switching_marginal_model``, the density
  p(theta) p(y_{1:T} | theta) with the states and modes integrated out by the same filter;
  point estimate the posterior mean;
- "gibbs": ``run_switching_gibbs`` (Carter and Kohn 1994; Gerlach, Carter and Kohn 2000),
  which samples p(s, x, theta | y_{1:T}) exactly, with no filter approximation; point
  estimate the posterior mean.
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, NamedTuple

import jax
import numpy as np

from .... import sharding, validation
from ....models.markov_switching import SwitchingSpec
from ....models.switching import SwitchingParams, SwitchingPriors
from ...diagnostics import diagnostics
from .likelihood import check_likelihood, switching_log_likelihood_unchecked
from .mle import fit_switching
from .posteriors import (
    check_kwargs,
    check_observations,
    check_samplers,
    learning_problem,
    posterior_draws,
    sample_theta,
)

if TYPE_CHECKING:  # pandas is imported where used
    import pandas as pd

LEARNING_METHODS = ("mle", "em", "nuts", "gibbs")


def _fit_options() -> tuple:
    skip = {"key", "observations", "init", "method", "likelihood", "inputs", "free"}
    return tuple(n for n in inspect.signature(fit_switching).parameters if n not in skip)


# ----------------------------------------------------------------------------- held-out score


_CHUNK = 128  # draws per device per call of the held-out kernel: one program for any S


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _heldout_kernel(structure, likelihood, mesh, draws, fixed, obs_train, u_train, obs_all, u_all):
    """Per draw of a chunk: (log L_T(theta), log L_{T+H}(theta) - log L_T(theta)), the
    draws split over ``mesh``."""

    def one(free_values, fixed, obs_train, u_train, obs_all, u_all):
        theta = fixed | free_values
        train = switching_log_likelihood_unchecked(structure, likelihood, theta, obs_train, u_train)
        whole = switching_log_likelihood_unchecked(structure, likelihood, theta, obs_all, u_all)
        return train, whole - train

    local = jax.vmap(one, in_axes=(0, None, None, None, None, None))
    split = (True, False, False, False, False, False)
    run = sharding.shard_batch(local, mesh, split, True)
    return run(draws, fixed, obs_train, u_train, obs_all, u_all)


class _Scorer(NamedTuple):
    spec: SwitchingSpec
    free: tuple
    likelihood: str
    obs_all: np.ndarray
    u_all: np.ndarray
    mesh: object

    def __call__(self, draws: dict):
        """(train log-likelihoods (S,), held-out log predictive densities (S,)) of S draws
        {name: (S, *shape)}, vmapped over chunks of ``_CHUNK`` draws per device of the mesh
        (the last chunk padded with copies of the last draw), each chunk split over the
        mesh. Host (NumPy) values in: every process passes the same ones."""
        dtype = self.spec.observations.dtype
        fixed = {n: np.asarray(v, dtype) for n, v in self.spec.theta.items() if n not in self.free}
        data = (
            np.asarray(self.spec.observations),
            np.asarray(self.spec.inputs, dtype),
            np.asarray(self.obs_all),
            np.asarray(self.u_all, dtype),
        )
        num = next(iter(draws.values())).shape[0]
        step = _CHUNK * sharding.mesh_size(self.mesh)
        padded = -(-num // step) * step
        batch = {
            n: np.concatenate([v, np.repeat(v[-1:], padded - num, axis=0)]).astype(dtype)
            for n, v in ((n, np.asarray(draws[n])) for n in self.free)
        }
        train, heldout = [], []
        structure = self.spec.structure
        for lo in range(0, padded, step):
            chunk = {n: v[lo : lo + step] for n, v in batch.items()}
            out = _heldout_kernel(structure, self.likelihood, self.mesh, chunk, fixed, *data)
            a, b = sharding.gather(out)
            train.append(a)
            heldout.append(b)
        return np.concatenate(train)[:num], np.concatenate(heldout)[:num]


def _mixture_lpd(heldout: np.ndarray) -> float:
    """log (1/S) sum_s exp(heldout_s): the posterior predictive density of the held-out steps
    (max-shifted, so no term underflows)."""
    top = float(np.max(heldout))
    return top + float(np.log(np.mean(np.exp(heldout - top))))


# ----------------------------------------------------------------------------- comparison


class SwitchingLearningComparison(NamedTuple):
    """The result of ``compare_switching_learning``.

    Attributes:
        table: pandas DataFrame with columns method, metric, value (tidy; the metrics are in
            ``compare_switching_learning``'s docstring).
        thetas: {method: {name: array}} each method's point estimate of the free parameters
            (the posterior mean for the samplers).
        truth: {name: array} the true free parameters (None when unknown).
        results: {method: result}: a ``SwitchingFitResult`` ("mle", "em") or the sampler's
            DataTree ("nuts", "gibbs").
        free: the learned parameter names.
        likelihood: the filter of the fits, NUTS and the held-out scores.
        priors: the conjugate priors of the samplers (restricted to the free fields).
    """

    table: pd.DataFrame
    thetas: dict
    truth: dict | None
    results: dict
    free: tuple
    likelihood: str
    priors: SwitchingPriors


def compare_switching_learning(
    key: jax.Array,
    model: SwitchingParams | SwitchingSpec,
    observations,
    heldout,
    *,
    methods=None,
    truth: dict | None = None,
    free=None,
    priors: SwitchingPriors | None = None,
    likelihood: str | None = None,
    inputs=None,
    heldout_inputs=None,
    start: dict | None = None,
    mle_kwargs: dict | None = None,
    em_kwargs: dict | None = None,
    nuts_kwargs: dict | None = None,
    gibbs_kwargs: dict | None = None,
    mesh=None,
) -> SwitchingLearningComparison:
    """Learn theta from y_{1:T} by MLE, EM, NUTS and Gibbs; score each against the truth and on
    the held-out y_{T+1:T+H}; one tidy table.

    theta is the free parameters (default ``GIBBS_FREE`` for a state-space model: Pi, c_j,
    r_j, the set the Gibbs sampler draws, so the four learn the same thing; ``spec.free`` for
    an econometric spec). The samplers share the priors (default ``study_priors``: Dirichlet
    (1 + 9 I) rows, InverseGamma(3, 2) scales; ``numpyro_priors`` gives NUTS the same laws;
    free fields they do not cover, e.g. an econometric spec's means and variances, get
    ``default_priors(spec)`` at the start under NUTS). The filter ``likelihood`` L_T(theta) =
    p(y_{1:T} | theta) is that of "mle", "em", "nuts" and of every held-out score:

        mle:   theta_hat = argmax_theta log L_T(theta)
        em:    theta_hat = the limit of EM on log L_T
        nuts:  theta_s ~ p(theta | y_{1:T}) ∝ p(theta) L_T(theta),  theta_hat = mean_s theta_s
        gibbs: (s, x, theta)_s ~ p(s, x, theta | y_{1:T}) (exact),  theta_hat = mean_s theta_s

    Metrics (``table``: method, metric, value):

    - ``rmse_<name>`` = sqrt(mean_k (theta_hat_k - theta_k)^2) over the entries of each free
      field, and ``rel_error_<name>`` = ||theta_hat - theta|| / ||theta|| (Frobenius), when the
      truth is known;
    - ``heldout_lpd_per_step``: (1/H) log p(y_{T+1:T+H} | y_{1:T}), where for a point estimate
      log p(y_{T+1:T+H} | y_{1:T}, theta_hat) = log L_{T+H}(theta_hat) - log L_T(theta_hat)
      = sum_{t>T} log p(y_t | y_{1:t-1}, theta_hat), and for a sampler the posterior
      predictive log (1/S) sum_s p(y_{T+1:T+H} | y_{1:T}, theta_s) (computed vmapped over the
      S draws); the samplers also report ``heldout_lpd_plugin_per_step`` at their posterior
      mean (H counts the held-out steps with an observed coordinate);
    - ``train_log_likelihood``: log L_T(theta_hat);
    - ``wall_time_s``: the method's wall time, compilation included;
    - MLE and EM: ``converged`` (1 or 0, ``SwitchingFitResult.converged``) and ``iterations``
      (the accepted steps of the best start; EM returns its start when its first step lowers
      log L, which an approximate (collapsed) E-step can);
    - samplers: ``max_rhat_theta``, ``min_ess_bulk_theta``, ``min_ess_tail_theta`` over the
      scalar entries of theta (rank-normalised split R-hat and ESS, Vehtari et al. 2021),
      ``ess_bulk_per_s`` = min bulk ESS / wall time; NUTS ``divergences``.

    Args:
        key: a ``jax.random`` key (MLE starts, NUTS, Gibbs).
        model: the true ``SwitchingParams`` (theta is read off it: Pi, and scales 1 of
            Q_j = c_j Q0_j, R_j = r_j R0_j with Q0, R0 its covariances; MLE and EM start at
            the prior mean of each row of Pi and the prior mode b / (a + 1) of each scale, not
            at the truth), or a ``SwitchingSpec`` whose theta is the start of the fits (its data
            are the training series unless ``observations`` is given).
        observations: (T, o) y_{1:T}, NaN coordinates missing; with a spec, None for its own.
        heldout: (H, o) y_{T+1:T+H}, the continuation of the same series.
        methods: any of ``LEARNING_METHODS``; default all that apply ("gibbs" needs a
            state-space model and free within ``GIBBS_FREE``).
        truth: with a spec, {name: true value} of (at least) the free parameters; None skips
            the parameter errors.
        free: the learned names (see above).
        priors: ``SwitchingPriors`` (default ``study_priors(M)``); it must cover the free
            fields among Pi, c, r.
        likelihood: "exact", "gpb2", "imm", "gpb1" (default "imm" for a state-space model,
            "exact" (Hamilton's filter) for an econometric spec, whose collapse is exact).
        inputs: (T, k) u_{1:T} when the model has inputs.
        heldout_inputs: (H, k) u_{T+1:T+H} when the model has inputs.
        start: {name: value} overriding the start of the fits for free parameters.
        mle_kwargs, em_kwargs: for ``fit_switching`` (num_starts, start_scale, max_iterations,
            tolerance).
        nuts_kwargs: for ``run_nuts`` (num_warmup, num_samples, num_chains, target_accept_prob,
            max_tree_depth, dense_mass, init_values, chain_method); default 2 x (500 + 1000).
        gibbs_kwargs: for ``run_switching_gibbs`` (num_warmup, num_samples, num_chains,
            mode_sampler, init_modes); default 2 x (1000 + 4000).
        mesh: a one-axis ``jax.sharding.Mesh`` the held-out scoring splits the posterior
            draws over; default ``sharding.batch_mesh()`` (every device).

    Where the work runs: the held-out scores of the samplers' S draws (two filter passes,
    over y_{1:T} and y_{1:T+H}, per draw) are split over ``mesh``, ``_CHUNK`` draws per
    device per call (the draws padded with copies of the last one); nothing is reduced
    across devices: the draws go in (a few numbers each) and two numbers per draw come out,
    against a filter pass of T + H steps per draw. Each draw's score is the same program on
    any mesh (equal to round-off on 1, 2 or 4 devices). Not split: the four fits themselves,
    one run each (L-BFGS and EM from their starts; NUTS and Gibbs with their chains, keys
    from ``key`` whatever the mesh).

    Returns:
        ``SwitchingLearningComparison``.

    References: Kim (1994), J. Econometrics 60, 1-22 (GPB2 and the approximate likelihood);
    Blom and Bar-Shalom (1988), IEEE Trans. Automatic Control 33, 780-783 (IMM);
    Frühwirth-Schnatter (2006), Finite Mixture and Markov Switching Models, Springer (Bayesian
    estimation of switching models, conjugate priors, Gibbs); Hoffman and Gelman (2014), JMLR
    15, 1593-1623 (NUTS).
    """
    validation.check_key("key", key)
    mesh = sharding.check_mesh(mesh)
    p = learning_problem(model, observations, inputs, truth, free, priors, start)
    spec = p.spec
    kind = spec.structure.kind
    if likelihood is None:
        likelihood = "imm" if kind == "state_space" else "exact"
    heldout = check_observations("heldout", heldout, spec.observations.shape[1])
    k = spec.inputs.shape[1]
    if k == 0:
        if heldout_inputs is not None and np.size(heldout_inputs):
            raise ValueError("heldout_inputs: the model takes no inputs")
        u_heldout = np.zeros((heldout.shape[0], 0))
    else:
        if heldout_inputs is None:
            raise ValueError(f"heldout_inputs: required, shape ({heldout.shape[0]}, {k})")
        u_heldout = validation.as_float_array("heldout_inputs", heldout_inputs)
        if u_heldout.ndim == 1 and k == 1:
            u_heldout = u_heldout[:, None]
        if u_heldout.shape != (heldout.shape[0], k):
            raise ValueError(
                f"heldout_inputs: expected shape ({heldout.shape[0]}, {k}), got {u_heldout.shape}"
            )
        validation.check_finite("heldout_inputs", u_heldout)
    obs_all = np.concatenate([spec.observations, heldout.astype(spec.observations.dtype)])
    u_all = np.concatenate([spec.inputs, u_heldout.astype(spec.inputs.dtype)])
    likelihood = check_likelihood(likelihood, spec.structure, obs_all.shape[0])
    if likelihood == "kalman":
        raise ValueError("likelihood: 'kalman' has one mode; nothing switches to learn")

    if methods is None:
        methods = tuple(m for m in LEARNING_METHODS if m != "gibbs" or p.gibbs_params is not None)
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    unknown = [m for m in methods if m not in LEARNING_METHODS]
    if unknown or not methods or len(set(methods)) != len(methods):
        raise ValueError(
            f"methods: expected distinct names from {list(LEARNING_METHODS)}, got {list(methods)}"
        )
    if "gibbs" in methods and p.gibbs_params is None:
        raise ValueError(f"methods: 'gibbs' cannot learn this theta: {p.gibbs_reason}")
    fit_options = _fit_options()
    mle_opts = check_kwargs("mle_kwargs", mle_kwargs, fit_options)
    em_opts = check_kwargs("em_kwargs", em_kwargs, fit_options)
    samplers = {"nuts": likelihood, "gibbs": "gibbs"}
    sampler_opts = check_samplers(
        p, {samplers[m]: "methods" for m in methods if m in samplers}, nuts_kwargs, gibbs_kwargs
    )
    num_heldout = int(np.sum(np.any(~np.isnan(heldout), axis=-1)))
    if num_heldout == 0:
        raise ValueError("heldout: every row is missing (NaN); nothing to score")
    score = _Scorer(spec, p.free, likelihood, obs_all, u_all, mesh)
    keys = dict(zip(LEARNING_METHODS, jax.random.split(key, len(LEARNING_METHODS)), strict=True))

    rows, thetas, results = [], {}, {}
    for method in methods:
        if method in ("mle", "em"):
            opts = mle_opts if method == "mle" else em_opts
            fit = fit_switching(
                keys[method],
                spec,
                method=method,
                likelihood=likelihood,
                free=p.free,
                **opts,
            )
            results[method] = fit
            thetas[method] = {n: np.asarray(fit.theta[n]) for n in p.free}
            seconds = fit.seconds
            draws = None
            rows.append((method, "converged", float(fit.converged)))
            rows.append((method, "iterations", float(len(fit.log_likelihood) - 1)))
        else:
            tree, seconds = sample_theta(keys[method], p, samplers[method], sampler_opts)
            results[method] = tree
            draws = posterior_draws(tree, p.free)
            thetas[method] = {n: v.mean(axis=(0, 1)) for n, v in draws.items()}
        rows.append((method, "wall_time_s", seconds))
        if p.truth is not None:
            for name in p.free:
                err = thetas[method][name] - p.truth[name]
                rows.append((method, f"rmse_{name}", float(np.sqrt(np.mean(err**2)))))
                norm = float(np.linalg.norm(p.truth[name]))
                rows.append((method, f"rel_error_{name}", float(np.linalg.norm(err)) / norm))
        point = {n: v[None] for n, v in thetas[method].items()}
        train_ll, plugin = score(point)
        rows.append((method, "train_log_likelihood", float(train_ll[0])))
        if draws is None:
            rows.append((method, "heldout_lpd_per_step", float(plugin[0]) / num_heldout))
            continue
        flat = {n: v.reshape(-1, *v.shape[2:]) for n, v in draws.items()}
        _, per_draw = score(flat)
        rows.append((method, "heldout_lpd_per_step", _mixture_lpd(per_draw) / num_heldout))
        rows.append((method, "heldout_lpd_plugin_per_step", float(plugin[0]) / num_heldout))
        diag = diagnostics(tree, var_names=list(p.free))
        rows.append((method, "max_rhat_theta", diag.max_r_hat))
        rows.append((method, "min_ess_bulk_theta", diag.min_ess_bulk))
        rows.append((method, "min_ess_tail_theta", diag.min_ess_tail))
        rows.append((method, "ess_bulk_per_s", diag.min_ess_bulk / seconds))
        if method == "nuts":
            rows.append((method, "divergences", float(diag.num_divergences)))
    import pandas as pd

    return SwitchingLearningComparison(
        table=pd.DataFrame(rows, columns=["method", "metric", "value"]),
        thetas=thetas,
        truth=p.truth,
        results=results,
        free=p.free,
        likelihood=likelihood,
        priors=p.priors,
    )


__all__ = ["LEARNING_METHODS", "SwitchingLearningComparison", "compare_switching_learning"]
