"""The package as a user gets it: the wheel built from a copy of the repository, installed into a fresh virtual
environment, gives a working ``anisotropy`` command outside any checkout: ``--help``, ``chapters`` (the table of
contents and the parameters cells come inside the wheel, ``profiles.PACKAGED``) and ``profile`` of a registry model.

Offline and quick: the wheel is built without build isolation (setuptools, from make test's packages), and the fresh
venv sees the test environment's installed packages through a ``.pth`` line instead of installing them again (not the
checkout's ``lib/``: the ``.pth`` files of that site-packages, the editable install's among them, are not read)."""

from __future__ import annotations

import os
import re
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest

from conftest import CHAPTER_S, ROOT, copy_repo, run_guarded

BUILD_S = 60  # build the wheel, make the venv, install, on the slow 2-core machine


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The wheel installed into a fresh venv: its ``bin`` folder, and an environment without the checkout's library
    (no PYTHONPATH) whose cache and results store are the test's own."""
    tmp = tmp_path_factory.mktemp("install")
    repo = copy_repo(tmp / "repo")
    run_guarded([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                 "-w", str(tmp / "dist"), str(repo)], expected_s=BUILD_S, check=True, capture_output=True)
    [wheel] = (tmp / "dist").glob("anisotropy-*.whl")
    venv = tmp / "venv"
    run_guarded([sys.executable, "-m", "venv", "--without-pip", str(venv)], expected_s=BUILD_S, check=True)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (purelib / "test-environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANISOTROPY_", "PYTHON"))}
    env.update(ANISOTROPY_CACHE=str(tmp / "cache"), ANISOTROPY_RESULTS=str(tmp / "results"), HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1")
    # -I: never touch the editable install of the test environment, which pip sees through the .pth line
    run_guarded([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-I", "--no-deps", "--no-index",
                 str(wheel)], expected_s=BUILD_S, check=True, capture_output=True, env=env)
    elsewhere = tmp / "elsewhere"  # a working directory outside any checkout
    elsewhere.mkdir()
    return {"bin": venv / "bin", "venv": venv, "env": env, "cwd": elsewhere}


def run(installed: dict, *argv: str) -> subprocess.CompletedProcess:
    return run_guarded([str(installed["bin"] / argv[0]), *argv[1:]], expected_s=CHAPTER_S, capture_output=True,
                       text=True, cwd=installed["cwd"], env=installed["env"])


def test_the_installed_package_is_the_wheel_not_the_checkout(installed):
    proc = run(installed, "python", "-c", "import anisotropy, anisotropy.paths as p; print(anisotropy.__file__); "
               "print(p.project_root())")
    where, root = proc.stdout.split()
    assert Path(where).is_relative_to(installed["venv"]) and root == "None", proc.stderr


def test_the_public_api_comes_with_the_wheel(installed):
    """``import anisotropy`` of the installed wheel exports its public functions (``anisotropy.api``, a package of
    the wheel) and they compute: the cosine's 0.95-quantile in R^3 is 0.9, the mean cosine of the +-e_i is -0.2."""
    import anisotropy

    code = ("import anisotropy, numpy as np; print(anisotropy.__all__); print(anisotropy.api.__file__); "
            "print(round(anisotropy.isotropic_null(3), 12), "
            "anisotropy.mean_cosine(np.vstack([np.eye(3), -np.eye(3)])))")
    proc = run(installed, "python", "-c", code)
    assert proc.returncode == 0, proc.stderr
    names, where, values = proc.stdout.splitlines()
    assert names == str(anisotropy.__all__) and Path(where).is_relative_to(installed["venv"])
    assert values == "0.9 -0.2"


def test_anisotropy_help_lists_the_commands(installed):
    proc = run(installed, "anisotropy", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: anisotropy")
    for command in ("build", "run", "sweep", "chapters", "profile", "profiles"):
        assert re.search(rf"^\s+{command}\s", proc.stdout, flags=re.M), command
    proc = run(installed, "anisotropy", "profile", "--help")
    assert proc.returncode == 0 and "--variant" in proc.stdout and "MODEL" in proc.stdout, proc.stderr


def test_anisotropy_chapters_lists_the_tocs_chapters_and_their_parameters(installed):
    """The chapters in _toc.yml's order (read here from the file itself), each with as many parameters as its
    parameters cell in the checkout's MyST source has."""
    from anisotropy import profiles

    toc = re.findall(r"^\s*- file: book/executed/(\w+)$", (ROOT / "_toc.yml").read_text(), flags=re.M)
    proc = run(installed, "anisotropy", "chapters")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.endswith(" parameters")]
    assert [r[0] for r in rows] == toc and len(toc) > 10
    assert {r[0]: int(r[1]) for r in rows} == {name: len(profiles.notebook_parameters(name)) for name in toc}

    proc = run(installed, "anisotropy", "chapters", "appendix_b_isotropic", "--profile", "smoke")
    assert proc.returncode == 0, proc.stderr
    shown = [line.split(" ", 1)[0] for line in proc.stdout.splitlines() if not line.startswith(" ")]
    assert shown == list(profiles.notebook_parameters("appendix_b_isotropic"))

    proc = run(installed, "anisotropy", "chapters", "appendx_b_isotropic")
    assert proc.returncode == 1 and "did you mean 'appendix_b_isotropic'?" in proc.stderr


def test_anisotropy_run_outside_a_checkout_says_so_in_one_line(installed):
    proc = run(installed, "anisotropy", "run", "appendix_b_isotropic")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "checkout" in proc.stderr


def test_anisotropy_profile_measures_a_registry_model_installed(installed):
    """The tiny BERT of the registry, profiled by the installed command: one row per hidden state (embeddings and
    every layer), each measure inside its range."""
    out = installed["cwd"] / "profile-out"
    proc = run(installed, "anisotropy", "profile", "bert-base-uncased", "--variant", "tiny", "--n", "8", "--out",
               str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pd.read_csv(out / "profile.csv")
    assert set(table["hub_id"]) == {"bert-base-uncased"} and set(table["variant"]) == {"tiny"}
    assert list(table["layer"]) == list(range(table["n_layers"].iloc[0])) and len(table) >= 2
    assert table["mean_cosine"].between(-1, 1).all() and table["sigma1_share"].between(0, 1).all()
    assert (table["sigma1_share"] > 0).all() and (out / "verdicts.md").read_text().startswith("## BERT")
