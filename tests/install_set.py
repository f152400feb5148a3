"""What the Makefile installs, read from its install lines, and what environment.yml installs, read the same way.

The Makefile is the one place that says how the book's environment is made (``make book``); environment.yml (for conda)
and benchmarks/python_range.py (which Python versions the pinned set resolves on) must follow it. Both read it here,
so a package added to a Makefile install line or to a pyproject extra that the Makefile installs is checked without
anyone updating a second list. Not a test module: tests/test_pipeline.py and the benchmark import it, and
tests/test_paper_profile.py makes its Colab runtime with ``colab_runtime``.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Options of pip / uv pip install that take a value (the value is not a requirement).
WITH_VALUE = {"-c", "--constraint", "--constraints", "-r", "--requirement", "-i", "--index-url", "--extra-index-url",
              "-f", "--find-links", "--python", "-p", "--target", "--prefix"}
# Installers of the installation itself, not packages of the environment.
TOOLS = {"uv", "pip"}
SHELL_WORDS = {"if", "then", "else", "elif", "fi", "do", "done", "{", "}", "!"}


@dataclass
class Install:
    """One ``pip install`` / ``uv pip install`` command: its requirements and the options that matter here."""

    requirements: list[str] = field(default_factory=list)
    editable: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    no_deps: bool = False
    no_index: bool = False


def name(requirement: str) -> str:
    """The normalised project name of a requirement string (``"moto[server]==5.2.5"`` -> ``"moto"``)."""
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)).lower()


def spec(requirement: str) -> str:
    """A requirement without spaces and quotes, its name normalised: comparable across files."""
    req = requirement.replace(" ", "").strip("\"'")
    return name(req) + req[len(re.match(r"[A-Za-z0-9._-]*", req).group(0)):]


def extras_of(editable: str) -> list[str]:
    """``".[book,colab]"`` -> ``["book", "colab"]``."""
    m = re.search(r"\[([^\]]*)\]", editable)
    return [e.strip() for e in m.group(1).split(",") if e.strip()] if m else []


def parse_install_args(tokens: list[str]) -> Install:
    """The arguments after ``install``: requirements, ``-e``, ``-c``, index options and ``--no-deps``."""
    out, i = Install(), 0
    while i < len(tokens):
        tok = tokens[i]
        opt, _, inline = tok.partition("=") if tok.startswith("--") else (tok, "", "")
        if tok in ("-e", "--editable"):
            out.editable.append(tokens[i + 1])
            i += 2
            continue
        if opt in WITH_VALUE:
            value = inline or tokens[i + 1]
            i += 1 if inline else 2
            if opt in ("-c", "--constraint", "--constraints"):
                out.constraints.append(value)
            elif opt in ("-i", "--index-url"):
                out.index_url = value
            elif opt == "--extra-index-url":
                out.extra_index_urls.append(value)
            continue
        if tok == "--no-deps":
            out.no_deps = True
        elif tok == "--no-index":
            out.no_index = True
        elif not tok.startswith("-"):
            out.requirements.append(tok)
        i += 1
    return out


def makefile_variables(text: str) -> dict[str, str]:
    """The Makefile's simple variables (``NAME := value``, ``?=``, ``=``), continuation lines joined."""
    text = text.replace("\\\n", " ")
    found = {}
    for m in re.finditer(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?::=|\?=|=)\s*(.*)$", text, flags=re.M):
        found.setdefault(m.group(1), m.group(2).strip())
    return found


def expand(text: str, variables: dict[str, str]) -> str:
    for _ in range(10):
        new = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: variables.get(m.group(1), m.group(0)), text)
        if new == text:
            break
        text = new
    return text.replace("$$", "$")


def recipe(text: str, target: str) -> list[str]:
    """The command lines of ``target``'s rule (as written, e.g. ``$(STAMP)``), continuation lines joined."""
    lines = text.replace("\\\n", " ").splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^{re.escape(target)}\s*:(?!=)", line))
    body = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        body.append(line.strip().lstrip("@-"))
    return body


def install_commands(lines: list[str], variables: dict[str, str]) -> list[Install]:
    """Every ``pip install`` / ``uv pip install`` in these shell lines (each alternative of a ``||`` chain too)."""
    found = []
    for line in lines:
        lex = shlex.shlex(expand(line, variables), posix=True, punctuation_chars=";&|<>()")
        lex.whitespace_split = True
        tokens, command, skip = [*lex, ";"], [], False
        for i, tok in enumerate(tokens):
            if skip:
                skip = False
            elif tok in ("<", ">", ">>", ">&"):  # a redirection: neither its fd nor its file is an argument
                if command and command[-1].isdigit():
                    command.pop()
                skip = True
            elif tok and set(tok) <= set(";&|<>()") or tok in SHELL_WORDS:
                if "install" in command and "pip" in command[:command.index("install")]:
                    found.append(parse_install_args(command[command.index("install") + 1:]))
                command = []
            else:
                command.append(tok)
    return found


@dataclass
class InstallSet:
    """A whole environment's installation: requirements by name (the specs as written), the extras of the editable
    install of the project, the constraints files, the packages installed without their dependencies."""

    requirements: dict[str, str]
    extras: list[str]
    constraints: list[str]
    no_deps: set[str]
    installs: list[Install]

    @property
    def specs(self) -> set[str]:
        return {spec(r) for r in self.requirements.values()}


def _gather(installs: list[Install]) -> InstallSet:
    reqs, extras, constraints, no_deps = {}, [], [], set()
    for inst in installs:
        for r in inst.requirements:
            if name(r) not in TOOLS:
                reqs[name(r)] = r
                if inst.no_deps and inst.requirements:
                    no_deps.add(name(r))
        for e in inst.editable:
            extras += [x for x in extras_of(e) if x not in extras]
        constraints += [c for c in inst.constraints if c not in constraints]
    # torch's wheel alone comes --no-deps from where the machine provides it; its dependencies follow from another
    # install of the same pin, so it is not a package installed without its dependencies.
    no_deps -= {n for inst in installs if not inst.no_deps for n in map(name, inst.requirements)}
    return InstallSet(reqs, extras, constraints, no_deps, installs)


def makefile(target: str, root: Path = ROOT) -> InstallSet:
    """What the Makefile's rule ``target`` (``"$(STAMP)"``: the book, ``"$(TEST_STAMP)"``: the tests) installs."""
    text = (root / "Makefile").read_text()
    return _gather(install_commands(recipe(text, target), makefile_variables(text)))


def book(root: Path = ROOT) -> InstallSet:
    return makefile("$(STAMP)", root)


def tests(root: Path = ROOT) -> InstallSet:
    return makefile("$(TEST_STAMP)", root)


def pyproject(root: Path = ROOT) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]


def project_requirements(extras: list[str], root: Path = ROOT) -> list[str]:
    """The project's own dependencies and those of ``extras``, as pyproject.toml writes them."""
    project = pyproject(root)
    return list(project["dependencies"]) + [r for e in extras for r in project["optional-dependencies"][e]]


def resolved(install: InstallSet, root: Path = ROOT) -> dict[str, list[str]]:
    """Everything an install set asks for, by name: the project's requirements (with its extras) and the Makefile's
    own; the resolver meets them all at once (``-c constraints.txt`` pins the result)."""
    found: dict[str, list[str]] = {}
    for r in project_requirements(install.extras, root) + list(install.requirements.values()):
        found.setdefault(name(r), []).append(r)
    return found


def environment_yml(root: Path = ROOT) -> tuple[dict, InstallSet]:
    """environment.yml's conda part and its pip section (none: the Makefile installs into the conda environment)
    read as one requirements file."""
    import yaml

    env = yaml.safe_load((root / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next((d["pip"] for d in env["dependencies"] if isinstance(d, dict)), [])
    tokens = [t for line in pip for t in shlex.split(line)]
    return {"name": env.get("name"), "conda": conda, "channels": env.get("channels", [])}, _gather(
        [parse_install_args(tokens)] if tokens else [])


def requires_python(root: Path = ROOT) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """pyproject.toml's ``requires-python`` (the library's range) as (lowest version, first version above the range)."""
    text = pyproject(root)["requires-python"]
    m = re.fullmatch(r">=\s*([\d.]+)\s*,\s*<\s*([\d.]+)", text.replace(" ", ""))
    assert m, f"requires-python should read '>=X.Y.Z,<A.B', not {text!r}"
    return tuple(map(int, m.group(1).split("."))), tuple(map(int, m.group(2).split(".")))


def pinned_python(root: Path = ROOT) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The range the pinned set (constraints.txt) installs on, which `make` checks its Python against: the Makefile's
    ``PY_MIN`` and ``PY_BELOW``, as (lowest version, first version above the range)."""
    variables = makefile_variables((root / "Makefile").read_text())
    return (tuple(map(int, variables["PY_MIN"].split("."))), tuple(map(int, variables["PY_BELOW"].split("."))))


# ---- a Colab runtime's installation, for the Colab-route tests (tests/test_paper_profile.py) --------------------------
# What a Colab runtime already has that the tests' harness needs: papermill runs the notebook and ipykernel is its
# kernel (Colab preinstalls both; the `colab` extra must not need to). Everything else comes from the `colab` extra and
# the base dependencies.
COLAB_PREINSTALLED = ("papermill", "ipykernel")


def find_links() -> list[str]:
    """The machine's own pip find-links (``PIP_FIND_LINKS`` or pip's configuration files), where the Makefile's first
    torch install looks (``pip install --no-deps --no-index``)."""
    import subprocess
    import sys

    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    links = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.rsplit(".", 1)[-1] == "find-links":
            links += [v for v in value.strip().strip("'\"").split() if v not in links]
    return links


def torch_routes(install: list[str], root: Path = ROOT) -> list[list[str]]:
    """The commands that install the Makefile's torch pin (``TORCH``) with the installer command ``install`` (``uv
    pip install ... --python PY``), in the Makefile's order: the machine's find-links without an index, else the
    PyTorch CPU index (macOS, or no TORCH_INDEX: the configured index). Never the CUDA build."""
    import platform

    variables = makefile_variables((root / "Makefile").read_text())
    torch = expand(variables["TORCH"], variables)
    index = expand(variables.get("TORCH_INDEX", ""), variables)
    routes, links = [], find_links()
    if links:
        routes.append([*install, "--no-deps", "--no-index", *(f"--find-links={link}" for link in links), torch])
    if platform.system() == "Darwin" or not index:
        routes.append([*install, "--no-deps", torch])
    else:
        routes.append([*install, "--no-deps", "--index-url", index, torch])
    return routes


def colab_runtime(venv: Path, source: Path, uv: str, python: str, root: Path = ROOT) -> dict:
    """The commands that make ``venv`` a Colab runtime as far as this book is concerned: the interpreter ``python``,
    torch the way the Makefile installs it (its pin, the machine's find-links first, else the CPU wheel index: never
    the CUDA build), then the copy ``source`` installed the way a chapter's first cell installs it on Colab (not
    editable, ``anisotropy[colab] @ <url>``) with constraints.txt, so that the numbers match the book's, and papermill
    and ipykernel (``COLAB_PREINSTALLED``). Nothing else: the book-building stack and the tests' peers stay out."""
    py = str(venv / "bin" / "python")
    # no --compile-bytecode: compiling all of torch costs ten times the rest of the installation; the runtime's first
    # processes compile what they import (the Colab-route tests let them write the bytecode into the runtime)
    install = [uv, "pip", "install", "-q", "--python", py]
    return {
        "venv": [uv, "venv", "-q", "--python", python, str(venv)],
        "torch": torch_routes(install, root),  # tried in this order, as the Makefile's `||`
        "package": [*install, "-c", str(root / "constraints.txt"), f"anisotropy[colab] @ {source.resolve().as_uri()}",
                    *COLAB_PREINSTALLED],
    }
