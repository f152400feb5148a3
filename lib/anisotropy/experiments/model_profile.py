"""Any model's layer-wise geometry in one call (``python -m anisotropy profile``): both papers' per-layer measures of a
registry model, a Hub id (``owner/name@revision``), a ``save_pretrained`` folder or a ``.gguf`` file, on a named
source, a text file, a folder of images or a folder of audio files, as one tidy table through the results store.

Which models: what ``models.registry.load_any`` loads, i.e. the registry's, and any text, image or speech model that
transformers' Auto classes load with its tokenizer, image processor or feature extractor (``registry.load_auto``;
an unsupported one stops in one line saying what is supported). Which vectors count is ``measure.taps``' rule for the
model's layout (text: padding and special tokens excluded; images: a vision transformer's patch tokens, a CNN's
flattened map per image; speech: the encoder's frames of the real audio). Audio files are decoded with soundfile,
mixed down to mono and resampled to the 16 kHz every feature extractor is fed (``measure.taps.SAMPLING_RATE``,
``scipy.signal.resample_poly``); images are read with PIL as RGB.

Per layer (one row per model and layer; ``relative_depth`` = layer / last layer, in [0, 1]):

- Paper 1 (``experiments.layerwise``, ``layerwise.FirstMoments`` on every valid token vector): ``mean_cosine`` with its
  bootstrap interval over examples (``mean_cosine_low`` / ``_high``, ``layerwise.BOOTSTRAP``), ``null_q95`` (the
  isotropic 95th percentile of the cosine at the layer's width ``dim``), ``ratio_to_null`` = mean_cosine / null_q95,
  ``drift_norm`` = ||mean of the vectors|| and ``mean_norm`` = mean of ||vector|| (units of the hidden state), ``n``
  (vectors);
- Paper 2 (``experiments.spectral.measure``'s shuffled batches): ``sigma1_share`` = sigma_1^2 / sum_i sigma_i^2 of the
  centred batch and ``twonn_dimension`` (TwoNN), each the mean over ``spectral_n_batches`` batches of
  ``spectral_batch_size`` vectors (``<metric>_std``: standard deviation over batches), ``spectral_vectors`` in all.

The batches are Paper 2's 4096 vectors where the text gives four of them, else fewer and smaller (every layer's
vectors, at least ``MIN_VECTORS``): the table records what was used. A text file gives one example per line, or one
per paragraph when it has blank lines. Inputs that cannot be profiled stop with one ``ProfileInputError`` line.
``figures`` draws one figure per measure (``pages.plots``); the verdicts are ``claims.model_verdicts``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch

from anisotropy import devices, hub, progress, results
from anisotropy.data import sources
from anisotropy.errors import ModelTooLargeError, UserError
from anisotropy.experiments import layerwise, spectral
from anisotropy.measure import taps
from anisotropy.measure.batches import BATCH_SIZE, BatchedLayer
from anisotropy.models import registry
from anisotropy.models.identity import identity
from anisotropy.models.session import session

STORE_CHAPTER = "model_profile"  # results/<STORE_CHAPTER>/: one frame per model, data and settings
MIN_VECTORS = 64  # fewer vectors in some layer: no bootstrap, TwoNN or sigma_1 share worth reading
EXTRACTION_BATCH = 8  # examples per forward pass
N_BATCHES = 4  # Paper 2's batches per layer, when the text has enough vectors
DEFAULT_N = 256  # examples of a named source
PAPER2_METRICS = ("sigma1_share", "twonn_dimension")  # Paper 1's measures come from every vector, not the batches

#: The measures drawn and their axis labels, in the table's order.
MEASURES = {"mean_cosine": "mean cosine similarity", "sigma1_share": "σ₁ share (σ₁² / Σσᵢ²)",
            "twonn_dimension": "TwoNN intrinsic dimension", "drift_norm": "drift norm ||mean||",
            "mean_norm": "mean norm"}


class ProfileInputError(UserError):
    """A model or a text that cannot be profiled here (one line, what to give instead)."""


@dataclass(frozen=True)
class Target:
    """One model as typed on the command line: ``name`` (without ``@revision``) and ``revision``."""

    name: str
    revision: str | None = None

    @classmethod
    def parse(cls, text: str) -> "Target":
        """``owner/name@rev`` -> Target("owner/name", "rev"); a path that exists keeps any "@" it holds."""
        if "@" in text and not Path(text).exists():
            name, revision = text.rsplit("@", 1)
            return cls(name, revision or None)
        return cls(text)

    @property
    def shown(self) -> str:
        return self.name + (f"@{self.revision}" if self.revision else "")


def read_texts(path: str | Path) -> list[str]:
    """The examples of a text file (UTF-8): one per non-empty line, or one per paragraph (lines joined by a space)
    when the file has blank lines."""
    path = Path(path)
    if not path.is_file():
        raise ProfileInputError(f"--text {path}: no such file")
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    if any(not line.strip() for line in lines[:-1]) and len(text.strip().splitlines()) > 1:
        blocks = [" ".join(line.strip() for line in block.splitlines() if line.strip())
                  for block in text.replace("\r\n", "\n").split("\n\n")]
        return [b for b in blocks if b]
    return [line.strip() for line in lines if line.strip()]


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".aiff", ".aif")  # what libsndfile decodes everywhere
#: What a model of each modality is given, in the one line of a model that does not read the examples given.
GIVE = {"text": "a text file (--text FILE) or a text source (--source)", "vision": "a folder of images (--images DIR)",
        "speech": "a folder of audio files (--audio DIR)"}


def _files(folder: str | Path, suffixes: tuple[str, ...], flag: str, n: int | None) -> list[Path]:
    """The first ``n`` (all when None) files of ``folder`` with one of ``suffixes``, by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ProfileInputError(f"{flag} {folder}: no such folder")
    files = sorted(f for f in folder.iterdir() if f.is_file() and f.suffix.lower() in suffixes)
    if not files:
        raise ProfileInputError(f"{flag} {folder}: no file ending in {', '.join(suffixes)}")
    return files[:n] if n else files


def _digest(files: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\x00" + f.read_bytes() + b"\x00")
    return h.hexdigest()[:16]


def read_images(folder: str | Path, n: int | None = None) -> list:
    """The images of a folder (``IMAGE_SUFFIXES``, by file name; the first ``n``) as RGB PIL images."""
    from PIL import Image

    images = []
    for f in _files(folder, IMAGE_SUFFIXES, "--images", n):
        try:
            with Image.open(f) as im:
                images.append(im.convert("RGB"))
        except OSError as exc:
            raise ProfileInputError(f"--images {f}: not an image PIL reads ({' '.join(str(exc).split())})") from None
    return images


def read_audio(folder: str | Path, n: int | None = None) -> list[dict]:
    """The audio files of a folder (``AUDIO_SUFFIXES``, by file name; the first ``n``) as ``{"array",
    "sampling_rate"}`` speech examples: decoded with soundfile, channels averaged to mono, resampled to
    ``taps.SAMPLING_RATE`` with ``scipy.signal.resample_poly`` (its polyphase filter)."""
    from math import gcd

    import numpy as np
    from scipy.signal import resample_poly

    try:
        import soundfile
    except ImportError:
        raise ProfileInputError("--audio needs the soundfile package (pip install soundfile)") from None
    clips = []
    for f in _files(folder, AUDIO_SUFFIXES, "--audio", n):
        try:
            array, rate = soundfile.read(str(f), dtype="float32", always_2d=True)
        except (RuntimeError, soundfile.LibsndfileError) as exc:
            raise ProfileInputError(f"--audio {f}: not audio soundfile reads ({' '.join(str(exc).split())})") from None
        array = array.mean(axis=1)
        if rate != taps.SAMPLING_RATE:
            g = gcd(int(rate), taps.SAMPLING_RATE)
            array = resample_poly(array, taps.SAMPLING_RATE // g, int(rate) // g)
        clips.append({"array": np.asarray(array, dtype=np.float32), "sampling_rate": taps.SAMPLING_RATE})
    return clips


def examples(text: str | Path | None = None, source: str = "prose", n: int | None = None, seed: int = 0,
             images: str | Path | None = None, audio: str | Path | None = None) -> tuple[list, dict, str]:
    """(examples, their key, their modality): the text file's examples, the folder's images (``read_images``) or
    audio clips (``read_audio``), each the first ``n`` when given, else ``n`` examples of ``source``
    (``data.sources.load``, default ``DEFAULT_N``)."""
    if n is not None and n < 1:
        raise ProfileInputError(f"--n {n}: give at least one example")
    if sum(x is not None for x in (text, images, audio)) > 1:
        raise ProfileInputError("give one of --text, --images and --audio")
    if text is not None:
        texts = read_texts(text)
        texts = texts[:n] if n else texts
        digest = hashlib.sha256("\n\x00".join(texts).encode()).hexdigest()[:16]
        return texts, {"text": digest, "n": len(texts), "name": Path(text).name}, "text"
    for folder, kind, modality, suffixes, read in ((images, "images", "vision", IMAGE_SUFFIXES, read_images),
                                                   (audio, "audio", "speech", AUDIO_SUFFIXES, read_audio)):
        if folder is not None:  # keyed by the files read: their names and bytes
            digest = _digest(_files(folder, suffixes, f"--{kind}", n))
            found = read(folder, n)
            return found, {kind: digest, "n": len(found), "name": Path(folder).resolve().name}, modality
    if source not in sources.SOURCES:
        raise ProfileInputError(f"--source {source}: no such source; choose from {', '.join(sources.SOURCES)}")
    n = n or DEFAULT_N
    return sources.load(source, n, seed=seed), {"source": source, "n": n, "seed": seed}, sources.modality(source)


def load(target: Target, device=None, dtype: str | None = None, variant: str = "pretrained",
         modality: str = "text"):
    """``models.registry.load_any`` (``variant``: "pretrained", or a registry entry's "untrained" or "tiny") with its
    failures (an unsupported model, and a model that does not read the examples' ``modality``) as one
    ``ProfileInputError`` line."""
    # transformers' notices would break the one line of an error, and say nothing here
    layerwise.silence_known_warnings()
    try:
        loaded = registry.load_any(target.name, revision=target.revision, device=devices.resolve(device),
                                   dtype=getattr(torch, dtype) if dtype else None, variant=variant)
    except (FileNotFoundError, ValueError, hub.Unavailable, ModelTooLargeError) as exc:
        raise ProfileInputError(f"{target.shown}: {' '.join(str(exc).split())}") from None
    if loaded.spec.modality != modality:
        raise ProfileInputError(f"{target.shown} is a {loaded.spec.modality} model but the examples are "
                                f"{modality}: give {GIVE[loaded.spec.modality]}")
    rate = getattr(loaded.preprocessor, "sampling_rate", taps.SAMPLING_RATE)
    if modality == "speech" and rate != taps.SAMPLING_RATE:
        raise ProfileInputError(f"{target.shown}: its feature extractor reads {rate} Hz audio; profile feeds every "
                                f"speech model {taps.SAMPLING_RATE} Hz")
    return loaded


def batching(n_min: int) -> tuple[int, int]:
    """(batch size, batches) of Paper 2's measures for a model whose thinnest layer has ``n_min`` vectors:
    ``N_BATCHES`` batches of ``BATCH_SIZE`` where there are enough, else as many ``BATCH_SIZE`` batches as fit, else
    one batch of every vector."""
    size = min(BATCH_SIZE, n_min)
    return size, max(1, min(N_BATCHES, n_min // size))


def measure(loaded, examples: Sequence, *, max_length: int = 128, extraction_batch: int = EXTRACTION_BATCH,
            seed: int = 0, device=None) -> pd.DataFrame:
    """The per-layer rows of one loaded model on ``examples`` (texts, images or speech clips, as ``measure.taps``
    takes them; see the module docstring); not stored.

    One pass over the text: each layer's accumulator is a ``taps.Tee`` of Paper 1's ``FirstMoments`` and Paper 2's
    ``BatchedLayer``, whose batching (``batching``) is chosen beforehand from the vectors the tokenizer says the
    text gives (``taps.text_vectors``). The rows equal those of the two separate passes (``layerwise`` then
    ``spectral.measure``), which are still taken where that count is unknown (CANINE, images, speech) or proves
    wrong (a layer with zero or non-finite vectors, so fewer than counted)."""
    base = getattr(loaded.model, "base_model", loaded.model)
    loaded.model = base  # the hidden states are the base model's; an LM head would only compute logits
    counted = taps.text_vectors(loaded, examples, batch_size=extraction_batch, max_length=max_length)
    if counted is not None and counted < MIN_VECTORS:
        _too_few(loaded, counted)
    planned = batching(counted) if counted is not None else None
    moments = layerwise.stats_factory("moments", 0, seed)

    def both(dim: int):
        # the same BatchedLayer spectral.measure builds (shuffled with the seed), beside the moments; the table shows
        # no robust reading of the sigma_1 share, so none is computed
        return taps.Tee(moments(dim), BatchedLayer(dim, planned[0], planned[1], PAPER2_METRICS, shuffle_seed=seed,
                                                   robust=False))

    extraction = taps.extract(loaded, examples, batch_size=extraction_batch, max_length=max_length, seed=seed,
                              device=device, stats_factory=both if planned else moments)
    frame = layerwise.frame_of(extraction.mapped(lambda s: s.members[0]) if planned else extraction, loaded)
    n_min = int(frame["n"].min())
    if n_min < MIN_VECTORS:
        _too_few(loaded, n_min)
    size, count = batching(n_min)
    if planned == (size, count):
        batches = spectral.batch_rows(loaded, extraction.mapped(lambda s: s.members[1]), batch_size=size)
    else:  # the thinnest layer holds other than counted: its own pass, as Paper 2's batches would be alone
        batches = spectral.measure(loaded, examples, batch_size=size, n_batches=count, max_length=max_length,
                                   extraction_batch=extraction_batch, device=device, shuffle_seed=seed,
                                   metric_names=PAPER2_METRICS, robust=False)
    summary = spectral.summary(batches, by=["layer"])[["layer", "sigma1_share", "sigma1_share_std",
                                                        "twonn_dimension", "twonn_dimension_std"]]
    frame = frame.drop(columns=["sigma1_share", "twonn_dimension"]).merge(summary, on="layer", how="left")
    frame["ratio_to_null"] = frame["mean_cosine"] / frame["null_q95"]
    frame["spectral_batch_size"], frame["spectral_n_batches"] = size, count
    frame["spectral_vectors"] = size * count
    return frame


# What gives more vectors, by modality (a CNN's layer holds one vector per image).
_MORE = {"text": "more or longer examples (--n, --text, --max-length)", "vision": "more images (--images, --n)",
         "speech": "more or longer audio (--audio, --n)"}


def _too_few(loaded, n: int):
    raise ProfileInputError(f"{loaded.spec.display}: the examples give {n} vectors in some layer, fewer than "
                            f"{MIN_VECTORS}: give {_MORE[loaded.spec.modality]}")


def profile(model: str, *, text: str | Path | None = None, source: str = "prose", n: int | None = None,
            seed: int = 0, max_length: int = 128, extraction_batch: int = EXTRACTION_BATCH, device=None,
            dtype: str | None = None, variant: str = "pretrained", images: str | Path | None = None,
            audio: str | Path | None = None, store: results.Store | None = None) -> pd.DataFrame:
    """One model's per-layer rows (``measure``), from the store when the same model, examples, settings and code
    were measured before; columns ``model`` (as given), ``label``, ``stack`` and ``data`` are added. The examples:
    ``text`` (a file), ``images`` or ``audio`` (a folder), else ``n`` of ``source`` (``examples``). ``variant``
    "untrained" (true size) or "tiny" (toy size) measures a registry entry's random weights instead."""
    if max_length < 1:
        raise ProfileInputError(f"--max-length {max_length}: give at least one token per example")
    target = Target.parse(str(model))
    inputs, data_key, modality = examples(text, source, n, seed, images=images, audio=audio)
    key = {"what": "model profile", "model": identity(target.name, variant, target.revision), "data": data_key,
           "max_length": max_length, "extraction_batch": extraction_batch, "seed": seed, "dtype": dtype}
    store = store or results.Store()
    measured = []

    def compute() -> pd.DataFrame:
        measured.append(True)
        progress.say(f"profiling {target.shown} on {len(inputs)} examples")
        try:
            with session(target.name, batch_size=extraction_batch, dtype=getattr(torch, dtype) if dtype else None,
                         load=lambda: load(target, device, dtype, variant, modality)) as loaded:
                return measure(loaded, inputs, max_length=max_length, extraction_batch=extraction_batch, seed=seed,
                               device=devices.resolve(device))
        except ModelTooLargeError as exc:  # out of GPU memory, loading or measuring: the session's one line
            raise ProfileInputError(f"{target.shown}: {exc}") from None

    frame = store.cached(STORE_CHAPTER, key, compute)
    frame["model"] = target.shown
    frame["label"] = _label(target, frame) + ("" if variant == "pretrained" else f" ({variant})")
    frame["data"] = data_key.get("name") or f"{data_key['source']} ({data_key['n']})"
    progress.say(f"{target.shown}: {len(frame)} layers, {int(frame['n'].min()):,} vectors in the thinnest"
                 + ("" if measured else " (read from the results store)"))
    return frame


def _label(target: Target, frame: pd.DataFrame) -> str:
    """The legend's name: the registry's display name, a folder's or file's own name, else the Hub id."""
    path = Path(target.name)
    if registry.known(target.name):
        return str(frame["display"].iloc[0]) + (f" @ {target.revision}" if target.revision else "")
    if path.exists():
        return path.stem if path.is_file() else path.resolve().name
    return target.shown


def profile_models(models: Sequence[str], **kwargs) -> pd.DataFrame:
    """``profile`` of each model, one table (two models with the same label get their names as labels)."""
    frames = [profile(m, **kwargs) for m in models]
    table = pd.concat(frames, ignore_index=True)
    if table.groupby("label")["model"].nunique().max() > 1:
        table["label"] = table["model"]
    return table


#: The table's columns in the order it is written (the rest follow).
COLUMNS = ("model", "label", "display", "stack", "data", "layer", "relative_depth", "dim", "n", "n_examples",
           "mean_cosine", "mean_cosine_low", "mean_cosine_high", "null_q95", "ratio_to_null", "sigma1_share",
           "sigma1_share_std", "twonn_dimension", "twonn_dimension_std", "spectral_batch_size", "spectral_n_batches",
           "spectral_vectors", "drift_norm", "mean_norm")


def tidy(table: pd.DataFrame) -> pd.DataFrame:
    """The table with ``COLUMNS`` first."""
    first = [c for c in COLUMNS if c in table.columns]
    return table[first + [c for c in table.columns if c not in first]]


def figures(table: pd.DataFrame) -> dict:
    """``{measure: Figure}``: mean cosine (``plots.layer_cosines``, with the isotropic null) and every other measure
    (``plots.layer_measure``) against relative depth, all models on each."""
    # cost: pulls matplotlib (~0.6 s) into every process that measures (a Dask worker); only the figures draw
    from anisotropy.pages import plots

    plots.use_style()
    out = {"mean_cosine": plots.layer_cosines(table)}
    for measure_name, label in MEASURES.items():
        if measure_name != "mean_cosine":
            out[measure_name] = plots.layer_measure(table, measure_name, label)
    return out


def write(table: pd.DataFrame, out: str | Path) -> list[Path]:
    """The table (``profile.csv``, ``profile.parquet``) and one PNG per measure in ``out``; the paths written."""
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = tidy(table)
    written = [out / "profile.csv", out / "profile.parquet"]
    table.to_csv(written[0], index=False)
    table.to_parquet(written[1], index=False)
    for name, fig in figures(table).items():
        written.append(out / f"{name}.png")
        fig.savefig(written[-1], bbox_inches="tight")
        plt.close(fig)
    return written
