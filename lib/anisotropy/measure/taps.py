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
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from anisotropy.measure.rows import one_thread
from anisotropy.measure.streaming import LayerStats
from anisotropy.measure.streaming import Tee as Tee  # importable from here, where it was first

SAMPLING_RATE = 16_000
_MIN_SAMPLES = 400  # receptive field of the wav2vec 2.0 / HuBERT feature encoder (25 ms)
_CANINE_PARTS = ("character", "downsampled", "upsampled")
_PARTS = {"encoder-decoder": ("encoder", "decoder"), "whisper": ("encoder", "decoder"), "canine": _CANINE_PARTS,
          "manta": ("encoder", "decoder")}
_DEFAULT_SOURCE = {"text": "prose", "speech": "synthetic-speech", "vision": "synthetic-shapes"}


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


# ---------------------------------------------------------------------------------------------------------------------
# Examples: modality checks and batching
# ---------------------------------------------------------------------------------------------------------------------


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


def _audio(example) -> tuple[np.ndarray, str | None]:
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


def _image(example) -> np.ndarray:
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


def _accepts(model) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _to(batch: dict, device) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


# ---------------------------------------------------------------------------------------------------------------------
# One batch -> [(part, [hidden state per layer], keep mask (batch, positions) or None)], per layout
# ---------------------------------------------------------------------------------------------------------------------


def position_limit(loaded) -> int:
    """The longest input the model takes: its position table (RoBERTa's starts after the padding index) or the
    tokenizer's own limit (self-trained checkpoints set it to their training length)."""
    config = loaded.model.config
    limits = [getattr(loaded.preprocessor, "model_max_length", None)]
    for attr in ("max_position_embeddings", "n_positions"):
        value = getattr(config, attr, None)
        if value:
            limits.append(value - 2 if config.model_type in ("roberta", "xlm-roberta", "camembert", "mpnet") else value)
    limits = [int(v) for v in limits if v and v < 1_000_000]
    return min(limits) if limits else 1_000_000


def _tokenize(tokenizer, texts, max_length):
    return tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt",
                     return_special_tokens_mask=True, padding_side="right")


def _content_mask(enc, keep_special: bool) -> torch.Tensor:
    keep = enc["attention_mask"].bool()
    if not keep_special:
        keep &= ~enc["special_tokens_mask"].bool()
    return keep


def _decoder_keep(enc, keep_special: bool) -> torch.Tensor:
    """An encoder-decoder's decoder positions that count, fed the input shifted right (``_encoder_decoder``): with
    right padding, decoder position j holds token j-1, so it is real exactly where the encoder position j is; the
    start token counts as special."""
    keep = enc["attention_mask"].bool().clone()
    if not keep_special:
        keep &= ~_shift_right(enc["special_tokens_mask"], 1).bool()
    return keep


def text_vectors(loaded, texts: Sequence[str], batch_size: int = 8, max_length: int = 128,
                 keep_special: bool = False) -> int | None:
    """The vectors ``extract`` would offer the thinnest layer of a text model on ``texts``, counted by tokenizing as
    ``extract`` does (same batches, length cap and masks) without running the model: kept positions, before any
    zero or non-finite vector is dropped. None where the layout's layers keep different positions that the
    tokenizer alone does not give (CANINE's molecules) or the model does not read text."""
    layout = loaded.spec.layout
    if loaded.spec.modality != "text" or layout not in ("hidden_states", "encoder-decoder"):
        return None
    max_length = min(max_length, position_limit(loaded))
    counts = [0, 0]  # encoder (or the only stack), decoder
    for chunk in _chunks(texts, batch_size):
        enc = _tokenize(loaded.preprocessor, chunk, max_length)
        if enc["input_ids"].shape[1] == 0:
            continue
        counts[0] += int(_content_mask(enc, keep_special).sum())
        if layout == "encoder-decoder":
            counts[1] += int(_decoder_keep(enc, keep_special).sum())
    return min(counts) if layout == "encoder-decoder" else counts[0]


def _text(loaded, texts, ctx):
    enc = _tokenize(loaded.preprocessor, texts, ctx["max_length"])
    if enc["input_ids"].shape[1] == 0:
        return []
    accepts = _accepts(loaded.model) - {"special_tokens_mask"}
    if loaded.spec.stack == "decoder":
        accepts.discard("token_type_ids")  # GPT-2 / GPT-J would add a type embedding common to every token
    inputs = {k: v for k, v in enc.items() if k in accepts}
    out = loaded.model(**_to(inputs, ctx["device"]), output_hidden_states=True)
    return [("layers", out.hidden_states, _content_mask(enc, ctx["keep_special"]))]


def decoder_start(model) -> int:
    """The token an encoder-decoder's decoder starts from: its config's ``decoder_start_token_id``, else its generation
    config's (transformers 5 keeps it there unless the config names it), else the padding id (T5's convention)."""
    for source in (model.config, getattr(model, "generation_config", None)):
        start = getattr(source, "decoder_start_token_id", None)
        if start is not None:
            return start
    return model.config.pad_token_id


def _shift_right(ids: torch.Tensor, start: int) -> torch.Tensor:
    return torch.cat([torch.full_like(ids[:, :1], start), ids[:, :-1]], dim=1)


def _encoder_decoder(loaded, texts, ctx):
    enc = _tokenize(loaded.preprocessor, texts, ctx["max_length"])
    if enc["input_ids"].shape[1] == 0:
        return []
    model, device = loaded.model, ctx["device"]
    ids, attn = enc["input_ids"], enc["attention_mask"]
    enc_keep = _content_mask(enc, ctx["keep_special"])
    if ctx["part"] == "encoder":
        out = model.get_encoder()(input_ids=ids.to(device), attention_mask=attn.to(device), output_hidden_states=True)
        return [("encoder", out.hidden_states, enc_keep)]
    dec_ids = _shift_right(ids, decoder_start(model))
    dec_keep = _decoder_keep(enc, ctx["keep_special"])
    out = model(input_ids=ids.to(device), attention_mask=attn.to(device), decoder_input_ids=dec_ids.to(device),
                decoder_attention_mask=attn.to(device), output_hidden_states=True)
    return [("encoder", out.encoder_hidden_states, enc_keep), ("decoder", out.decoder_hidden_states, dec_keep)]


def _canine(loaded, texts, ctx):
    enc = _tokenize(loaded.preprocessor, texts, ctx["max_length"])
    model = loaded.model
    out = model(**_to({k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc},
                      ctx["device"]), output_hidden_states=True)
    hs = out.hidden_states
    n_deep = model.config.num_hidden_layers + 1
    n_char = (len(hs) - n_deep) // 2
    char_keep = _content_mask(enc, ctx["keep_special"])
    # The model's own molecule mask: a molecule is on where any character of its window is (max-pool, stride rate).
    rate = model.config.downsampling_rate
    attn = enc["attention_mask"]
    n_mol = attn.shape[1] // rate
    mol_keep = attn[:, : n_mol * rate].reshape(attn.shape[0], n_mol, rate).amax(dim=2).bool()
    if not ctx["keep_special"]:
        mol_keep[:, 0] = False  # the [CLS] molecule
    return [("character", hs[:n_char], char_keep), ("downsampled", hs[n_char:n_char + n_deep], mol_keep),
            ("upsampled", hs[n_char + n_deep:], char_keep)]


def _character_bert(loaded, texts, ctx):
    """CharacterBERT: one vector per word. Its indexer (``loaded.preprocessor``, ``models.character_indexer``) gives
    (texts, words, 50) character ids and the word mask; the model returns (texts, words, d) per layer."""
    enc = loaded.preprocessor(list(texts), max_length=ctx["max_length"])
    inputs = {k: enc[k] for k in ("input_ids", "attention_mask")}
    out = loaded.model(**_to(inputs, ctx["device"]), output_hidden_states=True)
    states = getattr(out, "hidden_states", None)
    if states is None:
        raise ValueError(f"{loaded.spec.name}: its forward pass returned no hidden_states")
    return [("layers", states, _content_mask(enc, ctx["keep_special"]))]


def _pad_positions(states, lengths):
    """Per-text hidden states of different lengths -> one (texts, longest, d) tensor per layer, zero beyond a text's
    length, and the (texts, longest) mask of the real positions."""
    longest = max(lengths)
    keep = torch.arange(longest)[None, :] < torch.tensor(lengths)[:, None]
    layers = [torch.cat([torch.nn.functional.pad(h, (0, 0, 0, longest - h.shape[1])) for h in per_text])
              for per_text in zip(*states)]
    return layers, keep


def _manta(loaded, texts, ctx):
    """MANTa-LM, one text a forward pass. Its encoder pools the bytes into blocks whose number the model decides
    (frontier predictor), and runs the T5 encoder on them without an attention mask; its decoder reads bytes and is
    handed the byte mask as the mask of the encoder's blocks (modeling_manta.py, NathanGodey/transformers at 108c43a).
    A padded batch would therefore put padding inside the blocks and mismatch the cross-attention mask; alone, a text
    has no padding, every block is content and the decoder's positions are its bytes shifted right (start token
    special, as for ByT5)."""
    model, device = loaded.model, ctx["device"]
    start = decoder_start(model)
    enc_states, dec_states, dec_keep = [], [], []
    for text in texts:
        enc = _tokenize(loaded.preprocessor, [text], ctx["max_length"])
        ids = enc["input_ids"]
        if ids.shape[1] == 0:
            continue
        if ctx["part"] == "encoder":
            out = model.get_encoder()(input_ids=ids.to(device), output_hidden_states=True)
            enc_states.append(out.hidden_states)
            continue
        out = model(input_ids=ids.to(device), decoder_input_ids=_shift_right(ids, start).to(device),
                    output_hidden_states=True)
        if out.decoder_hidden_states[0].shape[1] != ids.shape[1]:
            raise ValueError(f"{loaded.spec.name}: its decoder returned {out.decoder_hidden_states[0].shape[1]} "
                             f"positions for {ids.shape[1]} bytes (the remote code is not the one read)")
        enc_states.append(out.encoder_hidden_states)
        dec_states.append(out.decoder_hidden_states)
        dec_keep.append(_decoder_keep(enc, ctx["keep_special"])[0])
    if not enc_states:
        return []
    layers, keep = _pad_positions(enc_states, [s[0].shape[1] for s in enc_states])
    parts = [("encoder", layers, keep)]
    if dec_states:
        dec_layers, _ = _pad_positions(dec_states, [s[0].shape[1] for s in dec_states])
        keep = torch.nn.utils.rnn.pad_sequence([k.long() for k in dec_keep], batch_first=True).bool()
        parts.append(("decoder", dec_layers, keep))
    return parts


def _speech_encoder(loaded, examples, ctx):
    fe, model = loaded.preprocessor, loaded.model
    arrays = [_audio(e)[0] for e in examples]
    feats = fe(arrays, sampling_rate=SAMPLING_RATE, padding=True, return_tensors="pt", return_attention_mask=True)
    values = feats["input_values"]
    lengths = torch.tensor([a.size for a in arrays])
    if values.shape[1] < _MIN_SAMPLES:
        values = torch.nn.functional.pad(values, (0, _MIN_SAMPLES - values.shape[1]))
    inputs = {"input_values": values.to(model.dtype)}
    if getattr(fe, "return_attention_mask", False):
        mask = feats["attention_mask"]
        inputs["attention_mask"] = torch.nn.functional.pad(mask, (0, values.shape[1] - mask.shape[1]))
    out = model(**_to(inputs, ctx["device"]), output_hidden_states=True)
    n_frames = out.hidden_states[0].shape[1]
    frames = model._get_feat_extract_output_lengths(lengths).clamp(min=0)
    keep = torch.arange(n_frames)[None, :] < frames[:, None]
    return [("layers", out.hidden_states, keep)]


def _whisper(loaded, examples, ctx):
    fe, model, device = loaded.preprocessor, loaded.model, ctx["device"]
    audio = [_audio(e) for e in examples]
    feats = fe([a for a, _ in audio], sampling_rate=SAMPLING_RATE, return_tensors="pt", return_attention_mask=True)
    # Mel frames are one per 160 samples; the encoder's second convolution has stride 2.
    enc_keep = feats["attention_mask"][:, ::2].bool()
    features = feats["input_features"].to(device=device, dtype=model.dtype)
    texts = [t for _, t in audio]
    if ctx["part"] == "decoder" and all(t is None for t in texts):
        raise ValueError(f"{loaded.spec.name}: part='decoder' needs transcripts: give examples as "
                         f"{{'array', 'sampling_rate', 'text'}} dicts")
    if ctx["part"] == "encoder" or all(t is None for t in texts):
        out = model.get_encoder()(features, output_hidden_states=True)
        return [("encoder", out.hidden_states, enc_keep)]
    tok = loaded.tokenizer
    dec = tok([t or "" for t in texts], padding=True, truncation=True, max_length=ctx["max_length"] - 1,
              return_tensors="pt", return_special_tokens_mask=True, padding_side="right")
    start = decoder_start(model)
    ids, special, attn = dec["input_ids"], dec["special_tokens_mask"], dec["attention_mask"]
    if ids.shape[1] == 0 or not bool((ids[:, 0] == start).all()):
        ones = torch.ones_like(attn[:, :1])
        ids = torch.cat([torch.full_like(ones, start), ids], dim=1)
        special, attn = torch.cat([ones, special], dim=1), torch.cat([ones, attn], dim=1)
    dec_keep = attn.bool() & (torch.ones_like(special).bool() if ctx["keep_special"] else ~special.bool())
    out = model(input_features=features, decoder_input_ids=ids.to(device), decoder_attention_mask=attn.to(device),
                output_hidden_states=True)
    return [("encoder", out.encoder_hidden_states, enc_keep), ("decoder", out.decoder_hidden_states, dec_keep)]


def _pixel_values(loaded, images) -> torch.Tensor:
    arrays = [_image(e) for e in images]
    return loaded.preprocessor(arrays, return_tensors="pt", input_data_format="channels_last")["pixel_values"]


def _pixels(loaded, images, ctx, pixels: torch.Tensor | None = None):
    pixels = _pixel_values(loaded, images) if pixels is None else pixels
    model = loaded.model
    return model(pixel_values=pixels.to(device=ctx["device"], dtype=model.dtype), output_hidden_states=True)


def _vit(loaded, images, ctx):
    hs = _pixels(loaded, images, ctx).hidden_states
    keep = torch.ones(hs[0].shape[:2], dtype=torch.bool)
    if not ctx["keep_special"]:
        keep[:, : loaded.spec.prefix_tokens] = False
    return [("layers", hs, keep)]


def _spatial_stages(loaded, images, ctx):
    hs = _pixels(loaded, images, ctx).hidden_states
    # (batch, C, H, W) -> (batch, H*W, C): one vector per spatial position.
    maps = [h.flatten(2).transpose(1, 2) if h.ndim == 4 else h for h in hs]
    return [("stages", maps, None)]


def _cnn(loaded, images, ctx):
    hs = _pixels(loaded, images, ctx).hidden_states
    # One vector per image: the whole (C, H, W) map flattened in C-major order.
    return [("stages", [h.reshape(h.shape[0], 1, -1) for h in hs], None)]


def _prefix_tokens(config, tokens: int, pixels: torch.Tensor) -> int:
    """Tokens in front of the patch grid (CLS, distillation, register tokens) of an image model outside the registry:
    ``tokens`` less the (H / patch) x (W / patch) patches of its input; 0 where the config has no patch size or the
    tokens are no grid plus a prefix."""
    patch = getattr(config, "patch_size", None)
    patch = (patch, patch) if isinstance(patch, int) else tuple(patch) if isinstance(patch, (list, tuple)) else None
    if patch is None or len(patch) != 2:
        return 0
    prefix = tokens - (pixels.shape[-2] // patch[0]) * (pixels.shape[-1] // patch[1])
    return prefix if 0 <= prefix < tokens else 0


def _image_states(loaded, images, ctx):
    """An image model outside the registry, read from its own hidden states: token states (batch, tokens, d) give one
    vector per token, those in front of the patch grid special (``_prefix_tokens``), as ``_vit``; stage maps
    (batch, C, H, W) one flattened vector per image, as ``_cnn``."""
    pixels = _pixel_values(loaded, images)
    hs = _pixels(loaded, images, ctx, pixels).hidden_states
    if all(h.ndim == 4 for h in hs):
        return [("stages", [h.reshape(h.shape[0], 1, -1) for h in hs], None)]
    if not all(h.ndim == 3 for h in hs):
        raise ValueError(f"{loaded.spec.name}: hidden states of shapes {sorted({tuple(h.shape) for h in hs})}; "
                         f"an image model's must all be token states (batch, tokens, d) or all stage maps")
    keep = torch.ones(hs[0].shape[:2], dtype=torch.bool)
    if not ctx["keep_special"]:
        keep[:, : _prefix_tokens(loaded.model.config, hs[0].shape[1], pixels)] = False
    return [("layers", hs, keep)]


def _hidden_states(loaded, examples, ctx):
    """The model's own ``output_hidden_states``, read as its modality's: tokens of text (``_text``), tokens or stage
    maps of images (``_image_states``)."""
    return (_image_states if loaded.spec.modality == "vision" else _text)(loaded, examples, ctx)


_LAYOUT_FN = {"hidden_states": _hidden_states, "encoder-decoder": _encoder_decoder, "canine": _canine,
              "character-bert": _character_bert, "manta": _manta,
              "speech-encoder": _speech_encoder, "whisper": _whisper, "vit": _vit, "spatial-stages": _spatial_stages,
              "cnn": _cnn}
# Models whose first hidden state is already a stage output (no embeddings/stem exposed): numbering starts at 1.
_STARTS_AT_ONE = ("Segformer", "Cvt", "Van", "VGG16BN")


def _first_layer(loaded) -> int:
    return 1 if type(loaded.model).__name__.startswith(_STARTS_AT_ONE) else 0


# ---------------------------------------------------------------------------------------------------------------------
# The streaming loop
# ---------------------------------------------------------------------------------------------------------------------


def _checked(spec, examples: Iterable):
    """The examples, the first one checked against the model's modality (``_check_modality``) before anything reads
    it as that modality's data."""
    it = iter(examples)
    for example in it:
        _check_modality(spec, example)
        yield example
        break
    yield from it


def _chunks(examples: Iterable, size: int):
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
        array, text = _audio(example)
        width = max(array.size, _MIN_SAMPLES)  # what the batch is padded to, at least
        if chunk and (len(chunk) == size or
                      front_end_bytes(config, len(chunk) + 1, max(longest, width), dtype_bytes) > limit):
            yield chunk
            chunk, longest = [], 0
        chunk.append({"array": array, "sampling_rate": SAMPLING_RATE, "text": text})
        longest = max(longest, width)
    if chunk:
        yield chunk


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
    layout_parts = _PARTS.get(spec.layout)
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
    fn = _LAYOUT_FN[spec.layout]
    result = Extraction({"model": spec.name, "display": spec.display, "variant": loaded.variant,
                         "revision": loaded.revision})
    first = _first_layer(loaded)
    n_examples = 0
    total = len(examples) if hasattr(examples, "__len__") else None
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=f"{spec.name} layers", unit="ex")
    with torch.inference_mode():
        examples = _checked(spec, examples)
        chunks = (speech_chunks(examples, batch_size, model.config, next(model.parameters()).element_size())
                  if spec.layout == "speech-encoder" else _chunks(examples, batch_size))
        for chunk in chunks:
            first_example = n_examples
            n_examples += len(chunk)
            offset = first
            passes = fn(loaded, chunk, ctx)  # the forward pass, on every thread torch has
            # Feeding is many small reductions per layer, where a second thread mostly waits at barriers (one_thread);
            # each is computed alike on any number of threads, so the numbers do not change.
            with one_thread():
                for name, states, keep in passes:
                    for i, h in enumerate(states):
                        layer = offset + i
                        if part is None or name == part:
                            _feed(result, layer, name, i, h, keep, make, first_example)
                    offset += len(states)
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


def _feed(result: Extraction, layer: int, part: str, index: int, h: torch.Tensor, keep, make,
          first_example: int = 0) -> None:
    rows = h.reshape(-1, h.shape[-1])
    if layer not in result:
        result[layer] = make(rows.shape[-1])
        result.parts[layer], result.layer_in_part[layer], result.n_masked[layer] = part, index, 0
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
