"""Where a model runs: ``resolve`` turns "auto" (or None) into "cuda" when a GPU is visible, else "cpu".

This module imports nothing of the package, and torch only when "auto" is resolved, so importing it stays cheap.
"""


def resolve(device=None):
    """"auto" and None -> "cuda" when ``torch.cuda.is_available()``, else "cpu"; anything else ("cpu", "cuda:1", "mps",
    a ``torch.device``) is returned as given. The union of the copies this replaces: the registry and the QK dynamics
    resolved only "auto", the layer-wise and spectral measurements also None."""
    if device is not None and str(device) != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
