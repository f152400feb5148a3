"""The statistics of a set of row vectors under their former one name, kept for one release: this module only
re-exports. It was one file of statistics, streaming and the device path; each now lives in its own module, and new
code imports from there:

- ``measure.statistics``: the pure statistics (mean cosine, drift, mean norm, pair sampling, sigma_1 share, Paper 2's
  batches, correlation across layers, bootstrap intervals);
- ``measure.twonn``: the TwoNN intrinsic dimension;
- ``measure.streaming``: the accumulators (``Accumulator``, ``LayerStats``, ``FirstMoments``, ``Tee``);
- ``measure.rows``: how the rows are read and where they are measured (``on_device``, ``device_for``, the ``DEVICE_*``
  bounds of the device path).

``from anisotropy.measure import metrics; metrics.X`` gives the same object as the owning module's ``X``, for every
name this module had.
"""

from __future__ import annotations

from anisotropy.measure.rows import (DEVICE_MEAN_COSINE_ABS, DEVICE_NORM_REL, DEVICE_SIGMA1_SHARE_ABS,
                                     DEVICE_TWONN_SQ_REL, device_for, on_device)
from anisotropy.measure.statistics import (BOOTSTRAP, EXACT_SPEARMAN_MAX_N, BatchedResult, ConfidenceInterval,
                                           Correlation, PairEstimate, batched, bootstrap_mean_cosine, drift_norm,
                                           grouped_bootstrap_mean_cosine, layer_correlation, mean_cosine,
                                           mean_cosine_from_sums, mean_norm, min_significant_layers,
                                           sampled_pair_cosine, sigma1_share)
from anisotropy.measure.streaming import LayerStats
from anisotropy.measure.twonn import TWONN_MIN_ROWS, TwoNNEstimate, twonn_dimension, twonn_estimate

__all__ = [
    "BOOTSTRAP",
    "DEVICE_MEAN_COSINE_ABS",
    "DEVICE_NORM_REL",
    "DEVICE_SIGMA1_SHARE_ABS",
    "DEVICE_TWONN_SQ_REL",
    "EXACT_SPEARMAN_MAX_N",
    "TWONN_MIN_ROWS",
    "BatchedResult",
    "ConfidenceInterval",
    "Correlation",
    "LayerStats",
    "PairEstimate",
    "TwoNNEstimate",
    "batched",
    "bootstrap_mean_cosine",
    "device_for",
    "drift_norm",
    "grouped_bootstrap_mean_cosine",
    "layer_correlation",
    "mean_cosine",
    "mean_cosine_from_sums",
    "mean_norm",
    "min_significant_layers",
    "on_device",
    "sampled_pair_cosine",
    "sigma1_share",
    "twonn_dimension",
    "twonn_estimate",
]
