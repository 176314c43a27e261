"""The one convention for labelling the regimes of a switching model (``regime_ordering``:
regimes are exchangeable, so a fit labels them by the increasing value of one named parameter),
the relabelling of exchangeable modes (``relabel_regimes``), and the weakly informative priors
that keep the convention under NUTS (``default_priors``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints

from ..regime_laws import (
    InverseWishart,
    OrderedFirstColumn,
    OrderedIID,
    OrderedNormal,
    ordered_first_column,
)
from .structure import SwitchingSpec

# the noise scales that label exchangeable modes of a state-space spec, in order of preference
_LABEL_SCALES = ("emission_cov_scale", "dynamics_cov_scale")


class RegimeOrdering(NamedTuple):
    """How the regimes of a spec are labelled (``regime_ordering``).

    Attributes:
        parameter: the name of theta whose entries increase with the label (regime 0 the
            smallest), or None when nothing is ordered.
        description: one sentence for the output of a fit.
        identified: False when the modes are exchangeable and nothing orders them (a
            posterior then mixes the labellings).
    """

    parameter: str | None
    description: str
    identified: bool = True


def _symmetric_under_relabelling(spec: SwitchingSpec, free) -> bool:
    """Whether every fixed field of a state-space spec is the same in every mode (a fixed
    transition matrix: one stay probability and one switch probability), so that permuting
    the mode labels leaves the likelihood unchanged."""
    for name, value in spec.theta.items():
        if name in free:
            continue
        value = np.asarray(value)
        if name == "transition_matrix":
            diagonal = np.diagonal(value)
            off = value[~np.eye(value.shape[0], dtype=bool)]
            if np.ptp(diagonal) > 0 or (off.size and np.ptp(off) > 0):
                return False
        elif value.size and not np.all(value == value[:1]):
            return False
    return True


def fixed_parameters_alike(spec: SwitchingSpec, free) -> bool:
    """Whether relabelling the regimes of an econometric spec leaves its fixed parameters as
    they are: every fixed per-regime parameter the same in every regime, a fixed transition
    matrix with one stay and one switch probability, fixed TVTP logits all 0."""
    for name in per_regime_names(spec):
        value = np.asarray(spec.theta[name])
        if name not in free and value.size and not np.all(value == value[:1]):
            return False
    if "transition_matrix" in spec.theta and "transition_matrix" not in free:
        p = np.asarray(spec.theta["transition_matrix"])
        off = p[~np.eye(p.shape[0], dtype=bool)]
        if np.ptp(np.diagonal(p)) > 0 or (off.size and np.ptp(off) > 0):
            return False
    coefficients = spec.theta.get("transition_coefficients")
    return coefficients is None or "transition_coefficients" in free or not np.any(coefficients)


# the supports of the parameter that labels the regimes of an econometric spec
_LABEL_SUPPORTS = (
    constraints.ordered_vector,
    ordered_first_column,
    constraints.positive_ordered_vector,
)


def _label_description(spec: SwitchingSpec, name: str) -> str:
    """The labelling parameter in words, e.g. "intercept (regime 0 the lowest)", "coefficient
    of x1 (...)", "intercept of y1 (...)", "variance (...)"."""
    if name == "variances":
        return "variance (regime 0 the least volatile)"
    if name in ("intercepts", "means") and spec.structure.kind != "var":
        return f"{name[:-1]} (regime 0 the lowest)"
    label = spec.names[name][0].rsplit("[", 1)[0]  # the first entry of regime 0, e.g. x1
    if name == "intercepts":
        return f"intercept of {label.split('.', 1)[1]} (regime 0 the lowest)"
    return f"coefficient {label} (regime 0 the lowest)"


def regime_ordering(spec: SwitchingSpec, free=None) -> RegimeOrdering:
    """The suite's one convention for labelling the regimes of a fit (``free`` defaults to
    ``spec.free``):

    - a Markov-switching regression, MS-AR or MS-VAR model: by increasing intercept or mean
      (the support of "intercepts" / "means" is ``ordered_vector``; for MS-VAR the intercept
      of the first series, ``ordered_first_column``); without one (trend "n") by the first
      switching coefficient (``ordered_first_column``), else by the variance
      (``positive_ordered_vector``); fixed ones out of order label the regimes as given, and
      so do fixed per-regime parameters that differ between regimes (then relabelling would
      change the model: nothing is reordered);
    - a state-space model (``switching_state_space``) whose fixed parameters differ between
      modes: by those parameters (the modes are not exchangeable, nothing is reordered);
    - a state-space model whose fixed parameters are the same in every mode: the modes are
      exchangeable (permuting the labels, of theta and of the transition matrix's rows and
      columns, leaves the likelihood unchanged), so they are labelled by increasing
      emission_cov_scale r_j, else dynamics_cov_scale c_j, whichever is free first. NUTS
      samples it under ``OrderedIID`` of its prior (``default_priors``), the exchangeable
      prior restricted to that ordering; maximum likelihood and EM relabel their optimum
      (``relabel_regimes``). With neither scale free the labels are not identified.

    Returns ``RegimeOrdering`` (the parameter or None, a sentence for the output, and whether
    the labels are identified).
    """
    if not isinstance(spec, SwitchingSpec):
        raise ValueError(f"spec: expected a SwitchingSpec, got {type(spec).__name__}")
    free = tuple(spec.free if free is None else free)
    kind, m = spec.structure.kind, spec.structure.num_regimes
    if m == 1:
        return RegimeOrdering(None, "one regime: there are no labels to identify.")
    if kind in ("regression", "ar", "var"):
        name = next((n for n, c in spec.support.items() if c in _LABEL_SUPPORTS), None)
        if name is None:
            return RegimeOrdering(
                None, "no parameter labels the regimes (an unlabelled spec, a fit's working form)."
            )
        if not fixed_parameters_alike(spec, free):
            return RegimeOrdering(
                None,
                "the regimes are labelled by their fixed parameters, as given (they differ "
                "between regimes: nothing is reordered).",
            )
        what = _label_description(spec, name)
        value = np.asarray(spec.theta[name], dtype=float)
        value = value[:, 0] if value.ndim == 2 else value
        if name in free or np.all(np.diff(value) > 0):
            return RegimeOrdering(name, f"the regimes are labelled by increasing {what}.")
        return RegimeOrdering(
            None, f"the regimes are labelled by their fixed {name}, as given (not in order)."
        )
    if not _symmetric_under_relabelling(spec, free):
        return RegimeOrdering(
            None, "the modes are labelled by their fixed parameters, which differ between modes."
        )
    for name in _LABEL_SCALES:
        if name in free:
            return RegimeOrdering(
                name,
                "the modes' fixed parameters are the same in every mode, so the modes are "
                f"exchangeable and labelled by increasing {name} (mode 0 the lowest).",
            )
    return RegimeOrdering(
        None,
        "the modes' fixed parameters are the same in every mode and no noise scale is free: "
        "the modes are exchangeable and their labels are not identified.",
        identified=False,
    )


def per_regime_names(spec: SwitchingSpec) -> set:
    """The parameters of an econometric spec with one entry (or row) per regime: intercepts,
    means, switching coefficients, variances and covariances (not the transition's)."""
    kind = spec.structure.kind
    out = set()
    for name, value in spec.theta.items():
        ndim = np.ndim(value)
        if name in ("intercepts", "means") or (name, ndim) in (
            ("coefficients", 2),
            ("variances", 1),
            ("covariances", 3),
            ("ar_coefficients", 3 if kind == "var" else 2),
        ):
            out.add(name)
    return out


def relabel_regimes(spec: SwitchingSpec, theta: dict, order) -> dict:
    """theta with the regimes (modes) relabelled: new regime k is old regime ``order[k]``, an
    exact symmetry of the likelihood (the regimes are exchangeable up to their labels).

    Every per-regime parameter (leading axis M: a state-space spec's fields; an econometric
    spec's intercepts, means, switching coefficients, variances, covariances) is permuted, and
    the transition matrix's rows and columns both, P'[k, l] = P[order[k], order[l]]. TVTP
    logits keep the last regime as the reference: with G the (M, M, k) logits padded with
    G[:, M-1] = 0, gamma'[k, l] = G[order[k], order[l]] - G[order[k], order[M-1]]. Common
    parameters are unchanged. Pure NumPy (theta's values, not their standard errors)."""
    m = spec.structure.num_regimes
    order = np.asarray(order)
    if sorted(order.tolist()) != list(range(m)):
        raise ValueError(f"order: expected a permutation of 0..{m - 1}, got {order}")
    per_regime = set(theta) if spec.structure.kind == "state_space" else per_regime_names(spec)
    out = {}
    for name, value in theta.items():
        value = np.asarray(value)
        if name == "transition_matrix":
            out[name] = value[order][:, order]
        elif name == "transition_coefficients":
            full = np.concatenate([value, np.zeros((m, 1, value.shape[-1]))], axis=1)
            full = full[order][:, order]
            out[name] = full[:, :-1] - full[:, -1:]
        elif name in per_regime:
            out[name] = value[order]
        else:
            out[name] = value
    return out


def labelling_order(spec: SwitchingSpec, theta: dict, free=None) -> np.ndarray:
    """The permutation that puts theta in the suite's labelling (``regime_ordering``): the
    regimes sorted by increasing labelling parameter (its first column for an (M, k) one);
    the identity when nothing labels them. ``relabel_regimes(spec, theta, order)`` applies
    it."""
    name = regime_ordering(spec, free).parameter
    m = spec.structure.num_regimes
    if name is None:
        return np.arange(m)
    value = np.asarray(theta[name], dtype=float)
    key = value[:, 0] if value.ndim == 2 else value
    if key.ndim != 1 or key.shape[0] != m:  # e.g. a state-space scale
        key = key.reshape(m, -1)[:, 0]
    return np.argsort(key, kind="stable")


def unlabelled(spec: SwitchingSpec) -> SwitchingSpec:
    """The spec with its labelling parameter's support relaxed to the unordered one (the
    reals, or positive variances): the likelihood is the same function, and a fit over it
    cannot stop on the labelling boundary (two regimes' intercepts merged) that the ordered
    coordinates put between the basins of the two labellings; it is relabelled afterwards
    (``labelling_order``). Unchanged for a state-space spec."""
    if spec.structure.kind == "state_space":
        return spec

    def relaxed(support):
        if support is constraints.ordered_vector or support is ordered_first_column:
            return constraints.real
        if support is constraints.positive_ordered_vector:
            return constraints.positive
        return support

    return spec._replace(support={n: relaxed(c) for n, c in spec.support.items()})


# ----------------------------------------------------------------------------- priors


def default_priors(spec: SwitchingSpec, free=None) -> dict:
    """Weakly informative priors on the free parameters of ``spec``, in constrained form
    (NumPyro distributions keyed by parameter name), scaled by the spec's start values (the
    OLS fit of the constructors, hence data-dependent: pass fixed priors for
    simulation-based calibration):

    - "transition_matrix": each row Dirichlet(1 + 2 e_i) (prior stay probability 3 / (M + 2),
      0.75 for M = 2);
    - "transition_coefficients" (TVTP logits): N(start, (2.5 / s_k)^2) for the coefficient
      of covariate k, with s_k its standard deviation over the inputs (|c| for a constant
      column c): a one-standard-deviation move of a covariate moves a logit by about 2.5 a
      priori, and the constant's coefficients centre on the persistent start (stay 0.9);
    - regime means / intercepts: ``OrderedNormal`` around their mean start, scale
      2 sqrt(v0) + their spread (v0 the start variance), which fixes the labels; an MS-VAR's
      (M, o) intercepts: that law on the first series' column (``OrderedFirstColumn``) and
      N(start, (2 sqrt(v0_i))^2) on series i's;
    - "variances": InverseGamma(3, 2 v0) (prior mean v0), or, when they label the regimes
      (trend "n"), ``OrderedIID`` of InverseGamma(3, 2 mean(v0)); "covariances" of an MS-VAR:
      InverseWishart(o + 3, 2 S0) per regime (prior mean S0, the start); noise scales of a
      state-space spec: InverseGamma(3, 2) (prior mean 1), iid over the modes, or their
      ``OrderedIID`` (the iid law restricted to increasing values) for the scale that labels
      exchangeable modes (``regime_ordering(spec, free)``; ``free`` defaults to ``spec.free``);
    - "ar_coefficients" (and "common_ar_coefficients") of MS-AR and MS-VAR: N(0, 0.5^2);
      regression "coefficients" (and "common_coefficients"): N(start, (10 (|start| + 1))^2);
      coefficients that label the regimes (trend "n"): that law's ``OrderedIID`` on the
      first column (centred on the column's mean start), ``OrderedFirstColumn``;
    - other real fields (biases, offsets): N(start, (10 (|start| + 1))^2).
    """
    m = spec.structure.num_regimes
    ordered = regime_ordering(spec, free).parameter
    out = {}
    variance = _start_variance(spec)
    for name, value in spec.theta.items():
        value = np.asarray(value, dtype=float)
        support = spec.support[name]
        if name == "transition_matrix":
            out[name] = dist.Dirichlet(jnp.ones((m, m)) + 2.0 * jnp.eye(m)).to_event(1)
        elif name == "transition_coefficients":
            z = np.asarray(spec.inputs, float)[:, -spec.structure.num_tvtp :]
            spread = np.where(np.ptp(z, axis=0) > 0, np.std(z, axis=0), np.abs(z[0]))
            scale = 2.5 / np.where(spread > 0, spread, 1.0)
            loc = jnp.asarray(value)
            out[name] = dist.Normal(loc, jnp.broadcast_to(scale, value.shape)).to_event(3)
        elif support is constraints.ordered_vector:
            scale = 2.0 * np.sqrt(variance) + float(np.ptp(value))
            out[name] = OrderedNormal(float(np.mean(value)), scale, value.shape[-1])
        elif support is ordered_first_column:
            out[name] = _ordered_first_column_prior(spec, name, value)
        elif name == "variances" and support is constraints.positive_ordered_vector:
            out[name] = OrderedIID(dist.InverseGamma(3.0, 2.0 * float(np.mean(value))), m)
        elif name == "variances":
            out[name] = dist.InverseGamma(3.0, 2.0 * jnp.asarray(value)).to_event(value.ndim)
        elif name == "covariances":
            law = InverseWishart(value.shape[-1] + 3.0, 2.0 * jnp.asarray(value))
            out[name] = law.to_event(value.ndim - 2) if value.ndim > 2 else law
        elif name in _LABEL_SCALES and name == ordered:
            out[name] = OrderedIID(dist.InverseGamma(3.0, 2.0), m)
        elif name in _LABEL_SCALES:
            out[name] = dist.InverseGamma(3.0 * jnp.ones(value.shape), 2.0).to_event(1)
        elif name in ("ar_coefficients", "common_ar_coefficients"):
            out[name] = dist.Normal(jnp.zeros(value.shape), 0.5).to_event(value.ndim)
        elif support is constraints.real:
            loc = jnp.asarray(value)
            out[name] = dist.Normal(loc, 10.0 * (jnp.abs(loc) + 1.0)).to_event(value.ndim)
    return out


def _start_variance(spec: SwitchingSpec) -> float:
    """The mean start variance v0 of an econometric spec (of the first series for MS-VAR)."""
    if "covariances" in spec.theta:
        return float(np.mean(np.asarray(spec.theta["covariances"])[..., 0, 0]))
    return float(np.mean(spec.theta.get("variances", 1.0)))


def _ordered_first_column_prior(spec: SwitchingSpec, name: str, value: np.ndarray):
    """``OrderedFirstColumn`` for an (M, k) parameter that labels the regimes by its first
    column: the MS-VAR intercepts (``OrderedNormal`` on the first series, N(start, (2 sd_i)^2)
    on series i), or switching coefficients of a model without intercept (the ordered law of
    their own prior on the first column, that prior on the others)."""
    m = value.shape[0]
    rest_loc = jnp.asarray(value[:, 1:])
    if name == "intercepts":  # MS-VAR
        covs = np.asarray(spec.theta["covariances"]).reshape(-1, value.shape[1], value.shape[1])
        sd = np.sqrt(np.mean(np.diagonal(covs, axis1=-2, axis2=-1), axis=0))
        first = OrderedNormal(float(np.mean(value[:, 0])), 2.0 * sd[0] + np.ptp(value[:, 0]), m)
        rest_scale = jnp.broadcast_to(2.0 * sd[1:], rest_loc.shape)
    elif name == "ar_coefficients":
        first = OrderedNormal(0.0, 0.5, m)
        rest_loc, rest_scale = jnp.zeros(rest_loc.shape), jnp.full(rest_loc.shape, 0.5)
    else:
        loc = float(np.mean(value[:, 0]))
        first = OrderedNormal(loc, 10.0 * (abs(loc) + 1.0), m)
        rest_scale = 10.0 * (jnp.abs(rest_loc) + 1.0)
    rest = None if value.shape[1] == 1 else dist.Normal(rest_loc, rest_scale).to_event(2)
    return OrderedFirstColumn(first, rest)


__all__ = [
    "RegimeOrdering",
    "default_priors",
    "fixed_parameters_alike",
    "labelling_order",
    "per_regime_names",
    "regime_ordering",
    "relabel_regimes",
    "unlabelled",
]
