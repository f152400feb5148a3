"""The remaining rules with a threshold, each tested just above and just below the value its claim gives it in
claims.yml (so a threshold edited without its reason fails a test): the drift correlation's share, the fixed point's
order of magnitude, the onset of the opposite-direction dynamics, and the CNNs' interval ceiling."""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.claims import ledger as claims
from anisotropy.claims.rules import p1_s3, p1_s4, p1_s5

N_STAR = 27.7


def corr(rows, n_layers: int = 13) -> pd.DataFrame:
    return pd.DataFrame([{"label": n, "model": n, "variant": "pretrained", "family": f, "spearman": r,
                          "spearman_p": p, "n_layers": n_layers} for n, f, r, p in rows])


def test_drift_correlated_at_its_share_of_transformers():
    params = claims.claim("p1-s3.3-transformers-drift-correlated").params
    share, alpha = params["share"], params["alpha"]
    n = 10
    k = int(np.ceil(share * n))  # the fewest significant models that make the share

    def frame(significant):
        return corr([(f"t{i}", "token-level", 0.8, alpha / 2 if i < significant else 0.5) for i in range(n)])

    assert p1_s3.drift_correlated(frame(k), **params).holds
    assert p1_s3.drift_correlated(frame(k - 1), **params).holds is False
    # alpha itself: a model at p just above it is not significant
    at = corr([(f"t{i}", "token-level", 0.8, alpha * (0.9 if i < k - 1 else 1.1) if i < k else 0.5)
               for i in range(n)])
    assert p1_s3.drift_correlated(at, **params).holds is False


def test_drift_contrast_at_its_ceiling_for_a_cnns_interval():
    params = claims.claim("p1-s3.3-cnns-not-correlated").params
    max_rho = params["max_rho"]
    transformers = [(f"t{i}", "token-level", 0.9, 0.001) for i in range(3)]
    layers = 60

    def rho_with_upper(target):
        """The rho whose interval over ``layers`` points ends at ``target`` (bisection on spearman_interval)."""
        lo, hi = -0.99, 0.99
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if p1_s3.spearman_interval(mid, layers, params["level"])[1] < target else (lo, mid)
        return lo

    def frame(upper):
        rho = rho_with_upper(upper)
        return corr(transformers + [("r", "cnn", rho, 0.5), ("v", "cnn", rho, 0.5)], n_layers=layers)

    assert p1_s3.drift_contrast(frame(max_rho * 0.98), **params).holds
    assert p1_s3.drift_contrast(frame(max_rho * 1.02), **params).holds is not True  # undecided CNNs: no verdict


def block(n_star: float = N_STAR) -> pd.DataFrame:
    norms = (0.0, 4.0, 8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 128.0)
    return pd.DataFrame([{"variant": "post_ln", "seed": s, "bias_norm": n, "input_drift_norm": n + 0.01,
                          "output_drift_norm": n_star + 0.3 * (n - n_star)} for s in (0, 1) for n in norms])


def test_n_star_order_at_both_ends_of_its_range():
    params = claims.claim("p1-s4-nstar-bert-scale").params
    stars = p1_s4.crossings(block(), "output_drift_norm", "input_drift_norm", "post_ln").mean()

    def reference(ratio):  # hidden-state norms that put N* / norm at ``ratio``
        return pd.DataFrame({"label": "BERT", "model": "bert-base-uncased", "layer": range(13),
                             "mean_norm": stars / ratio})

    for end in ("low", "high"):
        inside = params[end] * (1.02 if end == "low" else 0.98)
        outside = params[end] * (0.98 if end == "low" else 1.02)
        assert p1_s4.n_star_order(block(), reference(inside), **params).holds, end
        assert p1_s4.n_star_order(block(), reference(outside), **params).holds is False, end


def test_opposite_onset_at_both_ends_of_its_window():
    params = claims.claim("p1-s5-opposite-onset").params
    share, factor = params["share"], params["factor"]
    steps = np.arange(0, 1001, 1)

    def frame(onset_share):
        rows = []
        for run in ("s0", "s1"):
            for step in steps:
                for layer in range(2):
                    negative = layer == 1 and step >= onset_share * steps[-1]
                    rows.append({"run": run, "step": int(step), "layer": layer, "head": 0,
                                 "cos_qk": -0.5 if negative else 0.5})
        return pd.DataFrame(rows)

    assert p1_s5.opposite_onset(frame(share * factor * 0.95), **params).holds
    assert p1_s5.opposite_onset(frame(share * factor * 1.05), **params).holds is False
    assert p1_s5.opposite_onset(frame(share / factor * 1.05), **params).holds
    assert p1_s5.opposite_onset(frame(share / factor * 0.95), **params).holds is False
