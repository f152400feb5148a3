"""Fingerprints of the code that produces a result, so that a changed library never leaves old numbers on a page.

``of(module)`` hashes the source of a module of this package and of every package module it imports (read with
``ast``, at any depth of the file; modules by dotted name, ``measure.metrics``), the data files that are part of a
module's code (``DATA_FILES``: the model table is ``models.table``'s), plus the versions of the packages that shape
numbers (``PACKAGES``). A sub-package's ``__init__`` is followed only when it holds code (the layers' hold a
docstring). Two kinds of edges are not followed:

- modules that never change a number (``NOT_NUMERIC``): they locate, schedule or transport results (``executor``
  decides where a computation runs, not what it computes); so does every module of a sub-package in
  ``NOT_NUMERIC_PACKAGES``: ``pages`` presents numbers, ``book`` builds the book, ``chapters.<chapter>`` words a
  page's numbers (no library module imports one, and a computation defined in one and stored through
  ``Store.cached`` is still keyed by it, since a root is always kept);
- the trainer's modules (``TRAINER``: the modules of ``training``), from any module outside the trainer: a
  self-trained checkpoint enters a measurement as an input with its own key (its recipe hash and training record
  hold the trainer's fingerprint, ``trainer()``), so measuring it does not depend on the trainer's code.

So an edit to ``measure/statistics.py`` changes the fingerprint of every measurement, an edit to ``pages/plots/``
changes none, and an edit to any trainer module (``training/recipes.py``, say) changes the trained checkpoints (hence
the measurements of those checkpoints only).
``package()`` covers every module: what an executed notebook shows depends on all of them. A computation defined
outside the package (a notebook's lambda) adds its own code (``own_code``), and may call the library only.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import types
from functools import lru_cache
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
PACKAGES = ("torch", "transformers", "tokenizers", "numpy", "scipy")
NOT_NUMERIC = frozenset({"profiles", "paths", "hub", "results", "fingerprint", "executor", "errors", "__main__"})
# Sub-packages whose modules never change a number: the page helpers (report, plots, budget), the book's build
# (runner, execution, kernels, sweeps, cli; machine calibrates, it measures no result) and the chapter modules, which
# word numbers.
NOT_NUMERIC_PACKAGES = frozenset({"pages", "book", "chapters"})
# The trainer: the modules whose code decides a self-trained checkpoint's weights (the loop, the recipes with their
# tokenizers and models, the tasks with their loss, the token arrays, the checkpoints on disk with the training record).
TRAINER = frozenset({"training.trainer", "training.recipes", "training.tasks", "training.checkpoints",
                     "training.tokens"})
# Data files that are part of a module's code: a changed entry of the model table changes registry's fingerprint; a
# changed Hub manifest changes hub's, hence ``package()`` and every executed page's stamp (a paper page names the
# manifest's unverified facts), though no measurement (hub is not numeric).
DATA_FILES = {"models.table": ("models/models.yml",), "hub": ("hub_manifest.yml",)}


def _path(module: str) -> Path:
    parts = module.split(".")
    file = FOLDER.joinpath(*parts).with_suffix(".py")
    return file if file.is_file() else FOLDER.joinpath(*parts, "__init__.py")


def _name(module: str) -> str:
    name = module.removeprefix("anisotropy").lstrip(".")
    if not _path(name).is_file():
        raise ValueError(f"{module!r} is not a module of the anisotropy package")
    return name


def _package_of(module: str) -> str:
    """The package a module's relative imports start from: itself for a package (``profiles``), else its parent
    (``""``, the top of the package, for ``measure.metrics``; ``chapters`` for ``chapters.p1_s5_qk_training``)."""
    return module if _path(module).name == "__init__.py" else module.rpartition(".")[0]


def _resolve(dotted: str) -> str | None:
    """The longest leading part of a dotted name that is a module of the package (``rules`` for ``rules.Outcome``,
    ``chapters.p2_layer_profiles`` for itself); None when no part is."""
    parts = [p for p in dotted.split(".") if p]
    for end in range(len(parts), 0, -1):
        if _path(".".join(parts[:end])).is_file():
            return ".".join(parts[:end])
    return None


@lru_cache(maxsize=None)
def _has_code(module: str) -> bool:
    """Whether a module holds more than its docstring (the sub-packages' ``__init__`` files hold a docstring only)."""
    path = _path(module)
    if not path.is_file():
        return False
    body = ast.parse(path.read_text()).body
    return len(body) > (1 if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else 0)


@lru_cache(maxsize=None)
def imports(module: str) -> frozenset[str]:
    """The package modules ``module`` imports anywhere in its file, by dotted name relative to the package: relative
    imports resolved from the module's own package (``from . import x``, ``from .x import y``, ``from .. import
    report`` in a sub-package) and absolute ones (``from anisotropy.x import y``, ``from anisotropy import x``,
    ``import anisotropy.x``)."""
    tree = ast.parse(_path(module).read_text())
    package = [p for p in _package_of(module).split(".") if p]
    wanted = []  # dotted names (relative to the package) that name a module, or a module and what it holds
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level > 0:
                if node.level - 1 > len(package):
                    continue  # above the package
                base = package[:len(package) - (node.level - 1)]
            elif node.module == "anisotropy" or (node.module or "").startswith("anisotropy."):
                base = []
            else:
                continue
            source = [*base, *(node.module or "").split(".")[node.level == 0:]]
            source = [p for p in source if p]
            # ``from anisotropy.models import registry``: x may be a module of its own; the package itself is followed
            # when a name comes from its ``__init__`` or that runs code (the layers' ``__init__`` hold a docstring only)
            submodules = [".".join([*source, alias.name]) for alias in node.names
                          if _path(".".join([*source, alias.name])).is_file()]
            if source and (len(submodules) < len(node.names) or _has_code(".".join(source))):
                wanted.append(".".join(source))
            wanted += submodules
        elif isinstance(node, ast.Import):
            wanted += [alias.name.removeprefix("anisotropy.") for alias in node.names
                       if alias.name.startswith("anisotropy.")]
    found = {_resolve(name) for name in wanted}
    return frozenset(m for m in found if m and m != module)


def numeric(module: str) -> bool:
    """Whether ``module`` (a dotted name relative to the package) may change a number: not in ``NOT_NUMERIC`` and not
    in a sub-package of ``NOT_NUMERIC_PACKAGES``."""
    return module not in NOT_NUMERIC and module.split(".")[0] not in NOT_NUMERIC_PACKAGES


def closure(*modules: str) -> tuple[str, ...]:
    """The modules whose code determines what ``modules`` compute (see the module docstring for the edges skipped)."""
    roots = {_name(m) for m in modules}
    seen, todo = set(), list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for dep in imports(module):
            if not numeric(dep) or (dep in TRAINER and not roots & TRAINER):
                continue
            todo.append(dep)
    return tuple(sorted(seen))


@lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Installed versions of the packages that shape numbers. On Colab a chapter's install cell pins each of them to
    the version the default runtime ships (``pages.colab.pins``), so a key is the same in every session on that image
    and a store kept on Drive is read back in the next one."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


@lru_cache(maxsize=None)
def _digest(modules: tuple[str, ...]) -> str:
    h = hashlib.sha256(json.dumps(versions(), sort_keys=True).encode())
    for module in modules:
        h.update(module.encode() + b"\0" + _path(module).read_bytes() + b"\0")
        for name in DATA_FILES.get(module, ()):
            h.update(name.encode() + b"\0" + (FOLDER / name).read_bytes() + b"\0")
    return h.hexdigest()[:12]


def of(*modules: str) -> str:
    """12 hex digits naming the code that ``modules`` compute with (their ``closure``) and the package versions."""
    return _digest(closure(*modules))


def trainer() -> str:
    """The fingerprint of the trainer's code (every module of ``TRAINER``, what they compute with, package versions):
    a recipe's hash, its tokenizer's folder and its training record hold it, so an edit to any of them trains anew."""
    return of(*TRAINER)


def package() -> str:
    """The fingerprint of every module of the package (what an executed notebook depends on)."""
    names = sorted(".".join(p.relative_to(FOLDER).with_suffix("").parts).removesuffix(".__init__")
                   for p in FOLDER.rglob("*.py") if "__pycache__" not in p.parts)
    return _digest(tuple(n for n in names if n != "__init__"))


def modules_of(fn) -> tuple[str, ...]:
    """The package modules a function computes with: its own module when it is defined in the package (a closure in
    ``experiments.layerwise.measure``), else the package modules its code refers to by name (a notebook's
    ``lambda: block.reference_norms(...)``), else every module."""
    if in_package(fn):
        return (_name(fn.__module__),)
    found = set()
    code, scope = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    codes = [code] if code is not None else []
    while codes:
        current = codes.pop()
        for name in current.co_names:
            value = scope.get(name)
            if isinstance(value, types.ModuleType) and value.__name__.startswith("anisotropy."):
                found.add(_name(value.__name__))
        codes += [c for c in current.co_consts if isinstance(c, types.CodeType)]
    return tuple(sorted(found)) or ("__all__",)


class UnkeyedCodeError(TypeError):
    """A compute function whose code the results key cannot cover (it calls a function of a notebook or test module)."""


def in_package(fn) -> bool:
    """Whether ``fn`` is defined in a module of this package (its module's fingerprint then covers its code)."""
    module = getattr(fn, "__module__", "") or ""
    return module == "anisotropy" or module.startswith("anisotropy.")


def _const_bytes(const) -> bytes:
    if isinstance(const, types.CodeType):
        return _code_bytes(const)
    if isinstance(const, (tuple, frozenset)):  # a set literal's order follows the string hash, which varies by process
        items = [_const_bytes(c) for c in const]
        return b"(" + b"\0".join(sorted(items) if isinstance(const, frozenset) else items) + b")"
    return repr(const).encode()


def _code_bytes(code: types.CodeType) -> bytes:
    # Bytecode, names and constants, nested code (a comprehension, an inner lambda) included; not the line numbers or
    # the file name, so moving a notebook cell does not change the digest, but editing what it computes does.
    parts = [code.co_code, repr(code.co_names).encode(), repr(code.co_varnames).encode()]
    return b"\0".join(parts + [_const_bytes(const) for const in code.co_consts])


def own_code(fn) -> str | None:
    """12 hex digits of the own code of a function defined outside the package (a notebook's lambda, a test's
    function); None for a package function, whose module fingerprint (``of``) already covers it.

    Only ``fn``'s own code is read, so the functions it calls must be covered by a fingerprint too: a call by name to
    a function defined in the same module as ``fn`` (another function of the notebook or test module) raises
    ``UnkeyedCodeError``, as does a callable without code of its own (an object, a ``functools.partial``)."""
    if in_package(fn):
        return None
    code = getattr(fn, "__code__", None)
    if code is None:
        raise UnkeyedCodeError(f"{fn!r} has no code of its own that a results key could cover: pass a function of "
                               "the anisotropy package, or a lambda that calls one.")
    codes, names = [code], set()
    while codes:
        current = codes.pop()
        names.update(current.co_names)
        codes += [c for c in current.co_consts if isinstance(c, types.CodeType)]
    values = [fn.__globals__.get(name) for name in names]
    for cell in fn.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # a closure cell not filled yet
            pass
    local = sorted(v.__name__ for v in values if isinstance(v, types.FunctionType) and v is not fn
                   and v.__module__ == fn.__module__)
    if local:
        raise UnkeyedCodeError(
            f"The computation {fn.__qualname__} of {fn.__module__} calls {', '.join(local)}, defined beside it (in a "
            "notebook or test module): the results key holds the library's code, not theirs, so an edit to them "
            "would bring old numbers back. Move them into the library module of their concept and call that.")
    return hashlib.sha256(_code_bytes(code)).hexdigest()[:12]


def of_function(fn) -> tuple[tuple[str, ...], str]:
    """(modules, fingerprint) of the code a function computes with (``modules_of``)."""
    modules = modules_of(fn)
    return modules, package() if modules == ("__all__",) else of(*modules)
