"""The build's training units: each run (suite x seed) of the profile's self-trained suites that a chapter to execute
reads, trained in a process of its own, so that the build schedules it beside the chapters, longest first
(``book.runner``), instead of one chapter training every run in its kernel.

A chapter names the suites it reads in its front matter (``anisotropy: {suites: [mlm, clm]}``: each seed of each; the
suites are those of the profile's ``checkpoint_suites`` chapter, ``training.recipes.suite_specs``). It does not wait
for them to start: the build starts it when a core is free, and where it reaches a run that a unit is training, it
waits for that run (``training.checkpoints.claimed``: the run's lock) while its core goes to other work
(``executor.waiting``), then reads it; a run nobody is training yet it trains itself, as it does when run alone
(``python -m anisotropy run``). Training is deterministic given recipe and seed, so who trains a run changes no
number. A unit's process is::

    python -m anisotropy.book.units SUITE SEED PROFILE
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from anisotropy import profiles, progress

PREFIX = "train:"


@dataclass(frozen=True)
class Unit:
    """One training run of the build: ``suite``'s recipe of ``seed`` under the build's profile."""

    suite: str
    seed: int

    @property
    def name(self) -> str:
        """``train:<suite>:<seed>``, the unit's name in the build's console and records."""
        return f"{PREFIX}{self.suite}:{self.seed}"

    @property
    def log(self) -> str:
        """Its log's file name under ``_build/logs``."""
        return f"train-{self.suite}-{self.seed}.log"

    def recipe(self, profile: str):
        # cost: pulls torch (~1.5 s) into every `python -m anisotropy` start (book.runner imports this module)
        from anisotropy.training import recipes

        return next(r for r in recipes.suite(self.suite, profile) if r.seed == self.seed)


def is_unit(name: str) -> bool:
    return name.startswith(PREFIX)


def parse(name: str) -> Unit:
    """The ``Unit`` named ``train:<suite>:<seed>``."""
    suite, seed = name.removeprefix(PREFIX).rsplit(":", 1)
    return Unit(suite, int(seed))


def suites_read(chapter: str) -> list[str]:
    """The self-trained suites ``chapter`` reads, as its front matter names them (``anisotropy: {suites: [...]}``)."""
    return list(profiles.read_notebook(chapter).metadata.get("anisotropy", {}).get("suites", []) or [])


def needed(profile: str, chapters: list[str], trained: bool = False) -> list[Unit]:
    """The units of the runs ``chapters`` read (every seed of every suite they name) that are not trained yet (all of
    them with ``trained``: a fresh build's), costliest first (``training.trainer.cost``)."""
    # cost: pulls torch (~1.5 s) into every `python -m anisotropy` start (book.runner imports this module)
    from anisotropy.training import checkpoints, recipes, trainer

    specs = recipes.suite_specs(profile)
    wanted = [s for s in dict.fromkeys(s for c in chapters for s in suites_read(c)) if s in specs]
    runs = [r for s in wanted for r in recipes.recipes(s, specs[s]) if trained or not checkpoints.is_trained(r)]
    return [Unit(r.suite, r.seed) for r in sorted(runs, key=trainer.cost, reverse=True)]


def main(argv: list[str] | None = None) -> int:
    """Train one unit's run (``SUITE SEED PROFILE``), as the chapters would (``trainer.train``, no progress bar; its
    progress lines go to the build's console)."""
    # cost: pulls torch (~1.5 s) into every `python -m anisotropy` start (book.runner imports this module)
    from anisotropy.training import trainer

    suite, seed, profile = argv if argv is not None else sys.argv[1:]
    recipe = Unit(suite, int(seed)).recipe(profile)
    found = trainer.train(recipe, progress=False)
    state = trainer.training_state(found[-1])
    progress.say(f"{suite} seed {seed} is trained: {state['step']} updates, final validation loss "
                 f"{found[-1].loss:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
