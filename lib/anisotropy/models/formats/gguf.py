"""The GGUF format (llama.cpp): quantised decoders read with the ``gguf`` package (header, quantisation table,
tokenizer) and dequantised to a float32 ``transformers`` folder once (``convert_gguf``)."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from anisotropy.models.weights import source_hash


# Tensor classes of a GGUF decoder (llama.cpp's names, the part after "blk.N."), for the quantisation table.
GGUF_CLASSES = {"token_embd": "embedding", "attn_q": "attention q", "attn_k": "attention k", "attn_v": "attention v",
                "attn_output": "attention output", "ffn_gate": "mlp gate", "ffn_up": "mlp up", "ffn_down": "mlp down",
                "attn_q_norm": "q/k norms", "attn_k_norm": "q/k norms", "output": "output projection"}


def gguf_class(name: str) -> str:
    """The class of a GGUF tensor name: ``blk.3.attn_q.weight`` -> "attention q"; norms -> "norms"."""
    base = name.rsplit(".", 1)[0]
    base = base.split(".", 2)[2] if base.startswith("blk.") else base
    if base in GGUF_CLASSES:
        return GGUF_CLASSES[base]
    return "norms" if "norm" in base else base


@lru_cache(maxsize=1)
def _gguf_reader(path: str, size: int, mtime_ns: int):
    """One ``gguf.GGUFReader`` per file and process: reading a header walks every field part through numpy memory
    views (about 45 s for Gemma 3's 262,144-token vocabulary on a slow core, measured), and a conversion read the same
    header six times (four here, twice in ``transformers``). Keyed by size and modification time, so a replaced file is
    read again; ``gguf_reader_done`` frees it (its field views take hundreds of MB)."""
    from gguf import GGUFReader

    return GGUFReader(path)


def gguf_reader(path: str | os.PathLike):
    """The (cached) ``gguf.GGUFReader`` of ``path``."""
    stat = os.stat(path)
    return _gguf_reader(str(path), stat.st_size, stat.st_mtime_ns)


def gguf_reader_done() -> None:
    _gguf_reader.cache_clear()


def gguf_quantisation(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    """Per tensor class (``gguf_class``), how many tensors of each GGUF type (``Q4_1``, ``Q8_0``, ``F32``...) the
    file holds, from its header (``gguf.GGUFReader``)."""
    table: dict[str, dict[str, int]] = {}
    for t in gguf_reader(path).tensors:
        row = table.setdefault(gguf_class(t.name), {})
        row[t.tensor_type.name] = row.get(t.tensor_type.name, 0) + 1
    return table


def gguf_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The scalar and string fields of a GGUF header (the long token lists left out)."""
    out = {}
    for key, f in gguf_reader(path).fields.items():
        if key.startswith("tokenizer.ggml.") and len(f.data) > 16:
            continue
        try:
            out[key] = f.contents()
        except Exception:  # a field type the reader cannot turn into Python values
            continue
    return out


def _gguf_tokens(path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(tokens, scores, token types) of a GGUF header's vocabulary."""
    fields = gguf_reader(path).fields
    f = fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def column(key: str, default: float) -> np.ndarray:
        if key not in fields:  # byte-level BPE files carry merges, not scores
            return np.full(len(tokens), default)
        return np.array([fields[key].parts[i][0] for i in fields[key].data])

    return tokens, column("tokenizer.ggml.scores", 0.0), column("tokenizer.ggml.token_type", 1)


def _gguf_special_tokens(tokenizer, path, meta: dict) -> None:
    """Set the special tokens and whether a BOS token is prepended as the GGUF header says: ``transformers`` 4.57
    prepends BOS to SmolLM2's text although its header says ``add_bos_token = False``, and names the BOS token as
    EOS."""
    tokens = _gguf_tokens(path)[0]
    for role in ("bos", "eos", "unk", "pad"):
        key = f"tokenizer.ggml.{'padding' if role == 'pad' else 'unknown' if role == 'unk' else role}_token_id"
        if key in meta:
            setattr(tokenizer, f"{role}_token", tokens[int(meta[key])])
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    tokenizer.add_bos_token = add_bos
    tokenizer.add_eos_token = False
    tokenizer.update_post_processor()


def gguf_spm_bpe_tokenizer(path: str | os.PathLike):
    """The SentencePiece-BPE tokenizer of a GGUF file (``tokenizer.ggml.model = llama``, e.g. Gemma 3) as a fast
    ``transformers`` tokenizer: the vocabulary and the merges ranked by the pieces' scores (SentencePiece's BPE
    scores are merge priorities; ``transformers``' own ``generate_merges``, as its Gemma converter uses them), byte
    fallback, spaces as "▁", control tokens (type 3) as special tokens, user-defined ones (type 4) as added tokens,
    BOS prepended as the header says. ``transformers`` 4.57's GGUF converter for Gemma builds a Unigram model on these
    scores instead, which splits ordinary English words into single characters."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import generate_merges

    meta = gguf_metadata(path)
    tokens, scores, types = _gguf_tokens(path)
    pieces, has_tab = [], "\t" in tokens
    for token in tokens:  # as transformers' GGUF converter: tab and whitespace-only pieces in SentencePiece's form
        if token == "<0x09>" and not has_tab:
            token = "\t"
        elif " " in token and not token.strip():
            token = "▁" * len(token)
        pieces.append(token)
    vocab = {piece: i for i, piece in enumerate(pieces)}
    normal = [(piece, float(score)) for piece, score, kind in zip(pieces, scores, types) if kind in (1, 6)]
    merges = generate_merges({p: vocab[p] for p, _ in normal}, normal)
    role = {r: pieces[int(meta[f"tokenizer.ggml.{k}_token_id"])] for r, k in
            (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding"))}
    tok = Tokenizer(models.BPE(vocab, merges, unk_token=role["unk"], fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_tokens([AddedToken(p, special=False, normalized=False) for p, kind in zip(pieces, types) if kind == 4])
    tok.add_special_tokens([AddedToken(p, special=True, normalized=False) for p, kind in zip(pieces, types)
                            if kind in (2, 3)])
    from tokenizers import processors

    if meta.get("tokenizer.ggml.add_bos_token", False):
        bos = role["bos"]
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, vocab[bos])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=role["bos"], eos_token=role["eos"],
                                   unk_token=role["unk"], pad_token=role["pad"], padding_side="right",
                                   model_input_names=["input_ids", "attention_mask"])


def convert_gguf(path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Dequantise a GGUF decoder into a ``save_pretrained`` folder (float32 safetensors, the tokenizer of the same
    file, a ``conversion.json`` with the source's hash and the quantisation per tensor class). ``transformers`` reads
    the file (``from_pretrained(folder, gguf_file=name)``, needs the ``gguf`` package): it maps llama.cpp's names
    onto its own, undoes llama.cpp's permutation of Llama's Q and K rows and Gemma's (1 + w) norm weights;
    ``models.references.gguf_weights.gguf_against_transformers`` checks every weight against ``gguf``'s own dequantisation."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    path, out_dir = Path(path), Path(out_dir)
    meta = gguf_metadata(path)
    from unittest import mock

    from transformers import modeling_gguf_pytorch_utils

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the tokenizer's notices
    import gguf

    try:
        # its plain tqdm bar ("Converting and de-quantizing GGUF tensors") would fill a chapter's output; and it reads
        # the header twice (config, weights) through `from gguf import GGUFReader`: given the reader already read
        with mock.patch.object(modeling_gguf_pytorch_utils, "tqdm", lambda items, **_: items), \
                mock.patch.object(gguf, "GGUFReader", lambda file, *args, **kwargs: gguf_reader(file)):
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        if meta.get("tokenizer.ggml.model") == "gpt2":
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            _gguf_special_tokens(tokenizer, path, meta)
        else:
            tokenizer = gguf_spm_bpe_tokenizer(path)
    finally:
        hf_logging.set_verbosity(verbosity)
    model.config._name_or_path = ""  # the GGUF's general.name, not a folder
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "conversion.json").write_text(json.dumps(
        {"source": str(path), "sha256": source_hash(path),
         "format": f"GGUF v{meta.get('GGUF.version')}, architecture {meta.get('general.architecture')}, "
                   f"{meta.get('general.name')}",
         "quantisation": gguf_quantisation(path), "converted_dtype": "float32"}, indent=1))
    gguf_reader_done()
    return out_dir
