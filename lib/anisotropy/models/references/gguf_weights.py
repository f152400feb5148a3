"""GGUF weights: every tensor of a GGUF decoder dequantised by the ``gguf`` package against the parameter
``transformers`` loaded for it (llama.cpp's tensor names and Q/K permutation), and the quantise-dequantise round trip
of a float weight to a GGUF type."""

from __future__ import annotations

import os

import numpy as np
import torch

from anisotropy.models.formats import gguf
from anisotropy.models import weights

# ---------------------------------------------------------------------------------------------------------------------
# GGUF decoders: every weight against the gguf package's own dequantisation, perplexity against a unigram model
# ---------------------------------------------------------------------------------------------------------------------

# llama.cpp's tensor names (after "blk.N.") -> transformers' (after "model.layers.N."), written here from llama.cpp's
# conversion script (convert_hf_to_gguf.py), independently of transformers' own GGUF table.
GGUF_LLAMA_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
                    "ffn_norm": "post_attention_layernorm"}
GGUF_GEMMA3_NAMES = {**GGUF_LLAMA_NAMES, "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
                     "post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
                     "post_ffw_norm": "post_feedforward_layernorm"}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's permutation of Llama's Q and K rows (``convert_hf_to_gguf.LlamaModel.permute``): within each head,
    the two halves of the rotary pairs are interleaved, as its rotary kernel expects."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_hf_name(name: str, arch: str) -> str | None:
    """The ``transformers`` parameter (of the ``...ForCausalLM``) that holds a GGUF tensor, or None."""
    table = GGUF_GEMMA3_NAMES if arch == "gemma3" else GGUF_LLAMA_NAMES
    stem, _, param = name.rpartition(".")
    if stem == "token_embd":
        return f"model.embed_tokens.{param}"
    if stem == "output_norm":
        return f"model.norm.{param}"
    if stem == "output":
        return f"lm_head.{param}"
    if stem.startswith("blk."):
        _, layer, part = stem.split(".", 2)
        if part in table:
            return f"model.layers.{layer}.{table[part]}.{param}"
    return None


@torch.inference_mode()
def gguf_against_transformers(path: str | os.PathLike, model) -> dict:
    """Every tensor of a GGUF file, dequantised by the ``gguf`` package itself (``gguf.quants.dequantize``), against
    the parameter ``transformers`` loaded for it (``model``: the ``...ForCausalLM`` of the converted folder), after
    llama.cpp's own changes are redone on ours: Llama's Q and K rows permuted (``llama_cpp_permute``), Gemma's norm
    weights stored as 1 + w. Returns the number of tensors, the max |difference| overall and per GGUF type, the
    largest |weight| (scale), and the parameters of ``model`` that no tensor covered (the tied output projection
    excepted)."""
    from gguf.quants import dequantize

    reader = gguf.gguf_reader(path)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    heads = int(reader.fields[f"{arch}.attention.head_count"].parts[-1][0])
    kv_heads = int(reader.fields[f"{arch}.attention.head_count_kv"].parts[-1][0])
    params = dict(model.named_parameters())
    covered, per_type, scale, unmapped = set(), {}, 0.0, []
    for t in reader.tensors:
        hf = gguf_hf_name(t.name, arch)
        if hf is None or hf not in params:
            unmapped.append(t.name)
            continue
        theirs = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(tuple(int(d) for d in
                                                                                     reversed(t.shape)))
        ours = params[hf].detach().float().numpy()
        if arch == "llama" and t.name.endswith(("attn_q.weight", "attn_k.weight")):
            ours = llama_cpp_permute(ours, heads if ".attn_q." in t.name else kv_heads)
        if arch == "gemma3" and "norm" in t.name:
            ours = ours + np.float32(1.0)
        if ours.shape != theirs.shape:
            raise weights.FormatError(f"{t.name}: gguf gives {theirs.shape}, transformers {hf} {ours.shape}")
        diff = float(np.max(np.abs(ours - theirs)))
        kind = t.tensor_type.name
        per_type[kind] = max(per_type.get(kind, 0.0), diff)
        scale = max(scale, float(np.max(np.abs(theirs))))
        covered.add(hf)
    gguf.gguf_reader_done()  # its field views hold hundreds of MB in the chapter's kernel
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    return {"n_tensors": len(covered), "max_abs": max(per_type.values()), "per_type": per_type, "scale": scale,
            "unmapped_tensors": unmapped, "uncovered_parameters": sorted(set(params) - covered - tied)}



def gguf_roundtrip(weight: torch.Tensor, qtype: str) -> torch.Tensor:
    """``weight`` quantised to the GGUF type ``qtype`` by ``gguf.quants.quantize`` (blocks along the rows' last
    dimension, as llama.cpp stores a matrix) and dequantised back by ``gguf.quants.dequantize``."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    kind = GGMLQuantizationType[qtype]
    array = weight.detach().float().numpy()
    return torch.from_numpy(dequantize(quantize(array, kind), kind).reshape(array.shape).astype(np.float32))
