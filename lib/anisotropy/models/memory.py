"""The memory guard of loading: whether a model's weights fit the device before any are loaded. ``available_bytes``
is what a new model could take on a device (a GPU's free memory with what PyTorch holds cached, the host's
MemAvailable); ``check_fits`` (a registry entry, from its parameter count) and ``check_folder_fits`` (a folder, from
its weight files' size, ``folder_bytes``) raise one ``ModelTooLargeError`` line before loading what would not fit.
``registry.load`` and ``registry.load_any`` call them; tests stand in for a device by patching ``available_bytes``
here."""

from __future__ import annotations

import os
from pathlib import Path

from anisotropy import devices
from anisotropy.errors import ModelTooLargeError
from anisotropy.models.table import ModelSpec


def available_bytes(device) -> int | None:
    """Bytes a new model could take on ``device``: on a GPU the driver's free memory plus what PyTorch's caching
    allocator holds reserved but unused (the previous checkpoint's freed blocks, which it hands out again before
    asking the driver); on the CPU the kernel's MemAvailable."""
    import torch

    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        reclaimable = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(torch.cuda.mem_get_info(device)[0]) + max(int(reclaimable), 0)
    if device.type == "cpu":
        try:
            with open("/proc/meminfo") as fh:
                for line in fh:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


def check_fits(s: ModelSpec, device="cpu", dtype=None) -> None:
    """Raise ``ModelTooLargeError`` (one line) when the weights alone would not fit in the device's free memory."""
    import torch

    if not s.n_params:
        return
    dtype = dtype or torch.float32
    need = s.n_params * torch.empty(0, dtype=dtype).element_size() * 1.1
    have = available_bytes(device)
    if have is not None and need > have:
        raise ModelTooLargeError(
            f"{s.name} ({s.n_params / 1e9:.2f}B parameters) needs about {need / 2**30:.1f} GiB in {dtype} on "
            f"{device}, but {have / 2**30:.1f} GiB is free: use a larger GPU, dtype=torch.float16, or a smaller "
            f"model")


def folder_bytes(folder: str | os.PathLike) -> int:
    """Bytes of a folder's weight files (``*.safetensors``, ``*.bin``, ``*.gguf``): what its weights take in memory
    at the dtype they are stored in."""
    folder = Path(folder)
    return sum(f.stat().st_size for pattern in ("*.safetensors", "*.bin", "*.gguf") for f in folder.glob(pattern))


def check_folder_fits(folder: str | os.PathLike, device="cpu", dtype=None) -> None:
    """``check_fits`` for a folder, from its weight files' size (float32 on disk, scaled to ``dtype``)."""
    import torch

    need = folder_bytes(folder) * 1.1
    if dtype is not None:
        need *= torch.empty(0, dtype=dtype).element_size() / 4
    have = available_bytes(devices.resolve(device))
    if have is not None and need > have:
        raise ModelTooLargeError(
            f"{Path(folder).name} needs about {need / 2**30:.1f} GiB on {device}, but {have / 2**30:.1f} GiB is "
            f"free: use a larger GPU, dtype float16, or a smaller model")
