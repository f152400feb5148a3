"""BERT's relative positions, which the trainer's encoders may use (``Recipe.positions``), under every transformers.

The distance between query i and key j enters the scores as a learnt vector ``r_{i-j}`` (one per distance, shared by
the heads) met by the query (Shaw et al. 2018, ``"relative_key"``) or by the query and the key (Huang et al. 2020,
``"relative_key_query"``): ``s_ij = (q_i . k_j + q_i . r_{i-j} [+ k_j . r_{i-j}]) / sqrt(head_dim)``, and the embeddings
add no absolute position.

transformers 4 computes this itself (``BertConfig.position_embedding_type``). transformers 5 removed it: there
``install(model)`` gives every self-attention module of a BERT model whose config names relative positions
transformers 4's ``distance_embedding`` (an ``nn.Embedding`` of ``2 * max_position_embeddings - 1`` rows of
``head_dim``: the same name and shape, so a checkpoint written under one version loads under the other) and
transformers 4's eager computation of the scores above (``RelativeSelfAttention``), and makes the embeddings add no
absolute position (their ``position_embeddings`` stays, unused, as under 4). ``restore(model, folder)`` does the same
for a model ``from_pretrained`` read from a checkpoint and loads the distance vectors from its weights. Under
transformers 4 both do nothing.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from anisotropy import compat

RELATIVE = ("relative_key", "relative_key_query")


def needed(model: nn.Module) -> bool:
    """Whether ``model`` names relative positions that its transformers does not compute itself (5.x)."""
    config = getattr(model, "config", None)
    return compat.transformers_major() >= 5 and getattr(config, "position_embedding_type", "absolute") in RELATIVE


def self_attention_class(base=None):
    """A subclass of ``base`` (BERT's self-attention class by default; the attention variants' class for a variant
    model) that computes transformers 4's eager attention with relative positions."""
    if base is None:
        from transformers.models.bert.modeling_bert import BertSelfAttention as base

    class RelativeSelfAttention(base):
        """BERT self-attention with transformers 4's ``distance_embedding`` and scores (see the module docstring)."""

        def __init__(self, config, *args, **kwargs):
            super().__init__(config, *args, **kwargs)
            self.position_embedding_type = config.position_embedding_type
            self.max_position_embeddings = config.max_position_embeddings
            self.distance_embedding = nn.Embedding(2 * config.max_position_embeddings - 1, self.attention_head_size)
            self.distance_embedding.weight.data.normal_(0.0, config.initializer_range)

        def forward(self, hidden_states, attention_mask=None, *args, **kwargs):
            shape = (*hidden_states.shape[:-1], -1, self.attention_head_size)
            q = self.query(hidden_states).view(shape).transpose(1, 2)
            k = self.key(hidden_states).view(shape).transpose(1, 2)
            v = self.value(hidden_states).view(shape).transpose(1, 2)
            scores = torch.matmul(q, k.transpose(-1, -2))
            rows = torch.arange(q.shape[2], device=q.device)[:, None]
            cols = torch.arange(k.shape[2], device=q.device)[None, :]
            r = self.distance_embedding(rows - cols + self.max_position_embeddings - 1).to(q.dtype)
            scores = scores + torch.einsum("bhld,lrd->bhlr", q, r)
            if self.position_embedding_type == "relative_key_query":
                scores = scores + torch.einsum("bhrd,lrd->bhlr", k, r)
            scores = scores / self.attention_head_size ** 0.5
            if attention_mask is not None:
                if attention_mask.dtype == torch.bool:  # a boolean mask (True: attend) rather than an additive one
                    attention_mask = torch.zeros_like(scores).masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
                scores = scores + attention_mask
            probs = self.dropout(nn.functional.softmax(scores, dim=-1))
            out = torch.matmul(probs, v).transpose(1, 2).reshape(*hidden_states.shape[:-1], -1)
            return out, probs

    return RelativeSelfAttention


class _NoAbsolutePositions(nn.Embedding):
    """The embeddings' absolute position table, kept (as under transformers 4) but adding nothing."""

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*positions.shape, self.embedding_dim, dtype=self.weight.dtype, device=self.weight.device)


def self_attention_modules(model: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """(parent, attribute, module) of every BERT-style self-attention block (``BertAttention.self``)."""
    found = []
    for module in model.modules():
        inner = getattr(module, "self", None)
        if isinstance(inner, nn.Module) and isinstance(getattr(inner, "query", None), nn.Linear) \
                and hasattr(inner, "num_attention_heads"):
            found.append((module, "self", inner))
    return found


def install(model: nn.Module, base=None) -> nn.Module:
    """Give a BERT model that names relative positions their computation, in place, where its transformers lacks it
    (see the module docstring); new distance vectors are drawn as transformers 4 draws them (normal, std
    ``initializer_range``) without moving the caller's random state. A no-op otherwise."""
    if not needed(model) or all(hasattr(m, "distance_embedding") for _, _, m in self_attention_modules(model)):
        return model
    cls = self_attention_class(base)
    with torch.random.fork_rng(devices=[]):
        for parent, attr, old in self_attention_modules(model):
            new = cls(model.config, is_causal=old.is_causal, layer_idx=old.layer_idx)
            new.load_state_dict(old.state_dict(), strict=False)
            new.train(old.training)
            setattr(parent, attr, new.to(device=old.query.weight.device, dtype=old.query.weight.dtype))
    for module in model.modules():
        table = getattr(module, "position_embeddings", None)
        if type(table) is nn.Embedding and hasattr(module, "word_embeddings"):
            kept = _NoAbsolutePositions(table.num_embeddings, table.embedding_dim, device=table.weight.device,
                                        dtype=table.weight.dtype)
            kept.load_state_dict(table.state_dict())
            module.position_embeddings = kept
    model.config._attn_implementation = "eager"  # as transformers 4 ran them (the masks it prepares: eager's)
    return model


def restore(model: nn.Module, folder: str | Path, base=None) -> nn.Module:
    """``install`` on a model ``from_pretrained`` read from ``folder`` (which dropped the distance vectors), then the
    vectors from the folder's weights. A no-op where ``install`` is one."""
    if not needed(model):
        return model
    from safetensors.torch import load_file

    install(model, base)
    saved = load_file(str(Path(folder) / "model.safetensors"), device=str(next(model.parameters()).device))
    own = model.state_dict()
    wanted = [k for k in own if k.endswith("distance_embedding.weight")]
    missing = [k for k in wanted if k not in saved]
    if missing:
        raise KeyError(f"{folder}: relative position vectors missing from the weights: {missing[:3]}")
    model.load_state_dict({k: saved[k] for k in wanted}, strict=False)
    return model
