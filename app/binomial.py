"""Binomial counts as normal means: Brown's (2008) variance-stabilising transform and its inverse.

``attnbayes deconvolve --binomial HITS,TRIALS`` fits the deconvolution model to
x_i = arcsin(sqrt((H_i + 1/4) / (T_i + 1/2))) with known s_i = 1 / (2 sqrt(T_i))
(``brown_transform``, ``binomial_data``) and maps z back to proportions by p = sin(z)^2
(``proportion_scale``), so batting averages with unequal at-bats need no hand transform.
"""

from __future__ import annotations

import numpy as np

from .user_data import Table


def brown_transform(hits, trials) -> tuple[np.ndarray, np.ndarray]:
    """Brown's variance-stabilising transform of binomial counts H_i ~ Bin(T_i, p_i):

        x_i = arcsin(sqrt((H_i + 1/4) / (T_i + 1/2))),   s_i = 1 / (2 sqrt(T_i)),

    so that x_i is about N(arcsin(sqrt(p_i)), s_i^2) (Brown 2008, "In-season prediction of
    batting averages: a field test of empirical Bayes and Bayes methodologies", Ann. Appl.
    Stat. 2(1), section 2). Counts as checked by ``attnbayes.app.user_data.read_counts``.

    Returns:
        (x, s): two (N,) float64 arrays.
    """
    hits = np.asarray(hits, np.float64)
    trials = np.asarray(trials, np.float64)
    x = np.arcsin(np.sqrt((hits + 0.25) / (trials + 0.5)))
    return x, 0.5 / np.sqrt(trials)


def proportion_scale(z) -> np.ndarray:
    """p = sin(z)^2, the inverse of z = arcsin(sqrt(p)), with z clipped to [0, pi/2] (where it is
    increasing): a monotone map, so interval endpoints map to interval endpoints."""
    return np.sin(np.clip(np.asarray(z, np.float64), 0.0, 0.5 * np.pi)) ** 2


def binomial_data(counts: Table) -> tuple[Table, Table]:
    """(x, s) of ``brown_transform`` on the counts (columns hits, trials) as Tables of the same
    file and lines, named "x" and "se"."""
    x, s = brown_transform(counts.values[:, 0], counts.values[:, 1])
    common = {"path": counts.path, "lines": counts.lines, "header": True, "sha256": counts.sha256}
    return (
        Table(columns=("x",), values=x[:, None], **common),
        Table(columns=("se",), values=s[:, None], **common),
    )


__all__ = ["binomial_data", "brown_transform", "proportion_scale"]
