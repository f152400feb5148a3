"""Model + raw examples -> per-layer ``LayerStats``, streaming: each batch's hidden states go straight into per-layer
accumulators, so memory does not grow with the corpus.

Which vectors count (every rule applies to every variant of a model):

- text: one vector per token; padding is always excluded; special tokens ([CLS], [SEP], <s>, </s>, BOS...) are
  excluded unless ``keep_special=True``. Layer 0 = the embedding output.
- encoder-decoder text models (T5, ByT5): encoder layers, then decoder layers. The decoder is fed the encoder's input
  shifted right by one position (decoder start token first, last token dropped), i.e. teacher forcing on the same
  text; the start token counts as a special token.
- CharacterBERT: one vector per word (its indexer splits words and gives each 50 character ids); [CLS] and [SEP]
  are special.
- MANTa-LM: encoder layers (one vector per block of bytes, as many blocks as the model's segmentation makes of the
  text), then decoder layers (one per byte, fed the bytes shifted right); one text a forward pass, since the model
  masks neither padding among its blocks nor its blocks for the decoder.
- CANINE: three parts of different lengths, concatenated in this order unless ``part`` selects one: "character"
  (character embeddings + initial local character encoder), "downsampled" (molecules, one per 4 characters: deep
  stack input + its blocks; the [CLS] molecule is special; a molecule counts where the model's own molecule mask is
  on), "upsampled" (projection back to characters + final character encoder).
- speech: one vector per frame of the encoder (20 ms for wav2vec 2.0, HuBERT, Whisper); frames beyond an example's
  real audio are excluded; a batch of long clips is cut into passes whose convolutional front end stays under
  ``SPEECH_PASS_BYTES`` (``speech_chunks``), so full-length utterances fit a T4. Whisper's encoder always sees 30 s
  windows: frames are cropped to the real audio (ceil(samples / 320)). When the examples carry a transcript (``{"array", "sampling_rate", "text"}``), Whisper's
  decoder is fed [decoder start] + transcript tokens and its layers follow the encoder's.
- vision transformers (ViT, BEiT, DeiT): one vector per patch token; the CLS (and DeiT's distillation) token is
  special, excluded by default. MiT (Segformer encoder): each stage's map gives one vector per spatial position.
- CNNs (ResNet, EfficientNet, CvT, ConvNeXt, VAN): each stage's (or block's) map is flattened to one vector of
  dimension C*H*W per image. Layer 0 = the stem where the model exposes it; models without one start at layer 1.
- an image model outside the registry (layout "hidden_states", ``models.registry.generic_spec``): token states as a
  vision transformer's, the tokens in front of the patch grid special; stage maps as a CNN's.

``part`` selects "encoder" / "decoder" (T5, ByT5, Whisper) or a CANINE part; layer numbers stay those of the whole
model.

Typical use::

    loaded = registry.load("gpt2", variant="untrained")            # or "pretrained" / "tiny" / a checkpoint folder
    stats = taps.extract(loaded, data.load("prose", 200, seed=0))  # {layer: LayerStats}
    frame = taps.layer_frame(stats, seed=0)                        # one tidy row per layer

The modules beside it (every name above stays importable from here, ``taps.<name>``: they were this one module before
it was split): ``measure.inputs`` (examples -> what a model is fed, and their batches) and ``measure.layouts`` (one
batch -> each layer's hidden states, per layout).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import torch

from anisotropy.measure.inputs import checked, in_chunks, speech_chunks
from anisotropy.measure.layouts import LAYOUTS, PARTS, first_layer, position_limit
from anisotropy.measure.rows import threads_each
from anisotropy.measure.streaming import LayerStats

# The names this module held before it was split, importable from here as they were.
from anisotropy.measure.inputs import FRONT_END_COPIES, SAMPLING_RATE, SPEECH_PASS_BYTES, front_end_bytes  # noqa: F401
from anisotropy.measure.layouts import decoder_start, text_vectors  # noqa: F401
from anisotropy.measure.streaming import Tee as Tee  # importable from here, where it was first


class NoVectorKept(ValueError):
    """``extract`` kept no vector in some layer (every position padding or special, or every vector zero, NaN or
    inf): a property of the model's weights and of the examples, not a failure of the code."""


class Extraction(dict):
    """``{layer: LayerStats}`` with the layout of the layers: ``parts[layer]`` (e.g. "encoder", "downsampled"),
    ``layer_in_part[layer]``, ``n_masked[layer]`` (positions excluded as padding / special tokens / beyond the
    audio) and ``meta`` (model name, display name, variant, revision) for ``layer_frame``."""

    def __init__(self, meta: dict | None = None):
        super().__init__()
        self.parts: dict[int, str] = {}
        self.layer_in_part: dict[int, int] = {}
        self.n_masked: dict[int, int] = {}
        self.meta: dict = dict(meta or {})

    def mapped(self, fn: Callable[[Any], Any]) -> "Extraction":
        """The same layers, layout and meta with ``fn(accumulator)`` in place of each accumulator (e.g. one member
        of a ``Tee``)."""
        out = Extraction(self.meta)
        for layer, stats in self.items():
            out[layer] = fn(stats)
        out.parts, out.layer_in_part, out.n_masked = dict(self.parts), dict(self.layer_in_part), dict(self.n_masked)
        return out


def extract(loaded, examples: Iterable, batch_size: int = 8, max_length: int = 128, keep_special: bool = False,
            reservoir_size: int = 2048, seed: int = 0, device=None, progress: bool = False, part: str | None = None,
            stats_factory: Callable[[int], Any] | None = None) -> Extraction:
    """Stream ``examples`` through ``loaded.model`` and return ``{layer: LayerStats}`` (an ``Extraction``).

    ``examples``: strings (text), waveforms at 16 kHz or ``{"array", "sampling_rate", "text"?}`` dicts (speech),
    (H, W, 3) arrays or PIL images (vision). ``max_length`` caps tokens (characters for CANINE, bytes for ByT5, decoder
    tokens for Whisper). ``part``: see the module docstring. Every layer's accumulator is
    ``LayerStats(dim, reservoir_size, seed)`` (the same seed for every layer, so the reservoirs of all layers keep the
    same positions) unless ``stats_factory(dim)`` is given (any ``measure.streaming.Accumulator``): ``LayerStats``
    holds a d x d float64 scatter matrix, which flattened CNN maps (d = C*H*W, e.g. 802,816 for ResNet-50's first
    stage at 224 px) cannot afford, so give those a lighter accumulator. ``device``: where the forward passes run
    (default: the model's device; the model is moved there). Hidden states enter the accumulators in float32 whatever
    the model's dtype, on the model's device (``LayerStats`` then accumulates there: ``measure.rows``' device path).
    A layer where no vector is kept raises ``NoVectorKept``.
    """
    spec = loaded.spec
    if batch_size < 1 or max_length < 1:
        raise ValueError(f"batch_size and max_length must be >= 1, got {batch_size} and {max_length}")
    layout_parts = PARTS.get(spec.layout)
    if part is not None and (layout_parts is None or part not in layout_parts):
        raise ValueError(f"part={part!r} does not apply to {spec.name}; "
                         f"{'its parts are ' + ', '.join(layout_parts) if layout_parts else 'it has a single part'}")
    model = loaded.model
    if device is None:
        device = next(model.parameters()).device
    model.to(device).eval()
    make = stats_factory or (lambda dim: LayerStats(dim, reservoir_size=reservoir_size, seed=seed))
    # Longer inputs would index past the position table (self-trained text models have 128 positions).
    max_length = min(max_length, position_limit(loaded))
    ctx = dict(device=torch.device(device), max_length=max_length, keep_special=keep_special, part=part)
    fn = LAYOUTS[spec.layout]
    result = Extraction({"model": spec.name, "display": spec.display, "variant": loaded.variant,
                         "revision": loaded.revision})
    first = first_layer(loaded)
    n_examples = 0
    total = len(examples) if hasattr(examples, "__len__") else None
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=f"{spec.name} layers", unit="ex")
    with torch.inference_mode():
        examples = checked(spec, examples)
        chunks = (speech_chunks(examples, batch_size, model.config, next(model.parameters()).element_size())
                  if spec.layout == "speech-encoder" else in_chunks(examples, batch_size))
        for chunk in chunks:
            first_example = n_examples
            n_examples += len(chunk)
            offset = first
            passes = fn(loaded, chunk, ctx)  # the forward pass, on every thread torch has
            feeds = []
            for name, states, keep in passes:
                for i, h in enumerate(states):
                    layer = offset + i
                    if part is None or name == part:
                        if layer not in result:  # opened in layer order, whichever thread feeds it
                            _open(result, layer, name, i, h, make)
                        feeds.append((layer, h, keep))
                offset += len(states)
            # Feeding is many small reductions per layer, where a second thread mostly waits at barriers: the layers,
            # independent accumulators, are fed several at a time, each on one thread (threads_each), on the CPU; each
            # is computed alike on any number of threads, so the numbers do not change.
            threads_each(lambda f: _feed(result, *f, first_example=first_example), feeds,
                         parallel=torch.device(device).type == "cpu")
            if bar is not None:
                bar.update(len(chunk))
    if bar is not None:
        bar.close()
    if n_examples == 0:
        raise ValueError(f"no examples given to extract ({spec.name}): the corpus is empty")
    empty = [layer for layer, stats in result.items() if stats.n == 0]
    if not result or empty:
        what = "padding or special tokens" if spec.modality == "text" else "padding"
        zeros = sum(result[layer].n_excluded for layer in empty)
        raise NoVectorKept(
            f"{spec.name}: no vector was kept{f' in layers {empty}' if empty else ''} of {n_examples} examples: "
            f"{sum(result.n_masked.get(layer, 0) for layer in empty)} positions were {what} "
            f"(keep_special={keep_special}) and {zeros} vectors were zero, NaN or inf")
    return result


def first_kept(kept: torch.Tensor) -> torch.Tensor:
    """(examples, positions) bool: True at the first position of each sequence that ``kept`` keeps (after left
    padding or a skipped special token, the first one read), where an attention sink's massive activation sits."""
    kept = kept.bool()
    return kept & (kept.long().cumsum(1) == 1)


def _open(result: Extraction, layer: int, part: str, index: int, h: torch.Tensor, make) -> None:
    """A new accumulator for ``layer`` (``make`` of the states' width) in ``result``, with its place in the model."""
    result[layer] = make(h.shape[-1])
    result.parts[layer], result.layer_in_part[layer], result.n_masked[layer] = part, index, 0


def _feed(result: Extraction, layer: int, h: torch.Tensor, keep, first_example: int = 0) -> None:
    rows = h.reshape(-1, h.shape[-1])
    extra = {}
    if getattr(result[layer], "wants_groups", False) and rows.shape[0] % h.shape[0] == 0:
        # the example each row comes from (h is (examples, positions, d) or (examples, d)): for intervals that
        # resample examples rather than positions
        extra["groups"] = torch.arange(first_example, first_example + h.shape[0], device=rows.device
                                       ).repeat_interleave(rows.shape[0] // h.shape[0])
    if getattr(result[layer], "wants_first", False) and h.dim() == 3:
        kept = torch.ones(h.shape[:2], dtype=torch.bool, device=h.device) if keep is None else keep[:, : h.shape[1]]
        extra["first"] = first_kept(kept).reshape(-1)
    if keep is None:
        result[layer].update(rows.float(), **extra)
        return
    keep = keep[:, : h.shape[1]].reshape(-1)
    result.n_masked[layer] += int((~keep).sum())
    if bool(keep.any()):
        result[layer].update(rows.float(), mask=keep, **extra)


# ---------------------------------------------------------------------------------------------------------------------
# Tidy frame
# ---------------------------------------------------------------------------------------------------------------------


def layer_frame(stats: dict, **cols):
    """One row per layer: ``layer``, ``relative_depth`` (rank of the layer among those given, scaled to [0, 1]),
    ``part``, ``layer_in_part``, ``n_masked`` (for an ``Extraction``), every ``LayerStats.as_dict()`` value, the
    extraction's model / display / variant / revision, and ``cols`` (which override those)."""
    import pandas as pd

    layers = sorted(stats)
    rows = []
    for rank, layer in enumerate(layers):
        row: dict = {"layer": layer, "relative_depth": rank / (len(layers) - 1) if len(layers) > 1 else 0.0}
        if isinstance(stats, Extraction):
            row.update(part=stats.parts[layer], layer_in_part=stats.layer_in_part[layer],
                       n_masked=stats.n_masked[layer])
        row.update(stats[layer].as_dict())
        if isinstance(stats, Extraction):
            row.update(stats.meta)
        row.update(cols)
        rows.append(row)
    return pd.DataFrame(rows)


def stack(frames: Sequence) -> Any:
    """Concatenate several ``layer_frame`` outputs (e.g. one per model or checkpoint) into one tidy frame."""
    import pandas as pd

    return pd.concat(list(frames), ignore_index=True)
