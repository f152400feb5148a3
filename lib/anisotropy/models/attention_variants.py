"""Variants of BERT self-attention for the ablation chapter "can attention be sharp without anisotropy?".

Each variant changes only how the per-head queries ``q`` and keys ``k`` enter the scores ``s = scale * q . k``:

- ``standard``: unchanged;
- ``qk_norm``: ``q <- g_q * q / rms(q)`` and ``k <- g_k * k / rms(k)`` per head and token, ``rms(x) =
  sqrt(mean_i x_i^2 + eps)`` over the head's dimensions, learned gains ``g`` of shape (heads, head_dim), init 1;
- ``centred``: ``q <- q - mean_t q``, ``k <- k - mean_t k`` per sequence and head, means over the sequence's valid
  (unmasked) tokens. Centring the keys leaves the softmax unchanged (it shifts a whole score row), so the variant
  removes exactly the term ``mean(q) . k`` by which a common drift of the queries favours some keys;
- ``temperature``: ``q <- exp(t_h) * q``, a learned per-head log-temperature ``t_h``, init 0: the same scale freedom
  as ``qk_norm`` without any normalisation.

The transforms live in the ``.query`` / ``.key`` linear maps (``VariantLinear``, a ``nn.Linear``), so
``measure.attention.capture``'s hooks on those maps read the EFFECTIVE queries and keys the scores are made of, and the
model's probabilities equal ``softmax(scale * q k^T + mask)`` of what is captured. Variant models run eager attention.
``apply_attention_variant(model, name)`` installs a variant in place (the trainer calls it after building a model);
``restore(model, folder)`` re-installs the variant a checkpoint's config records and loads its parameters, and the
relative positions its config names where the library computes them (``relative_positions``, transformers 5).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from anisotropy import compat
from anisotropy.models import relative_positions
from anisotropy.models.relative_positions import self_attention_modules  # one definition, re-exported here

VARIANTS = ("standard", "qk_norm", "centred", "temperature")
RMS_EPS = 1e-6


class VariantLinear(nn.Linear):
    """A query or key projection followed by a variant's per-head transform (see the module docstring)."""

    def __init__(self, linear: nn.Linear, variant: str, heads: int):
        super().__init__(linear.in_features, linear.out_features, bias=linear.bias is not None,
                         device=linear.weight.device, dtype=linear.weight.dtype)
        with torch.no_grad():
            self.weight.copy_(linear.weight)
            if linear.bias is not None:
                self.bias.copy_(linear.bias)
        self.variant, self.heads, self.head_dim = variant, heads, linear.out_features // heads
        if variant == "qk_norm":
            self.gain = nn.Parameter(torch.ones(heads, self.head_dim, device=self.weight.device))
        elif variant == "temperature":
            self.log_temperature = nn.Parameter(torch.zeros(heads, device=self.weight.device))
        self.valid: torch.Tensor | None = None  # (batch, seq) bool, set by VariantSelfAttention for each forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        h = y.view(*y.shape[:-1], self.heads, self.head_dim)  # (batch, seq, heads, head_dim)
        if self.variant == "qk_norm":
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + RMS_EPS) * self.gain
        elif self.variant == "temperature":
            h = h * self.log_temperature.exp()[:, None]
        elif self.variant == "centred":
            if self.valid is None:
                h = h - h.mean(1, keepdim=True)
            else:
                w = self.valid.to(h.dtype)[:, :, None, None]
                h = h - (h * w).sum(1, keepdim=True) / w.sum(1, keepdim=True).clamp_min(1)
        return h.reshape(y.shape)


def _valid_tokens(attention_mask: torch.Tensor | None, seq: int) -> torch.Tensor | None:
    """(batch, seq) bool of the keys a sequence may attend to, from BERT's 4-d mask (additive or boolean)."""
    if attention_mask is None:
        return None
    m = attention_mask[:, 0, -1, :] if attention_mask.dim() == 4 else attention_mask
    if m.dtype == torch.bool:
        return m[:, -seq:]
    return (m > torch.finfo(m.dtype).min / 2)[:, -seq:]


def _self_attention_class(model: nn.Module):
    """The variants' self-attention class: over BERT's own, or over ``relative_positions``' where the model's
    relative positions are computed by this library (transformers 5)."""
    from transformers.models.bert.modeling_bert import BertSelfAttention

    base = relative_positions.self_attention_class() if relative_positions.needed(model) else BertSelfAttention

    class VariantSelfAttention(base):
        """BERT's eager self-attention whose ``.query``/``.key`` are ``VariantLinear`` maps; hands them the mask."""

        def forward(self, hidden_states, attention_mask=None, *args, **kwargs):
            valid = _valid_tokens(attention_mask, hidden_states.shape[1])
            self.query.valid = self.key.valid = valid
            try:
                return super().forward(hidden_states, attention_mask, *args, **kwargs)
            finally:
                self.query.valid = self.key.valid = None

    return VariantSelfAttention


def variant_of(model: nn.Module) -> str:
    return getattr(model.config, "attention_variant", "standard")


def apply_attention_variant(model: nn.Module, name: str) -> nn.Module:
    """Install variant ``name`` in every self-attention block of a BERT-family model, in place (the projections'
    weights are kept; new gains start at 1, temperatures at 0), and record it in ``model.config.attention_variant``
    so that ``save_pretrained`` writes it. ``standard`` leaves the model untouched."""
    if name not in VARIANTS:
        raise ValueError(f"attention variant must be one of {VARIANTS}, got {name!r}")
    if name == "standard":
        return model
    if variant_of(model) != "standard":
        raise ValueError(f"the model already runs attention variant {variant_of(model)!r}")
    blocks = self_attention_modules(model)
    if not blocks:
        raise NotImplementedError(f"attention variants need BERT-style self-attention; {type(model).__name__} has "
                                  "none (GPT-2 and ViT are not supported)")
    cls = _self_attention_class(model)
    with torch.random.fork_rng(devices=[]):  # the throw-away initialisation below must not move the caller's RNG
        _install(model, blocks, cls, name)
    model.config.attention_variant = name
    if compat.transformers_major() >= 5:  # its BERT picks the implementation at each call, from the config
        model.config._attn_implementation = "eager"
    return model


def _install(model, blocks, cls, name: str) -> None:
    for parent, attr, old in blocks:
        config = model.config
        # transformers 5's BERT self-attention takes no position type (its positions: relative_positions)
        kwargs = {"position_embedding_type": old.position_embedding_type} if compat.transformers_major() < 5 else {}
        new = cls(config, layer_idx=old.layer_idx, **kwargs)
        new.load_state_dict(old.state_dict())
        new.query = VariantLinear(old.query, name, old.num_attention_heads)
        new.key = VariantLinear(old.key, name, old.num_attention_heads)
        new.train(old.training)
        setattr(parent, attr, new.to(old.query.weight.device))


def restore(model: nn.Module, folder: str | Path) -> nn.Module:
    """Re-install the variant that ``folder``'s config records on a model ``from_pretrained`` loaded from it (which
    dropped the variant's parameters) and load them from the folder's weights: the model then computes exactly what
    was saved. The same for relative positions (``relative_positions.restore``). A no-op for standard checkpoints
    (and, under transformers 4, for relative positions, which it computes itself)."""
    import json

    from safetensors.torch import load_file

    relative_positions.restore(model, folder)  # first: a variant's attention is built over them
    config = json.loads((Path(folder) / "config.json").read_text())
    name = config.get("attention_variant", "standard")
    if name == "standard":
        return model
    model.config.attention_variant = "standard"
    apply_attention_variant(model, name)
    saved = load_file(str(Path(folder) / "model.safetensors"), device=str(next(model.parameters()).device))
    own = model.state_dict()
    extra = {k: v for k, v in saved.items() if k in own and k.rsplit(".", 1)[-1] in ("gain", "log_temperature")}
    missing = [k for k in own if k.rsplit(".", 1)[-1] in ("gain", "log_temperature") and k not in extra]
    if missing:
        raise KeyError(f"{folder}: attention variant {name!r} parameters missing from the weights: {missing[:3]}")
    model.load_state_dict(extra, strict=False)
    return model


def from_pretrained(cls, folder: str | Path, **kwargs) -> nn.Module:
    """``cls.from_pretrained(folder)`` with the checkpoint's attention variant active (eager attention) and its
    relative positions (``restore``)."""
    import json

    name = json.loads((Path(folder) / "config.json").read_text()).get("attention_variant", "standard")
    if name != "standard":
        kwargs["attn_implementation"] = "eager"
    from transformers.utils import logging

    before = logging.get_verbosity()
    logging.set_verbosity_error()  # the variant's parameters are reported unused here and loaded by restore()
    try:
        model = cls.from_pretrained(str(folder), **kwargs)
    finally:
        logging.set_verbosity(before)
    return restore(model, folder)


__all__ = ["VARIANTS", "VariantLinear", "apply_attention_variant", "restore", "from_pretrained",
           "variant_of", "self_attention_modules"]
