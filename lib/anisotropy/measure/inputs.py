"""Examples -> what a model is fed: which modality an example is (checked against the model's before anything reads
it), a speech example as a 16 kHz mono waveform, an image as an (H, W, 3) array on the 0-255 scale, and the batches
``taps.extract`` feeds (``in_chunks``; long speech clips cut where the convolutional front end would pass
``SPEECH_PASS_BYTES``: ``speech_chunks``)."""

from __future__ import annotations

import itertools
from typing import Iterable

import numpy as np
import torch

SAMPLING_RATE = 16_000
MIN_SAMPLES = 400  # receptive field of the wav2vec 2.0 / HuBERT feature encoder (25 ms)
_DEFAULT_SOURCE = {"text": "prose", "speech": "synthetic-speech", "vision": "synthetic-shapes"}


def _kind(example) -> str:
    if isinstance(example, str):
        return "text"
    if isinstance(example, dict):
        return "speech" if ("array" in example or "audio" in example) else "unknown"
    try:
        from PIL import Image

        if isinstance(example, Image.Image):
            return "vision"
    except ImportError:  # pragma: no cover
        pass
    if isinstance(example, (np.ndarray, torch.Tensor)):
        if example.ndim == 2:  # (channels, samples) audio is long and thin; a grayscale image is not
            return "speech" if min(example.shape) <= 8 and max(example.shape) >= 64 * min(example.shape) else "vision"
        return {1: "speech", 3: "vision"}.get(example.ndim, "unknown")
    return "unknown"


def _check_modality(spec, example) -> None:
    kind = _kind(example)
    if kind != spec.modality:
        shape = getattr(example, "shape", None)
        got = f"{type(example).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else "")
        raise ValueError(
            f"{spec.name} is a {spec.modality} model but the examples look like {kind} data ({got}); "
            f"load {spec.modality} examples, e.g. data.load({_DEFAULT_SOURCE[spec.modality]!r}, n)")


def as_audio(example) -> tuple[np.ndarray, str | None]:
    """(16 kHz float32 waveform, transcript or None) of a speech example."""
    text = None
    if isinstance(example, dict):
        text = example.get("text")
        inner = example.get("audio", example)
        array, rate = inner["array"], inner.get("sampling_rate", SAMPLING_RATE)
    else:
        array, rate = example, SAMPLING_RATE
    array = np.asarray(array.cpu() if isinstance(array, torch.Tensor) else array, dtype=np.float32)
    if array.ndim == 2:  # several channels, on the shorter axis: mix down to mono
        array = array.mean(axis=int(np.argmin(array.shape)))
    if array.ndim != 1:
        raise ValueError(f"a speech example must be a waveform (samples,) or (channels, samples), got shape "
                         f"{array.shape}")
    if rate != SAMPLING_RATE:
        from math import gcd

        from scipy.signal import resample_poly

        g = gcd(int(rate), SAMPLING_RATE)
        array = resample_poly(array, SAMPLING_RATE // g, int(rate) // g).astype(np.float32)
    return array, text


def as_image(example) -> np.ndarray:
    """An (H, W, 3) array on the 0-255 scale that every image processor expects.

    PIL images are converted to RGB; (H, W) and single-channel arrays are repeated to 3 channels, channels-first
    arrays moved last, an alpha channel dropped; float arrays whose values all lie in [0, 1] are read as [0, 1]
    images and scaled to 0-255 (the processors rescale by 1/255 themselves).
    """
    if hasattr(example, "convert") and hasattr(example, "mode"):  # PIL
        example = example.convert("RGB")
    if isinstance(example, torch.Tensor):
        example = example.cpu().numpy()
    a = np.asarray(example)
    if a.ndim == 2:
        a = a[..., None]
    if a.ndim != 3:
        raise ValueError(f"an image must be (H, W), (H, W, C) or (C, H, W), got shape {a.shape}")
    if a.shape[0] in (1, 3, 4) and a.shape[-1] not in (1, 3, 4):
        a = np.moveaxis(a, 0, -1)  # channels first -> last
    if a.shape[-1] == 1:
        a = np.repeat(a, 3, axis=-1)
    elif a.shape[-1] == 4:
        a = a[..., :3]  # RGBA: the alpha channel is not part of the picture the models were trained on
    elif a.shape[-1] != 3:
        raise ValueError(f"an image needs 1, 3 or 4 channels, got shape {a.shape}")
    if a.dtype.kind == "f" and a.size and float(np.nanmax(a)) <= 1.0:
        a = a.astype(np.float32) * 255.0
    return a


def checked(spec, examples: Iterable):
    """The examples, the first one checked against the model's modality (``_check_modality``) before anything reads
    it as that modality's data."""
    it = iter(examples)
    for example in it:
        _check_modality(spec, example)
        yield example
        break
    yield from it


def in_chunks(examples: Iterable, size: int):
    it = iter(examples)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


# The convolutional front end of wav2vec 2.0 / HuBERT is the peak of a forward pass over long audio: its first layer's
# output (conv_dim[0] channels at 1 / conv_stride[0] of the sample rate) lives beside its normalised copy (a layer norm
# adds a transposed copy) and the second layer's output at half its length. Measured on the CPU at the same shapes
# (tests/test_taps.py): 2.5 and 3.5 times the first output.
FRONT_END_COPIES = {"group": 2.5, "layer": 3.5}
# What one pass's front end may take: with the model (wav2vec2-large: 1.3 GB in float32), its hidden states and
# attention beside it, this keeps a pass over LibriSpeech's longest utterances (~35 s) within a T4's 15 GiB; 32 such
# utterances in one pass would take ~14 GB for the front end alone.
SPEECH_PASS_BYTES = 2 << 30


def front_end_bytes(config, batch: int, samples: int, dtype_bytes: int = 4) -> int:
    """Peak bytes of the convolutional front end on ``batch`` clips padded to ``samples``: ``FRONT_END_COPIES`` x
    batch x conv_dim[0] x ((samples - conv_kernel[0]) // conv_stride[0] + 1) values of ``dtype_bytes``."""
    length = max((samples - config.conv_kernel[0]) // config.conv_stride[0] + 1, 1)
    copies = FRONT_END_COPIES.get(getattr(config, "feat_extract_norm", "group"), max(FRONT_END_COPIES.values()))
    return int(copies * batch * config.conv_dim[0] * length * dtype_bytes)


def speech_chunks(examples: Iterable, size: int, config, dtype_bytes: int = 4, limit: int = SPEECH_PASS_BYTES):
    """Chunks of at most ``size`` speech examples (as ``{"array", "sampling_rate", "text"}`` at 16 kHz), cut earlier
    where the padded batch's front end (``front_end_bytes``) would pass ``limit``; a clip over it alone is a chunk of
    its own, whole (cropping it would change the data). Clips keep their order."""
    chunk, longest = [], 0
    for example in examples:
        array, text = as_audio(example)
        width = max(array.size, MIN_SAMPLES)  # what the batch is padded to, at least
        if chunk and (len(chunk) == size or
                      front_end_bytes(config, len(chunk) + 1, max(longest, width), dtype_bytes) > limit):
            yield chunk
            chunk, longest = [], 0
        chunk.append({"array": array, "sampling_rate": SAMPLING_RATE, "text": text})
        longest = max(longest, width)
    if chunk:
        yield chunk

