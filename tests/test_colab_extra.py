"""What a chapter's first cell installs on Colab must not downgrade what the runtime already has (issue 28).

On Colab, ``%pip install "anisotropy[colab] @ git+..."`` installs the base dependencies and the ``colab`` extra into a
runtime that already holds torch (its CUDA build), numpy, pandas, scipy and matplotlib. A ``==`` pin or an upper bound
on one of them would make pip replace the runtime's own build (or break the packages Colab built against it), though
the book does not need that version; only floors are allowed there. transformers is pinned on purpose (the numbers
and the models' remote code depend on it), and the book's own environment pins everything through constraints.txt.
"""

from __future__ import annotations

from packaging.requirements import Requirement

from install_set import pyproject

# What a Colab runtime preinstalls that the book also needs.
RUNTIME_PACKAGES = ("torch", "numpy", "pandas", "scipy", "matplotlib")


def downgrades(requirements: list[str]) -> list[str]:
    """The requirements that could replace a Colab runtime's own build of a ``RUNTIME_PACKAGES`` package: a pin
    (``==``, ``===``), an upper bound (``<``, ``<=``) or a compatible release (``~=``, an upper bound too)."""
    found = []
    for text in requirements:
        req = Requirement(text)
        if req.name.lower() in RUNTIME_PACKAGES and any(
                s.operator in ("==", "===", "<", "<=", "~=") for s in req.specifier):
            found.append(text)
    return found


def test_the_rule_flags_pins_and_upper_bounds():
    assert downgrades(["torch==2.1", "numpy<2", "pandas~=2.0", "scipy<=1.13", "matplotlib==3.*"]) == [
        "torch==2.1", "numpy<2", "pandas~=2.0", "scipy<=1.13", "matplotlib==3.*"]
    assert downgrades(["torch>=2.6", "numpy>=1.24,!=2.0.0", "transformers==4.57.*", "soundfile>=0.12"]) == []


def test_colab_install_keeps_the_runtimes_own_torch_numpy_pandas_scipy_matplotlib():
    project = pyproject()
    installed = list(project["dependencies"]) + list(project["optional-dependencies"]["colab"])
    assert {Requirement(r).name.lower() for r in installed} >= {"torch", "numpy", "pandas", "scipy", "matplotlib"}
    assert downgrades(installed) == [], ("these would replace what a Colab runtime preinstalls; give them a floor "
                                         "only (constraints.txt pins the book's own environment)")


def test_a_checkout_without_jupytext_reads_the_parameters_from_the_committed_ipynb(monkeypatch):
    """With only the colab extra installed (no jupytext: the book's stack), a chapter run in a checkout still checks its
    parameters against its parameters cell, read from the committed .ipynb copy: the same as from the MyST source."""
    import sys

    from anisotropy import profiles
    from anisotropy.book import runner

    profiles._inspect_source.cache_clear()
    from_source = {name: profiles.notebook_parameters(name) for name in runner.chapters()}
    monkeypatch.setitem(sys.modules, "jupytext", None)  # `import jupytext` raises ImportError
    profiles._inspect_source.cache_clear()
    try:
        assert {name: profiles.notebook_parameters(name) for name in runner.chapters()} == from_source
    finally:
        profiles._inspect_source.cache_clear()


def test_outside_a_checkout_a_value_out_of_range_stops_in_one_line(monkeypatch):
    """On Colab (no checkout, no chapter source) the packaged ``allowed.yml`` still checks what a reader set in the
    parameters cell: a negative sample size stops in ``profiles.apply``, not inside a measurement."""
    import pytest

    from anisotropy import paths, profiles

    monkeypatch.setattr(paths, "project_root", lambda: None)
    monkeypatch.delenv("ANISOTROPY_RUNNER", raising=False)
    assert profiles.checkout() is None
    resolved = profiles.apply("appendix_b_isotropic", {"profile": "smoke", "n_pairs": 40000})
    assert resolved.values["n_pairs"] == profiles.chapter_parameters("smoke", "appendix_b_isotropic")["n_pairs"]
    with pytest.raises(profiles.ProfileError, match=r"parameter 'n_pairs': -5 is below the allowed range \(at least 1\)"):
        profiles.apply("appendix_b_isotropic", {"profile": "smoke", "n_pairs": -5})


def test_glue_without_myst_nb_records_what_myst_nb_would(monkeypatch):
    """Where only the colab extra is installed (no myst-nb), report.glue still records each value, in the very output
    myst-nb's glue writes, so that a Colab run's notebook holds the book's numbers (runner.glued_values)."""
    import sys

    import IPython.display
    from myst_nb.ext import glue as myst_glue

    from anisotropy.pages import report

    calls = []
    monkeypatch.setattr(myst_glue, "ipy_display", lambda *args, **kwargs: calls.append((args, kwargs)))
    report.glue("share", 0.123456, "{:.3f}")
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # `from myst_nb import glue` raises ImportError
    monkeypatch.setattr(IPython.display, "display", lambda *args, **kwargs: calls.append((args, kwargs)))
    report.glue("share", 0.123456, "{:.3f}")
    assert len(calls) == 2 and calls[0] == calls[1]
    assert calls[1][0][0] == {"application/papermill.record/text/plain": "'0.123'"}
