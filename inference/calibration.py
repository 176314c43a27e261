"""Calibration of the registry's methods over a fixed prior: SBC ranks for samplers, coverage for
interval methods, and a verdict.

``calibrate(key, reading, method, study=...)`` draws parameters and data from the study's fixed
prior (not the data-dependent priors the comparisons use), runs the registry's method on every
replicate inside one compiled program (``attnbayes.inference.diagnostics.sbc`` /
``interval_coverage``) and returns the DataTree with a verdict in its attrs.

- Deconvolution (``DeconvolutionStudy``): the NumPyro program ``deconvolution_model`` with
  Dirichlet or truncated-DP weights and N(atom_loc, atom_scale^2) atoms, x drawn by the program
  itself; the latent z_i is drawn from its exact conditional Categorical(A_i) given (w, mu, x).
  The noise is one sigma for all, one fixed s_i per observation (``sigma`` a tuple), or
  heteroscedastic settings drawn afresh for every replicate (``noise_range``: s_i = sigma_i r_i,
  r_i log-uniform on the range, ``attnbayes.models.deconvolution.noise_scales``); the methods
  see the s_i with the data (``data["sigma"]``) and condition on them.
  Samplers ("nuts", "nuts-dp", "gibbs") are ranked on permutation-invariant test quantities
  (``deconvolution_quantities``: nu's CDF at fixed points, its mean and standard deviation, and
  the log-likelihood); interval methods ("attention-em", "npmle", "approx-gibbs", "james-stein",
  "learned", "oracle") get the coverage of their intervals for z_i. "learned" is the grid stack
  (``deconvolution.learned.grid_stack``, parameters ``pretrained_grid_stack()`` unless
  ``overrides={"params": ...}``): its posterior of z_i is the normal N(m_i, v_i) of its
  posterior moments, the distribution its intervals z_hat -+ q sd are the quantiles of. It
  gives posteriors for the points it sees only, so ``data_fraction`` is refused for it.
- Switching (``SwitchingStudy``): fixed parameters (a named scenario), (s, x, y) simulated; the
  filters and smoothers get the coverage of their intervals for every coordinate of x_t, the
  quantiles of their Gaussian-mixture posterior (mode_probs, means, covs) found by bisection.

The verdict rule is ``calibration_verdict``'s docstring. A deliberately wrong method for the
power check: ``overrides={"sigma_factor": 1.3}`` makes a deconvolution method assume the noise
scale 1.3 sigma; ``{"data_fraction": 0.5}`` gives it the first half of the data only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import validation
from ..constants import (
    CALIBRATION_ATOMS,
    CALIBRATION_CHUNK_SIZE,
    CALIBRATION_POINTS,
    CALIBRATION_REPLICATES,
    CALIBRATION_STEPS,
)
from ..models import deconvolution as dmodel
from ..models import switching as smodel
from ..sharding import check_mesh
from . import methods as registry
from .deconvolution import em, gibbs
from .deconvolution.kiefer_wolfowitz import npmle
from .deconvolution.learned.grid_stack import check_grid_params, grid_stack_moments_unchecked
from .diagnostics import PosteriorDraws, coverage_summary, interval_coverage, sbc
from .mcmc import run_nuts_unchecked
from .switching import filters as sfilters
from .switching import smoothers as ssmoothers

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

__all__ = [
    "CALIBRATION_METHODS",
    "VERDICTS",
    "DeconvolutionStudy",
    "SwitchingStudy",
    "calibrate",
    "calibration_table",
    "calibration_verdict",
    "deconvolution_quantities",
    "deconvolution_simulator",
    "switching_simulator",
]

VERDICTS = ("calibrated", "over-confident", "under-confident", "biased")

# the methods calibrate() runs, per reading: the registry's methods offered by
# ``attnbayes calibrate``, in the registry's order
CALIBRATION_METHODS = {
    reading: tuple(m.name for m in registry.command_methods("calibrate", reading))
    for reading in registry.READINGS
}


class DeconvolutionStudy(NamedTuple):
    """The fixed prior and sizes of a deconvolution calibration study.

    x_i ~ sum_k w_k N(mu_k, s_i^2), i = 1..N; w ~ Dirichlet(concentration 1_K) (or the
    truncated DP with ``prior="dp"``); mu_k ~ N(atom_loc, atom_scale^2). ``cdf_points`` are
    where nu's CDF is a test quantity, in units of atom_scale around atom_loc.

    The noise scales s_i: ``sigma`` a number (s_i = sigma, the homoscedastic study) or a tuple
    of ``num_points`` numbers (one fixed s_i per observation); with ``noise_range = (low,
    high)`` every replicate draws s_i = sigma_i r_i with r_i log-uniform on [low, high]
    (independent of the means; e.g. ``sigma=1.0, noise_range=(0.5, 3.0)``, the setting of
    issue 35).
    """

    num_atoms: int = CALIBRATION_ATOMS
    num_points: int = CALIBRATION_POINTS
    sigma: float | tuple[float, ...] = 1.0
    prior: str = "dirichlet"
    concentration: float = 1.0
    atom_loc: float = 0.0
    atom_scale: float = 3.0
    cdf_points: tuple[float, ...] = (-1.0, -0.5, 0.0, 0.5, 1.0)
    noise_range: tuple[float, float] | None = None


class SwitchingStudy(NamedTuple):
    """Fixed parameters (a scenario of ``attnbayes.models.switching``) and the series length."""

    scenario: str = "maneuvering-target"
    num_steps: int = CALIBRATION_STEPS


# ----------------------------------------------------------------------------- deconvolution


def _heteroscedastic(study: DeconvolutionStudy) -> bool:
    """Whether the study's noise scales differ by observation (then ``data["sigma"]``)."""
    return study.noise_range is not None or np.ndim(study.sigma) > 0


def _fixed_sigma(study: DeconvolutionStudy):
    """The study's ``sigma``: a float, or an (N,) array."""
    if np.ndim(study.sigma) == 0:
        return float(study.sigma)
    return jnp.asarray(np.asarray(study.sigma, dtype=np.float64))


def _model_kwargs(study: DeconvolutionStudy, prior: str) -> dict:
    kwargs = {
        "sigma": _fixed_sigma(study),
        "num_atoms": study.num_atoms,
        "prior": prior,
        "atom_loc": float(study.atom_loc),
        "atom_scale": float(study.atom_scale),
    }
    if prior == "dirichlet":
        kwargs["concentration"] = float(study.concentration)
    return kwargs


def deconvolution_simulator(study: DeconvolutionStudy) -> Callable:
    """``simulate(key) -> (truth, data)`` from the NumPyro program's prior.

    ``truth``: the program's latent sites (``weights``, ``atoms``; with the DP also
    ``dp_concentration`` and ``sticks``) and z (N,), drawn from Categorical(A_i) given the
    program's x; ``data``: ``{"x": (N,)}``, with per-unit noise also ``"sigma": (N,)`` (the
    s_i, drawn for the replicate with ``noise_range``, from ``fold_in(key, 2)``).
    """
    from numpyro import handlers

    kwargs = _model_kwargs(study, study.prior)

    def simulate(key):
        k_model, k_z = jax.random.split(key)
        sigma = kwargs["sigma"]
        if study.noise_range is not None:
            low, high = study.noise_range
            r = dmodel.noise_scales(jax.random.fold_in(key, 2), study.num_points, low, high)
            sigma = sigma * r
        tr = handlers.trace(handlers.seed(dmodel.deconvolution_model, k_model)).get_trace(
            None, num_points=study.num_points, **{**kwargs, "sigma": sigma}
        )
        truth = {
            name: site["value"]
            for name, site in tr.items()
            if site["type"] in ("sample", "deterministic") and name != "x"
        }
        x = tr["x"]["value"]
        log_resp = (
            jnp.log(truth["weights"])[None, :]
            - 0.5 * ((x[:, None] - truth["atoms"][None, :]) / _column(sigma)) ** 2
        )
        labels = jax.random.categorical(k_z, log_resp, axis=-1)
        truth["z"] = truth["atoms"][labels]
        data = {"x": x}
        if _heteroscedastic(study):
            data["sigma"] = jnp.broadcast_to(sigma, x.shape)
        return truth, data

    return simulate


def deconvolution_quantities(study: DeconvolutionStudy) -> Callable:
    """Permutation-invariant test quantities of nu = sum_k w_k delta(mu_k) (exchangeable atoms):

    cdf(t_j) = sum_k w_k 1[mu_k <= t_j],  t_j = atom_loc + atom_scale * cdf_points[j]
    mean = sum_k w_k mu_k,   sd = (sum_k w_k (mu_k - mean)^2)^(1/2)
    log_likelihood = sum_i log sum_k w_k N(x_i; mu_k, s_i^2)
    """
    points = study.atom_loc + study.atom_scale * np.asarray(study.cdf_points, dtype=np.float64)
    fixed = _fixed_sigma(study)

    def quantities(values, data):
        w, mu, x = values["weights"], values["atoms"], data["x"]
        sigma = _column(data.get("sigma", fixed))
        mean = jnp.sum(w * mu)
        log_comp = (
            jnp.log(w)[None, :]
            - 0.5 * ((x[:, None] - mu[None, :]) / sigma) ** 2
            - 0.5 * jnp.log(2 * jnp.pi * sigma**2)
        )
        return {
            "cdf": jnp.sum(w[None, :] * (mu[None, :] <= jnp.asarray(points, mu.dtype)[:, None]), 1),
            "mean": mean,
            "sd": jnp.sqrt(jnp.sum(w * (mu - mean) ** 2)),
            "log_likelihood": jnp.sum(jax.nn.logsumexp(log_comp, axis=1)),
        }

    return quantities


def _column(sigma):
    """sigma as a number, or (N,) scales as an (N, 1) column against (N, K) arrays."""
    return sigma if jnp.ndim(sigma) == 0 else jnp.reshape(sigma, (-1, 1))


def _visible(data, settings, sigma):
    """The data and noise scales a (possibly deliberately wrong) method sees: ``(x, sigma,
    sigma_all)``, ``sigma`` for the visible x, ``sigma_all`` for all of them (both scaled by
    ``sigma_factor``). Per-unit scales come with the data (``data["sigma"]``)."""
    x = data["x"]
    sigma_all = data.get("sigma", sigma) * settings.pop("sigma_factor", 1.0)
    sigma = sigma_all
    fraction = settings.pop("data_fraction", 1.0)
    if fraction != 1.0:
        keep = max(1, round(fraction * x.shape[0]))
        x = x[:keep]
        sigma = sigma if jnp.ndim(sigma) == 0 else sigma[:keep]
    return x, sigma, sigma_all


def _deconvolution_posterior(study: DeconvolutionStudy, name: str, settings: dict) -> Callable:
    prior = "dp" if name == "nuts-dp" else study.prior
    if name == "gibbs" and prior != "dirichlet":
        raise ValueError("method: 'gibbs' samples the Dirichlet prior; the study has prior='dp'")

    fixed = _fixed_sigma(study)

    def posterior(key, data):
        opts = dict(settings)
        x, sigma, _ = _visible(data, opts, fixed)
        if name in ("nuts", "nuts-dp"):
            kwargs = {**_model_kwargs(study, prior), "sigma": sigma}
            opts.pop("prior", None)
            samples, stats = run_nuts_unchecked(
                key, dmodel.deconvolution_model, (x,), kwargs, **opts
            )
            names = ("weights", "atoms", "dp_concentration", "sticks")
            draws = {n: samples[n] for n in names if n in samples}
            return PosteriorDraws(draws, jnp.sum(stats["diverging"]))
        # gibbs: chains of the blocked conjugate sampler (gibbs_init + gibbs_step)
        num_chains, num_warmup = opts.pop("num_chains"), opts.pop("num_warmup")
        num_samples = opts.pop("num_samples")
        prior_kw = {
            "concentration": study.concentration,
            "atom_loc": study.atom_loc,
            "atom_scale": study.atom_scale,
        }

        def chain(k):
            k_init, k_run = jax.random.split(k)
            state = gibbs.gibbs_init(k_init, x, sigma, num_atoms=study.num_atoms, **prior_kw)

            def body(st, kk):
                new, _ = gibbs.gibbs_step(kk, st, x, sigma, **prior_kw)
                return new, new

            keys = jax.random.split(k_run, num_warmup + num_samples)
            _, states = jax.lax.scan(body, state, keys)
            return jax.tree_util.tree_map(lambda v: v[num_warmup:], states)

        states = jax.vmap(chain)(jax.random.split(key, num_chains))
        draws = {"weights": jnp.exp(states.log_weights), "atoms": states.atoms}
        return PosteriorDraws(draws, jnp.zeros((), jnp.int32))

    return posterior


def _discrete_cdf(x, atoms, weights, sigma, z, tolerance=1e-9):
    """(P(Z_i < z_i), P(Z_i <= z_i)) under z_i | x_i ~ sum_k A_ik delta(mu_k)."""
    resp = em.responsibilities(x, atoms, weights, sigma)
    mu = jnp.reshape(atoms, (1, -1))
    tol = tolerance * (1.0 + jnp.abs(z))[:, None]
    below = jnp.sum(resp * (mu < z[:, None] - tol), axis=1)
    at = jnp.sum(resp * (mu <= z[:, None] + tol), axis=1)
    return below, at


def _deconvolution_cdf(study: DeconvolutionStudy, name: str, settings: dict) -> Callable:
    if name == "james-stein" and _heteroscedastic(study):
        raise ValueError(
            "method: 'james-stein' here assumes one sigma for all; the study's noise differs "
            "by observation"
        )
    fixed = _fixed_sigma(study)

    def posterior_cdf(key, data, target):
        opts = dict(settings)
        x_all, z = data["x"], target["z"]
        x, sigma, sigma_all = _visible(data, opts, fixed)
        if name == "attention-em":
            fit = em.fit_em(x, sigma, **opts)
            atoms, weights = fit.atoms, fit.weights
        elif name == "npmle":
            fit = npmle(x, sigma, **opts)
            atoms, weights = fit.atoms, fit.weights
        elif name == "approx-gibbs":
            from .deconvolution.gibbs import approximate_gibbs

            trace = approximate_gibbs(
                x,
                sigma,
                _quantile_start(x, study),
                jnp.full(study.num_atoms, 1.0 / study.num_atoms),
                **opts,
            )
            atoms, weights = trace.atoms[-1], trace.weights[-1]
        elif name == "oracle":
            atoms, weights = data["atoms"], data["weights"]
        elif name == "learned":  # the normal posterior of its moments (data_fraction refused)
            from jax.scipy.special import ndtr

            params = jax.tree_util.tree_map(lambda v: jnp.asarray(v, x.dtype), opts["params"])
            s = jnp.broadcast_to(jnp.asarray(sigma, x.dtype), x.shape)
            mean, var = grid_stack_moments_unchecked(
                params, x, s, jnp.ones(x.shape, bool), opts["grid_size"]
            )
            cdf = ndtr((z - mean) / jnp.sqrt(var))
            return {"z": (cdf, cdf)}
        else:  # james-stein: positive-part shrinkage to the grand mean, normal EB posterior
            cdf = _james_stein_cdf(x_all, x, sigma, z)
            return {"z": (cdf, cdf)}
        return {"z": _discrete_cdf(x_all, atoms, weights, sigma_all, z)}

    return posterior_cdf


def _quantile_start(x, study):
    """K starting atoms at the data's quantiles (traceable; approximate Gibbs' start)."""
    probs = (jnp.arange(study.num_atoms) + 0.5) / study.num_atoms
    return jnp.quantile(x, probs)


def _james_stein_cdf(x_all, x, sigma, z):
    """Phi((z - m_i) / s): z_i | x ~ N(xbar + (1 - B)(x_i - xbar), sigma^2 (1 - B)),
    B = min(1, (N - 3) sigma^2 / sum (x_i - xbar)^2) (Efron and Morris 1973)."""
    from jax.scipy.special import ndtr

    n = x.shape[0]
    centre = jnp.mean(x)
    spread = jnp.sum((x - centre) ** 2)
    shrink = jnp.clip((n - 3) * sigma**2 / jnp.maximum(spread, 1e-300), 0.0, 1.0)
    mean = centre + (1 - shrink) * (x_all - centre)
    sd = sigma * jnp.sqrt(jnp.maximum(1 - shrink, 1e-300))
    return ndtr((z - mean) / sd)


# ----------------------------------------------------------------------------- switching


def switching_simulator(study: SwitchingStudy) -> Callable:
    """``simulate(key) -> (truth, data)``: truth ``{"states": (T, d), "modes": (T,)}``, data
    ``{"y": (T, o)}`` from the scenario's fixed parameters."""
    params = smodel.check_params("params", smodel.get_scenario(study.scenario))
    arrays = smodel.SwitchingParams(*(jnp.asarray(a) for a in params))

    def simulate(key):
        modes, states, obs = smodel.simulate(key, arrays, study.num_steps)
        return {"states": states, "modes": modes}, {"y": obs}

    return simulate, arrays


def _mixture_cdf(mode_probs, means, covs, x):
    """P(X_t,c <= x_t,c) of each coordinate under sum_j p_tj N(m_tj, P_tj): (T, d)."""
    from jax.scipy.special import ndtr

    sd = jnp.sqrt(jnp.diagonal(covs, axis1=-2, axis2=-1))  # (T, M, d)
    return jnp.sum(mode_probs[..., None] * ndtr((x[:, None, :] - means) / sd), axis=1)


def _switching_cdf(arrays, name: str, settings: dict) -> Callable:
    method = registry.get_method("switching", name)

    def posterior_cdf(key, data, target):
        y = data["y"]
        if method.target == "filter":  # the registry's filter
            res = method.fit(arrays, y, **settings)
        else:
            if name == "exact-smoother":
                res = ssmoothers.exact_smoother(arrays, y, **settings)
            else:  # Kim's smoother on the GPB2 or IMM filter
                base = sfilters.gpb2_filter if name == "kim-gpb2" else sfilters.imm_filter
                res = ssmoothers.kim_smoother(arrays, y, base(arrays, y), **settings)
        cdf = _mixture_cdf(res.mode_probs, res.means, res.covs, target["states"])
        return {"states": (cdf, cdf)}

    return posterior_cdf


# ----------------------------------------------------------------------------- calibrate


def calibrate(
    key: jax.Array,
    reading: str,
    method: str,
    *,
    study: DeconvolutionStudy | SwitchingStudy | None = None,
    num_replicates: int = CALIBRATION_REPLICATES,
    overrides: Mapping[str, Any] | None = None,
    levels: tuple[float, ...] = (0.5, 0.9),
    chunk_size: int = CALIBRATION_CHUNK_SIZE,
    thin: int | str = "auto",
    mesh: jax.sharding.Mesh | None = None,
    checkpoint=None,
    alpha: float = 0.01,
    progress: Callable[[str], None] | None = None,
) -> xr.DataTree:
    """Calibrate the registry's ``method`` (a name or an alias) of ``reading`` over ``study``'s
    fixed prior.

    Samplers (the registry's ``returns == "draws"``) get ``sbc`` ranks of the test quantities;
    interval methods get ``interval_coverage`` of their ``levels`` intervals. ``overrides``
    update the registry's settings (e.g. sampler sizes), and take ``sigma_factor`` and
    ``data_fraction`` for a deliberately wrong method (deconvolution). The returned DataTree's
    attrs carry ``method``, ``reading``, ``kind`` ("ranks" or "coverage"), ``verdict`` and
    ``verdict_reason`` (``calibration_verdict``), and ``devices`` and ``processes``.

    The replicates are split over the devices of ``mesh`` (a one-axis ``jax.sharding.Mesh``;
    None: every device, every process's under ``jax.distributed``), each replicate from its
    own key ``fold_in(key, i)``: the same draws, ranks or coverage on any mesh and chunk size
    (``sbc``'s module docstring). Under several processes every process makes the same call
    and gets the same DataTree; process 0 alone writes ``checkpoint``.
    """
    validation.check_key("key", key)
    mesh = check_mesh(mesh)
    entry = registry.get_method(reading, method)
    method = entry.name
    if method not in CALIBRATION_METHODS[reading]:
        raise ValueError(
            f"method: {method!r} cannot be calibrated here; choose from "
            f"{list(CALIBRATION_METHODS[reading])}"
        )
    overrides = dict(overrides or {})
    wrong = {k: overrides.get(k) for k in ("sigma_factor", "data_fraction") if k in overrides}
    for k, v in wrong.items():
        if reading != "deconvolution":
            raise ValueError(f"overrides: {k} applies to the deconvolution reading only")
        validation.check_positive_scalar(f"overrides[{k!r}]", v)
        if k == "data_fraction" and not 0 < v <= 1:
            raise ValueError(f"overrides['data_fraction']: must be in (0, 1], got {v}")
    if not isinstance(alpha, float) or not 0 < alpha < 1:
        raise ValueError(f"alpha: expected a number in (0, 1), got {alpha!r}")
    settings = registry.settings(reading, method, overrides)
    shown = dict(overrides)
    if method == "learned":
        settings = _learned_settings(entry, settings)
        if "params" in shown:
            shown["params"] = "GridStackParams (given)"
    study_info = {"reading": reading, "method": method, "overrides": _jsonable(shown)}
    if reading == "deconvolution":
        study = DeconvolutionStudy() if study is None else study
        if not isinstance(study, DeconvolutionStudy):
            raise ValueError("study: expected a DeconvolutionStudy for the deconvolution reading")
        _check_deconvolution_study(study)
        if method == "nuts-dp":
            study = study._replace(prior="dp")
        simulate = deconvolution_simulator(study)
        study_info["study"] = _jsonable(study._asdict())
        if entry.returns == "draws":
            tree = sbc(
                key,
                simulate,
                _deconvolution_posterior(study, method, settings),
                deconvolution_quantities(study),
                num_replicates=num_replicates,
                chunk_size=chunk_size,
                thin=thin,
                mesh=mesh,
                checkpoint=checkpoint,
                study=study_info,
                progress=progress,
            )
            kind = "ranks"
        else:
            if method == "oracle":
                base = simulate

                def simulate(k):  # the oracle sees the true nu
                    truth, data = base(k)
                    return truth, {**data, "atoms": truth["atoms"], "weights": truth["weights"]}

            tree = interval_coverage(
                key,
                simulate,
                _deconvolution_cdf(study, method, settings),
                lambda truth, data: {"z": truth["z"]},
                num_replicates=num_replicates,
                levels=levels,
                chunk_size=chunk_size,
                mesh=mesh,
                checkpoint=checkpoint,
                study=study_info,
                progress=progress,
            )
            kind = "coverage"
    else:
        study = SwitchingStudy() if study is None else study
        if not isinstance(study, SwitchingStudy):
            raise ValueError("study: expected a SwitchingStudy for the switching reading")
        smodel.get_scenario(study.scenario)
        validation.check_positive_int("study.num_steps", study.num_steps)
        simulate, arrays = switching_simulator(study)
        study_info["study"] = _jsonable(study._asdict())
        tree = interval_coverage(
            key,
            simulate,
            _switching_cdf(arrays, method, settings),
            lambda truth, data: {"states": truth["states"]},
            num_replicates=num_replicates,
            levels=levels,
            chunk_size=chunk_size,
            mesh=mesh,
            checkpoint=checkpoint,
            study=study_info,
            progress=progress,
        )
        kind = "coverage"
    tree.attrs.update(reading=reading, method=method, label=entry.label, kind=kind)
    verdict, reason = calibration_verdict(tree, alpha=alpha)
    tree.attrs.update(verdict=verdict, verdict_reason=reason, alpha=alpha)
    return tree


def _learned_settings(entry: registry.Method, settings: dict) -> dict:
    """The grid stack's settings checked before tracing: its parameters (the shipped stack
    unless ``overrides["params"]``), ``grid_size``, no other keys, no ``data_fraction``."""
    allowed = {"params", "grid_size", "sigma_factor"}
    if "data_fraction" in settings:
        raise ValueError(
            "overrides: data_fraction does not apply to 'learned': the grid stack gives "
            "posteriors for the points it sees only (no fitted nu to carry to the rest)"
        )
    unknown = sorted(set(settings) - allowed)
    if unknown:
        raise ValueError(
            f"overrides: unknown settings {unknown} for 'learned'; it takes params, grid_size "
            "and sigma_factor"
        )
    settings = dict(settings)
    settings["grid_size"] = validation.check_positive_int(
        "overrides['grid_size']", settings["grid_size"], minimum=2
    )
    params = settings.get("params")
    if params is None:
        params = entry.load_pretrained()
    settings["params"] = check_grid_params("overrides['params']", params)
    return settings


def _check_deconvolution_study(study: DeconvolutionStudy) -> None:
    validation.check_positive_int("study.num_atoms", study.num_atoms)
    num_points = validation.check_positive_int("study.num_points", study.num_points)
    if isinstance(study.sigma, tuple | list | np.ndarray):
        sigma = validation.as_scale_array("study.sigma", study.sigma)
        if sigma.shape != (num_points,):
            raise ValueError(
                f"study.sigma: expected a number or {num_points} numbers (one per observation, "
                f"study.num_points), got shape {sigma.shape}"
            )
        if not np.all(np.isfinite(sigma) & (sigma > 0)):
            raise ValueError("study.sigma: every entry must be a finite number > 0")
    else:
        validation.check_positive_scalar("study.sigma", study.sigma)
    if study.noise_range is not None:
        bounds = study.noise_range
        if not isinstance(bounds, tuple | list) or len(bounds) != 2:
            raise ValueError(f"study.noise_range: expected (low, high), got {bounds!r}")
        low = validation.check_positive_scalar("study.noise_range[0]", bounds[0])
        high = validation.check_positive_scalar("study.noise_range[1]", bounds[1])
        if high < low:
            raise ValueError(f"study.noise_range: high {high} is below low {low}")
    validation.check_positive_scalar("study.concentration", study.concentration)
    validation.check_positive_scalar("study.atom_scale", study.atom_scale)
    if study.prior not in ("dirichlet", "dp"):
        raise ValueError(f"study.prior: expected 'dirichlet' or 'dp', got {study.prior!r}")
    if study.prior == "dp" and study.num_atoms < 2:
        raise ValueError("study.num_atoms: prior='dp' needs at least 2 atoms")
    points = np.asarray(study.cdf_points, dtype=np.float64)
    if points.ndim != 1 or points.size == 0 or not np.all(np.isfinite(points)):
        raise ValueError("study.cdf_points: expected a non-empty tuple of finite numbers")


def _jsonable(value):
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.generic, np.ndarray)):
        return np.asarray(value).tolist()
    return value


# ----------------------------------------------------------------------------- verdict


def _critical(alpha: float, tests: int) -> float:
    """Two-sided normal critical value at family-wise level alpha over ``tests`` (Bonferroni)."""
    from scipy.stats import norm

    return float(norm.ppf(1 - alpha / (2 * max(tests, 1))))


def calibration_verdict(tree: xr.DataTree, *, alpha: float = 0.01) -> tuple[str, str]:
    """ "calibrated", "over-confident", "under-confident" or "biased", and why.

    Ranks (``sbc``): calibrated unless some Holm-adjusted p-value of the chi-square and KS tests
    (``uniformity`` group, over every scalar test quantity) is below ``alpha``. Otherwise the
    quantity with the smallest adjusted p-value is read: with n replicates, the bias score
    b = (mean PIT - 1/2) / sqrt(1 / (12 n)) and the tail score
    c = (tail fraction - 0.1) / sqrt(0.09 / n) (fraction of PIT values outside [0.05, 0.95]);
    |b| >= |c|: "biased" (the posterior sits to one side of the truth); else c > 0:
    "over-confident" (the truth falls in the posterior's tails: too narrow, U-shaped ranks),
    c < 0: "under-confident" (too wide, hump-shaped ranks).

    Coverage (``interval_coverage``): for every target and level, z = (coverage - level) / se
    with se the larger of the binomial and between-replicate standard errors; calibrated unless
    some |z| exceeds the Bonferroni critical value at family-wise level ``alpha``. Otherwise
    the worst (target, level) is read: if its misses fall on one side, |below - above| > z* se
    with below and above on opposite sides of (1 - level) / 2, "biased"; else coverage below the
    level "over-confident", above "under-confident".
    Failed replicates are reported in ``num_failed``, not in the verdict.
    """
    if "uniformity" in tree.children:
        table = tree["uniformity"].to_dataset().to_dataframe()
        table = table[np.isfinite(table["p_min"])]
        if table.empty:
            return "calibrated", "no test quantity varies"
        worst = table["p_min"].idxmin()
        row = table.loc[worst]
        if row["p_min"] >= alpha:
            return "calibrated", (
                f"smallest Holm-adjusted p = {row['p_min']:.3g} >= {alpha} over "
                f"{2 * len(table)} tests"
            )
        n = row["n"]
        b = (row["mean_pit"] - 0.5) / math.sqrt(1 / (12 * n))
        c = (row["tail_fraction"] - 0.1) / math.sqrt(0.09 / n)
        what = "biased" if abs(b) >= abs(c) else ("over-confident" if c > 0 else "under-confident")
        return what, (
            f"{worst}: Holm-adjusted p = {row['p_min']:.3g}; mean PIT {row['mean_pit']:.3f} "
            f"(score {b:+.1f}), tail fraction {row['tail_fraction']:.3f} (score {c:+.1f})"
        )
    table = coverage_summary(tree)
    table = table[np.isfinite(table["coverage"]) & (table["se"] > 0)]
    if table.empty:
        return "calibrated", "no finite coverage"
    z = (table["coverage"] - table["level"]) / table["se"]
    crit = _critical(alpha, len(table))
    worst = int(np.argmax(np.abs(z.to_numpy())))
    row, zw = table.iloc[worst], float(z.iloc[worst])
    label = (
        f"{row['target']} at {row['level']:.0%}: coverage {row['coverage']:.3f} +- {row['se']:.3f}"
    )
    if abs(zw) <= crit:
        return "calibrated", f"{label}; |z| = {abs(zw):.1f} <= {crit:.1f} (Bonferroni)"
    nominal = (1 - row["level"]) / 2
    one_sided = (row["below"] - nominal) * (row["above"] - nominal) < 0 and abs(
        row["below"] - row["above"]
    ) > crit * row["se"]
    what = "biased" if one_sided else ("over-confident" if zw < 0 else "under-confident")
    return what, (
        f"{label}; z = {zw:+.1f} beyond {crit:.1f}; missed below {row['below']:.3f}, "
        f"above {row['above']:.3f}"
    )


def calibration_table(trees: Mapping[str, xr.DataTree]) -> pd.DataFrame:
    """One row per calibrated method: verdict, its reason, replicates, failures, the smallest
    adjusted p-value (ranks) and the 50/90% coverage with its standard error (coverage)."""
    import pandas as pd

    rows = []
    for name, tree in trees.items():
        row = {
            "method": name,
            "kind": tree.attrs["kind"],
            "verdict": tree.attrs["verdict"],
            "num_replicates": tree.attrs["num_replicates"],
            "num_failed": tree.attrs["num_failed"],
            "num_divergent_replicates": tree.attrs.get("num_divergent_replicates", 0),
            "reason": tree.attrs["verdict_reason"],
        }
        if "uniformity" in tree.children:
            table = tree["uniformity"].to_dataset()
            row["min_p_adjusted"] = float(np.nanmin(table["p_min"].values))
        else:
            for _, r in coverage_summary(tree).iterrows():
                tag = f"{r['target']}_{round(100 * r['level'])}"
                row[f"coverage_{tag}"] = r["coverage"]
                row[f"se_{tag}"] = r["se"]
        rows.append(row)
    return pd.DataFrame(rows)
