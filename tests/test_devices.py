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


# ---- the paper profile's runtime: a Colab CPU runtime stops, "auto" on a CPU says what it will cost ---------------

@pytest.mark.parametrize("device", ["auto", "cpu", "cuda"])
def test_the_paper_profile_on_a_colab_cpu_runtime_stops_in_one_line_whatever_the_device(monkeypatch, colab, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(devices.NoGPUError) as info:
        devices.check_runtime("paper", device)
    message = str(info.value)
    assert "\n" not in message and "Runtime > Change runtime type" in message and 'profile = "local"' in message


@pytest.mark.parametrize("profile", ["local", "paper-sim", "smoke"])
def test_other_profiles_on_a_colab_cpu_runtime_run_on_the_cpu(monkeypatch, colab, profile):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.check_runtime(profile, "auto") == "cpu"


def test_the_paper_profile_runs_where_colab_has_a_gpu_and_off_colab_resolves_as_usual(monkeypatch, colab):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.check_runtime("paper", "auto") == "cuda"
    monkeypatch.delitem(sys.modules, "google.colab")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.check_runtime("paper", "auto") == "cpu"


def test_a_paper_chapter_opened_on_a_colab_cpu_runtime_stops_in_its_first_cell(monkeypatch, colab):
    from anisotropy import profiles

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(profiles, "_in_kernel", lambda: True)
    monkeypatch.setattr(profiles, "one_line_errors", lambda: None)
    with pytest.raises(devices.NoGPUError):
        profiles.apply("p1_s3_token_level", {"profile": "paper"})
    namespace = {"profile": "local"}  # the offline profile on the same runtime runs
    assert profiles.apply("p1_s3_token_level", namespace).profile == "local"


def test_auto_under_the_paper_profile_without_a_gpu_warns_once_with_its_time_on_the_cpu(monkeypatch):
    import warnings

    from anisotropy.chapters import plans
    from anisotropy.pages import budget, report

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    resolved = plans.apply("p1_s3_token_level", {"profile": "paper"})
    assert resolved.values["device"] == "auto"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = report.cpu_fallback(resolved)
    assert [w.category for w in caught] == [devices.CPUFallbackWarning] and str(caught[0].message) == text
    e = budget.estimate(plans.plan("p1_s3_token_level", resolved.values, "paper"))
    # The same downloads, and forward passes at two vCPUs' float32 peak instead of a T4's float16 one (65 / 0.14 =
    # 464 times slower): an order of magnitude more in all, the downloads being the same.
    assert budget.cpu_minutes(e) > 10 * e["gpu_minutes"]
    no_passes = dict(e, forward_tflop=0.0)
    assert budget.cpu_minutes(e) - budget.cpu_minutes(no_passes) == pytest.approx(
        e["forward_tflop"] / (0.14 * 0.3) / 60, rel=1e-12)
    assert budget.minutes_text(budget.cpu_minutes(e)) in text and budget.minutes_text(e["gpu_minutes"]) in text
    # No warning where a GPU is there, where the device is set, or under another profile.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert report.cpu_fallback(resolved) == ""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert report.cpu_fallback(plans.apply("p1_s3_token_level", {"profile": "local"})) == ""
    assert report.cpu_fallback(plans.apply("p1_s3_token_level", {"profile": "paper", "device": "cpu"})) == ""
