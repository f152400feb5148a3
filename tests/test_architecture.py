"""ARCHITECTURE.md is the map of the library: its module table names every module of ``lib/anisotropy`` once, and
every module it names imports. A module of a sub-package is named by its dotted name (`chapters.p1_s5_qk_training`)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lib" / "anisotropy"


def _table_modules(text: str) -> list[str]:
    """The modules named in the first column of the table under "## Modules" (a cell may name several; a sub-package's
    module by its dotted name)."""
    section = text.split("## Modules", 1)[1]
    rows = [line for line in section.split("\n## ", 1)[0].splitlines() if line.startswith("| `")]
    return [name for row in rows for name in re.findall(r"`([a-z_0-9]+(?:\.[a-z_0-9]+)*)`", row.split("|")[1])]


def test_the_module_table_names_every_module_once_and_each_imports():
    named = _table_modules((ROOT / "ARCHITECTURE.md").read_text())
    assert len(named) == len(set(named)), sorted({n for n in named if named.count(n) > 1})
    files = {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    files |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}  # sub-packages (profiles, chapters)
    files |= {f"{p.parent.name}.{p.stem}" for p in PACKAGE.glob("*/*.py") if p.stem != "__init__"}  # their modules
    assert set(named) == files, {"not in the table": sorted(files - set(named)),
                                 "no such module": sorted(set(named) - files)}
    for name in named:
        importlib.import_module(f"anisotropy.{name}")


def test_the_table_reader_sees_a_missing_and_a_doubled_row():
    table = ("## Modules\n\n| module | concept |\n|---|---|\n| `a`, `b` | x |\n| `b` | y |\n| `p.q` | w |\n\n## Next\n"
             "| `c` | z |\n")
    assert _table_modules(table) == ["a", "b", "b", "p.q"]  # `c` is in another section
