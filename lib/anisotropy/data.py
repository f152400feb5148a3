"""Corpora and their offline defaults, with deterministic sampling. The only module that imports ``datasets``.

Offline defaults (profiles ``local`` and ``smoke``):
- text: the English prose of Python's own language reference (``pydoc_data.topics``, ~465k characters, present on every
  Python install), split into paragraphs with code blocks and grammar rules removed;
- images: procedurally generated shapes (``synthetic_shapes``), labelled by shape, so that a small vision model can be
  trained on them.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

PROSE_SOURCE = "Python language reference prose (pydoc_data.topics)"


@lru_cache(maxsize=1)
def prose_paragraphs(min_chars: int = 80) -> tuple[str, ...]:
    """Paragraphs of English prose from ``pydoc_data.topics``, in a fixed order, whitespace normalised.

    Indented blocks (code, grammar productions) and underline rules are dropped: what is left is running text.
    """
    from pydoc_data.topics import topics

    paragraphs = []
    for name in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[name]):
            lines = block.split("\n")
            if any(line.startswith((" ", "\t")) for line in lines):
                continue  # code sample, grammar rule or indented note
            if re.fullmatch(r"[*=\-~^]+", lines[-1].strip() or "x"):
                continue  # section heading with its underline
            text = " ".join(line.strip() for line in lines).strip()
            if len(text) >= min_chars:
                paragraphs.append(text)
    return tuple(paragraphs)


def prose_corpus() -> str:
    """All offline prose paragraphs joined by blank lines (for tokenizer and language-model training)."""
    return "\n\n".join(prose_paragraphs())


def text_samples(n: int, seed: int = 0) -> list[str]:
    """``n`` prose paragraphs drawn without replacement (with replacement only if ``n`` exceeds the corpus)."""
    paragraphs = prose_paragraphs()
    if n <= 0:
        raise ValueError(f"text_samples needs n >= 1 samples, got n={n}")
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(paragraphs), size=n, replace=n > len(paragraphs))
    return [paragraphs[i] for i in idx]


SHAPES = ("disc", "square", "triangle", "ring", "cross", "stripes")


def synthetic_shapes(n: int, size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` RGB images (uint8, shape (n, size, size, 3)) of one coloured shape on a noisy background, and labels.

    Label ``k`` is the index of the shape in ``SHAPES``; position, scale, colours and noise are random, so the task
    needs shape recognition rather than colour statistics.
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    images = np.empty((n, size, size, 3), dtype=np.uint8)
    labels = rng.integers(0, len(SHAPES), size=n)
    for i, label in enumerate(labels):
        cx, cy = rng.uniform(0.3, 0.7, size=2)
        r = rng.uniform(0.15, 0.28)
        dx, dy = xx - cx, yy - cy
        shape = SHAPES[label]
        if shape == "disc":
            mask = dx**2 + dy**2 < r**2
        elif shape == "square":
            mask = (np.abs(dx) < r * 0.85) & (np.abs(dy) < r * 0.85)
        elif shape == "triangle":
            mask = (dy < r * 0.8) & (dy > -r) & (np.abs(dx) < (dy + r) * 0.6)
        elif shape == "ring":
            d2 = dx**2 + dy**2
            mask = (d2 < r**2) & (d2 > (0.55 * r) ** 2)
        elif shape == "cross":
            mask = ((np.abs(dx) < r * 0.3) & (np.abs(dy) < r)) | ((np.abs(dy) < r * 0.3) & (np.abs(dx) < r))
        else:  # stripes inside a square window
            mask = (np.abs(dx) < r) & (np.abs(dy) < r) & (np.sin(dx * 40 / (r * 8)) > 0)
        background = rng.uniform(0, 255, size=3)
        foreground = rng.uniform(0, 255, size=3)
        img = np.where(mask[..., None], foreground, background) + rng.normal(0, 12, size=(size, size, 3))
        images[i] = np.clip(img, 0, 255).astype(np.uint8)
    return images, labels
