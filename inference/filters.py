"""Filters of the switching linear-Gaussian state-space model (seed 3) -- placeholder header,
being written in this session."""

from inference.kalman import FilterResult, kalman_filter, kalman_predict, kalman_update

__all__ = ["FilterResult", "kalman_filter", "kalman_predict", "kalman_update"]
