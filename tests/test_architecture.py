"""ARCHITECTURE.md is the map of the library, and the map stays true:

- it names every sub-package of ``lib/anisotropy`` as ``name/`` (a nested one by its path: ``models/formats/``) and
  every top-level module as ``name.py``;
- every path it writes in backticks exists, in the repository or under ``lib/anisotropy/`` (a ``<placeholder>``
  stands for any name);
(The layers' import rules, each sub-package's "May import:" line, are checked in tests/test_layers.py.)
"""

from __future__ import annotations

import re
from pathlib import Path



ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lib" / "anisotropy"
SUFFIXES = (".py", ".yml", ".yaml", ".md", ".toml", ".json", ".txt", ".cfg", ".ipynb")


def sub_packages() -> list[str]:
    """Every sub-package, as its path relative to the package (``models/formats``)."""
    return sorted(p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py")
                  if p.parent != PACKAGE and "__pycache__" not in p.parts)


def top_modules() -> list[str]:
    return sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")


def _exists(path: str) -> bool:
    pattern = re.sub(r"<[^<>]*>", "*", path).rstrip("/")
    return any(any(base.glob(pattern)) if "*" in pattern else (base / pattern).exists() for base in (ROOT, PACKAGE))


def check(text: str, packages: list[str], modules: list[str]) -> dict[str, list[str]]:
    """What the map gets wrong: the sub-packages (``name/``) and top-level modules (``name.py``) it never names, and
    the paths in backticks (a ``/`` or a file suffix, no space) that exist neither in the repository nor under
    ``lib/anisotropy/``."""
    def named(token: str) -> bool:
        return re.search(r"(?<![\w./])" + re.escape(token), text) is not None

    missing = [f"{p}/" for p in packages if not named(f"{p}/")] + [m for m in modules if not named(m)]
    paths = {t for t in re.findall(r"`([^`\s]+)`", text) if "/" in t or (t.endswith(SUFFIXES) and t not in SUFFIXES)}
    return {"not named": missing, "no such path": sorted(p for p in paths if not _exists(p))}


def test_the_map_names_every_sub_package_and_module_and_every_path_it_writes_exists():
    wrong = check((ROOT / "ARCHITECTURE.md").read_text(), sub_packages(), top_modules())
    assert wrong == {"not named": [], "no such path": []}


def test_the_checker_reports_a_missing_name_and_a_nonexistent_path():
    text = ("`data/` and `measure/` hold `data/sources.py`, `claims/rules/<part>.py` and `notebooks/<name>.md`; "
            "`errors.py`, `models/paths.py` (a module of models, not the top one), `no_such_folder/x.py`, `gone.yml`, `.md`, "
            "a/b.\n")
    wrong = check(text, ["data", "measure", "models/formats"], ["errors.py", "paths.py"])
    assert wrong == {"not named": ["models/formats/", "paths.py"],
                     "no such path": ["gone.yml", "models/paths.py", "no_such_folder/x.py"]}
