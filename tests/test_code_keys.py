"""A rebuild never shows numbers computed by other code: results, executed notebooks and trained suites are keyed by
the fingerprint of the code that produced them (``anisotropy.fingerprint``).

On a copy of the repository, one chapter is built under ``smoke``, then the library is edited and the chapter
rebuilt: a changed metric changes the numbers, a changed plot function reruns no measurement and no training, a
changed trainer retrains the suites and re-measures their checkpoints only. ``--recompute`` recomputes; ``clean``
removes what no current code reaches.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from conftest import copy_repo, run_cli

from anisotropy import fingerprint, results
from anisotropy.book import runner
from anisotropy.measure import planted

CHAPTER = "p1_s3_token_level"


def _sidecars(root: Path, records: bool = False) -> dict[str, dict]:
    """Stored results: sidecar path -> its content. The claims' verdict rows are written on every run (records, not
    cached computations) and left out unless ``records``."""
    return {str(p.relative_to(root)): json.loads(p.read_text()) for p in (root / "results").rglob("*.json")
            if records or not p.parent.name.startswith("claims")}


def _runs(root: Path) -> set[str]:
    """Trained runs in the checkpoint cache (suite/recipe hash/seed)."""
    return {str(p.relative_to(root)) for p in (root / ".cache" / "checkpoints").glob("*/*/seed-*")}


def _build(root: Path, *extra: str) -> dict:
    proc = run_cli(root, "run", CHAPTER, "--profile", "smoke", *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    glued = runner.glued_values(root / "book" / "executed" / f"{CHAPTER}.ipynb", wall_clock=False)
    return {"stdout": proc.stdout, "glued": glued, "results": _sidecars(root), "runs": _runs(root),
            "records": _sidecars(root, records=True)}


def _edit(root: Path, module: str, old: str, new: str) -> None:
    path = root / "lib" / "anisotropy" / module
    text = path.read_text()
    assert text.count(old) == 1, f"{module}: {old!r}"
    path.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = copy_repo(tmp_path_factory.mktemp("code_keys") / "repo")
    return root, _build(root)


def test_fingerprints_follow_the_import_graph():
    assert "measure.metrics" in fingerprint.closure("experiments.layerwise") and "measure.taps" in fingerprint.closure("experiments.layerwise")
    for never in ("pages.plots", "pages.plots.style", "pages.report", "book.runner", "book.kernels", "book.sweeps", "results", "hub"):
        assert never not in fingerprint.closure("experiments.layerwise", "experiments.spectral", "experiments.qk_dynamics", "experiments.block", "training.trainer")
    # A measurement does not depend on the trainer's code (a self-trained checkpoint carries its own key) ...
    measurements = ("experiments.layerwise", "experiments.spectral", "experiments.qk_dynamics", "experiments.ablation", "claims.rules.p1_s5", "book.machine")
    assert fingerprint.TRAINER & set(fingerprint.closure(*measurements)) == set()
    # ... but training does: on every trainer module (the loop imports them all) and on what they compute with.
    assert fingerprint.TRAINER | {"data.sources", "models.offline_tokenizers"} <= set(fingerprint.closure("training.trainer"))
    assert "models.registry" not in fingerprint.closure("training.trainer")  # an edit to the model table retrains nothing
    assert fingerprint.closure(*fingerprint.TRAINER) == fingerprint.closure("training.trainer")
    assert fingerprint.trainer() == fingerprint.of("training.trainer")
    # every module of the training package is the trainer's: a new one must join TRAINER, or an edit to it would not
    # retrain
    assert {f"training.{p.stem}" for p in (fingerprint.FOLDER / "training").glob("[!_]*.py")} == fingerprint.TRAINER
    assert fingerprint.of("measure.metrics") != fingerprint.of("measure.baseline")


@pytest.mark.parametrize("module", sorted(fingerprint.TRAINER))
def test_an_edit_to_any_trainer_module_changes_the_trainers_fingerprint_and_no_measurements(module, tmp_path,
                                                                                           monkeypatch):
    """A recipe's hash, its tokenizer folder and its training record hold ``fingerprint.trainer()``: an edit to any of
    the trainer's modules trains the suites anew, while the measurements (which meet a self-trained checkpoint by
    its own key) keep theirs."""
    from anisotropy.training import recipes

    copy = tmp_path / "anisotropy"
    shutil.copytree(fingerprint.FOLDER, copy, ignore=shutil.ignore_patterns("__pycache__"))
    measurements = ("experiments.layerwise", "experiments.spectral", "experiments.qk_dynamics", "experiments.ablation", "claims.rules.p1_s5", "measure.metrics")

    def digests() -> dict[str, str]:
        fingerprint._digest.cache_clear()
        fingerprint.imports.cache_clear()
        out = {m: fingerprint.of(m) for m in (*fingerprint.TRAINER, *measurements)}
        return {**out, "trainer": fingerprint.trainer(), "recipe": recipes.Recipe(suite="s", kind="mlm").hash}

    monkeypatch.setattr(fingerprint, "FOLDER", copy)
    try:
        before = digests()
        path = copy.joinpath(*module.split(".")).with_suffix(".py")
        path.write_text(path.read_text() + "\n# an edit to the trainer\n")
        after = digests()
    finally:
        fingerprint._digest.cache_clear()
        fingerprint.imports.cache_clear()
    changed = {k for k in before if before[k] != after[k]}
    # the trainer's fingerprint, the recipes' hashes and the trainer modules that reach the edited one: none else
    assert changed == {"trainer", "recipe", *(m for m in fingerprint.TRAINER if module in fingerprint.closure(m))}
    assert {"training.trainer", module} <= changed


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """A copy of the package that ``fingerprint`` reads instead, and a function giving fresh digests of it."""
    copy = tmp_path / "anisotropy"
    shutil.copytree(fingerprint.FOLDER, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(fingerprint, "FOLDER", copy)

    def digests() -> dict[str, str]:
        fingerprint._digest.cache_clear()
        fingerprint.imports.cache_clear()
        modules = ("models.registry", "experiments.layerwise", "measure.metrics")
        return {"package": fingerprint.package(), **{m: fingerprint.of(m) for m in modules}}

    yield copy, digests
    fingerprint._digest.cache_clear()
    fingerprint.imports.cache_clear()


def test_a_changed_model_table_changes_what_loads_models_and_nothing_else(package_copy):
    copy, digests = package_copy
    before = digests()
    table = copy / "models" / "models.yml"
    table.write_text(table.read_text().replace("n_params: 124000000", "n_params: 124000001", 1))
    after = digests()
    assert after["models.registry"] != before["models.registry"] and after["experiments.layerwise"] != before["experiments.layerwise"]
    assert after["measure.metrics"] == before["measure.metrics"]  # metrics loads no model


def test_a_changed_hub_manifest_executes_the_pages_again_and_changes_no_measurement(package_copy):
    copy, digests = package_copy
    before = digests()
    manifest = copy / "hub_manifest.yml"
    manifest.write_text(manifest.read_text() + "\n# an edit\n")
    after = digests()
    assert after["package"] != before["package"]  # what every executed page is stamped with
    assert after["experiments.layerwise"] == before["experiments.layerwise"] and after["models.registry"] == before["models.registry"]


def test_a_sub_package_module_is_read_by_its_dotted_name(tmp_path, monkeypatch):
    # A chapter module of the library: its relative imports (``from .. import x``) are found from its own package.
    assert {"experiments.qk_dynamics", "training.trainer", "claims.learnt", "data.images"} <= fingerprint.imports("chapters.p1_s5_qk_training")
    assert fingerprint._name("anisotropy.chapters.p1_s5_qk_training") == "chapters.p1_s5_qk_training"
    closure = fingerprint.closure("chapters.p1_s3_modalities")
    assert "chapters.p1_s3_modalities" in closure
    assert "experiments.layerwise" in closure and "pages.report" not in closure  # report presents: not followed
    # A sub-package of every kind of import, in a copy of the package.
    copy = tmp_path / "anisotropy"
    shutil.copytree(fingerprint.FOLDER, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "sub").mkdir()
    (copy / "sub" / "__init__.py").write_text("from . import helper\n")
    (copy / "sub" / "helper.py").write_text("X = 1\n")
    (copy / "sub" / "page.py").write_text(
        "from ..measure import metrics\nfrom ..measure.baseline import cosine_quantile\nfrom . import helper\n"
        "from .helper import X\nimport anisotropy.experiments.spectral\nfrom anisotropy.claims.rules.common import Outcome\n"
        "from anisotropy.claims import learnt\n\ndef f():\n    from ...outside import y\n")

    def digests() -> dict[str, str]:
        fingerprint._digest.cache_clear()
        fingerprint.imports.cache_clear()
        return {m: fingerprint.of(m) for m in ("sub.page", "sub", "measure.metrics")}

    monkeypatch.setattr(fingerprint, "FOLDER", copy)
    try:
        before = digests()
        # (``from . import helper`` runs the package's ``__init__`` too: ``sub``)
        assert fingerprint.imports("sub.page") == {"measure.metrics", "measure.baseline", "sub", "sub.helper",
                                                   "experiments.spectral", "claims.rules.common", "claims.learnt"}
        assert fingerprint.imports("sub") == {"sub.helper"}  # a package's ``from . import`` is its own modules
        assert set(fingerprint.closure("sub.page")) >= {"sub.page", "sub.helper", "measure.metrics", "measure.baseline",
                                                         "experiments.spectral"}
        # An edit to a module it imports, at any depth, changes its fingerprint; one it does not import, not.
        metrics = copy / "measure" / "metrics.py"
        metrics.write_text(metrics.read_text() + "\n# an edit\n")
        after = digests()
        assert after["sub.page"] != before["sub.page"] and after["measure.metrics"] != before["measure.metrics"]
        assert after["sub"] == before["sub"]
        helper = copy / "sub" / "helper.py"
        helper.write_text("X = 2\n")
        again = digests()
        assert again["sub.page"] != after["sub.page"] and again["sub"] != after["sub"]
        assert again["measure.metrics"] == after["measure.metrics"]
    finally:
        fingerprint._digest.cache_clear()
        fingerprint.imports.cache_clear()


def chapter_imports_from_below(graph: dict[str, frozenset[str]]) -> list[str]:
    """Every import of the chapters package or one of its modules by a module outside ``chapters`` and ``book`` (the
    top layer, which builds the book out of the chapters): the only two that may import a chapter module."""
    def chapters(module: str) -> bool:
        return module == "chapters" or module.startswith("chapters.")

    return [f"{m} imports {d}" for m, deps in sorted(graph.items()) if not chapters(m) and m.split(".")[0] != "book"
            for d in sorted(deps) if chapters(d)]


def test_chapter_modules_present_numbers_and_only_the_chapters_and_the_book_import_one():
    chapters = sorted(".".join(p.relative_to(fingerprint.FOLDER).with_suffix("").parts)
                      for p in (fingerprint.FOLDER / "chapters").glob("[!_]*.py"))
    assert chapters and all(not fingerprint.numeric(c) for c in chapters)
    modules = [m for m in (".".join(p.relative_to(fingerprint.FOLDER).with_suffix("").parts).removesuffix(".__init__")
                           for p in fingerprint.FOLDER.rglob("*.py") if "__pycache__" not in p.parts)
               if m not in ("__init__", "__main__")]
    assert chapter_imports_from_below({m: fingerprint.imports(m) for m in modules}) == []
    # but a chapter module's own fingerprint follows what it computes with (a root is always kept)
    assert "experiments.qk_dynamics" in fingerprint.closure("chapters.p1_s5_qk_training")


def test_the_check_sees_a_chapter_module_imported_from_below_and_passes_the_chapters_and_the_book():
    planted = {"pages.report": frozenset({"chapters.p1_s5_qk_training", "pages.budget"}),
               "claims.ledger": frozenset({"chapters"}),
               "book.cli": frozenset({"chapters.plans"}), "chapters.p1_s3_drift": frozenset({"chapters.plans"}),
               "chapters.plans": frozenset({"pages.budget"})}
    assert chapter_imports_from_below(planted) == ["claims.ledger imports chapters",
                                                   "pages.report imports chapters.p1_s5_qk_training"]


def test_the_package_imports_form_no_cycle_and_errors_import_nothing():
    modules = sorted(".".join(p.relative_to(fingerprint.FOLDER).with_suffix("").parts).removesuffix(".__init__")
                     for p in fingerprint.FOLDER.rglob("*.py") if "__pycache__" not in p.parts)
    modules = [m for m in modules if m not in ("__init__", "__main__")]  # sub-packages (profiles, chapters) too
    graph = {m: fingerprint.imports(m) for m in modules}  # imports anywhere in a file, lazy ones too
    assert "chapters.p1_s5_qk_training" in graph and "profiles" in graph
    assert graph["errors"] == frozenset()
    assert {"profiles"} & (graph["results"] | graph["executor"]) == set()  # they need only the error types

    def reachable(start: str) -> set:
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo += graph.get(module, ())
        return seen

    assert [m for m in graph if m in reachable(m)] == []  # no module reaches itself: no cycle


def _planted_here():  # a function of this test module, as a notebook's ``def``: no fingerprint holds its code
    return planted.planted_measures(8, 4, steps=2)


def test_a_library_computation_is_keyed_by_its_module_and_a_notebook_lambda_by_its_own_code_too(tmp_path):
    assert fingerprint.own_code(planted.planted_measures) is None  # its module's fingerprint covers it
    assert fingerprint.modules_of(planted.planted_measures) == ("measure.planted",)
    store, calls = results.Store(tmp_path), []

    def notebook_lambda():  # the same code each time, as a chapter executed twice
        return lambda: calls.append("computed") or planted.planted_measures(8, 4, steps=2)

    first = store.cached("chapter", {"n": 8}, notebook_lambda())
    again = store.cached("chapter", {"n": 8}, notebook_lambda())
    assert calls == ["computed"]  # the second run read the stored frame
    pd.testing.assert_frame_equal(first, again)
    (sidecar,) = [json.loads(p.read_text()) for p in tmp_path.rglob("*.json")]
    assert sidecar["code"]["modules"] == ["measure.planted"] and sidecar["key"]["_own_code"]
    # The lambda edited (three knobs per case instead of two): recomputed, not the old numbers.
    edited = store.cached("chapter", {"n": 8},
                          lambda: calls.append("computed") or planted.planted_measures(8, 4, steps=3))
    assert calls == ["computed", "computed"] and len(edited) == 6


def test_a_notebook_computations_own_code_has_the_same_digest_in_every_process():
    import subprocess
    import sys

    # A set literal is a frozenset constant whose order follows the string hash, which differs between processes.
    script = ("from anisotropy import fingerprint; "
              "print(fingerprint.own_code(eval('lambda: [w in {\"alpha\", \"beta\", \"gamma\"} for w in \"ab\"]')))")
    digests = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")}
    assert len(digests) == 1


def test_a_computation_calling_a_function_defined_beside_it_is_refused(tmp_path):
    store = results.Store(tmp_path / "accepted")
    assert len(store.cached("chapter", {"n": 8}, _planted_here)) == 4  # its own code is keyed: it calls the library
    store = results.Store(tmp_path / "refused")
    with pytest.raises(fingerprint.UnkeyedCodeError, match="_planted_here"):
        store.cached("chapter", {"n": 8}, lambda: _planted_here())  # _planted_here's code is in no key
    with pytest.raises(fingerprint.UnkeyedCodeError, match="no code of its own"):
        store.cached("chapter", {"n": 8}, functools.partial(planted.planted_measures, 8, 4))
    assert not (tmp_path / "refused").exists()  # refused before computing or storing anything


@pytest.mark.slow
def test_a_changed_metric_changes_the_numbers(repo, tmp_path):
    root, first = repo
    copy = copy_repo(tmp_path / "repo")
    for folder in ("results", ".cache"):
        import shutil

        shutil.copytree(root / folder, copy / folder)
    _edit(copy, "measure/statistics.py", "    return float((s @ s - n) / (n * (n - 1)))", "    return 0.5 * float((s @ s - n) / (n * (n - 1)))")
    again = _build(copy)
    assert float(again["glued"]["top_peak"]) == pytest.approx(float(first["glued"]["top_peak"]) / 2, abs=0.006)
    assert again["runs"] == first["runs"]  # statistics.py does not change what the trainer computes
    new = set(again["results"]) - set(first["results"])
    assert len(new) == sum(1 for v in first["results"].values() if v["chapter"] == "p1_layerwise")


@pytest.mark.slow
def test_a_changed_plot_reruns_no_measurement_and_no_training(repo, tmp_path):
    root, first = repo
    copy = copy_repo(tmp_path / "repo")
    import shutil

    for folder in ("results", ".cache", "book"):
        shutil.copytree(root / folder, copy / folder, dirs_exist_ok=True)
    _edit(copy, "pages/plots/style.py", "def use_style(", "# an edit that changes no number\ndef use_style(")
    again = _build(copy)
    assert "reused" not in again["stdout"]  # the notebook's stamp holds the library's code: executed again
    assert again["results"] == first["results"]  # the same stored results, none recomputed
    assert again["runs"] == first["runs"]
    assert again["glued"] == first["glued"]


@pytest.mark.slow
def test_a_changed_trainer_retrains_its_suites_and_nothing_else(repo, tmp_path):
    root, first = repo
    copy = copy_repo(tmp_path / "repo")
    import shutil

    for folder in ("results", ".cache"):
        shutil.copytree(root / folder, copy / folder)
    _edit(copy, "training/trainer.py", "def train(recipe: Recipe,", "# a trainer edit\ndef train(recipe: Recipe,")
    again = _build(copy)
    retrained = again["runs"] - first["runs"]
    assert len(retrained) == len(first["runs"]) == 2  # the chapter's two suites (mlm, clm: seed 0), trained anew
    new = [again["results"][k] for k in set(again["results"]) - set(first["results"])]
    # Only the self-trained checkpoints are measured again; the untrained and tiny models' rows are reused.
    assert new and all(v["key"]["model"]["variant"] == "self-trained" for v in new)
    assert len(new) == 2


@pytest.mark.parametrize("command", ["run", "build"])
def test_each_flag_sets_the_parameter_of_its_name(command, monkeypatch):
    from anisotropy.book import cli

    calls = []
    record = lambda *args, **kwargs: calls.append(kwargs) or runner.Outcome("x", "x.ipynb", 0.0)  # noqa: E731
    monkeypatch.setattr(runner, "execute" if command == "run" else "build", record)
    chapter = ["x"] if command == "run" else []
    for flags, rerun, recompute in (([], False, False), (["--rerun"], True, False), (["--recompute"], False, True),
                                    (["--force"], False, True)):  # --force: the old name of --recompute
        assert cli.main([command, *chapter, *flags]) == 0
        assert (calls[-1]["rerun"], calls[-1]["recompute"]) == (rerun, recompute), flags


@pytest.mark.slow
def test_recompute_recomputes_and_clean_removes_what_no_code_reaches(repo, tmp_path):
    root, first = repo
    copy = copy_repo(tmp_path / "repo")
    import shutil

    for folder in ("results", ".cache"):
        shutil.copytree(root / folder, copy / folder)
    forced = _build(copy, "--recompute")
    assert "recomputes every result it reads from the store" in forced["stdout"]
    assert set(forced["results"]) == set(first["results"])  # the same keys ...
    assert all(forced["results"][k]["written"] >= first["results"][k]["written"] for k in first["results"])
    assert forced["glued"] == first["glued"]  # ... and the same numbers, recomputed
    assert forced["runs"] == first["runs"]  # --recompute recomputes results, it does not retrain
    # Old code's results are stale once the code changes; clean removes them and says how much it freed.
    _edit(copy, "measure/taps.py", "def extract(", "# a taps edit\ndef extract(")
    edited = _build(copy)
    proc = run_cli(copy, "clean", "--dry-run")
    listed = [line for line in proc.stdout.splitlines() if line.endswith((".json", ".parquet"))]
    # The measurements taps.py computes, and the verdicts the claims' rules drew from them (claims reads taps too).
    stale = {k for k in first["results"] if first["results"][k]["chapter"] == "p1_layerwise"}
    stale |= {k for k, v in first["records"].items() if v["chapter"].startswith("claims")}
    assert {Path(p).relative_to(copy).as_posix() for p in listed if p.endswith(".json")} == stale
    assert set(_sidecars(copy)) == set(edited["results"])  # a dry run removes nothing
    proc = run_cli(copy, "clean")
    assert proc.returncode == 0 and "freed" in proc.stdout
    assert set(_sidecars(copy)) == set(edited["results"]) - stale
    assert _build(copy)["glued"] == edited["glued"]  # what is left is what the current code reads


def test_a_chapter_stamp_follows_the_recipes_of_the_suites_it_measures_and_the_chapters_it_runs_after(monkeypatch):
    # p2_training_dynamics measures the mlm suite's checkpoints: the suite with another recipe must execute it again
    # (it was reused with the old recipe's numbers); p2_counterpoint_pythia measures only the clm suite and Section 4
    # no suite, so they are unmoved. p2_two_measures reads p2_layer_profiles' stored measurements: other parameters
    # there execute it again.
    from anisotropy import profiles
    from anisotropy.book import runner

    names = ("p2_training_dynamics", "p2_counterpoint_pythia", "p1_s4_untrained_block", "p2_two_measures")

    def stamps():
        return {name: runner._stamp("smoke", runner._parameters(name, "smoke")[1], name) for name in names}

    before = stamps()
    assert "mlm" in before["p2_training_dynamics"]["suites"] and "mlm" not in before["p2_counterpoint_pythia"]["suites"]
    real = profiles.chapter_parameters

    def more_updates(profile, chapter):
        params = real(profile, chapter)
        if chapter == "checkpoint_suites":
            suites = {k: dict(v) for k, v in params["suites"].items()}
            suites["mlm"]["steps"] += 1
            params = {**params, "suites": suites}
        return params

    monkeypatch.setattr(profiles, "chapter_parameters", more_updates)
    after = stamps()
    assert after["p2_training_dynamics"] != before["p2_training_dynamics"]
    assert after["p2_counterpoint_pythia"] == before["p2_counterpoint_pythia"]
    assert after["p1_s4_untrained_block"] == before["p1_s4_untrained_block"]

    def other_texts(profile, chapter):
        params = real(profile, chapter)
        return {**params, "n_texts": params["n_texts"] + 1} if chapter == "p2_layer_profiles" else params

    monkeypatch.setattr(profiles, "chapter_parameters", other_texts)
    assert stamps()["p2_two_measures"] != before["p2_two_measures"]
