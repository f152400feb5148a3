"""Every glued value of two builds of the same profile, compared: the check that a refactor changed no number.

    .venv/bin/python benchmarks/compare_glue.py BEFORE_DIR AFTER_DIR --label local --out benchmarks/results/glue_comparison.json

BEFORE_DIR and AFTER_DIR hold executed notebooks (``book/executed/*.ipynb`` of two fresh clones). Values are read with
``book.runner.glued_values``; names that report wall-clock or CPU time (``runner.WALL_CLOCK_GLUE``) are counted apart,
since they are the only values allowed to differ between two runs. ``--out`` adds (or replaces) this label's entry in a
JSON file: the counts, and every name whose value differs or exists on one side only. ``--explained FILE`` (YAML: a
list of ``pattern``, a regular expression over "<chapter>:<name>", and ``why``) names the intentional changes of
other work between the two builds: each differing or one-sided name is then given its ``why``. Exit status 1 when any
value other than a timing differs, or with ``--explained``, when any such name is matched by no pattern.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import yaml

from anisotropy.book import runner


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare(before: Path, after: Path) -> dict:
    names = sorted({p.name for p in before.glob("*.ipynb")} | {p.name for p in after.glob("*.ipynb")})
    out = {"notebooks": len(names), "values": 0, "timings": 0, "differ": [], "only_before": [], "only_after": []}
    for name in names:
        a = runner.glued_values(before / name) if (before / name).exists() else {}
        b = runner.glued_values(after / name) if (after / name).exists() else {}
        for key in sorted(set(a) | set(b)):
            where = f"{name.removesuffix('.ipynb')}:{key}"
            if runner.WALL_CLOCK_GLUE.search(key):
                out["timings"] += 1
            elif key not in b:
                out["only_before"].append(where)
            elif key not in a:
                out["only_after"].append(where)
            else:
                out["values"] += 1
                if not _same(a[key], b[key]):
                    out["differ"].append({"name": where, "before": repr(a[key]), "after": repr(b[key])})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--label", required=True, help="the entry's name in --out (the profile, say)")
    parser.add_argument("--note", default="", help="what was compared (commits, machines)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--explained", type=Path, help="YAML list of {pattern, why}: the intentional changes")
    args = parser.parse_args()
    result = compare(args.before, args.after) | {"note": args.note}
    unexplained = None
    if args.explained:
        reasons = [(re.compile(r["pattern"]), r["why"]) for r in yaml.safe_load(args.explained.read_text())]
        unexplained = []
        for kind in ("differ", "only_before", "only_after"):
            for i, row in enumerate(result[kind]):
                name = row["name"] if isinstance(row, dict) else row
                why = next((w for pattern, w in reasons if pattern.fullmatch(name)), None)
                if why is None:
                    unexplained.append(name)
                result[kind][i] = {**row, "why": why} if isinstance(row, dict) else {"name": name, "why": why}
        result["unexplained"] = unexplained
    print(f"{args.label}: {result['notebooks']} notebooks, {result['values']} glued values compared, "
          f"{len(result['differ'])} differ, {len(result['only_before'])} only before, "
          f"{len(result['only_after'])} only after ({result['timings']} timings not compared)")
    for row in result["differ"][:50]:
        print(f"  {row['name']}: {row['before']} -> {row['after']}")
    if args.out:
        table = json.loads(args.out.read_text()) if args.out.exists() else {}
        table[args.label] = result
        args.out.write_text(json.dumps(table, indent=1) + "\n")
    if unexplained is not None:
        print(f"  {len(unexplained)} explained by nothing" + "".join(f"\n    {n}" for n in unexplained))
        return 1 if unexplained else 0
    return 1 if result["differ"] else 0


if __name__ == "__main__":
    sys.exit(main())
