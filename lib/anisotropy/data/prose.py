"""The offline default text: the English prose of Python's own language reference (``pydoc_data.topics``), split
into paragraphs with code blocks and grammar rules removed (~465k characters, present on every Python install).
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from anisotropy.data.common import sample


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


def prose(n: int, seed: int = 0, min_chars: int = 80) -> list[str]:
    """``n`` paragraphs of at least ``min_chars`` characters (source ``"prose"``); the same draw as
    ``text_samples(n, seed)`` for the default ``min_chars``."""
    paragraphs = prose_paragraphs(min_chars)
    idx = sample(len(paragraphs), n, seed, f"the prose corpus (paragraphs of >= {min_chars} characters)")
    return [paragraphs[i] for i in idx]
