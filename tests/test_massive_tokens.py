"""Paper 2's sigma_1 share beside the same batch without each sequence's first position and without its largest 1%
of norms (measure.batches.ROBUST_METRICS): on vectors with a planted massive first token, brute force decides."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from anisotropy.measure import batches, taps


def sigma1_share(x: np.ndarray) -> float:
    """Brute force: sigma_1^2 / sum sigma_i^2 of the centred rows, by numpy's SVD."""
    s = np.linalg.svd(x - x.mean(0), compute_uv=False)
    return float(s[0] ** 2 / (s**2).sum())


def mean_cosine(x: np.ndarray) -> float:
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    c = u @ u.T
    return float((c.sum() - np.trace(c)) / (len(u) * (len(u) - 1)))


def sequences(n_seq=64, length=32, d=48, massive=100.0, seed=0):
    """(n_seq, length, d) isotropic Gaussian vectors whose first position points along one direction with a norm
    ``massive`` times the others' (0: no massive token)."""
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((n_seq, length, d)).astype(np.float32)
    if massive:
        sink = rng.standard_normal(d)
        h[:, 0] = massive * np.sqrt(d) * sink / np.linalg.norm(sink) + rng.standard_normal((n_seq, d))
    return h


def measured(h: np.ndarray, batch_size: int) -> dict:
    layer = batches.BatchedLayer(h.shape[-1], batch_size=batch_size, n_batches=1)
    first = taps.first_kept(torch.ones(h.shape[:2], dtype=torch.bool))
    layer.update(torch.from_numpy(h), first=first.reshape(-1))
    return layer.rows()[0]


def test_a_planted_massive_first_token_carries_the_raw_share_and_the_robust_ones_match_brute_force():
    h = sequences()
    rows = h.reshape(-1, h.shape[-1])
    row = measured(h, batch_size=len(rows))  # one batch of every vector, in stream order
    first = np.zeros(h.shape[:2], bool)
    first[:, 0] = True
    first = first.reshape(-1)
    assert row["sigma1_share"] == pytest.approx(sigma1_share(rows), rel=1e-4)
    assert row["sigma1_share"] > 0.9  # the massive token's direction holds the variance
    assert row["sigma1_share_no_first"] == pytest.approx(sigma1_share(rows[~first]), rel=1e-4)
    assert row["sigma1_share_no_first"] < 0.1
    assert row["mean_cosine_no_first"] == pytest.approx(mean_cosine(rows[~first]), abs=1e-5)
    norms = np.linalg.norm(rows, axis=1)
    # the largest 1% of norms: 20 of 2,048 rows, all massive first tokens here (64 of them), so 44 remain
    kept = rows[norms <= np.quantile(norms, 0.99)]
    assert row["sigma1_share_no_top_norms"] == pytest.approx(sigma1_share(kept), rel=1e-4)
    assert row["first_norm_ratio"] == pytest.approx(np.median(norms[first]) / np.median(norms[~first]), rel=1e-5)
    assert row["first_norm_ratio"] > 50


def test_without_a_massive_token_the_three_shares_agree():
    h = sequences(massive=0.0)
    row = measured(h, batch_size=h.shape[0] * h.shape[1])
    assert row["sigma1_share_no_first"] == pytest.approx(row["sigma1_share"], rel=0.1)
    assert row["sigma1_share_no_top_norms"] == pytest.approx(row["sigma1_share"], rel=0.1)
    assert row["first_norm_ratio"] == pytest.approx(1.0, abs=0.1)


def test_robust_false_leaves_the_robust_readings_out_and_the_rest_as_brute_force_has_it():
    """A caller that reads no robust share (the profile command) asks for none; the shares it reads do not move."""
    h = sequences(n_seq=40, length=16)
    rows = h.reshape(-1, h.shape[-1])
    first = taps.first_kept(torch.ones(h.shape[:2], dtype=torch.bool)).reshape(-1)
    read = {}
    for robust in (True, False):
        layer = batches.BatchedLayer(h.shape[-1], batch_size=len(rows), n_batches=1,
                                     metric_names=("sigma1_share", "mean_cosine"), robust=robust)
        read[robust] = layer.update(torch.from_numpy(h), first=first).rows()[0]
    assert set(batches.ROBUST_METRICS) <= set(read[True])
    assert not set(batches.ROBUST_METRICS) & set(read[False])
    assert read[False]["sigma1_share"] == pytest.approx(sigma1_share(rows), rel=1e-4)
    assert read[False]["mean_cosine"] == pytest.approx(mean_cosine(rows), abs=1e-5)
    assert {k: read[True][k] for k in read[False]} == read[False]


def test_the_first_kept_position_after_left_padding_and_a_skipped_token():
    kept = torch.tensor([[True, True, True, False], [False, False, True, True], [False, True, False, True]])
    assert taps.first_kept(kept).tolist() == [[True, False, False, False], [False, False, True, False],
                                              [False, True, False, False]]


def test_the_flags_follow_their_rows_through_the_shuffle():
    """With the paper's shuffle, a batch holds rows of every sequence in random order: the first-position flags must
    move with their rows (the massive rows are the flagged ones)."""
    h = sequences(n_seq=40, length=16)
    layer = batches.BatchedLayer(h.shape[-1], batch_size=256, n_batches=2, shuffle_seed=3)
    first = taps.first_kept(torch.ones(h.shape[:2], dtype=torch.bool))
    for k in range(0, len(h), 8):  # several updates, as taps.extract feeds them
        layer.update(torch.from_numpy(h[k:k + 8]), first=first[k:k + 8].reshape(-1))
    for row in layer.rows():
        assert row["first_norm_ratio"] > 50 and row["sigma1_share_no_first"] < 0.2 < row["sigma1_share"]


def test_opens_with_special_tells_a_bos_or_cls_tokenizer_from_one_that_opens_with_text(tmp_path):
    """A WordPiece tokenizer puts [CLS] first (its first position is special); the same vocabulary without a template
    puts the text first; a preprocessor of images (no tokenizer) opens with nothing."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from anisotropy.experiments.spectral import opens_with_special

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    plain = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]")
    core.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    opened = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                     sep_token="[SEP]")
    assert opened("a")["input_ids"] == [2, 4, 3] and opens_with_special(opened)
    assert plain("a")["input_ids"] == [4] and not opens_with_special(plain)
    assert not opens_with_special(object())
