"""The norm that decoders apply after their last block (the counterpoint of Machina & Mercer 2024): where a model keeps
it (``find_final_norm``), and ``final_norm_split``, under which a model's hidden states end with the last block's
output both before and after that norm, so that Paper 2's protocol can measure the two apart."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

# Where decoders keep the norm applied after the last block (GPT-NeoX/Pythia, GPT-2/Bloom/Falcon/GPT-J, Llama, OPT).
_FINAL_NORMS = ("final_layer_norm", "ln_f", "norm", "decoder.final_layer_norm")


def find_final_norm(model) -> tuple[torch.nn.Module, str] | None:
    """(parent module, attribute) of the norm applied after the last block, or None (encoders, post-LN OPT-350m)."""
    base = getattr(model, "base_model", model)
    for candidate in (base, model):
        for dotted in _FINAL_NORMS:
            *path, attr = dotted.split(".")
            parent = candidate
            for part in path:
                parent = getattr(parent, part, None)
            if isinstance(getattr(parent, attr, None), torch.nn.Module) and "norm" in type(
                    getattr(parent, attr)).__name__.lower():
                return parent, attr
    return None


@contextlib.contextmanager
def final_norm_split(model) -> Iterator[bool]:
    """While active, the model's ``hidden_states`` end with the last block's output *before* the final norm, followed
    by one extra state: that output *after* the final norm (the usual last hidden state). Yields False (and changes
    nothing) when the model has no final norm. The norm acts on each vector alone, so applying it to the stored
    pre-norm state gives exactly the state the model would have produced."""
    found = find_final_norm(model)
    if found is None:
        yield False
        return
    parent, attr = found
    norm = getattr(parent, attr)

    def append_normed(module, args, output):
        states = getattr(output, "hidden_states", None)
        if states is not None:
            output.hidden_states = (*states, norm(states[-1]))
        return output

    setattr(parent, attr, torch.nn.Identity())
    handle = model.register_forward_hook(append_normed)
    try:
        yield True
    finally:
        handle.remove()
        setattr(parent, attr, norm)
