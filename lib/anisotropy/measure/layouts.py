"""One batch -> ``[(part, [hidden state per layer], keep mask (batch, positions) or None)]``, one function per layout
of ``models.registry`` (``LAYOUTS``): how each kind of model is fed and which of its positions count
(``measure.taps``' docstring states the rules), with the layers' numbering (``first_layer``) and the parts a
layout has (``PARTS``)."""

from __future__ import annotations

import inspect
from typing import Sequence

import torch

from anisotropy.measure.inputs import MIN_SAMPLES, SAMPLING_RATE, as_audio, as_image, in_chunks

_CANINE_PARTS = ("character", "downsampled", "upsampled")
PARTS = {"encoder-decoder": ("encoder", "decoder"), "whisper": ("encoder", "decoder"), "canine": _CANINE_PARTS,
          "manta": ("encoder", "decoder")}


def _accepts(model) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _to(batch: dict, device) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


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
    """The vectors ``taps.extract`` would offer the thinnest layer of a text model on ``texts``, counted by tokenizing as
    ``taps.extract`` does (same batches, length cap and masks) without running the model: kept positions, before any
    zero or non-finite vector is dropped. None where the layout's layers keep different positions that the
    tokenizer alone does not give (CANINE's molecules) or the model does not read text."""
    layout = loaded.spec.layout
    if loaded.spec.modality != "text" or layout not in ("hidden_states", "encoder-decoder"):
        return None
    max_length = min(max_length, position_limit(loaded))
    counts = [0, 0]  # encoder (or the only stack), decoder
    for chunk in in_chunks(texts, batch_size):
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
    arrays = [as_audio(e)[0] for e in examples]
    feats = fe(arrays, sampling_rate=SAMPLING_RATE, padding=True, return_tensors="pt", return_attention_mask=True)
    values = feats["input_values"]
    lengths = torch.tensor([a.size for a in arrays])
    if values.shape[1] < MIN_SAMPLES:
        values = torch.nn.functional.pad(values, (0, MIN_SAMPLES - values.shape[1]))
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
    audio = [as_audio(e) for e in examples]
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
    arrays = [as_image(e) for e in images]
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


LAYOUTS = {"hidden_states": _hidden_states, "encoder-decoder": _encoder_decoder, "canine": _canine,
              "character-bert": _character_bert, "manta": _manta,
              "speech-encoder": _speech_encoder, "whisper": _whisper, "vit": _vit, "spatial-stages": _spatial_stages,
              "cnn": _cnn}
# Models whose first hidden state is already a stage output (no embeddings/stem exposed): numbering starts at 1.
_STARTS_AT_ONE = ("Segformer", "Cvt", "Van", "VGG16BN")


def first_layer(loaded) -> int:
    return 1 if type(loaded.model).__name__.startswith(_STARTS_AT_ONE) else 0


