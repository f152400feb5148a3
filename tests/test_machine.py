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


# ---- a build's timeline: cores busy, its critical path, the idle core-seconds on it ------------------------------------

def test_cores_busy_and_idle_core_seconds_on_the_critical_path_of_a_known_build():
    from anisotropy.book import timeline

    # Two cores, 150 s. A (one core) from 0 to 100; B (one core) 0-40; C, started on B's core, 40-100 at half a
    # core (it waited on A's process for part of it); D after A, 100-150, one core. Worked by hand: the cores held
    # 100 + 40 + 30 + 50 = 220 CPU-s in 150 s; idle 0 until 40, half a core from 40 to 100 (30 core-s), one core from
    # 100 to 150 (50 core-s).
    spans = [timeline.Span("A", 0, 100, 100), timeline.Span("B", 0, 40, 40), timeline.Span("C", 40, 100, 30),
             timeline.Span("D", 100, 150, 50, after=("A",))]
    assert timeline.cores_busy(220, 150) == pytest.approx(220 / 150)
    path = timeline.critical_path(spans)
    assert [s.name for s in path] == ["A", "D"]  # C ended with A, but D ran after A
    assert timeline.idle_core_seconds(spans, path, cores=2) == pytest.approx(30 + 50)
    # a core waited for: E starts when B ends; the path runs through B, the item whose end let it start
    waited = [timeline.Span("B", 0, 40, 40), timeline.Span("F", 0, 30, 30), timeline.Span("E", 40, 60, 20)]
    path = timeline.critical_path(waited)
    assert [s.name for s in path] == ["B", "E"]
    assert timeline.idle_core_seconds(waited, path, cores=2) == pytest.approx(10 + 20)  # 30-40 and 40-60: one idle
    # more busy than the cores (a chapter's own worker processes): never below zero idle
    assert timeline.idle_core_seconds([timeline.Span("G", 0, 10, 30)], [timeline.Span("G", 0, 10, 30)], 2) == 0.0
    assert timeline.critical_path([]) == []


def test_item_seconds_spread_an_old_references_suites_chapter_over_the_units_by_cost():
    from anisotropy.book import units
    from anisotropy.training import recipes, trainer

    runs = [units.Unit(r.suite, r.seed) for name, spec in recipes.suite_specs("local").items()
            for r in recipes.recipes(name, spec)]
    cost = {u.name: trainer.cost(u.recipe("local")) for u in runs}
    ref = {"profile": "local", "chapters_cpu_seconds": {"checkpoint_suites": 1000.0, "other": 50.0}}
    items = [u.name for u in runs] + ["checkpoint_suites", "other", "new"]
    seconds = machine.item_seconds(ref, items)
    for u in runs:  # the suites chapter's seconds, shared by cost
        assert seconds[u.name] == pytest.approx(1000.0 * cost[u.name] / sum(cost.values()))
    assert seconds["checkpoint_suites"] == 0.0 and seconds["other"] == 50.0 and "new" not in seconds
    # a reference with units: the rate of its own units
    clm = [u for u in runs if u.suite == "clm"]
    newer = {"profile": "local", "chapters_cpu_seconds": {clm[0].name: 600.0, "checkpoint_suites": 30.0}}
    seconds = machine.item_seconds(newer, [u.name for u in runs] + ["checkpoint_suites"])
    assert seconds[clm[1].name] == pytest.approx(600.0) and seconds["checkpoint_suites"] == 30.0
    cnn = next(u for u in runs if u.suite == "cnn")
    assert seconds[cnn.name] == pytest.approx(600.0 * cost[cnn.name] / cost[clm[0].name])
    # the estimate of a fresh build counts the training once, whether the reference has units or not
    assert machine.estimate_build(calibration(), {**ref, "cpu_seconds": 1050.0, "wall_seconds": 600.0,
                                                  "calibration": calibration()}, items)["cpu_seconds"] == \
        pytest.approx(1050.0)
