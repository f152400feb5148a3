"""Where a model runs: ``resolve`` turns "auto" (or None) into "cuda" when a GPU is visible, else "cpu", and refuses
"cuda" on a machine without one in one line; ``check_runtime`` stops the ``paper`` profile on a Colab runtime
without a GPU, and says when "auto" under it falls back to the CPU.

This module imports nothing of the package but ``errors``, and torch only when a device is resolved, so importing it
stays cheap.
"""

import sys

from anisotropy.errors import UserError

#: What to do when a GPU was asked for and there is none: the one line every chapter and the CLI print.
NO_GPU = ("device {device!r} was asked for, but this runtime has no GPU (torch.cuda.is_available() is False): on "
          "Colab choose Runtime > Change runtime type > T4 GPU (or better) and run the notebook again; elsewhere set "
          "device = \"auto\" or \"cpu\".")


#: The same, for the ``paper`` profile opened on a Colab runtime without a GPU (whatever ``device`` says).
NO_GPU_PAPER = ("profile \"paper\" measures the papers' models at their size, and this Colab runtime has no GPU: choose "
                "Runtime > Change runtime type > T4 GPU (or better) and run the notebook again, or set profile = "
                "\"local\" for the offline models on this CPU.")


class NoGPUError(UserError):
    """A CUDA device was asked for on a machine without one."""


class CPUFallbackWarning(UserWarning):
    """``device = "auto"`` under the ``paper`` profile found no GPU: the chapter measures on the CPU."""


def on_colab() -> bool:
    """Whether this runs in a Colab kernel (the test the notebooks' install cell makes too)."""
    return "google.colab" in sys.modules


def check_runtime(profile: str, device=None) -> str:
    """Where the ``paper`` profile's chapter will measure: ``resolve(device)``, except that on Colab without a GPU
    it stops (``NoGPUError``, ``NO_GPU_PAPER``) whatever ``device`` says, since a free CPU runtime cannot hold the
    papers' models' work. Other profiles: ``resolve(device)``."""
    if profile == "paper" and on_colab():
        import torch

        if not torch.cuda.is_available():
            raise NoGPUError(NO_GPU_PAPER)
    return resolve(device)


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
