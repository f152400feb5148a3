"""Where a model runs: ``resolve`` turns "auto" (or None) into "cuda" when a GPU is visible, else "cpu", and refuses
"cuda" on a machine without one in one line.

This module imports nothing of the package but ``errors``, and torch only when a device is resolved, so importing it
stays cheap.
"""

from anisotropy.errors import UserError

#: What to do when a GPU was asked for and there is none: the one line every chapter and the CLI print.
NO_GPU = ("device {device!r} was asked for, but this runtime has no GPU (torch.cuda.is_available() is False): on "
          "Colab choose Runtime > Change runtime type > T4 GPU (or better) and run the notebook again; elsewhere set "
          "device = \"auto\" or \"cpu\".")


class NoGPUError(UserError):
    """A CUDA device was asked for on a machine without one."""


def resolve(device=None):
    """"auto" and None -> "cuda" when ``torch.cuda.is_available()``, else "cpu"; a CUDA device ("cuda", "cuda:1", a
    ``torch.device``) without a GPU raises ``NoGPUError`` (one line saying how to get one); anything else ("cpu",
    "mps", a CUDA device where there is a GPU) is returned as given."""
    if device is not None and str(device) != "auto":
        if str(device).split(":", 1)[0] == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise NoGPUError(NO_GPU.format(device=str(device)))
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
