"""Profiles: named sets of chapter parameters shipped with the package, what each parameter allows, and how a
chapter's parameters are resolved from a profile name (the one line a Colab user changes).

A profile is ``<name>.yml`` in this folder: ``description`` and ``notebooks`` (chapter -> parameters). A profile with
``base: <other>`` starts from the other profile and overrides some values (``paper-sim`` is ``paper`` with its sizes
shrunk; nested dicts such as a suite's recipe are merged key by key). The ``local`` profile holds exactly the values
written in every chapter's parameters cell (a test keeps them equal), so inside a kernel a value that still equals
the ``local`` one was not set by the user and is taken from the named profile (``apply``).

What each chapter's parameters allow is ``allowed.yml`` in this folder (``Rule``: bounds and choices, validated by
pydantic), so a value out of range stops in one line wherever a chapter runs, Colab included. Every number a reader
writes, in a profile, in ``allowed.yml`` or on the command line (``-p n=1e3``), is read by one parser (``number``,
through ``read_yaml``).

Chapter sources (``notebooks/<name>.md``) are read here too, for their parameters cell: its names, defaults and
comments. Outside a checkout (a pip install) the chapters and their parameters come from the copies a wheel carries
(``PACKAGED``: ``_toc.yml`` and the committed ``notebooks/*.ipynb``, put there by setup.py); on Colab the packaged
profiles stand for the defaults.

May import: the foundation modules (it is one of them: the profiles are what every layer reads its parameters from).
"""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from anisotropy import devices, hub, paths
from anisotropy.errors import ModelTooLargeError
from anisotropy.errors import ProfileError, UserError  # noqa: F401 - ProfileError is also profiles.ProfileError, as before

FOLDER = Path(__file__).resolve().parent
DEFAULT = "local"  # the profile whose values every parameters cell shows
ALLOWED = FOLDER / "allowed.yml"  # what each chapter's parameters allow (``Rule``); not a profile
# Parameters of every chapter that say where it runs, not what it measures: no profile sets them, a result's key and a
# verdict's key leave them out, and ``apply`` acts on them. ``results_dir``: the results store ("" = the default).
RUNTIME = ("profile", "results_dir")


# ---- numbers: one reading, wherever a reader writes one -------------------------------------------------------------

_DIGITS = r"[0-9](?:_?[0-9])*"  # Python's: an underscore only between two digits
NUMBER = re.compile(rf"[+-]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?\Z")


def number(text: str) -> int | float | None:
    """The number ``text`` spells, None if it spells none: a decimal number as Python's ``float()`` reads it (a sign,
    digits with ``_`` between two of them, a point, an exponent: ``1e3``, ``+3``, ``.5``, ``-1``, ``1_000``), finite
    and in ASCII digits (``inf``, ``nan``, ``0x10`` and ``١٢`` stay words). An integral value written without a
    point, or with an exponent (``1e3``, ``2.5e3``: a count, as people write one), is an int; ``1.0`` is a float."""
    text = text.strip()
    if not NUMBER.match(text):
        return None
    exponent = "e" in text.lower()
    if "." not in text and not exponent:
        return int(text)
    value = float(text)
    if not math.isfinite(value):  # 1e400
        return None
    return int(value) if exponent and value.is_integer() else value


class _Reader(yaml.SafeLoader):
    """YAML whose plain scalars that spell a number are read by ``number``: YAML 1.1's own int and float take
    ``5e-2`` for a word, ``017`` for octal 15 and ``1:30`` for 90."""


_Reader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Reader.add_implicit_resolver("!number", NUMBER, list("+-.0123456789"))


def _number_or_text(text: str):
    value = number(text)
    return text if value is None else value  # 1e400 stays the word it is


_Reader.add_constructor("!number", lambda loader, node: _number_or_text(loader.construct_scalar(node)))


def read_yaml(text: str):
    """YAML (JSON is YAML too) with its numbers read by ``number``: the profiles, ``allowed.yml`` and the command
    line's ``-p name=value`` read a number the same way."""
    return yaml.load(text, Loader=_Reader)  # a SafeLoader: plain data only


# ---- profiles -------------------------------------------------------------------------------------------------------

def names() -> list[str]:
    """The profiles shipped with the package (every ``*.yml`` here but ``allowed.yml``)."""
    return sorted(p.stem for p in FOLDER.glob("*.yml") if p != ALLOWED)


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@lru_cache(maxsize=1)
def _profile_schema():
    """The schema of a profile file (a pydantic model, no other field): ``description``, ``base`` (another profile)
    and ``notebooks`` (chapter -> parameters, a block may be empty)."""
    from typing import Any

    from pydantic import BaseModel, ConfigDict

    class ProfileFile(BaseModel):
        model_config = ConfigDict(extra="forbid")

        description: str | None = None
        base: str | None = None
        runtime: str | None = None  # the machine it assumes (pages.budget.RUNTIMES); a base's when not set
        notebooks: dict[str, dict[str, Any] | None] = {}

    return ProfileFile


def _validated(name: str, path: Path, raw) -> dict:
    """A profile file's contents checked against ``_profile_schema``: the fields it sets, or one ``ProfileError``."""
    from pydantic import ValidationError

    try:
        valid = _profile_schema().model_validate(raw)
    except ValidationError as err:
        errors = err.errors()
        unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
        if unknown:
            problem = f"unknown field(s) {unknown}; a profile holds description, base, runtime and notebooks"
        else:
            e = errors[0]
            problem = f"{'.'.join(map(str, e['loc'])) or 'the file'}: {e['msg']} (got {e['input']!r})"
        raise ProfileError(f"Profile {name!r} ({path.name}): {problem}.") from None
    return {key: getattr(valid, key) for key in raw}  # in the file's order


@lru_cache(maxsize=None)
def _load(name: str) -> dict:
    path = FOLDER / f"{name}.yml"
    if name not in names():
        known = names()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ProfileError(f"Unknown profile {name!r}.{hint} Known profiles: {', '.join(known)}.")
    profile = _validated(name, path, read_yaml(path.read_text()) or {})
    profile.setdefault("notebooks", {})
    base = profile.pop("base", None)
    if base:
        merged = _load(base)
        profile["notebooks"] = {chapter: _merge(merged["notebooks"].get(chapter) or {}, block or {})
                                for chapter, block in {**merged["notebooks"], **profile["notebooks"]}.items()}
        profile["base"] = base
        profile.setdefault("runtime", merged.get("runtime"))
    return profile


def load(name: str) -> dict:
    """The profile as a dict: ``description``, ``notebooks`` (chapter -> parameters), ``base`` when it extends one,
    ``runtime`` (the machine it assumes, ``pages.budget.RUNTIMES``; its base's when it sets none)."""
    return copy.deepcopy(_load(name))


def chapter_parameters(profile: str, chapter: str) -> dict:
    """The parameters ``chapter`` runs with under ``profile`` (its block of the profile; may be empty)."""
    return copy.deepcopy(_load(profile)["notebooks"].get(chapter) or {})


# ---- chapter sources and their parameters cell ----------------------------------------------------------------------

EXECUTED = Path("book") / "executed"  # where the runner writes executed chapters (the toc's entries point there)


# The book's _toc.yml and notebooks/*.ipynb as a wheel carries them (setup.py copies them here; a checkout has none)
PACKAGED = Path(__file__).resolve().parent / "book"


def chapters() -> list[str]:
    """Chapter names in ``_toc.yml`` order: every toc entry under ``book/executed/``."""
    root = checkout() or packaged()
    if root is None:
        raise ProfileError("The chapters' order needs a checkout of the book (a folder with _toc.yml).")
    return toc_chapters(root)


def toc_chapters(root: Path) -> list[str]:
    """The chapters of ``root``'s ``_toc.yml`` in its order (``chapters`` of another tree, e.g. the one Sphinx renders)."""
    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            file = node.get("file")
            if isinstance(file, str) and file.startswith(EXECUTED.as_posix() + "/"):
                found.append(file.split("/")[-1].removesuffix(".ipynb"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(yaml.safe_load((root / "_toc.yml").read_text()))
    return found


def checkout() -> Path | None:
    """The checkout holding ``notebooks/`` (None on a plain install, e.g. Colab)."""
    return paths.project_root()


def packaged() -> Path | None:
    """The folder of ``_toc.yml`` and ``notebooks/*.ipynb`` that an installed wheel carries, else None."""
    return PACKAGED if (PACKAGED / "_toc.yml").is_file() else None


def notebook_source(name: str) -> Path:
    root = checkout()
    if root is None:
        raise ProfileError("Chapter sources need a checkout of the book (a folder with _toc.yml and notebooks/).")
    path = root / "notebooks" / f"{name}.md"
    if not path.is_file():
        known = [p.stem for p in (root / "notebooks").glob("*.md")]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ProfileError(f"No notebook {name!r} in notebooks/.{hint}")
    return path


def read_notebook(name: str):
    """The MyST source as an nbformat notebook with the python3 kernelspec (jupytext writes none; papermill needs one)."""
    import jupytext

    nb = jupytext.read(notebook_source(name))
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata.setdefault("jupytext", {}).pop("text_representation", None)
    return nb


def source_hash(name: str) -> str:
    return hashlib.sha256(notebook_source(name).read_bytes()).hexdigest()[:16]


def _assignments(text: str) -> dict[str, dict]:
    """Top-level ``name = value  # comment`` lines of a cell: name -> {"default": value source, "help": comment}.

    Read with ``ast`` rather than papermill's line pattern, which drops any parameter whose comment contains "=".
    """
    tree = ast.parse(text)
    lines = text.splitlines()
    found = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        if len(targets) != 1 or not isinstance(targets[0], ast.Name) or getattr(node, "value", None) is None:
            continue
        rest = lines[node.end_lineno - 1][node.end_col_offset:]
        found[targets[0].id] = {"default": ast.get_source_segment(text, node.value),
                                "help": rest.split("#", 1)[1].strip() if "#" in rest else ""}
    return found


def _parameters_file(name: str) -> Path:
    """Where the chapter's parameters cell is read: its MyST source (jupytext, which only the book's stack installs),
    else its committed ``.ipynb`` copy (written from the source by ``make sync``, a test keeps them the same), so that
    a checkout with only the ``colab`` extra installed checks a run's parameters too; outside a checkout, the copy a
    wheel carries (``packaged``)."""
    if checkout() is None and packaged() is not None:
        copy_ = packaged() / "notebooks" / f"{name}.ipynb"
        if not copy_.is_file():
            close = difflib.get_close_matches(name, chapters(), n=1)
            raise ProfileError(f"No chapter {name!r} in this installation." + (
                f" Did you mean {close[0]!r}?" if close else ""))
        return copy_
    try:
        import jupytext  # noqa: F401
    except ImportError:
        copy_ = notebook_source(name).with_suffix(".ipynb")
        if copy_.is_file():
            return copy_
    return notebook_source(name)


def _parameters_cell(path: Path) -> str | None:
    """The source of the parameters cell of ``path``, a chapter's MyST source or its ``.ipynb`` copy."""
    if path.suffix == ".ipynb":
        import json

        cell = next((c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"
                     and "parameters" in c.get("metadata", {}).get("tags", [])), None)
        source = None if cell is None else cell["source"]
        return "".join(source) if isinstance(source, list) else source
    cell = next((c for c in read_notebook(path.stem).cells
                 if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])), None)
    return None if cell is None else cell.source


@lru_cache(maxsize=64)
def _inspect_source(name: str, path: Path, digest: str) -> dict:
    source = _parameters_cell(path)
    if source is None:
        return {}
    try:
        return _assignments(source)
    except SyntaxError as exc:
        raise ProfileError(f"notebooks/{path.name}: the parameters cell is not plain Python ({exc.msg}, line "
                           f"{exc.lineno} of the cell).") from None


def _inspect(name: str) -> dict:
    path = _parameters_file(name)
    return _inspect_source(name, path, hashlib.sha256(path.read_bytes()).hexdigest()[:16])


def notebook_parameters(name: str) -> dict:
    """The parameters cell's names and default values (Python literals)."""
    return {pname: ast.literal_eval(info["default"]) for pname, info in _inspect(name).items()}


# ---- what each parameter allows (allowed.yml) -----------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """What a parameter allows, as ``allowed.yml`` writes it (``n_pairs: {at_least: 1}``): bounds ``at_least`` /
    ``at_most`` (inclusive) and ``above`` / ``below`` (exclusive), and/or the values ``one_of``; for a list value
    every element must satisfy them. pydantic validates the file against these fields (``read_allowed``)."""

    __pydantic_config__ = {"extra": "forbid"}  # a misspelt key is an error, not a rule that checks nothing

    at_least: float | None = None
    at_most: float | None = None
    above: float | None = None
    below: float | None = None
    one_of: tuple[str, ...] = ()

    def __post_init__(self):
        for inclusive, exclusive in (("at_least", "above"), ("at_most", "below")):
            if getattr(self, inclusive) is not None and getattr(self, exclusive) is not None:
                raise ValueError(f"{inclusive} and {exclusive} both bound the same side; give one")
        low, high = self.bounds().get("ge", self.above), self.bounds().get("le", self.below)
        if low is not None and high is not None and low > high:
            raise ValueError(f"the range is empty ({self.text})")
        if not self.bounds() and not self.one_of:
            raise ValueError("a rule gives at_least, at_most, above, below or one_of")

    def bounds(self) -> dict:
        """The bounds as pydantic's ``Field`` keywords (``ge``, ``le``, ``gt``, ``lt``)."""
        pairs = (("ge", self.at_least), ("le", self.at_most), ("gt", self.above), ("lt", self.below))
        return {key: value for key, value in pairs if value is not None}

    @property
    def text(self) -> str:
        """The rule in words, as the one-line refusals and ``anisotropy chapters NAME`` show it: ``at least 1``,
        ``in [1, 50]``, ``> 0, < 1``, ``one of "post_ln", "pre_ln"``."""
        if self.at_least is not None and self.at_most is not None:
            words = [f"in [{_shown(self.at_least)}, {_shown(self.at_most)}]"]
        else:
            words = [f"at least {_shown(self.at_least)}" if self.at_least is not None else "",
                     f"> {_shown(self.above)}" if self.above is not None else "",
                     f"at most {_shown(self.at_most)}" if self.at_most is not None else "",
                     f"< {_shown(self.below)}" if self.below is not None else ""]
        if self.one_of:
            words.append("one of " + ", ".join(f'"{choice}"' for choice in self.one_of))
        return ", ".join(w for w in words if w)

    def violation(self, value) -> str | None:
        """Why ``value`` is not allowed (None when it is): each item (of a list value) goes through pydantic, the
        choices as a ``Literal`` and the bounds as a strict float's ``Field(ge=...)`` and the like; the bounds apply to
        numbers only (not to bools)."""
        from pydantic import ValidationError

        choices, bounds = _rule_validators(self.one_of, tuple(sorted(self.bounds().items())))
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if choices is not None:
                try:
                    choices.validate_python(item)
                except ValidationError:
                    return f"{item!r} is not one of {', '.join(map(repr, self.one_of))}"
            if bounds is None or isinstance(item, bool) or not isinstance(item, (int, float)) or item != item:
                continue  # (item != item: NaN, which no bound refuses)
            try:
                bounds.validate_python(item)
            except ValidationError as err:
                side = "below" if err.errors()[0]["type"] in ("greater_than", "greater_than_equal") else "above"
                return f"{item!r} is {side} the allowed range ({self.text})"
        return None


def _shown(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(bound)  # "at least 1", not "at least 1.0"


@lru_cache(maxsize=None)
def _rule_validators(choices: tuple, bounds: tuple):
    from typing import Annotated, Literal

    from pydantic import Field, TypeAdapter

    return (TypeAdapter(Literal[choices]) if choices else None,
            TypeAdapter(Annotated[float, Field(strict=True, **dict(bounds))]) if bounds else None)


@lru_cache(maxsize=None)
def read_allowed(path: Path) -> dict[str, dict[str, Rule]]:
    """``allowed.yml`` (chapter -> parameter -> ``Rule``), validated by pydantic; one ``ProfileError`` naming the entry
    and the key when the file is wrong."""
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(dict[str, dict[str, Rule]]).validate_python(read_yaml(path.read_text()) or {})
    except ValidationError as err:
        e = err.errors()[0]
        where = ".".join(str(part) for part in e["loc"])
        if e["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
            problem = "unknown key; a rule holds at_least, at_most, above, below and one_of"
        else:
            problem = e["msg"].removeprefix("Value error, ")
            problem += f" (got {e['input']!r})" if e["type"] != "value_error" else ""
        raise ProfileError(f"{path.name}: {where}: {problem}.") from None


def parameter_table(name: str, profile: str = DEFAULT) -> list[dict]:
    """One row per parameter of chapter ``name``: its name, kind (number, str, list...), what its comment says, what
    it allows (``Rule.text``), its value in the parameters cell and under ``profile`` (what ``anisotropy chapters
    NAME`` prints)."""
    values, rules = chapter_parameters(profile, name), parameter_rules(name)
    rows = []
    for pname, info in _inspect(name).items():
        default = ast.literal_eval(info["default"])
        rows.append({"name": pname, "kind": _kind(default), "meaning": (info.get("help") or "").strip(),
                     "allowed": rules[pname].text if pname in rules else "", "notebook": default,
                     profile: values.get(pname, default)})
    return rows


def parameter_rules(name: str) -> dict[str, Rule]:
    """What chapter ``name``'s parameters allow: its block of ``allowed.yml`` (parameter -> ``Rule``; may be empty)."""
    return dict(read_allowed(ALLOWED).get(name, {}))


def _kind(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def check(name: str, given: dict, defaults: dict, rules: dict[str, Rule] | None = None) -> None:
    """Refuse unknown names, values whose kind differs from the notebook default (bool/number/str/list/dict), and
    values outside what the parameter allows (``rules``, see ``parameter_rules``)."""
    problems = []
    for pname, value in given.items():
        if pname not in defaults:
            close = difflib.get_close_matches(pname, list(defaults), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown parameter {pname!r}{hint}")
            continue
        default = defaults[pname]
        if default is not None and value is not None and _kind(value) != _kind(default):
            problems.append(f"parameter {pname!r} should be a {_kind(default)} like {default!r}, got {value!r}")
            continue
        if isinstance(default, (list, tuple)) and default and isinstance(value, (list, tuple)):
            wrong = [v for v in value if _kind(v) != _kind(default[0])]
            if wrong:
                problems.append(f"parameter {pname!r} should be a list of {_kind(default[0])}s like {default!r}, "
                                f"got {value!r}")
                continue
        why = (rules or {}).get(pname) and rules[pname].violation(value)
        if why:
            problems.append(f"parameter {pname!r}: {why}")
    if problems:
        raise ProfileError(
            f"Notebook {name!r}: " + "; ".join(problems) + f". Its parameters are: {', '.join(sorted(defaults))}."
        )


def check_profile(profile: str, chapters: list[str], overrides: dict | None = None) -> None:
    """Check every chapter's parameters under ``profile`` before anything runs: a typo in chapter 9's block must
    not surface after chapters 1 to 8 have run. Raises one ``ProfileError`` listing every problem."""
    load(profile)  # an unknown profile is one problem, not one per chapter
    problems = []
    for name in chapters:
        try:
            check(name, {**chapter_parameters(profile, name), **(overrides or {})}, notebook_parameters(name),
                  parameter_rules(name))
        except ProfileError as exc:
            problems.append(str(exc))
    if problems:
        raise ProfileError(f"profile {profile!r}: " + " ".join(problems))


# ---- resolution inside a kernel -------------------------------------------------------------------------------------

FROM_PROFILE, SET_HERE, DEFAULTED = "profile", "set here", "notebook"


@dataclass
class Resolved:
    """A chapter's parameters after ``apply``: their ``values`` and, per name, where each came from
    (``origins``: "profile" = the named profile's value, "set here" = the parameters cell or papermill ``-p``,
    "notebook" = the cell's default, which the profile does not set)."""

    chapter: str
    profile: str
    values: dict = field(default_factory=dict)
    origins: dict = field(default_factory=dict)
    results_dir: str = ""  # where this run's results store is, when the reader moved it ("" = the default)

    def origin_words(self, name: str) -> str:
        origin = self.origins.get(name)
        if origin == FROM_PROFILE:
            return f"profile {self.profile}"
        return {SET_HERE: "set in this run (parameters cell or papermill -p)", DEFAULTED: "notebook default"}.get(
            origin, "")


def _papermill_injected(namespace: dict) -> set[str]:
    """Names assigned by papermill's injected-parameters cell ("# Parameters" ...), read from IPython's input
    history; empty outside papermill."""
    for cell in reversed(namespace.get("In") or []):
        if cell.lstrip().startswith("# Parameters"):
            try:
                return set(_assignments(cell))
            except SyntaxError:
                return set()
    return set()


def _in_kernel() -> bool:
    """Whether this runs in a notebook kernel (IPython), where a chapter is about to measure, rather than in a test or
    a tool that only resolves a chapter's parameters."""
    try:
        get_ipython()  # noqa: F821 - defined inside IPython only
    except NameError:
        return False
    return True


def one_line_errors() -> None:
    """In a notebook kernel, show the failures a reader can fix (a parameter, a model or dataset that cannot be had
    here, a full disk, a model too large for the device) as their one-line message instead of a traceback; the cell
    still fails, so papermill and the book runner report it."""
    try:
        shell = get_ipython()  # noqa: F821 - defined inside IPython only
    except NameError:
        return
    def show(shell, etype, value, tb, tb_offset=None):
        stb = [f"{etype.__name__}: {value}"]
        shell._showtraceback(etype, value, stb)  # the cell's error output (what IPython's showtraceback sends)
        return stb

    shell.set_custom_exc((UserError, hub.Unavailable, hub.NoSpace, ModelTooLargeError), show)


def apply(chapter: str, namespace: dict) -> Resolved:
    """Resolve ``chapter``'s parameters in ``namespace`` (a notebook's ``globals()``) from its ``profile`` value.

    A parameter keeps its value when the user set it: papermill injected it (``-p``, the book runner's overrides) or
    it differs from the ``local`` value printed in the parameters cell (an edit on Colab). Every other parameter takes
    the named profile's value. The namespace is updated in place; outside the book runner the values are checked as
    the runner checks them (kinds, and what ``allowed.yml`` allows: on Colab too). From here on, the failures a
    reader can fix show as one line (``one_line_errors``); a ``device`` of "cuda" on a machine without a GPU stops
    here (``devices.NoGPUError``), and so does ``profile = "paper"`` on a Colab runtime without one
    (``devices.check_runtime``). A ``results_dir`` moves this run's results store there (``paths.use_results``:
    on Colab a folder of Google Drive, mounted if it is not, and unpacked: ``results``), so a chapter run again after
    a disconnect continues from what it stored; like ``profile`` it is not among ``values``.
    """
    one_line_errors()
    profile = namespace.get("profile", DEFAULT)
    wanted = chapter_parameters(profile, chapter)  # raises for an unknown profile
    has_source = checkout() is not None and (checkout() / "notebooks" / f"{chapter}.md").is_file()
    defaults = chapter_parameters(DEFAULT, chapter) or (notebook_parameters(chapter) if has_source else {})
    for name in RUNTIME:
        defaults.pop(name, None)
    injected = _papermill_injected(namespace)
    resolved = Resolved(chapter, profile, results_dir=str(namespace.get("results_dir") or ""))
    if resolved.results_dir:
        paths.use_results(resolved.results_dir)
        # cost: pulls pandas (~1 s) into every training unit's process (book.units imports this module)
        from anisotropy import results

        if not results.is_url(resolved.results_dir):  # a packed folder (Google Drive) unpacks here, at the start
            results.Store()
    for name, default in defaults.items():
        current = namespace.get(name, default)
        if name in injected or current != default:
            value, origin = current, SET_HERE
        elif name in wanted:
            value, origin = wanted[name], FROM_PROFILE
        else:
            value, origin = current, DEFAULTED
        namespace[name] = resolved.values[name] = value
        resolved.origins[name] = origin
    if os.environ.get("ANISOTROPY_RUNNER") != "1":  # the runner has checked them already
        # plain papermill injects a misspelt name as a new variable and warns only: the chapter would run with the
        # profile's value, so a name that is not a parameter stops here, naming the nearest one
        runtime = {"profile": profile, "results_dir": resolved.results_dir}
        check(chapter, {name: namespace[name] for name in sorted(injected - set(defaults) - set(RUNTIME))},
              {**runtime, **defaults})
        reference = notebook_parameters(chapter) if has_source else {"profile": DEFAULT, "results_dir": "", **defaults}
        check(chapter, {**{k: v for k, v in runtime.items() if k in reference}, **resolved.values}, reference,
              parameter_rules(chapter))
    if _in_kernel() and (profile == "paper" or "cuda" in str(resolved.values.get("device", ""))):
        # No GPU where one is needed: stop now, in one line, not deep inside a measurement.
        devices.check_runtime(profile, resolved.values.get("device", "auto"))
    return resolved
