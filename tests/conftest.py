"""Shared fixtures: a throw-away copy of the repository, and the `smoke` book built there once per session.

Tests never touch the developer's ``book/executed``, ``_build``, ``results`` or ``.cache``: every build, run and sweep
happens in a copy of the repository's files (tracked plus untracked-but-not-ignored, as ``git ls-files`` lists them)
under pytest's temporary folder, with ``ANISOTROPY_RESULTS`` and ``ANISOTROPY_CACHE`` pointing into that copy and the
copy's own ``lib/`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# Generated folders that a copy must not inherit when git is unavailable (a tarball instead of a clone).
GENERATED = {".git", ".venv", "_build", "results", ".cache", ".pytest_cache", "__pycache__", ".helpers", ".gl",
             ".ipynb_checkpoints"}

# ---- hang guards, not time limits -----------------------------------------------------------------------------------
# A test never fails because the machine is slow. A subprocess a test waits for gets no time limit that a correct run
# can reach, only a hang guard: HANG_GUARD_FACTOR times what the step takes on the slowest machine measured (a 2-core
# AMD EPYC with AVX2, about 3x slower than the one the suite was first tuned on; issue 29), and never under
# HANG_GUARD_MIN_S. ANISOTROPY_HANG_GUARD_FACTOR raises it on a slower machine still. When a guard trips, the failure
# says it was a hang guard and what was expected, with the end of what the process printed.
HANG_GUARD_FACTOR = float(os.environ.get("ANISOTROPY_HANG_GUARD_FACTOR", "10"))
HANG_GUARD_MIN_S = 600.0
# Expected times on that slow machine, alone (a busy machine stretches them; the guards leave room for that).
SMOKE_BUILD_S = 300  # the smoke book, executed and rendered
CHAPTER_S = 120  # one chapter under the smoke or paper-sim profile, or a CLI command around it


def hang_guard(expected_s: float) -> float:
    """The hang guard of a step that takes ``expected_s`` seconds on the slow 2-core machine."""
    return max(HANG_GUARD_MIN_S, HANG_GUARD_FACTOR * expected_s)


def _tail(text) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return (text or "")[-3000:]


def hang_failure(what: str, expected_s: float, stdout=None, stderr=None):
    """Fail the test: ``what`` ran past its hang guard."""
    limit = hang_guard(expected_s)
    pytest.fail(f"hang guard: {what} was still running after {limit:.0f} s, {limit / expected_s:.0f}x the "
                f"~{expected_s:.0f} s it takes on a slow 2-core machine, and was taken for hung (a slow machine stays "
                f"far below this guard; ANISOTROPY_HANG_GUARD_FACTOR raises it)\n--- stdout ---\n{_tail(stdout)}"
                f"\n--- stderr ---\n{_tail(stderr)}", pytrace=False)


def run_guarded(cmd, *, expected_s: float, what: str | None = None, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, **kwargs)`` under the hang guard of a step expected to take ``expected_s`` seconds."""
    try:
        return subprocess.run(cmd, timeout=hang_guard(expected_s), **kwargs)
    except subprocess.TimeoutExpired as exc:
        hang_failure(what or " ".join(map(str, cmd))[:300], expected_s, exc.stdout, exc.stderr)


POLL_S = 0.02  # polling interval while waiting for a file or a process (never a synchronisation by itself)


def wait_for(condition, proc: subprocess.Popen | None, what: str, expected_s: float = CHAPTER_S):
    """Poll ``condition`` until it returns something true, and return that; fail if ``proc`` ends first (it should
    still be running), or, killing it, if the hang guard of ``expected_s`` passes."""
    deadline = time.monotonic() + hang_guard(expected_s)
    while not (found := condition()):
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run ended (exit {proc.returncode}) before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            if proc is not None:
                proc.kill()
            hang_failure(f"waiting for {what}", expected_s, *(proc.communicate() if proc is not None else ()))
        time.sleep(POLL_S)
    return found


def measure_beside_tiny_bert(monkeypatch, store_dir: Path, character_bert):
    """A chapter's measurement of CharacterBERT (``character_bert()`` stands for ``registry.load``'s answer: a loaded
    model, or an exception) beside a tiny BERT: (the two refs, the measured frame, the skipped rows)."""
    from anisotropy import results
    from anisotropy.experiments import layerwise
    from anisotropy.models import registry

    real = registry.load

    def load(name, variant="pretrained", **kwargs):
        return character_bert() if name == "character-bert" else real(name, "tiny", **kwargs)

    monkeypatch.setattr(registry, "load", load)
    refs = layerwise.model_refs(["character-bert", "bert-base-uncased"], "pretrained")
    return refs, *layerwise.measure_models(refs, source="prose", n=2, max_length=16,
                                           store=results.Store(store_dir))


@pytest.fixture
def colab(monkeypatch):
    """A Colab kernel as the notebooks' install cell and ``devices.on_colab`` recognise it (a ``google.colab`` module);
    its ``drive.mount`` records where it was asked to mount, in ``colab.mounted``."""
    import types

    module = types.ModuleType("google.colab")
    module.mounted = []
    module.drive = types.SimpleNamespace(mount=module.mounted.append)
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", module)
    return module


def communicate_guarded(proc: subprocess.Popen, *, expected_s: float, what: str) -> tuple:
    """``proc.communicate()`` under a hang guard; a process that trips it is killed first."""
    try:
        return proc.communicate(timeout=hang_guard(expected_s))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        hang_failure(what, expected_s, out, err)


def project_files(root: Path = ROOT) -> list[str]:
    """Relative paths of the repository's files: tracked plus untracked files that git does not ignore."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True).stdout.decode()
        return sorted({p for p in out.split("\0") if p and (root / p).is_file()})
    except (OSError, subprocess.CalledProcessError):
        found = []
        for folder, dirs, files in os.walk(root):
            rel = Path(folder).relative_to(root)
            dirs[:] = [d for d in dirs if d not in GENERATED and (rel / d).as_posix() not in ("book/executed",
                                                                                               "book/sweeps")]
            found += [(rel / f).as_posix() for f in files]
        return sorted(found)


def copy_repo(dest: Path) -> Path:
    """Copy the repository's files into ``dest`` (created) and return it."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel in project_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    return dest


def book_env(root: Path, **extra: str) -> dict[str, str]:
    """The environment for running the CLI inside the copy ``root``: its own results store, cache and library."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANISOTROPY_")}
    env.update(
        ANISOTROPY_RESULTS=str(root / "results"),
        ANISOTROPY_CACHE=str(root / ".cache"),
        PYTHONPATH=os.pathsep.join([str(root / "lib"), *filter(None, [os.environ.get("PYTHONPATH")])]),
        # Tests never reach the network: smoke runs are offline by design, and a slip must fail fast.
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",  # a run must leave nothing but its outputs in the copy
    )
    env.update(extra)
    return env


def run_cli(root: Path, *args: str, expected_s: float = CHAPTER_S, env: dict | None = None, **kwargs
            ) -> subprocess.CompletedProcess:
    """``python -m anisotropy <args>`` inside the copy ``root``; returns the finished process (stdout, stderr).
    ``expected_s``: what the command takes on the slow 2-core machine (its hang guard is ``hang_guard`` of it);
    ``kwargs`` go to ``subprocess.run`` (e.g. ``preexec_fn``)."""
    return run_guarded([PYTHON, "-m", "anisotropy", *args], expected_s=expected_s,
                       what=f"python -m anisotropy {' '.join(args)}", cwd=root, env=env or book_env(root),
                       capture_output=True, text=True, **kwargs)


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """A fresh copy of the repository for one test (nothing executed or built in it)."""
    return copy_repo(tmp_path / "repo")


def session_dir(tmp_path_factory) -> Path:
    """A folder shared by every process of the test session: pytest's base temporary folder, or with pytest-xdist
    (``make test`` runs ``pytest -n``) the folder above the workers' own base folders."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist's ``--dist loadgroup``, the tests of a module that use a module- or session-scoped fixture
    of their own (a book built against the Hub stand-in, a repository copy with a changed module, a converted model)
    go to one worker together, so that fixture is built once; every other test is distributed alone. The smoke book
    is built once per session whatever the workers (``smoke_book``)."""
    shared = {"smoke_book", "tmp_path_factory", "worker_id", "testrun_uid"}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None or any(m.name == "xdist_group" for m in item.iter_markers()):
            continue
        scoped = [name for name in info.names_closure if name not in shared and any(
            d.scope in ("module", "session") and d.baseid for d in info.name2fixturedefs.get(name, ()))]
        if scoped:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


# The work units that start first under ``--dist loadgroup``, one per worker: the two longest chains of the suite. The
# paper-sim group (its book, then the Colab route over it: about 12 minutes of one worker on the slow 2-core machine)
# and the smoke book with the determinism test that rebuilds it (about 9 minutes) would end the run if xdist, which
# hands out the groups with the most tests first, started them late (issue 29). Both builds use about one core each,
# so they overlap well; every other unit follows in xdist's own order.
FIRST_UNITS = ("tests/test_paper_profile.py",
               "tests/test_hardening.py::test_same_profile_and_seed_give_identical_results")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's ``loadgroup`` scheduler, with ``FIRST_UNITS`` handed out before any other unit."""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class LongestFirst(LoadGroupScheduling):
        def _assign_work_unit(self, node):
            for scope in reversed(FIRST_UNITS):
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)


@pytest.fixture(scope="session")
def smoke_book(tmp_path_factory) -> Path:
    """Build the whole book under the `smoke` profile, once per test session, in a copy of the repository.

    Under pytest-xdist every worker shares the one build: the first to ask builds it under a file lock in the
    session's shared folder, the others wait for it and read it (none of them writes into it but screenshots).
    Returns the copy's root: the HTML is in ``<root>/_build/html``, executed notebooks in ``<root>/book/executed``,
    results in ``<root>/results``; the build's output is kept in ``<root>/_build/smoke_build.log``.
    """
    from filelock import FileLock

    folder = session_dir(tmp_path_factory) / "smoke_book"
    folder.mkdir(exist_ok=True)
    root, log, status = folder / "repo", folder / "repo" / "_build" / "smoke_build.log", folder / "exit_status"
    with FileLock(str(folder / "build.lock")):
        if not status.is_file():
            shutil.rmtree(root, ignore_errors=True)  # a build interrupted by a crashed worker
            copy_repo(root)
            proc = run_cli(root, "build", "--profile", "smoke", expected_s=SMOKE_BUILD_S)
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"$ python -m anisotropy build --profile smoke\n{proc.stdout}\n--- stderr ---\n"
                           f"{proc.stderr}")
            status.write_text(str(proc.returncode))
    code = int(status.read_text())
    if code != 0:
        tail = log.read_text()[-6000:] if log.is_file() else ""
        pytest.fail(f"the smoke build failed (exit {code}); log: {log}\n{tail}", pytrace=False)
    return root
