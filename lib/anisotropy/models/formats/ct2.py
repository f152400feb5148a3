"""The CTranslate2 format (``model.bin``): its reader (``read_ct2``), and Whisper read from it as a ``transformers``
``WhisperForConditionalGeneration`` (``whisper_config``, ``whisper_state_dict``, ``convert_whisper_ct2``)."""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from anisotropy.models.weights import FormatError, file_sha256


CT2_DTYPES = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}
CT2_BINARY_VERSIONS = (3, 4, 5, 6)  # those with the layout read here (strings with a uint16 length, aliases)


@dataclass
class CT2Model:
    """The content of a CTranslate2 ``model.bin``: format ``version``, ``spec`` name (e.g. "WhisperSpec") and
    ``revision``, ``variables`` (name -> numpy array, bfloat16 read as float32) and ``aliases`` (name -> the variable
    it shares, e.g. a tied output projection)."""

    version: int
    spec: str
    revision: int
    variables: dict[str, np.ndarray] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.variables[self.aliases.get(name, name)]

    def __contains__(self, name: str) -> bool:
        return name in self.variables or name in self.aliases


def read_ct2(path: str | os.PathLike) -> CT2Model:
    """Read a CTranslate2 ``model.bin`` (binary versions 3 to 6, little-endian) with numpy only.

    Layout: uint32 version; string spec name; uint32 revision; uint32 number of variables; per variable: string name,
    uint8 rank, rank x uint32 dimensions, uint8 dtype id (``CT2_DTYPES``), uint32 byte count, the raw bytes; then
    uint32 number of aliases and (alias, variable) string pairs. A string is a uint16 length (including a final NUL)
    followed by its UTF-8 bytes and the NUL.
    """
    buf = Path(path).read_bytes()
    pos = 0

    def take(fmt: str):
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(buf):
            raise FormatError(f"{path}: truncated at byte {pos} (expected {size} more bytes)")
        values = struct.unpack_from(fmt, buf, pos)
        pos += size
        return values[0] if len(values) == 1 else values

    def string() -> str:
        nonlocal pos
        n = take("<H")
        if n < 1 or pos + n > len(buf) or buf[pos + n - 1] != 0:
            raise FormatError(f"{path}: malformed string at byte {pos}")
        text = buf[pos:pos + n - 1].decode("utf-8")
        pos += n
        return text

    version = take("<I")
    if version not in CT2_BINARY_VERSIONS:
        raise FormatError(f"{path}: CTranslate2 binary version {version} is not supported (read: "
                          f"{CT2_BINARY_VERSIONS}); is this a CTranslate2 model.bin?")
    model = CT2Model(version, string(), take("<I"))
    for _ in range(take("<I")):
        name = string()
        rank = take("<B")
        shape = tuple(take("<I") for _ in range(rank))
        dtype_id = take("<B")
        n_bytes = take("<I")
        if dtype_id not in CT2_DTYPES:
            raise FormatError(f"{path}: variable {name!r} has unknown dtype id {dtype_id}")
        dtype = CT2_DTYPES[dtype_id]
        raw = buf[pos:pos + n_bytes]
        if len(raw) != n_bytes:
            raise FormatError(f"{path}: variable {name!r} is truncated")
        pos += n_bytes
        if dtype == "bfloat16":  # the upper half of a float32
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))
        if array.size != int(np.prod(shape, dtype=np.int64)):
            raise FormatError(f"{path}: variable {name!r} holds {array.size} values for shape {shape}")
        model.variables[name] = array.reshape(shape)
    if pos < len(buf):
        for _ in range(take("<I")):
            alias = string()
            model.aliases[alias] = string()
    if pos != len(buf):
        raise FormatError(f"{path}: {len(buf) - pos} unread bytes at the end")
    return model


def _scalar(ct2: CT2Model, name: str, default=None):
    return ct2[name].item() if name in ct2 else default


def _count_layers(ct2: CT2Model, stack: str) -> int:
    n = 0
    while f"{stack}/layer_{n}/ffn/linear_0/weight" in ct2:
        n += 1
    return n


def whisper_config(ct2: CT2Model, extra: dict | None = None, tokenizer_file: str | os.PathLike | None = None):
    """The ``WhisperConfig`` of a CTranslate2 ``WhisperSpec``: sizes from the variables' shapes, heads from the
    stored scalars and special-token ids from ``tokenizer_file`` (``tokenizer.json``); the token suppression lists of
    the model folder's ``config.json`` (``extra``) go to the generation config (``convert_whisper_ct2``)."""
    from transformers import WhisperConfig

    if ct2.spec != "WhisperSpec":
        raise FormatError(f"expected a WhisperSpec model, got {ct2.spec!r}")
    for name, want in (("decoder/pre_norm", 1), ("decoder/scale_embeddings", 0)):
        value = _scalar(ct2, name, want)
        if bool(value) != bool(want):
            raise FormatError(f"{name} = {value}: this converter handles Whisper's pre-norm blocks without "
                              f"embedding scaling only")
    vocab, d_model = ct2["decoder/embeddings/weight"].shape
    ids = {}
    if tokenizer_file is not None:
        added = {t["content"]: t["id"] for t in json.loads(Path(tokenizer_file).read_text())["added_tokens"]}
        ids = dict(eos=added["<|endoftext|>"], start=added["<|startoftranscript|>"])
    extra = extra or {}
    return WhisperConfig(
        vocab_size=vocab, num_mel_bins=ct2["encoder/conv1/weight"].shape[1], d_model=d_model,
        encoder_layers=_count_layers(ct2, "encoder"), decoder_layers=_count_layers(ct2, "decoder"),
        encoder_attention_heads=int(_scalar(ct2, "encoder/num_heads")),
        decoder_attention_heads=int(_scalar(ct2, "decoder/num_heads")),
        encoder_ffn_dim=ct2["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=ct2["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=ct2["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=ct2["decoder/position_encodings/encodings"].shape[0],
        pad_token_id=ids.get("eos"), bos_token_id=ids.get("eos"), eos_token_id=ids.get("eos"),
        # without a tokenizer, WhisperConfig's own start id (transformers 5 takes no None for it)
        **({"decoder_start_token_id": ids["start"]} if "start" in ids else {}),
        scale_embedding=False, activation_function="gelu", tie_word_embeddings=True)


def whisper_state_dict(ct2: CT2Model, dtype=torch.float32) -> dict[str, torch.Tensor]:
    """CTranslate2 Whisper variables -> ``WhisperForConditionalGeneration`` state dict (``proj_out`` is tied to the
    token embeddings, as in CTranslate2's alias). Fused projections are split: self-attention ``linear_0`` = [Q; K; V],
    cross-attention ``linear_1`` = [K; V]; Whisper's K projections have no bias, so their part of the fused bias must
    be zero (checked). Every variable of the file is used exactly once (checked)."""
    used: set[str] = set()

    def get(name: str) -> np.ndarray:
        used.add(ct2.aliases.get(name, name))
        return ct2[name]

    def t(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(array, dtype=np.float32)).to(dtype)

    out: dict[str, torch.Tensor] = {}

    def linear(dst: str, src: str, bias: bool = True) -> None:
        out[f"{dst}.weight"] = t(get(f"{src}/weight"))
        if bias:
            out[f"{dst}.bias"] = t(get(f"{src}/bias"))

    def norm(dst: str, src: str) -> None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = t(get(f"{src}/gamma")), t(get(f"{src}/beta"))

    def split(dst_prefix: str, src: str, parts: Sequence[str]) -> None:
        weight, bias = get(f"{src}/weight"), get(f"{src}/bias")
        d = weight.shape[1]
        if weight.shape[0] != d * len(parts):
            raise FormatError(f"{src}/weight has shape {weight.shape}, expected ({d * len(parts)}, {d})")
        for k, part in enumerate(parts):
            out[f"{dst_prefix}.{part}.weight"] = t(weight[k * d:(k + 1) * d])
            b = bias[k * d:(k + 1) * d]
            if part == "k_proj":
                if np.any(b != 0):
                    raise FormatError(f"{src}/bias: the key part is not zero, but Whisper's keys have no bias")
            else:
                out[f"{dst_prefix}.{part}.bias"] = t(b)

    for stack in ("encoder", "decoder"):
        prefix = f"model.{stack}"
        if stack == "encoder":
            for conv in ("conv1", "conv2"):
                linear(f"{prefix}.{conv}", f"encoder/{conv}")
        else:
            out[f"{prefix}.embed_tokens.weight"] = t(get("decoder/embeddings/weight"))
        out[f"{prefix}.embed_positions.weight"] = t(get(f"{stack}/position_encodings/encodings"))
        for i in range(_count_layers(ct2, stack)):
            src, dst = f"{stack}/layer_{i}", f"{prefix}.layers.{i}"
            split(f"{dst}.self_attn", f"{src}/self_attention/linear_0", ("q_proj", "k_proj", "v_proj"))
            linear(f"{dst}.self_attn.out_proj", f"{src}/self_attention/linear_1")
            norm(f"{dst}.self_attn_layer_norm", f"{src}/self_attention/layer_norm")
            if stack == "decoder":
                linear(f"{dst}.encoder_attn.q_proj", f"{src}/attention/linear_0")
                split(f"{dst}.encoder_attn", f"{src}/attention/linear_1", ("k_proj", "v_proj"))
                linear(f"{dst}.encoder_attn.out_proj", f"{src}/attention/linear_2")
                norm(f"{dst}.encoder_attn_layer_norm", f"{src}/attention/layer_norm")
            linear(f"{dst}.fc1", f"{src}/ffn/linear_0")
            linear(f"{dst}.fc2", f"{src}/ffn/linear_1")
            norm(f"{dst}.final_layer_norm", f"{src}/ffn/layer_norm")
        norm(f"{prefix}.layer_norm", f"{stack}/layer_norm")
    if "decoder/projection/weight" in ct2:
        projection = get("decoder/projection/weight")
        if not np.array_equal(projection, ct2["decoder/embeddings/weight"]):
            raise FormatError("decoder/projection/weight differs from the token embeddings: this converter expects "
                              "them tied, as in Whisper")
    scalars = {name for name, v in ct2.variables.items() if v.ndim == 0}
    unused = sorted(set(ct2.variables) - used - scalars - {"decoder/projection/bias"})
    if unused:
        raise FormatError(f"variables not mapped onto Whisper: {unused[:5]}{' ...' if len(unused) > 5 else ''}")
    return out


def convert_whisper_ct2(model_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Convert a CTranslate2 Whisper folder (``model.bin``, ``config.json``, ``tokenizer.json``) into a
    ``save_pretrained`` folder of ``WhisperForConditionalGeneration`` (float32 safetensors), with the feature
    extractor and the tokenizer, and a ``conversion.json`` naming the source and its hash."""
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizerFast

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    ct2 = read_ct2(model_dir / "model.bin")
    extra = json.loads((model_dir / "config.json").read_text()) if (model_dir / "config.json").is_file() else {}
    tokenizer_file = model_dir / "tokenizer.json"
    config = whisper_config(ct2, extra, tokenizer_file if tokenizer_file.is_file() else None)
    state = whisper_state_dict(ct2)
    with torch.device("meta"):
        model = WhisperForConditionalGeneration(config)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    missing = [k for k in missing if k != "proj_out.weight"]  # tied to the embeddings
    if missing or unexpected:
        raise FormatError(f"conversion does not cover the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.tie_weights()
    generation = model.generation_config
    generation.decoder_start_token_id = config.decoder_start_token_id
    generation.suppress_tokens = list(extra.get("suppress_ids", [])) or None
    generation.begin_suppress_tokens = list(extra.get("suppress_ids_begin", [])) or None
    model.save_pretrained(out_dir)
    WhisperFeatureExtractor(feature_size=config.num_mel_bins, return_attention_mask=True).save_pretrained(out_dir)
    if tokenizer_file.is_file():
        tok = WhisperTokenizerFast(tokenizer_file=str(tokenizer_file), unk_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   add_prefix_space=False)
        if config.vocab_size >= 51865:
            # a multilingual model (OpenAI's rule: n_vocab >= 51865) is told the language and the task, as its
            # transcripts are decoded (checks.MULTILINGUAL_PROMPT): the transcripts that taps feeds the decoder start
            # <|startoftranscript|><|en|><|transcribe|><|notimestamps|>, not the English-only prompt
            tok.set_prefix_tokens(language="en", task="transcribe", predict_timestamps=False)
        tok.save_pretrained(out_dir)
    (out_dir / "conversion.json").write_text(json.dumps(
        {"source": str(model_dir / "model.bin"), "sha256": file_sha256(model_dir / "model.bin"),
         "format": f"CTranslate2 binary v{ct2.version}, {ct2.spec} rev {ct2.revision}",
         "source_dtypes": sorted({str(v.dtype) for v in ct2.variables.values() if v.ndim}),
         "converted_dtype": "float32"}, indent=1))
    return out_dir
