"""A chapter's plan, found by its name, and a chapter's run: what a page asks of a runtime, as the chapter says it.

Each chapter module ``chapters.<chapter>`` that downloads, measures or trains has ``plan(p, out)``: it adds to ``out``
(a ``pages.budget.Plan``) the checkpoints, data and training the chapter requests with its resolved parameters ``p``,
read from the experiments' own constants; ``pages.budget`` turns a plan into sizes and minutes. ``plan(chapter,
params, profile)`` finds a chapter's ``plan`` by name (a chapter without one requests nothing).

No layer below this one imports a chapter module, so a page hands its plan down: its first cell calls ``apply``
(``profiles.apply``, returning a ``Run``, whose ``plan`` ``pages.report``'s provenance box reads), and its budget cell
calls ``colab_budget``. The book layer above reads plans by name.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from functools import cached_property

from anisotropy import profiles
from anisotropy.models import registry
from anisotropy.pages import budget, report


def plan(chapter: str, params: dict, profile: str = "paper") -> budget.Plan:
    """The checkpoints, data and training ``chapter`` requests with ``params`` (its resolved parameters), from its
    module's ``plan``; ``profile`` names where the suites it trains are defined."""
    out = budget.Plan(chapter, profile=profile)
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


class Run(profiles.Resolved):
    """A chapter's resolved parameters (``profiles.Resolved``) with what they ask of a runtime: ``plan``, the
    chapter's plan under this run's values and profile, made when first read."""

    @cached_property
    def plan(self) -> budget.Plan:
        return plan(self.chapter, self.values, self.profile)  # the module's ``plan``: a method body skips the class


def apply(chapter: str, namespace: dict) -> Run:
    """``profiles.apply`` (``chapter``'s parameters resolved in its notebook's ``namespace``, the namespace updated),
    as a ``Run``: what a page's first cell calls."""
    resolved = profiles.apply(chapter, namespace)
    return Run(**{f.name: getattr(resolved, f.name) for f in dataclasses.fields(resolved)})


def colab_budget(run: Run):
    """What the chapter asks of a Colab runtime on the ``paper`` route (``report.paper_route``: this run's values
    under a profile based on ``paper``, else the ``paper`` profile's): glues ``paper_requests`` and ``colab_budget``
    and returns the budget table (``report.colab_budget``)."""
    params, profile = report.paper_route(run)
    return report.colab_budget(plan(run.chapter, params, profile))
