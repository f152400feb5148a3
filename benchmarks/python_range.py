"""Which Python versions the pinned set installs on: the Makefile's PY_MIN/PY_BELOW checked against the registry.

The pinned set's range lies within pyproject.toml's requires-python, the library's own range, which also holds Colab's
Python (tests/test_colab_runtime.py resolves that install). Not a test (it needs the package index, and its answer
changes only when the pins do): run it after changing constraints.txt, the Makefile's install lines or PY_MIN/PY_BELOW,
and commit its result file.

For each Python version around the claimed range (the one below it, its lowest version, every minor version in it, the
one above it) and each platform (Linux x86_64 and aarch64, manylinux_2_28; macOS 14 on Apple silicon), ``uv pip
compile --python-version V --python-platform P`` resolves, with ``-c constraints.txt``:

- ``book``: what `make book` installs (tests/install_set.py reads the Makefile's install lines and the pyproject extras
  they name), the packages it installs ``--no-deps`` resolved alone with ``--no-deps``;
- ``tests``: the book's set plus what `make test` adds (its second Makefile rule);
- ``hub``: the Hub stand-in's own virtualenv (tests/hub_standin/requirements.txt, no constraints: its own pins).

Wheels only (``--only-binary :all:``): a version "resolves" only if every package has a wheel for that Python and
platform, but for the few published as source only (``SOURCE_BUILDS``, e.g. dadapy), which every install builds. torch's metadata comes from PyPI (the CPU index serves the
same version for the same Pythons; this script contacts no other index).

    .venv/bin/uv --version && .venv/bin/python benchmarks/python_range.py   # ~13 min on 2 cores with a cold uv cache, needs PyPI
    .venv/bin/python benchmarks/python_range.py --versions 3.12.0 --platforms x86_64-manylinux_2_28

Writes ``results/python_range.json``; exits 1 if a version inside the Makefile's range fails, or one outside it
resolves (then the claimed range is wrong one way or the other).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import install_set  # noqa: E402

PLATFORMS = ("x86_64-manylinux_2_28", "aarch64-manylinux_2_28", "aarch64-apple-darwin")
MACOS = "14.0"  # torch 2.13's macOS wheels are macosx_14_0_arm64
OUT = ROOT / "benchmarks" / "results" / "python_range.json"
# Packages published as source only, which every install builds (dadapy: `make test` compiles it against the
# installed numpy). A new one shows up here as "X has no usable wheels" on every version: add it after checking.
SOURCE_BUILDS = {"dadapy"}


def uv() -> str:
    for candidate in (ROOT / ".venv" / "bin" / "uv", Path(sys.executable).parent / "uv"):
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("uv")
    if not found:
        sys.exit("uv is missing: `make env` installs it into .venv")
    return found


def versions_around(lo: tuple[int, ...], hi: tuple[int, ...]) -> list[str]:
    """The minor version below the range, the range's lowest version (and its minor's .0 when that is not it), every
    minor version inside, and the first one above it."""
    below = f"{lo[0]}.{lo[1] - 1}.0"
    first = ".".join(map(str, lo + (0,) * (3 - len(lo))))
    out = [below] + ([f"{lo[0]}.{lo[1]}.0"] if first != f"{lo[0]}.{lo[1]}.0" else []) + [first]
    out += [f"{lo[0]}.{m}.0" for m in range(lo[1] + 1, hi[1])]
    return out + [f"{hi[0]}.{hi[1]}.0"]


def inside(version: str, lo, hi) -> bool:
    return lo <= tuple(map(int, version.split("."))) < hi


def compile_set(requirements: list[str], version: str, platform: str, constraints: Path | None,
                no_deps: bool = False) -> dict:
    """Resolve ``requirements`` for one Python and platform, wheels only but for the packages that have none for it
    (retried from source, named in ``built_from_source``). Returns ok, the number of packages, the error's cause."""
    source = sorted(SOURCE_BUILDS & {install_set.name(r) for r in requirements})
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "requirements.in"
        req.write_text("\n".join(requirements) + "\n")
        env = {**os.environ, "MACOSX_DEPLOYMENT_TARGET": MACOS}
        cmd = [uv(), "pip", "compile", "-q", "--python-version", version, "--python-platform", platform,
               "--only-binary", ":all:", *[a for p in source for a in ("--no-binary", p)],
               *(["-c", str(constraints)] if constraints else []), *(["--no-deps"] if no_deps else []),
               str(req), "-o", str(Path(tmp) / "out.txt")]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        if proc.returncode == 0:
            lines = (Path(tmp) / "out.txt").read_text().splitlines()
            return {"ok": True, "packages": sum(1 for line in lines if re.match(r"^[A-Za-z0-9]", line)),
                    "built_from_source": source}
    cause = [line.strip() for line in proc.stderr.splitlines() if line.strip() and "hint:" not in line][:3]
    return {"ok": False, "built_from_source": source, "cause": " ".join(cause)[:600]}


def sets() -> dict[str, tuple[list[str], list[str], Path | None]]:
    """Per set: (requirements, requirements resolved --no-deps, constraints file)."""
    book, tests = install_set.book(), install_set.tests()
    reqs = install_set.project_requirements(book.extras)
    with_deps = reqs + [r for n, r in book.requirements.items() if n not in book.no_deps]
    nodeps = [book.requirements[n] for n in sorted(book.no_deps)]
    hub = [line.strip() for line in (ROOT / "tests/hub_standin/requirements.txt").read_text().splitlines()
           if line.strip() and not line.startswith("#")]
    return {"book": (with_deps, nodeps, ROOT / "constraints.txt"),
            "tests": (with_deps + list(tests.requirements.values()), nodeps, ROOT / "constraints.txt"),
            "hub": (hub, [], None)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--versions", nargs="*", help="default: around the Makefile's PY_MIN/PY_BELOW")
    p.add_argument("--platforms", nargs="*", default=list(PLATFORMS))
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    lo, hi = install_set.pinned_python()
    versions = args.versions or versions_around(lo, hi)
    claimed = f">={'.'.join(map(str, lo))},<{'.'.join(map(str, hi))}"
    rows, wrong = [], []
    for version in versions:
        for platform in args.platforms:
            for name, (reqs, nodeps, constraints) in sets().items():
                got = compile_set(reqs, version, platform, constraints)
                if got["ok"] and nodeps:
                    extra = compile_set(nodeps, version, platform, None, no_deps=True)
                    got = extra if not extra["ok"] else got
                row = {"python": version, "platform": platform, "set": name, "claimed": inside(version, lo, hi),
                       **got}
                rows.append(row)
                mark = "resolves" if got["ok"] else "FAILS"
                print(f"{version:<8} {platform:<24} {name:<6} {'in range ' if row['claimed'] else 'outside  '}"
                      f"{mark}{' (from source: ' + ', '.join(got['built_from_source']) + ')' if got['built_from_source'] else ''}"
                      f"{'' if got['ok'] else ': ' + got['cause'][:200]}", flush=True)
                if row["claimed"] != got["ok"] and name != "hub":
                    wrong.append(row)
    uv_version = subprocess.run([uv(), "--version"], capture_output=True, text=True).stdout.strip()
    result = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
              "requires_python": claimed, "uv": uv_version, "constraints_sha256": __import__("hashlib").sha256(
                  (ROOT / "constraints.txt").read_bytes()).hexdigest(), "only_binary": True,
              "claim_holds": not wrong, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"the pinned set's range {claimed}: {'holds' if not wrong else 'WRONG for ' + str(len(wrong)) + ' cases'} "
          f"(book and tests sets; {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out})")
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
