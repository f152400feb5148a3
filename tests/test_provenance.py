"""The provenance box names no folder of the machine that built the page (issue 57): a chapter that measures every
checkpoint of two self-trained suites lists each run once, by suite, recipe and seed, with its steps as a range, and
no path of the build root remains anywhere in the box. (tests/test_pipeline.py checks the same of a whole smoke
book's HTML.)"""

from __future__ import annotations

import shutil

from conftest import ROOT


def test_the_box_summarises_checkpoints_and_shows_no_path_of_the_build_root(tmp_path, monkeypatch):
    from anisotropy import paths, profiles
    from anisotropy.experiments import spectral
    from anisotropy.pages import report

    fake = tmp_path / "build-root"  # a checkout whose cache is inside it, as on a CI runner
    fake.mkdir()
    shutil.copy(ROOT / "_config.yml", fake / "_config.yml")
    monkeypatch.setenv("ANISOTROPY_CACHE", str(fake / ".cache"))
    monkeypatch.setattr(paths, "project_root", lambda: fake)
    recipes = {"mlm": "f087466982e2", "clm": "4e3da3192d67"}
    steps = [0, 1, 2, 5, 12, 28, 65, 150, 347, 800]
    entries = []
    for suite, recipe in recipes.items():
        for seed in (0, 1):
            for step in steps:
                folder = fake / ".cache" / "checkpoints" / suite / recipe / f"seed-{seed}" / f"step-{step}"
                folder.mkdir(parents=True)
                entries.append({"model": str(folder), "step": step, "seed": seed, "suite": suite, "kind": suite,
                                "label": f"self-trained {spectral.KIND_NAMES[suite]} (seed {seed})"})
    lines = spectral.describe(entries)  # what p2_training_dynamics passes
    assert len(lines) == 40 and all(str(fake) in line for line in lines)
    lines.append(f"a tokenizer read from {fake / '.cache' / 'tokenizers' / 'bpe-4000'}")

    summary = report.measured(lines)
    assert len(summary) == 5
    for suite, recipe in recipes.items():
        for seed in (0, 1):
            run = f"suite {suite}, recipe {recipe}, seed {seed}, 10 checkpoints, steps 0 to 800"
            assert sum(run in line for line in summary) == 1, run
    assert summary[-1] == "a tokenizer read from <cache>/tokenizers/bpe-4000"

    resolved = profiles.Resolved("p2_training_dynamics", "local", values={"text": str(fake / "data" / "notes.txt")},
                                 origins={"text": profiles.SET_HERE}, results_dir=str(fake / "results"))
    box = report.provenance(resolved, models=lines).data
    assert str(fake) not in box and str(tmp_path) not in box
    assert box.count("10 checkpoints, steps 0 to 800") == 4
    assert "&lt;checkout&gt;/data/notes.txt" in box and "&lt;checkout&gt;/results (results_dir" in box


def test_portable_leaves_other_paths_and_lookalike_folders_alone(tmp_path, monkeypatch):
    from anisotropy import paths
    from anisotropy.pages import report

    root = tmp_path / "repo"
    monkeypatch.setenv("ANISOTROPY_CACHE", str(root / ".cache"))
    monkeypatch.setattr(paths, "project_root", lambda: root)
    text = f"{root}/a, {root}-old/b, {root}2/c, /content/drive/MyDrive/x, {root}"
    assert report.portable(text) == f"<checkout>/a, {root}-old/b, {root}2/c, /content/drive/MyDrive/x, <checkout>"
