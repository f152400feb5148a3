"""Per-head queries, keys and attention probabilities, captured by hooks on the ``transformers`` attention modules.

Nothing here re-implements attention: forward hooks copy what the library's own modules compute.
Supported self-attention modules:

- BERT family (``BertSelfAttention`` and its copies: RoBERTa, RoBERTa-PreLayerNorm, ELECTRA, ViT, DeiT, ...): hooks
  on the ``.query`` / ``.key`` linear maps, reshaped to (batch, heads, seq, head_dim);
- the same attention with ``.q_proj`` / ``.k_proj`` maps and no rotary positions (transformers 5's ViT, DeiT, ...):
  hooks on those, reshaped the same way;
- GPT-2 (``GPT2Attention``): a hook on the fused ``.c_attn`` projection, split into query, key and value;
- Llama-style decoders (``LlamaAttention``, ``Gemma3Attention``: ``.q_proj`` / ``.k_proj``, rotary positions,
  grouped-query attention): hooks on the projections (on Gemma 3's ``.q_norm`` / ``.k_norm`` after them), then the
  model's own ``apply_rotary_pos_emb`` with the cos/sin the layer received, so that queries and keys are captured
  **after** the rotary embedding, exactly the vectors whose products are the scores (``AttentionCapture.scores``); the
  key-value heads are repeated to the query heads (``repeat_kv``), so ``keys`` has as many heads as ``queries`` and
  query head h reads key-value head h // (heads / kv_heads). Sliding-window layers (Gemma 3) are captured like the
  others: the window is part of the mask, which ``scores`` leaves out.

Attention probabilities are the second output of the self-attention module, which the eager implementation fills;
``hooks`` switches the model's config to eager attention for the duration of the forward and calls it with
``output_attentions=True`` (with sdpa the library returns no weights). Cross-attention modules are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class AttentionCapture:
    """What one self-attention module computed in one forward pass.

    ``queries``, ``keys``: (batch, heads, seq, head_dim), the projected vectors the scores are made of;
    ``probs``: (batch, heads, query_seq, key_seq), the softmax weights (``None`` if not kept);
    ``scale``: the factor on ``queries @ keys^T`` before the mask and the softmax (1/sqrt(head_dim) for BERT).
    """

    queries: torch.Tensor
    keys: torch.Tensor
    probs: torch.Tensor | None
    scale: float
    module_name: str = ""
    causal: bool = False

    def scores(self, rows: torch.Tensor | slice | None = None) -> torch.Tensor:
        """Pre-softmax scores ``scale * Q K^T`` (batch, heads, rows, key_seq), without any mask; ``rows`` selects
        query positions (all by default)."""
        q = self.queries if rows is None else self.queries[:, :, rows]
        return torch.matmul(q, self.keys.transpose(-1, -2)) * self.scale


@dataclass
class _Site:
    """One self-attention module and how to read its queries and keys."""

    name: str
    module: nn.Module
    kind: str  # "bert", "projection", "gpt2" or "rotary"
    heads: int
    head_dim: int
    captured: dict = field(default_factory=dict)

    @property
    def scale(self) -> float:
        m = self.module
        if self.kind == "gpt2":
            scale = 1.0 / math.sqrt(self.head_dim) if m.scale_attn_weights else 1.0
            if m.scale_attn_by_inverse_layer_idx:
                scale /= float(m.layer_idx + 1)
            return scale
        return float(getattr(m, "scaling", 1.0 / math.sqrt(self.head_dim)))

    @property
    def causal(self) -> bool:
        return self.kind == "gpt2" or bool(getattr(self.module, "is_decoder", False)) or bool(
            self.kind == "rotary" and getattr(self.module, "is_causal", True)) or bool(
            self.kind == "projection" and getattr(self.module, "is_causal", False))


def _rotary_function(module: nn.Module):
    """The ``apply_rotary_pos_emb`` of the module's own modeling file (Llama, Gemma 3, ...), or None."""
    import sys

    return getattr(sys.modules.get(type(module).__module__), "apply_rotary_pos_emb", None)


def _split_heads(x: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """(batch, seq, heads * head_dim) -> (batch, heads, seq, head_dim)."""
    return x.view(*x.shape[:-1], heads, head_dim).transpose(-3, -2)


def attention_sites(model: nn.Module) -> list[_Site]:
    """The model's self-attention modules in forward order (module registration order), one per layer."""
    sites = []
    for name, module in model.named_modules():
        if "crossattention" in name.split(".")[-2:] or getattr(module, "is_cross_attention", False):
            continue
        query, key = getattr(module, "query", None), getattr(module, "key", None)
        if isinstance(query, nn.Linear) and isinstance(key, nn.Linear) and hasattr(module, "num_attention_heads"):
            sites.append(_Site(name, module, "bert", module.num_attention_heads, module.attention_head_size))
        elif type(module).__name__.startswith("GPT2Attention") and hasattr(module, "c_attn"):
            sites.append(_Site(name, module, "gpt2", module.num_heads, module.head_dim))
        elif (isinstance(getattr(module, "q_proj", None), nn.Linear) and isinstance(getattr(module, "k_proj", None),
                                                                                    nn.Linear)
              and hasattr(module, "head_dim")):
            if hasattr(module, "num_key_value_groups") and _rotary_function(module) is not None:
                sites.append(_Site(name, module, "rotary", module.config.num_attention_heads, module.head_dim))
            elif (_rotary_function(module) is None and hasattr(module, "num_attention_heads")
                  and getattr(module, "num_key_value_groups", 1) == 1):
                sites.append(_Site(name, module, "projection", module.num_attention_heads, module.head_dim))
    return sites


def _attention_configs(model: nn.Module) -> list:
    configs = []
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation") and all(config is not c for c in configs):
            configs.append(config)
    return configs


@contextmanager
def _eager(model: nn.Module):
    """Eager attention for the duration of the block (GPT-2 and ViT choose the implementation at call time)."""
    configs = _attention_configs(model)
    before = [c._attn_implementation for c in configs]
    for c in configs:
        c._attn_implementation = "eager"
    try:
        yield
    finally:
        for c, value in zip(configs, before):
            c._attn_implementation = value


@contextmanager
def hooks(model: nn.Module, layers=None, keep_probs: bool = True):
    """Context manager: while open, every forward of ``model`` fills the yielded dict ``{layer: AttentionCapture}``
    (the last forward wins). Run the forward yourself, with ``output_attentions=True`` when ``keep_probs``; use this
    when you also need the model's output (``capture`` is the one-call form). With ``keep_probs`` the model runs
    with eager attention while the context is open; without, it keeps its own implementation (sdpa is faster)."""
    sites = attention_sites(model)
    if not sites:
        raise NotImplementedError(
            f"No supported self-attention module in {type(model).__name__}: anisotropy.measure.attention knows BERT-style "
            "modules (.query/.key or .q_proj/.k_proj linear maps), GPT-2 (.c_attn) and Llama-style rotary attention "
            "(.q_proj/.k_proj)."
        )
    chosen = range(len(sites)) if layers is None else [layers] if isinstance(layers, int) else list(layers)
    captures: dict[int, AttentionCapture] = {}
    handles = []

    def keep(site: _Site, slot: str):
        def hook(_module, _inputs, output):
            site.captured[slot] = _split_heads(output.detach(), site.heads, site.head_dim)
        return hook

    def keep_fused(site: _Site):
        def hook(module, _inputs, output):
            q, k, _v = output.detach().split(site.module.split_size, dim=-1)
            site.captured["queries"] = _split_heads(q, site.heads, site.head_dim)
            site.captured["keys"] = _split_heads(k, site.heads, site.head_dim)
        return hook

    def keep_rotary(site: _Site, slot: str):
        def hook(_module, _inputs, output):
            x = output.detach()
            if x.dim() == 3:  # a projection's output (batch, seq, heads * head_dim); q/k norms act per head
                x = x.view(*x.shape[:-1], -1, site.head_dim).transpose(1, 2)
            site.captured[slot] = x
        return hook

    def positions(site: _Site):
        def hook(_module, args, kwargs):
            found = kwargs.get("position_embeddings")
            site.captured["position_embeddings"] = found if found is not None else args[1]
        return hook

    def rotate(site: _Site) -> None:
        cos, sin = site.captured.pop("position_embeddings")
        q, k = _rotary_function(site.module)(site.captured["queries"], site.captured["keys"], cos, sin)
        groups = site.module.num_key_value_groups
        site.captured["queries"] = q
        site.captured["keys"] = k.repeat_interleave(groups, dim=1) if groups > 1 else k

    def finish(index: int, site: _Site):
        def hook(_module, _inputs, output):
            if site.kind == "rotary":
                rotate(site)
            probs = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if keep_probs and probs is None:
                raise RuntimeError(
                    f"{site.name} returned no attention probabilities: call the model with output_attentions=True "
                    "(and load it with attn_implementation='eager')."
                )
            captures[index] = AttentionCapture(
                queries=site.captured.pop("queries"), keys=site.captured.pop("keys"),
                probs=probs.detach() if keep_probs else None, scale=site.scale, module_name=site.name,
                causal=site.causal,
            )
        return hook

    try:
        for index in chosen:
            site = sites[index]
            if site.kind == "gpt2":
                handles.append(site.module.c_attn.register_forward_hook(keep_fused(site)))
            elif site.kind == "rotary":
                m = site.module
                q_src = m.q_norm if isinstance(getattr(m, "q_norm", None), nn.Module) else m.q_proj
                k_src = m.k_norm if isinstance(getattr(m, "k_norm", None), nn.Module) else m.k_proj
                handles.append(q_src.register_forward_hook(keep_rotary(site, "queries")))
                handles.append(k_src.register_forward_hook(keep_rotary(site, "keys")))
                handles.append(m.register_forward_pre_hook(positions(site), with_kwargs=True))
            elif site.kind == "projection":
                handles.append(site.module.q_proj.register_forward_hook(keep(site, "queries")))
                handles.append(site.module.k_proj.register_forward_hook(keep(site, "keys")))
            else:
                handles.append(site.module.query.register_forward_hook(keep(site, "queries")))
                handles.append(site.module.key.register_forward_hook(keep(site, "keys")))
            handles.append(site.module.register_forward_hook(finish(index, site)))
        if keep_probs:
            with _eager(model):
                yield captures
        else:
            yield captures
    finally:
        for handle in handles:
            handle.remove()


def capture(model: nn.Module, inputs, layers=None, keep_probs: bool = True,
            **forward_kwargs) -> dict[int, AttentionCapture]:
    """Run ``model`` once on ``inputs`` (a mapping of keyword arguments, e.g. a tokenizer's output, or one tensor:
    input ids for a model, hidden states for a bare layer) and return ``{layer: AttentionCapture}``.

    ``layers``: indices among the model's self-attention modules (all by default). ``keep_probs=False`` skips the
    attention probabilities (``probs`` is None) and lets the model keep its attention implementation. Runs under
    ``torch.no_grad``.
    """
    with hooks(model, layers, keep_probs=keep_probs) as captures, torch.no_grad():
        if isinstance(inputs, Mapping):
            model(**inputs, output_attentions=keep_probs, **forward_kwargs)
        else:
            model(inputs, output_attentions=keep_probs, **forward_kwargs)
    return captures
