"""A chapter's plan, found by its name, and a chapter's run: what a page asks of a runtime, as the chapter says it.

Each chapter module ``chapters.<chapter>`` that downloads, measures or trains has ``plan(p, out)``: it adds to ``out``
(a ``pages.budget.Plan``) the checkpoints, data and training the chapter requests with its resolved parameters ``p``,
read from the experiments' own constants; ``pages.budget`` turns a plan into sizes and minutes. ``plan(chapter,
params, profile)`` finds a chapter's ``plan`` by name (a chapter without one requests nothing).

No layer below this one imports a chapter module, so a page hands its plan down: its first cell calls ``apply``
(``profiles.apply``, returning a ``Run``, whose ``plan`` ``pages.report``'s provenance box reads), and its budget cell
calls ``colab_budget``. The book layer above reads plans by name.

Before anything runs, ``apply`` checks the chapter's plan against the runtime its profile assumes
(``pages.budget.runtime``: a free Colab T4 for ``paper``, a 2-core machine without a GPU for ``local`` and ``smoke``):
every part (``pages.budget.Part``) must fit its memory and, where the runtime limits it, its session. A part that
does not stops the chapter in one line (``PlanError``, ``check``), which names the part and the parameter to change,
with the largest value that fits by the plan's own count (``problems``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from functools import cached_property

from anisotropy import profiles
from anisotropy.errors import UserError
from anisotropy.models import registry
from anisotropy.pages import budget, report


class PlanError(UserError):
    """A chapter whose plan does not fit the runtime its profile assumes, told before anything is downloaded."""


def plan(chapter: str, params: dict, profile: str = "paper") -> budget.Plan:
    """The checkpoints, data and training ``chapter`` requests with ``params`` (its resolved parameters), from its
    module's ``plan``; ``profile`` names where the suites it trains are defined."""
    out = budget.Plan(chapter, profile=profile, chunk_chars=preparation_chunk())
    module = f"{__package__}.{chapter}"
    if importlib.util.find_spec(module) is not None:
        fill = getattr(importlib.import_module(module), "plan", None)
        if fill is not None:
            fill(params, out)
    _drop_unloadable(out)
    return out


def _drop_unloadable(plan: budget.Plan) -> None:
    """Leave out the checkpoints of models the installed transformers cannot load (VAN under transformers 5): the
    chapter skips them in one line and downloads nothing for them; a note names them."""
    dropped = set()
    for c in plan.checkpoints:
        if not registry.known(c.model):
            continue
        try:
            registry.check_transformers(registry.spec(c.model))
        except registry.ModelUnavailableError:
            dropped.add(c.model)
    if dropped:
        plan.checkpoints = [c for c in plan.checkpoints if c.model not in dropped]
        plan.notes.append(f"not planned: {', '.join(sorted(dropped))} (this runtime's transformers cannot load them)")


def preparation_chunk() -> int | None:
    """The characters the trainer tokenizes at once when it prepares a corpus: ``training.tokens.CHUNK_CHARS`` where
    the training data are prepared in chunks into an on-disk array (issue 55), None where ``training.tasks``
    tokenizes a whole corpus at once."""
    if importlib.util.find_spec("anisotropy.training.tokens") is None:
        return None
    return getattr(importlib.import_module("anisotropy.training.tokens"), "CHUNK_CHARS", None)


class Run(profiles.Resolved):
    """A chapter's resolved parameters (``profiles.Resolved``) with what they ask of a runtime: ``plan``, the
    chapter's plan under this run's values and profile, made when first read."""

    @cached_property
    def plan(self) -> budget.Plan:
        return plan(self.chapter, self.values, self.profile)  # the module's ``plan``: a method body skips the class


def _get(params: dict, path: str):
    value = params
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _with(params: dict, path: str, value) -> dict:
    """``params`` with the (dotted) ``path`` set to ``value``, the rest shared."""
    head, _, rest = path.partition(".")
    return {**params, head: _with(params[head], rest, value) if rest else value}


def _largest_fitting(chapter: str, params: dict, profile: str, part: budget.Part, what: str, knob: str):
    """The largest whole value of parameter ``knob`` (below its value in ``params``) at which ``part`` (found by
    name in the chapter's plan) no longer shows the problem ``what`` ("host memory", "time", ...) on the profile's
    runtime, by bisection on the plan; None when even 1 does not make it fit or ``knob`` is not a count."""
    value = _get(params, knob)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 2:
        return None
    rt = budget.runtime(profile)

    def fits(v: int) -> bool:
        found = [x for x in budget.parts(plan(chapter, _with(params, knob, v), profile)) if x.name == part.name]
        return not any(line.startswith(what) for x in found for line in budget.part_problems(x, rt))

    high = int(value) if value < 2**63 else 2**63  # a value beyond any machine: bisect from a still absurd one
    if not fits(1):
        return None
    low = 1
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def problems(chapter: str, params: dict, profile: str) -> list[str]:
    """What of ``chapter``'s plan with ``params`` does not fit the runtime ``profile`` assumes (``budget.fit``), one
    line per problem and group of like parts (naming the others), each with what to change: the largest value of
    each parameter that sizes the part (its ``sized_by``, at most two) at which it fits, else ``budget.hint``."""
    rt = budget.runtime(profile)
    out: dict[tuple, str] = {}
    others: dict[tuple, list[str]] = {}
    for part, line in budget.fit(plan(chapter, params, profile), rt):
        what = line.split(":", 1)[0]
        key = (part.group if part else None, what)
        if key in out:
            others[key].append(part.name)
            continue
        others[key] = []
        advice = []
        for knob in part.sized_by if part else ():
            best = _largest_fitting(chapter, params, profile, part, what, knob)
            if best is not None:
                advice.append(f"{knob} to at most {best:,}")
            if len(advice) == 2:
                break
        if part is not None:
            line += "; set " + " or ".join(advice) if advice else f"; {budget.hint(part, line)}"
        out[key] = line
    return [line + (f" (so do {report.listing(others[key])})" if others[key] else "") for key, line in out.items()]


def check(chapter: str, params: dict, profile: str) -> None:
    """Stop (``PlanError``, one paragraph) when a part of ``chapter``'s plan with ``params`` does not fit the runtime
    ``profile`` assumes: what does not fit and what to change (``problems``)."""
    lines = problems(chapter, params, profile)
    if lines:
        rt = budget.runtime(profile)
        raise PlanError(f"{chapter} under profile {profile!r} does not fit {rt.description} ({len(lines)} "
                        f"problem{'s' if len(lines) > 1 else ''}; nothing was downloaded or run): "
                        + "; ".join(lines) + ".")


def apply(chapter: str, namespace: dict) -> Run:
    """``profiles.apply`` (``chapter``'s parameters resolved in its notebook's ``namespace``, the namespace updated),
    as a ``Run``, once its plan is checked against the runtime its profile assumes (``check``: a part that does not
    fit stops here, before any download): what a page's first cell calls."""
    resolved = profiles.apply(chapter, namespace)
    run = Run(**{f.name: getattr(resolved, f.name) for f in dataclasses.fields(resolved)})
    check(run.chapter, run.values, run.profile)
    return run


def colab_budget(run: Run):
    """What the chapter asks of a Colab runtime on the ``paper`` route (``report.paper_route``: this run's values
    under a profile based on ``paper``, else the ``paper`` profile's): glues ``paper_requests`` and ``colab_budget``
    and returns the budget table (``report.colab_budget``)."""
    params, profile = report.paper_route(run)
    return report.colab_budget(plan(run.chapter, params, profile))


def parameters(chapter: str, profile: str) -> dict:
    """``chapter``'s parameters under ``profile`` as its page resolves them (``profiles.apply``): the profile's
    values, and for every parameter it does not set, the parameters cell's (the ``local`` profile's)."""
    return {**profiles.chapter_parameters(profiles.DEFAULT, chapter), **profiles.chapter_parameters(profile, chapter)}


def profile_plans(profile: str, chapters=None) -> list[budget.Plan]:
    """The plan of every chapter of ``chapters`` (default: the chapters ``profile`` sets, in its order) under
    ``profile`` (``parameters``)."""
    names = list(chapters) if chapters is not None else list(profiles.load(profile)["notebooks"])
    return [plan(name, parameters(name, profile), profile) for name in names]


def runtime_words(profile: str) -> str:
    """The runtime ``profile`` assumes, with its limits, in words: "a free Colab runtime with a T4: 15 GiB of GPU
    memory, 12.7 GiB of host memory, 2 vCPUs, 40 GiB of free disk, at most 3 h a part"."""
    rt = budget.runtime(profile)
    limits = ([f"{budget.GPUS[rt.gpu].memory_gib:.0f} GiB of GPU memory"] if rt.gpu else ["no GPU"])
    limits += [f"{rt.ram_gib:g} GiB of host memory", f"{rt.cpus} vCPUs"]
    limits += [f"{rt.disk_gib:.0f} GiB of free disk"] if rt.disk_gib is not None else []
    limits += [f"at most {rt.part_hours:g} h a part"] if rt.part_hours is not None else ["no limit on a part's time"]
    return f"{rt.description}: {', '.join(limits)}"
