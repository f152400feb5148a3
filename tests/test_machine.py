"""The machine's calibration and the build estimate made from it (anisotropy.book.machine): the arithmetic against
calibrations whose ratios are known, never against timings of this machine."""

from __future__ import annotations

import json

import pytest

from anisotropy.book import machine


def calibration(scale: float = 1.0) -> dict:
    steps = {"mlm": 0.2, "clm": 0.3, "vit": 0.1}
    return {"cpu": "test", "cores": 2, "isa": "AVX2", "gemm_gflops_1": 50.0, "gemm_gflops_all": 90.0,
            "stream_gbs": 10.0, "first_touch_gbs": 4.0, "step_seconds": {k: v * scale for k, v in steps.items()},
            "load_average": [0.1, 0.1, 0.1], "seconds": 12.0}


def reference() -> dict:
    return {"profile": "local", "commit": "abc1234", "wall_seconds": 1000.0, "cpu_seconds": 1800.0,
            "chapters_cpu_seconds": {"a": 1000.0, "b": 700.0}, "other_cpu_seconds": 100.0,
            "calibration": calibration()}


def test_speed_index_is_the_geometric_mean_of_the_step_time_ratios():
    assert machine.speed_index(calibration(), calibration()) == pytest.approx(1.0)
    assert machine.speed_index(calibration(3.0), calibration()) == pytest.approx(1 / 3)  # three times slower
    mixed = calibration()
    mixed["step_seconds"] = {"mlm": 0.4, "clm": 0.3, "vit": 0.05}  # 2x slower, same, 2x faster
    assert machine.speed_index(mixed, calibration()) == pytest.approx(1.0)
    mixed["step_seconds"] = {"mlm": 0.8}  # only the recipes both timed count
    assert machine.speed_index(mixed, calibration()) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        machine.speed_index({"step_seconds": {"cnn": 1.0}}, calibration())


def test_estimate_scales_the_reference_build_by_the_speed_index():
    est = machine.estimate_build(calibration(3.0), reference())
    assert est["speed_index"] == pytest.approx(1 / 3)
    assert est["cpu_seconds"] == pytest.approx(3 * 1800.0)
    assert est["wall_seconds"] == pytest.approx(3 * 1800.0 / 1.8)  # at the reference's 1.8 cores busy
    part = machine.estimate_build(calibration(), reference(), chapters=["a", "new"])
    assert part["cpu_seconds"] == pytest.approx(1000.0 + 100.0) and part["missing"] == ["new"]
    assert machine.estimate_build(calibration(), None) is None


def test_reference_reads_the_committed_file_format(tmp_path):
    path = tmp_path / "ref.json"
    path.write_text(json.dumps(reference()))
    assert machine.reference(path)["commit"] == "abc1234"
    assert machine.reference(tmp_path / "missing.json") is None


def test_describe_names_every_measurement():
    text = machine.describe(calibration())
    for fragment in ("GEMM 50 GFLOP/s", "90 on all", "memory 10.0 GB/s", "fresh pages 4.0 GB/s", "mlm 200 ms",
                     "clm 300 ms", "load average 0.1"):
        assert fragment in text


def test_gemm_rate_is_the_flop_count_over_the_best_time(monkeypatch):
    times = iter([0.0, 1.0, 1.5, 2.0])  # after an untimed warm-up: 1.0 s, then 0.5 s; the best is 0.5 s

    monkeypatch.setattr(machine.time, "perf_counter", lambda: next(times))
    assert machine.gemm_gflops(1, n=8, repeats=2) == pytest.approx(2 * 8**3 / 0.5 / 1e9)
