"""The public API (issue 57): ``import anisotropy`` exports ``mean_cosine``, ``sigma1_share``, ``twonn``,
``isotropic_null``, ``profile`` and ``load`` (its ``__all__``); each one's docstring example runs as written (doctest:
planted data with a known answer, the Beta distribution's quantile, the tiny registry models' shapes); importing the
package still imports none of the heavy packages the functions compute with; the book's API page documents every
one of them (its rendering in the smoke book: tests/test_pipeline.py)."""

from __future__ import annotations

import doctest
import re
import subprocess
import sys

import pytest
import yaml

import anisotropy
from anisotropy import api

from conftest import ROOT

PUBLIC = ["mean_cosine", "sigma1_share", "twonn", "isotropic_null", "profile", "load"]


def test_all_is_the_public_functions_each_documented_with_an_example():
    assert anisotropy.__all__ == PUBLIC == api.__all__
    namespace: dict = {}
    exec("from anisotropy import *", namespace)
    assert set(PUBLIC) <= set(namespace)
    for name in PUBLIC:
        fn = getattr(anisotropy, name)
        assert callable(fn) and fn is getattr(api, name) and fn.__name__ == name
        assert ">>> " in fn.__doc__, name


def test_import_anisotropy_imports_no_heavy_package():
    """The functions import what they compute with when called: the command line's start, every Dask worker and
    every kernel imports the package without torch, transformers, pandas, scipy or numpy."""
    code = ("import sys, anisotropy; anisotropy.mean_cosine; "
            "print(sorted(m for m in ('torch', 'transformers', 'pandas', 'scipy', 'numpy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stderr


@pytest.mark.parametrize("name", PUBLIC)
def test_the_docstring_example_runs(name, tmp_path, monkeypatch):
    # profile's example measures a tiny registry model through the results store: this test's own, offline
    monkeypatch.setenv("ANISOTROPY_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tests = doctest.DocTestFinder().find(getattr(anisotropy, name), name, globs={})
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    summary = runner.summarize(verbose=False)
    assert summary.failed == 0 and summary.attempted >= 3, summary


def test_the_api_page_documents_every_public_function_and_is_in_the_book():
    page = (ROOT / "book" / "api.md").read_text()
    assert re.findall(r"^\.\. autofunction:: anisotropy\.(\w+)$", page, flags=re.M) == PUBLIC
    toc = (ROOT / "_toc.yml").read_text()
    assert re.search(r"^\s*- file: book/api$", toc, flags=re.M)
    extensions = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["extra_extensions"]
    assert {"sphinx.ext.autodoc", "sphinx.ext.napoleon"} <= set(extensions)
