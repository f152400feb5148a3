"""``devices.resolve``: "auto" and None pick the GPU when there is one; "cuda" without one stops in one line; anything
else passes through."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from anisotropy import devices


@pytest.mark.parametrize("device", ["auto", None])
def test_auto_is_the_cpu_without_a_gpu(monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve(device) == "cpu"


@pytest.mark.parametrize("device", ["auto", None])
def test_auto_is_the_gpu_when_there_is_one(monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.resolve(device) == "cuda"


def test_the_default_is_auto(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve() == "cpu"


@pytest.mark.parametrize("available", [False, True])
@pytest.mark.parametrize("device", ["cpu", "mps"])
def test_explicit_devices_pass_through(monkeypatch, available, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    assert devices.resolve(device) == device


@pytest.mark.parametrize("device", ["cuda", "cuda:1", torch.device("cuda", 0)])
def test_a_cuda_device_passes_through_where_there_is_a_gpu(monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.resolve(device) is device


@pytest.mark.parametrize("device", ["cuda", "cuda:1", torch.device("cuda", 0)])
def test_a_cuda_device_without_a_gpu_stops_in_one_line_saying_how_to_get_one(monkeypatch, device):
    from anisotropy.errors import UserError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError) as info:
        devices.resolve(device)
    message = str(info.value)
    assert "\n" not in message and "no GPU" in message and "Runtime > Change runtime type" in message
    assert repr(str(device)) in message


def test_importing_the_module_does_not_import_torch():
    code = "import sys; import anisotropy.devices; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
