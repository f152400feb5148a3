"""A chapter's install cell on Colab's default runtime as it is (issue 55): resolved against the runtime's package list,
its commit and pins, and the smoke chapters run on the versions it leaves in place.

The runtime's list is ``lib/anisotropy/pages/colab_runtime.txt`` (googlecolab/backend-info, with its commit and date).
The resolution runs offline: pip reads metadata-only wheels written from ``benchmarks/results/colab_index.json`` (the
metadata PyPI serves for Python 3.13 on Linux x86_64 of every package in the resolution, gathered by
benchmarks/colab_index.py) and this repository's own wheel, built here.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from conftest import book_env, copy_repo, run_guarded

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "benchmarks" / "results" / "colab_index.json"
sys.path.insert(0, str(ROOT / "benchmarks"))

import colab_index  # noqa: E402

from anisotropy.models import registry  # noqa: E402
from anisotropy.pages import colab, report  # noqa: E402

# What the requirements of the install (the package's, its colab extra's, the pins) were in the old route: a
# transformers 4.57 pin and its huggingface_hub, IPython 8 and filelock 4 (before issue 55).
OLD_ROUTE = {"transformers": "transformers==4.57.*", "huggingface-hub": "huggingface_hub>=0.34,<1",
             "ipython": "ipython>=8", "filelock": "filelock>=4.3,<5"}


# ---- the index: metadata-only wheels of what PyPI serves, and this repository's wheel --------------------------------

def _metadata(name: str, version: str, requires_python: str | None, requires_dist, provides_extra) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Python: {requires_python}"] if requires_python else []
    lines += [f"Provides-Extra: {e}" for e in provides_extra] + [f"Requires-Dist: {r}" for r in requires_dist]
    return "\n".join(lines) + "\n"


def write_wheel(folder: Path, filename: str, metadata: str) -> Path:
    """A wheel that holds only its metadata (what a resolver reads): ``filename`` (its name, version and tags) with
    ``METADATA``, ``WHEEL`` and ``RECORD`` in its dist-info folder."""
    dist, version = filename.split("-")[:2]
    info = f"{dist}-{version}.dist-info"
    tags = filename.removesuffix(".whl").split("-")[-3:]
    wheel = "Wheel-Version: 1.0\nGenerator: tests/test_colab_runtime.py\nRoot-Is-Purelib: true\n" + "".join(
        f"Tag: {py}-{abi}-{plat}\n" for py in tags[0].split(".") for abi in tags[1].split(".")
        for plat in tags[2].split("."))
    path = folder / filename
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{info}/METADATA", metadata)
        zf.writestr(f"{info}/WHEEL", wheel)
        zf.writestr(f"{info}/RECORD", f"{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    return path


def stub_index(folder: Path) -> dict:
    """Write the gathered packages as metadata-only wheels into ``folder``; returns the index file. torch's wheel
    carries the runtime's own version (2.11.0+cu128, which the file records as PyPI's 2.11.0): what pip finds
    installed there."""
    index = json.loads(INDEX.read_text())
    runtime = colab.runtime()
    for name, p in index["packages"].items():
        version = p["version"]
        listed = runtime.get(name, "")
        if colab.public(listed) == version and listed != version:  # a local build of the same release
            version = listed
        filename = p["wheel"].replace(f"-{p['version']}-", f"-{version}-", 1)
        write_wheel(folder, filename, _metadata(p["name"], version, p["requires_python"], p["requires_dist"],
                                                p["provides_extra"]))
    return index


def simple_index(folder: Path) -> str:
    """A PEP 503 index of the wheels in ``folder`` (``folder/simple/<project>/index.html``), each link carrying its
    wheel's Requires-Python as ``data-requires-python``, as PyPI serves it; returns its file URL. pip checks a link's
    Requires-Python against ``--python-version`` (a wheel's own metadata only against the Python pip runs on)."""
    import html

    links: dict[str, list[str]] = {}
    for wheel in sorted(folder.glob("*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        name = colab.normalise(re.search(r"^Name: (.+)$", meta, flags=re.M).group(1).strip())
        found = re.search(r"^Requires-Python: (.+)$", meta, flags=re.M)
        attr = f' data-requires-python="{html.escape(found.group(1).strip())}"' if found else ""
        links.setdefault(name, []).append(f'<a href="../../{wheel.name}"{attr}>{wheel.name}</a>')
    shutil.rmtree(folder / "simple", ignore_errors=True)
    for name, anchors in links.items():
        (folder / "simple" / name).mkdir(parents=True)
        (folder / "simple" / name / "index.html").write_text("<html><body>\n" + "\n".join(anchors) + "\n</body></html>\n")
    (folder / "simple" / "index.html").write_text("<html><body>\n" + "\n".join(
        f'<a href="{n}/">{n}</a>' for n in sorted(links)) + "\n</body></html>\n")
    return (folder / "simple").as_uri()


def build_wheel(folder: Path, tmp: Path) -> Path:
    """This repository's wheel, built by pip from a copy of what the build reads (pyproject.toml, README.md, lib/),
    offline and with the setuptools installed here (as pip builds it from ``git+URL@commit`` on Colab)."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "lib", src / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    proc = subprocess.run([sys.executable, "-m", "pip", "--isolated", "wheel", "--no-deps", "--no-build-isolation",
                           "--no-index", "--quiet", "--wheel-dir", str(folder), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return next(folder.glob("anisotropy-*.whl"))


def runtime_constraints(path: Path) -> Path:
    """The runtime's list as constraints: every package at its exact version, local builds included (what pip finds
    installed; a requirement it satisfies leaves it in place); not those installed from a URL."""
    path.write_text("".join(f"{n}=={v}\n" for n, v in sorted(colab.runtime().items()) if not v.startswith("@")))
    return path


def install_requirements(command: str, version: str) -> list[str]:
    """The requirements of the install cell's ``%pip install`` line, the package from ``git+URL@commit`` taken as
    the wheel built here (``anisotropy[colab]==<version>``)."""
    words = shlex.split(command.removeprefix("%pip install"))
    reqs = [w for w in words if not w.startswith("-")]
    assert reqs[0].startswith("anisotropy[colab] @ git+"), reqs[0]
    return [f"anisotropy[colab]=={version}", *reqs[1:]]


def resolve(folder: Path, requirements: list[str], constraints: Path, tmp: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """pip's resolution of ``requirements`` for the runtime's Python and platform, wheels only, from an index of the
    wheels in ``folder`` only, with ``constraints``: (the process, its report or {})."""
    report = tmp / "report.json"
    report.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "install",
                           "--dry-run", "--ignore-installed", "--target", str(tmp / "target"), "--report",
                           str(report), "--index-url", simple_index(folder), *colab_index.pip_options(),
                           "-c", str(constraints), *requirements], capture_output=True, text=True)
    return proc, json.loads(report.read_text()) if report.is_file() else {}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    base = tmp_path_factory.mktemp("colab_index")
    folder = base / "wheels"
    folder.mkdir()
    gathered = stub_index(folder)
    wheel = build_wheel(folder, base)
    return {"folder": folder, "gathered": gathered, "wheel": wheel, "base": base,
            "constraints": runtime_constraints(base / "runtime.txt")}


def test_the_index_was_gathered_for_this_install_and_this_runtime():
    gathered = json.loads(INDEX.read_text())
    assert gathered["requirements"] == colab_index.requirements(), (
        "the install's requirements changed since benchmarks/results/colab_index.json was gathered: run "
        "benchmarks/colab_index.py (needs PyPI) and commit its result")
    assert gathered["runtime_sha256"] == hashlib.sha256(colab.RUNTIME_FILE.read_bytes()).hexdigest(), (
        "the runtime's list changed: run benchmarks/colab_index.py")
    assert gathered["python_version"] == "3.13" and gathered["index"] == "https://pypi.org/simple"


def test_the_install_resolves_on_the_runtime_and_replaces_nothing(index, tmp_path):
    """The install cell's line, this repository's wheel in place of its git URL, resolved by pip for Python 3.13 with
    the runtime's versions as constraints: it succeeds, installs the package, and every other package it would
    install is one the runtime has at that very version (so pip replaces nothing: no restart) or one it lacks."""
    version = index["wheel"].name.split("-")[1]
    with zipfile.ZipFile(index["wheel"]) as wheel:  # the runtime's list travels with the package
        assert "anisotropy/pages/colab_runtime.txt" in wheel.namelist()
    proc, got = resolve(index["folder"], install_requirements(report.install_command(), version),
                        index["constraints"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    installed = {colab.normalise(i["metadata"]["name"]): i["metadata"]["version"] for i in got["install"]}
    assert installed.pop("anisotropy") == version
    runtime = colab.runtime()
    replaced = {n: (runtime[n], v) for n, v in installed.items() if n in runtime and runtime[n] != v}
    assert replaced == {}, f"pip would replace these packages of the runtime (runtime's, new): {replaced}"
    # what shapes numbers comes at the runtime's own versions, torch its CUDA build
    assert {n: installed[colab.normalise(n)] for n in colab.pins()} == {
        n: runtime[colab.normalise(n)] for n in colab.pins()}
    assert installed["torch"].endswith("+cu128")
    # Packages the runtime lacks are added (jedi: IPython 7.34 requires it, the image has none); the kernel cannot have
    # imported them, so they need no restart either.


def _with_metadata(index, tmp_path: Path, edit) -> Path:
    """A copy of the index whose package wheel has its METADATA passed through ``edit``."""
    with zipfile.ZipFile(index["wheel"]) as wheel:
        text = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    folder = tmp_path / "wheels"
    shutil.copytree(index["folder"], folder, ignore=shutil.ignore_patterns("simple"))
    write_wheel(folder, index["wheel"].name, edit(text))
    return folder


def test_the_old_pins_are_refused_by_the_runtime(index, tmp_path):
    """The same resolution with the requirements of the old route (transformers 4.57 and what came with it) fails:
    each of them would replace a package the runtime imported at start (pip would replace it, and the kernel would
    need a restart)."""
    def old_route(text: str) -> str:
        lines = []
        for line in text.splitlines():
            name = colab.normalise(re.split(r"[<>=!~;\[ ]", line.removeprefix("Requires-Dist: "))[0])
            lines.append(f"Requires-Dist: {OLD_ROUTE[name]}" if line.startswith("Requires-Dist: ") and name in OLD_ROUTE
                         else line)
        assert sum(line.removeprefix("Requires-Dist: ") in OLD_ROUTE.values() for line in lines) == len(OLD_ROUTE)
        return "\n".join(lines) + "\n"

    version = index["wheel"].name.split("-")[1]
    proc, _ = resolve(_with_metadata(index, tmp_path, old_route),
                      install_requirements(report.install_command(), version), index["constraints"], tmp_path)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "ResolutionImpossible" in said, said[-3000:]
    assert re.search(r"The conflict is caused by:.*(transformers|huggingface.hub|ipython|filelock)", said,
                     flags=re.S | re.I), said[-3000:]


def test_the_old_python_range_is_refused_on_python_3_13(index, tmp_path):
    """A package that says ``Requires-Python <3.13`` (the old range) is refused on the runtime's Python."""
    def old_range(text: str) -> str:
        return re.sub(r"^Requires-Python: .*$", "Requires-Python: >=3.11.5,<3.13", text, flags=re.M)

    version = index["wheel"].name.split("-")[1]
    proc, _ = resolve(_with_metadata(index, tmp_path, old_range),
                      install_requirements(report.install_command(), version), index["constraints"], tmp_path)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "require a different python version" in said, said[-3000:]


def test_uv_resolves_the_install_with_python_3_13_markers(index, tmp_path):
    """pip evaluates environment markers with the interpreter it runs on; uv with the target's: the same install,
    resolved by uv for Python 3.13 on manylinux x86_64, also keeps every package the runtime has at its version."""
    uv = next((str(p) for p in (Path(sys.executable).parent / "uv",) if p.is_file()), None) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (the Makefile installs it into .venv)")
    version = index["wheel"].name.split("-")[1]
    reqs = tmp_path / "requirements.in"
    reqs.write_text("\n".join(install_requirements(report.install_command(), version)) + "\n")
    proc = subprocess.run([uv, "pip", "compile", "--quiet", "--offline", "--index-url", simple_index(index["folder"]),
                           "--python-version", colab_index.target_python(), "--python-platform",
                           "x86_64-manylinux_2_35", "--only-binary", ":all:", "--no-header", "--no-annotate", "-c",
                           str(index["constraints"]), str(reqs)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pinned = {colab.normalise(n): v for n, v in re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$", proc.stdout,
                                                              flags=re.M)}
    assert pinned.pop("anisotropy") == version
    runtime = colab.runtime()
    assert {n: v for n, v in pinned.items() if n in runtime} == {n: runtime[n] for n in pinned if n in runtime}
    assert pinned["transformers"] == "5.15.0" and pinned["torch"] == "2.11.0+cu128"


# ---- the install cell: a commit and exact pins ------------------------------------------------------------------------

def _install_cell(path: Path) -> str:
    """The first code cell of a Colab copy (its install cell)."""
    return next(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_install_cell_names_a_commit_and_pins_the_runtimes_versions(path):
    """The first code cell of every Colab copy installs this repository at a full commit hash, with the exact versions the
    runtime ships of every package that shapes numbers (``fingerprint.PACKAGES``), and stops in one line on a Python
    other than the runtime's."""
    from anisotropy import fingerprint

    cell = _install_cell(path)
    url = report.repository()[0]
    found = re.search(rf'"anisotropy\[colab\] @ git\+{re.escape(url)}@([0-9a-f]{{40}})"', cell)
    assert found, cell
    pins = dict(re.findall(r'"([A-Za-z0-9_.-]+)==([^"]+)"', cell))
    assert sorted(pins) == sorted(fingerprint.PACKAGES)
    runtime = colab.runtime()
    assert {n: v for n, v in pins.items()} == {n: colab.public(runtime[colab.normalise(n)]) for n in pins}
    assert "sys.version_info[:2] != (3, 13)" in cell and "sys.exit(" in cell
    git = shutil.which("git")
    if git and (ROOT / ".git").exists():
        kind = subprocess.run([git, "cat-file", "-t", found.group(1)], cwd=ROOT, capture_output=True, text=True)
        assert kind.stdout.strip() == "commit", f"{found.group(1)} is not a commit of this repository"
        # the library at that commit is the library these notebooks were synced with
        diff = subprocess.run([git, "diff", "--quiet", found.group(1), "HEAD", "--", "lib", "pyproject.toml"],
                              cwd=ROOT)
        assert diff.returncode == 0, "the library changed since the notebooks were synced: run `make sync`"


@pytest.mark.usefixtures("colab")  # conftest's: a `google.colab` module, as on Colab
def test_a_kernel_on_another_python_stops_in_one_line_naming_the_runtime(monkeypatch):
    """The install cell, run as a Colab kernel on Python 3.12 would run it: one line, which runtime to choose; pip
    never starts."""
    cell = _install_cell(ROOT / "notebooks" / "appendix_b_isotropic.ipynb")
    code = "\n".join("    pass" if line.strip().startswith("%pip") else line for line in cell.splitlines())
    monkeypatch.setattr(sys, "version_info", (3, 12, 13, "final", 0))
    with pytest.raises(SystemExit) as stop:
        exec(code, {})
    message = str(stop.value)
    assert "\n" not in message and "Python 3.12" in message and "Python 3.13" in message
    assert "Runtime > Change runtime type" in message


# ---- models that transformers 5 cannot load skip in one line ----------------------------------------------------------

@pytest.mark.parametrize("name,variant", [("van-base", "tiny"), ("character-bert", "pretrained"),
                                          ("manta-lm", "pretrained")])
def test_a_model_that_needs_transformers_4_is_refused_in_one_line_under_5(monkeypatch, name, variant):
    import transformers

    monkeypatch.setattr(transformers, "__version__", "5.15.0")
    with pytest.raises(registry.ModelUnavailableError) as err:
        registry.load(name, variant)
    assert "\n" not in str(err.value) and f"{name} needs transformers <5" in str(err.value)
    assert "and this runtime has 5.15.0" in str(err.value)
    monkeypatch.setattr(transformers, "__version__", "4.57.6")
    if variant == "tiny":
        assert registry.load(name, variant).model is not None


# ---- the smoke chapters on the versions the install leaves in place --------------------------------------------------
COLAB_VENV = ROOT / ".venv-colab"
# The chapters run there: between them every family of model the registry has (token- and character-level text,
# speech, vision transformers, CNNs, encoders, decoders), the converted pretrained weights, the self-trained suites
# (relative positions, attention variants), attention capture and the claims ledger. CHAPTERS_S: what they take on the
# slow 2-core machine, two at a time.
COLAB_CHAPTERS = ("checkpoint_suites", "p1_s3_token_level", "p1_s3_character_level", "p1_s3_modalities",
                  "p1_s4_untrained_block", "p1_s5_qk_training", "p2_counterpoint_pythia",
                  "beyond_sharp_without_anisotropy")
CHAPTERS_S = 600
PROBE = ("import sys; from anisotropy.book import runner; "
         "outcomes = runner.execute_all('smoke', only=sys.argv[1:], jobs=2); "
         "sys.exit(1 if any(o.error for o in outcomes) else 0)")


@pytest.fixture(scope="module")
def colab_book(tmp_path_factory):
    """``COLAB_CHAPTERS`` executed under the smoke profile in a copy of the repository, by the interpreter of
    ``.venv-colab`` (its kernels too): (the copy's root, the run)."""
    python = COLAB_VENV / "bin" / "python"
    if not python.is_file():
        pytest.fail(f"{COLAB_VENV} is missing: `make test` makes it (python tests/colab_venv.py)", pytrace=False)
    import resource

    root = copy_repo(tmp_path_factory.mktemp("colab_book") / "repo")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = run_guarded([str(python), "-c", PROBE, *COLAB_CHAPTERS], expected_s=CHAPTERS_S,
                       what="the smoke chapters in .venv-colab", cwd=root, env=book_env(root), capture_output=True,
                       text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(f"\nthe smoke chapters in .venv-colab: {cpu:.0f} CPU s")
    return root, proc


def test_the_smoke_chapters_run_on_the_runtimes_versions(colab_book):
    """Each chapter ran to its end on the runtime's transformers, numpy, tokenizers and scipy (its provenance box names
    them): torch is this machine's CPU build (tests/colab_venv.py says why)."""
    from anisotropy.book import runner

    root, proc = colab_book
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    runtime = colab.runtime()
    for name in COLAB_CHAPTERS:
        text = (root / runner.EXECUTED / f"{name}.ipynb").read_text()
        for package in ("transformers", "numpy", "tokenizers", "scipy"):
            assert f"{package} {colab.public(runtime[package])}" in text, (name, package)


def test_a_model_transformers_5_cannot_load_is_skipped_in_one_line(colab_book):
    """VAN (its classes removed in transformers 5) is not measured, and the page says why in one line."""
    from anisotropy.book import runner

    root, proc = colab_book
    glued = runner.glued_values(root / runner.EXECUTED / "p1_s3_modalities.ipynb")
    said = [v for v in glued.values() if "van-base needs transformers <5" in str(v)]
    assert said, glued
    line = next(part for part in said[0].split("; ") if "van-base needs" in part)
    assert "VAN's classes were removed in transformers 5" in line and "and this runtime has 5.15.0" in line


# The tests of the code that transformers 5 changed, run again on the runtime's versions: attention capture (its ViT's
# q_proj/k_proj), BERT's relative positions (models.relative_positions computes them there) and the attention variants
# (eager attention, reloaded bit for bit).
V5_TESTS = ("tests/test_attention.py",
            "tests/test_training.py::test_relative_positions_enter_the_scores_as_shaw_et_al",
            "tests/test_ablation.py::test_captured_probs_are_the_models_and_follow_from_captured_queries_keys",
            "tests/test_ablation.py::test_variant_checkpoint_reloads_bit_identically_with_variant_active")
V5_TESTS_S = 120


def test_the_code_transformers_5_changed_passes_its_tests_on_the_runtimes_versions(tmp_path):
    python = COLAB_VENV / "bin" / "python"
    if not python.is_file():
        pytest.fail(f"{COLAB_VENV} is missing: `make test` makes it (python tests/colab_venv.py)", pytrace=False)
    env = book_env(tmp_path)  # its store and cache in tmp_path, this checkout's lib/ first
    env["PYTHONPATH"] = str(ROOT / "lib")
    version = subprocess.run([str(python), "-c", "import transformers; print(transformers.__version__)"],
                             capture_output=True, text=True, env=env).stdout.strip()
    assert version == colab.runtime()["transformers"]
    proc = run_guarded([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *V5_TESTS],
                       expected_s=V5_TESTS_S, what="tests in .venv-colab", cwd=ROOT, env=env, capture_output=True,
                       text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]

