"""The test harness itself: what `make test` relies on to build each costly module fixture once."""

import subprocess
import sys
from pathlib import Path

INNER_TESTS = '''
import os
import pytest

@pytest.fixture(scope="module")
def book():
    with open("builds", "a") as fh:
        fh.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")

def test_1(book): pass
def test_2(book): pass
def test_3(book): pass
def test_4(book): pass
def test_alone_1(): pass
def test_alone_2(): pass
'''

INNER_CONFTEST = '''
import importlib.util

spec = importlib.util.spec_from_file_location("repo_conftest", {path!r})
repo_conftest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(repo_conftest)
pytest_collection_modifyitems = repo_conftest.pytest_collection_modifyitems
'''


def test_a_module_fixture_is_built_once_under_two_workers(tmp_path):
    # make test's command line (-n, --dist loadgroup) with this repository's conftest hook, on four tests that share
    # a module fixture and two that do not: the fixture must be built on one worker only. It was built on both when
    # the hook ran after pytest-xdist's (its group marks came too late) and under pytest 9.2 (node ids ignore them).
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST.format(path=str(Path(__file__).with_name("conftest.py"))))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p",
                           "no:cacheprovider", "test_inner.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "6 passed" in proc.stdout
    builds = (tmp_path / "builds").read_text().split()
    assert len(builds) == 1, f"the module fixture was built on {builds}"


def test_the_first_units_exist_and_start_first(tmp_path):
    # conftest's FIRST_UNITS must name tests that exist (a renamed test would silently drop out of them) ...
    import re

    import conftest

    for unit in conftest.FIRST_UNITS:
        file, _, name = unit.partition("::")
        source = (Path(__file__).parents[1] / file).read_text()
        assert not name or re.search(rf"^def {re.escape(name)}\(", source, flags=re.M), unit
    # ... and under make test's command line they are the first unit of a worker each: here the group of the module
    # fixture and the second of the two lone tests, which xdist alone would hand out after the first.
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    (tmp_path / "conftest.py").write_text(
        INNER_CONFTEST.format(path=str(Path(__file__).with_name("conftest.py")))
        + 'repo_conftest.FIRST_UNITS = ("test_inner.py", "test_inner.py::test_alone_2")\n'
        + "pytest_xdist_make_scheduler = repo_conftest.pytest_xdist_make_scheduler\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-v", "-n", "2", "--dist", "loadgroup", "-p",
                           "no:cacheprovider", "test_inner.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = {}
    for worker, test in re.findall(r"^\[(gw\d)\] .*?PASSED (\S+)", proc.stdout, flags=re.M):
        first.setdefault(worker, test.split("@")[0])
    assert sorted(first.values()) == ["test_inner.py::test_1", "test_inner.py::test_alone_2"], proc.stdout
