"""Corpora and their offline defaults, with deterministic sampling; Hub datasets come through ``hub.dataset``.

``load(source, n, seed)`` is the one entry point; ``SOURCES`` lists what it knows, each source with the function that
reads it, in one module per kind of source (``data.prose``, ``data.docstrings``, ``data.wikipedia``, ``data.speech``,
``data.images``, ``data.reactions``; what they share is in ``data.common``):

- text: ``"prose"`` (offline default: the English prose of Python's own language reference, ``pydoc_data.topics``,
  ~465k characters present on every Python install, split into paragraphs with code blocks and grammar rules
  removed), ``"docstrings"`` (offline: the prose paragraphs of the docstrings of the installed packages, several MB,
  deduplicated and split into train and validation documents, keyed by a content hash; the self-trained language
  models learn from its train split, ``load`` draws from its validation split; see ``docstring_corpus``), ``"wikitext-103"`` (WikiText-103 raw validation, paper profile), ``"enwik8"`` (the Hutter Prize
  file, downloaded once with its checksum verified, its articles cleaned as the second paper does; see ``enwik8``);
- speech: ``"espeak-speech"`` (offline default: sentences of the prose spoken by eSpeak NG's English voices, 16 kHz,
  with their transcripts), ``"synthetic-speech"`` (offline: vowel-like utterances from a source-filter model, 16 kHz;
  used to train nothing now, kept as the untrained models' simplest input),
  ``"librispeech"`` (LibriSpeech clean validation, paper profile; Paper 1's Common Voice 11 is no longer on the Hub);
- images: ``"photos"`` (offline default: crops of the photographs bundled with scikit-image and matplotlib),
  ``"synthetic-shapes"`` (offline: procedurally generated shapes, labelled by shape, so that a small vision
  model can be trained on them), ``"imagenette"`` (ungated ImageNet subset, paper profile), ``"imagenet"`` (gated).

Hub sources fail at once, in one line, when the Hub is unreachable and the data is not cached.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Callable

from anisotropy.data import docstrings, images, prose, reactions, speech, wikipedia


@dataclass(frozen=True)
class Source:
    """A data source of ``load``: the function that reads it (``read(n, seed, **options)``), its modality, what it
    is, and whether it works without network."""

    name: str
    read: Callable[..., list] = field(repr=False, compare=False)
    modality: str
    description: str
    offline: bool
    download_mb: float = 0.0  # what a first use downloads (approximate, for the Colab budget)
    train_mb: float = 0.0  # what training on the corpus downloads (its train split)


SOURCES = {s.name: s for s in (
    Source("prose", prose.prose, "text", prose.PROSE_SOURCE, True),
    Source("docstrings", docstrings.docstrings, "text",
           docstrings.DOCSTRING_SOURCE + "; its held-out validation documents", True),
    # The validation split's Parquet file (about 1.2 MB of text); training on the corpus reads train too (~300 MB).
    Source("wikitext-103", wikipedia.wikitext, "text",
           "WikiText-103 raw, validation split (Salesforce/wikitext, wikitext-103-raw-v1)", False, 1.3, 300.0),
    Source("enwik8", wikipedia.enwik8, "text",
           "enwik8: the first 10^8 bytes of an English Wikipedia XML dump, articles cleaned of markup, code and media",
           False, 34.8),
    Source("reaction-smiles", reactions.reaction_smiles, "text",
           "36 textbook organic reactions written as reaction SMILES (reactants and reagents >> products), the input "
           "rxnmapper's ALBERT was trained on", True),
    Source("synthetic-speech", speech.synthetic_speech, "speech",
           "synthetic vowel-like utterances (source-filter model, 16 kHz)", True),
    Source("espeak-speech", speech.espeak_speech, "speech",
           "sentences of the offline prose spoken by eSpeak NG's English voices (formant synthesis, from the PyPI "
           "package espeakng-loader), resampled to 16 kHz, with their transcripts", True),
    # dev-clean is 337 MB as FLAC archives (openslr.org/12); its Parquet shards hold the same FLAC bytes.
    Source("librispeech", speech.librispeech, "speech",
           "LibriSpeech ASR, clean validation split (openslr/librispeech_asr)", False, 337.0),
    Source("synthetic-shapes", images.images, "vision",
           "procedurally generated coloured shapes on noisy backgrounds", True),
    Source("photos", images.photos, "vision",
           "random square crops of the 15 photographs bundled with scikit-image and matplotlib (astronaut, coffee, cat, "
           "rocket, motorcycle, Hubble deep field, retina, ...), resized to the model's input size", True),
    # 3,925 validation JPEGs of the 320-pixel version (the 13,394-image archive is 325 MB).
    Source("imagenette", images.imagenette, "vision",
           "Imagenette (10 easy ImageNet classes), 320px validation split (frgfm/imagenette)", False, 95.0),
    Source("imagenet", images.imagenet, "vision", "ImageNet-1k validation split (ILSVRC/imagenet-1k, gated)",
           False, 6400.0),
)}


def load(source: str, n: int, seed: int = 0, **options) -> list:
    """``n`` raw examples of ``source`` (see ``SOURCES``), deterministic given ``seed``.

    Text sources give strings; speech sources ``{"array", "sampling_rate", "text"}`` dicts at 16 kHz; vision sources
    (H, W, 3) uint8 arrays. ``options`` go to the source's function (``min_chars``, ``chars``/``path`` for enwik8,
    ``seconds``/``transcripts`` for synthetic speech, ``voices``/``sentences`` for eSpeak speech, ``size`` for
    synthetic shapes and photos). A source that cannot be read here raises ``DataUnavailableError`` with one line
    saying how to fix it.
    """
    _known(source)
    return SOURCES[source].read(n, seed, **options)


def _known(source: str) -> None:
    if source not in SOURCES:
        close = difflib.get_close_matches(source, list(SOURCES), n=3, cutoff=0.4)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ValueError(f"unknown data source {source!r}{hint}; choose from {', '.join(SOURCES)}")


def modality(source: str) -> str:
    """The modality of a source: "text", "speech" or "vision"."""
    _known(source)
    return SOURCES[source].modality
