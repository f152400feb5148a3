"""The one accumulator interface, ``measure.streaming.Accumulator``: every accumulator the library feeds
(``LayerStats``, ``FirstMoments``, ``measure.batches.BatchedLayer``, a ``Tee`` of them) implements it, and the same
rows fed in one batch or in two give what brute force gives on the concatenated valid rows (float64 numpy, the
definitions themselves: every pair's cosine, the SVD of the centred rows)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from anisotropy.experiments import layerwise
from anisotropy.measure import batches
from anisotropy.measure.streaming import Accumulator, FirstMoments, LayerStats, Tee
from test_metrics import twonn_reference  # TwoNN from exact float64 all-pairs distances

D = 16
BATCH, N_BATCHES = 100, 4
NAMES = ("sigma1_share", "mean_cosine", "drift_norm", "mean_norm")


def stream(seed: int = 0):
    """600 rows with a drift and unequal variances, three invalid (zero, NaN, inf) and about 10% masked out."""
    g = np.random.default_rng(seed)
    x = g.standard_normal((600, D)) * np.linspace(0.5, 3, D) + 1.5
    x[5] = 0.0
    x[77, 3] = np.nan
    x[400, 0] = np.inf
    mask = g.random(600) > 0.1
    return x, mask


def valid(x, mask):
    """The rows an accumulator keeps, in stream order, and the number it must count as excluded."""
    kept = x[mask]
    ok = np.isfinite(kept).all(axis=1) & (np.abs(kept).sum(axis=1) > 0)
    return kept[ok], int((~ok).sum())


def brute(rows: np.ndarray) -> dict:
    a = rows.astype(np.float64)
    n = len(a)
    u = a / np.linalg.norm(a, axis=1, keepdims=True)
    gram = u @ u.T
    s = np.linalg.svd(a - a.mean(axis=0), compute_uv=False)
    return {"mean_cosine": (gram.sum() - np.trace(gram)) / (n * (n - 1)),
            "drift_norm": np.linalg.norm(a.mean(axis=0)),
            "mean_norm": np.linalg.norm(a, axis=1).mean(),
            "sigma1_share": s[0] ** 2 / (s**2).sum()}


def batched_layer(shuffle_seed=None):
    return batches.BatchedLayer(D, batch_size=BATCH, n_batches=N_BATCHES, metric_names=NAMES,
                                shuffle_seed=shuffle_seed, robust=False)


MAKERS = {
    "LayerStats": lambda: LayerStats(D, reservoir_size=64, seed=3),
    "FirstMoments": lambda: FirstMoments(D, seed=3),
    "BatchedLayer": batched_layer,
    "BatchedLayer shuffled": lambda: batched_layer(shuffle_seed=5),
    "Tee": lambda: Tee(FirstMoments(D, seed=3), batched_layer(shuffle_seed=5)),
}


def fed(make, x, mask, cuts):
    """A new accumulator fed ``x`` (torch rows, as taps gives them) in pieces ending at ``cuts``, with each row's
    example (10 rows an example) where it asks for them."""
    acc, start = make(), 0
    examples = torch.arange(len(x)) // 10
    for end in (*cuts, len(x)):
        extra = {"groups": examples[start:end]} if acc.wants_groups else {}
        assert acc.update(torch.from_numpy(x[start:end]), mask=torch.from_numpy(mask[start:end]), **extra) is acc
        start = end
    return acc


@pytest.mark.parametrize("name", MAKERS)
def test_each_accumulator_implements_the_interface_and_counts_rows_as_one(name):
    x, mask = stream()
    good, bad = valid(x, mask)
    acc = fed(MAKERS[name], x, mask, [250])
    assert isinstance(acc, Accumulator) and acc.dim == D
    assert (acc.n, acc.n_excluded) == (len(good), bad)
    rows = acc.rows()
    assert rows and all(isinstance(row, dict) for row in rows)


def test_the_library_makes_only_accumulators():
    for stats in layerwise.STATS:
        assert isinstance(layerwise.stats_factory(stats)(D), Accumulator)
        assert isinstance(layerwise.stats_factory(stats)(layerwise.FULL_STATS_MAX_DIM + 1), Accumulator)
    assert layerwise.FirstMoments is FirstMoments  # still importable from where it was


@pytest.mark.parametrize("name", ["LayerStats", "FirstMoments"])
def test_one_batch_or_two_give_the_brute_force_moments(name):
    x, mask = stream(1)
    good, _ = valid(x, mask)
    truth = brute(good)
    one, two = fed(MAKERS[name], x, mask, []), fed(MAKERS[name], x, mask, [311])
    names = ("mean_cosine", "drift_norm", "mean_norm") + (("sigma1_share",) if name == "LayerStats" else ())
    for acc in (one, two):
        # float64 rows, float64 sums: only the order of the additions differs from brute force
        for m in names:
            assert getattr(acc, m) == pytest.approx(truth[m], rel=1e-11, abs=1e-13), m
    a, b = one.rows()[0], two.rows()[0]
    assert a.keys() == b.keys() and a["n"] == b["n"] and a["n_excluded"] == b["n_excluded"]


def test_first_moments_interval_is_the_same_for_one_batch_or_two():
    x, mask = stream(2)
    one, two = fed(MAKERS["FirstMoments"], x, mask, []), fed(MAKERS["FirstMoments"], x, mask, [255, 431])
    a, b = one.as_dict(), two.as_dict()
    assert a["n_examples"] == b["n_examples"] == 60
    assert (a["mean_cosine_low"], a["mean_cosine_high"]) == pytest.approx(
        (b["mean_cosine_low"], b["mean_cosine_high"]), abs=1e-6)


def test_first_moments_reads_examples_fed_out_of_order_as_in_order():
    x, mask = stream(5)
    examples = torch.arange(len(x)) // 10
    in_order, shuffled = FirstMoments(D, seed=3), FirstMoments(D, seed=3)
    in_order.update(torch.from_numpy(x), mask=torch.from_numpy(mask), groups=examples)
    perm = torch.from_numpy(np.random.default_rng(0).permutation(len(x)))
    for part in perm.split(170):  # every example split over several updates, in no order
        shuffled.update(torch.from_numpy(x[part.numpy()]), mask=torch.from_numpy(mask[part.numpy()]),
                        groups=examples[part])
    a, b = in_order.as_dict(), shuffled.as_dict()
    assert a["n_examples"] == b["n_examples"] == 60
    for name in ("mean_cosine", "mean_cosine_low", "mean_cosine_high"):
        assert a[name] == pytest.approx(b[name], abs=1e-6), name


@pytest.mark.parametrize("shuffle_seed", [None, 5])
def test_batched_layer_gives_each_batch_its_brute_force_value_for_one_batch_or_two(shuffle_seed):
    x, mask = stream(3)
    good, _ = valid(x, mask)
    good = good.astype(np.float32)  # BatchedLayer pools float32 rows
    order = np.arange(len(good)) if shuffle_seed is None else batches.shuffle_order(len(good), shuffle_seed)
    make = MAKERS["BatchedLayer" if shuffle_seed is None else "BatchedLayer shuffled"]
    for acc in (fed(make, x, mask, []), fed(make, x, mask, [97, 350])):
        rows = acc.rows()
        assert [row["batch"] for row in rows] == list(range(N_BATCHES))
        for k, row in enumerate(rows):
            truth = brute(good[order[k * BATCH:(k + 1) * BATCH]])
            for m in NAMES:  # float32 products of 100 rows of 16: far below 1e-5 relative
                assert row[m] == pytest.approx(truth[m], rel=1e-5, abs=1e-6), (k, m)


@pytest.mark.parametrize("threads", [1, 2])
def test_layers_measured_together_give_each_batch_its_brute_force_value(threads, monkeypatch):
    """measure_pools measures independent layers two at a time on one thread each (rows.threads_each): every layer's
    batches still get their brute-force values, TwoNN's among them, and torch's thread count is as it was."""
    if threads == 1:  # one layer after another; with 2, the machine's threads (2 on the CI's machines)
        monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    layers, truths = [], []
    for seed in range(5):  # five layers of different rows
        x, mask = stream(10 + seed)
        x = x * (1 + seed)
        good, _ = valid(x, mask)
        good = good.astype(np.float32)
        order = batches.shuffle_order(len(good), 5)
        layer = batches.BatchedLayer(D, batch_size=BATCH, n_batches=N_BATCHES, shuffle_seed=5, robust=False,
                                     metric_names=NAMES + ("twonn_dimension",))
        layer.update(torch.from_numpy(x), mask=torch.from_numpy(mask))
        layers.append(layer)
        truths.append([good[order[k * BATCH:(k + 1) * BATCH]] for k in range(N_BATCHES)])
    before = torch.get_num_threads()
    batches.measure_pools(layers)
    assert torch.get_num_threads() == before
    for layer, rows in zip(layers, truths):
        assert layer.batches_done == N_BATCHES
        for k, row in enumerate(layer.rows()):
            truth = brute(rows[k])
            for m in NAMES:
                assert row[m] == pytest.approx(truth[m], rel=1e-5, abs=1e-6), (k, m)
            assert row["twonn_dimension"] == pytest.approx(twonn_reference(rows[k]), rel=1e-9), k



def test_a_tee_gives_each_member_what_it_would_get_alone():
    x, mask = stream(4)
    tee = fed(MAKERS["Tee"], x, mask, [123])
    alone = [fed(lambda: FirstMoments(D, seed=3), x, mask, [123]), fed(lambda: batched_layer(5), x, mask, [123])]
    assert tee.wants_groups and tee.wants_first  # one member asks for each
    expected = [row for acc in alone for row in acc.rows()]
    assert len(tee.rows()) == len(expected) == 1 + N_BATCHES
    for got, want in zip(tee.rows(), expected):
        assert got.keys() == want.keys()
        assert all(got[k] == want[k] or (np.isnan(got[k]) and np.isnan(want[k])) for k in got), (got, want)
    assert (tee.n, tee.n_excluded) == (alone[0].n, alone[0].n_excluded)
