"""hub.step, the one parser of checkpoint names (issue 54), on every revision name the project knows: the Hub manifest's
revisions and the revisions its repositories are used at, the registry's revision series and every entry's
revisions, the profiles' revision lists, and the self-trained checkpoints' folder names. The expected steps are read
by a plain-string rule written here (prefix, digits, "k" = thousands) and, for each series, by the steps its source
lists; names that carry no step are None (an error where a step is required)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from anisotropy import hub
from anisotropy.models import registry
from anisotropy.training import recipes

PROFILES = Path(hub.__file__).with_name("profiles")
PREFIXES = ("global_step", "step_", "step-", "step")  # Bloom, MultiBERTs, the trainer's folders, Pythia


def expected(name: str) -> int | None:
    """The step a name is written with: a known prefix, then digits, then "k" for thousands, and nothing else."""
    for prefix in PREFIXES:
        rest = name[len(prefix):] if name.startswith(prefix) else ""
        digits = rest.removesuffix("k")
        if digits.isdigit():
            return int(digits) * (1000 if rest.endswith("k") else 1)
    return None


def _profile_revisions(node) -> set[str]:
    if isinstance(node, dict):
        return set().union(*(set(v) if k.endswith("revisions") and isinstance(v, list) else _profile_revisions(v)
                             for k, v in node.items()))
    if isinstance(node, list):
        return set().union(set(), *(_profile_revisions(v) for v in node))
    return set()


def known_names() -> dict[str, set[str]]:
    """Every revision name the project knows, by where it is written."""
    manifest = hub.manifest()["repos"]
    return {
        "manifest revisions": {r for entry in manifest.values() for r in (entry.get("revisions") or {})},
        "manifest used_by": {str(u).split("@", 1)[1] for entry in manifest.values()
                             for u in entry.get("used_by") or [] if "@" in str(u)},
        "registry series": {r for series in registry.REVISION_SERIES.values() for r in series},
        "registry entries": {r for s in registry.MODELS.values() for r in s.revisions},
        "profiles": set().union(*(_profile_revisions(yaml.safe_load(p.read_text())) for p in PROFILES.glob("*.yml"))),
        # training/trainer.py writes a checkpoint after step n to the folder step-<n>
        "self-trained folders": {f"step-{n}" for suite in recipes.suite_specs("local")
                                 for r in recipes.suite(suite, "local") for n in r.checkpoint_steps},
    }


def test_every_known_revision_name_parses_to_its_written_step():
    names = known_names()
    assert all(names.values()), {where: len(found) for where, found in names.items()}  # each place was read
    everything = set().union(*names.values())
    assert len(everything) > 200
    wrong = {n: (hub.step(n), expected(n)) for n in everything if hub.step(n) != expected(n)}
    assert not wrong
    # what carries no step among them: the default branch, a dataset's conversion branch, a pinned commit
    assert {n for n in everything if expected(n) is None} == {"main", "refs/convert/parquet",
                                                              "86a1f2fd1b65542935321f9a1e3e85a45f954cf2"}


SERIES = {
    # MultiBERTs: step 0 (the initialisation), every 20k to 200k, every 100k to 2000k (the README's list)
    "multiberts": [0, *range(20_000, 200_001, 20_000), *range(300_000, 2_000_001, 100_000)],
    # Pythia: step 0, log-spaced 1..512, every 1000 to 143000 (the model card)
    "pythia": [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, *range(1000, 143_001, 1000)],
    # Bloom's model cards: the 560m and 1b1 sizes, then the larger ones
    "bloom_small": [1000, 10_000, 100_000, 200_000, 300_000, 400_000, 500_000, 600_000],
    "bloom_large": [1000, 10_000, 50_000, 100_000, 150_000, 200_000, 250_000, 300_000],
}


def test_each_series_reads_as_the_steps_its_source_lists():
    assert set(registry.REVISION_SERIES) == set(SERIES)  # a new series gets its list here
    for series, steps in SERIES.items():
        assert [hub.step(r) for r in registry.REVISION_SERIES[series]] == steps, series


def test_a_name_without_a_step_is_none_or_an_error_where_one_is_required():
    for name in (None, "", "main", "refs/pr/1", "v2", "step", "step1000x", "global_step", "checkpoint-1000",
                 "86a1f2fd1b65542935321f9a1e3e85a45f954cf2", "0123456789abcdef0123456789abcdef01234567"):
        assert hub.step(name) is None, name
        with pytest.raises(ValueError, match="training step"):
            hub.step(name, required=True)
    assert hub.step("step_20k", required=True) == 20_000 and hub.step("step0") == 0


def test_nearest_orders_by_step_and_spells_names_without_one():
    pythia = registry.REVISION_SERIES["pythia"]
    assert hub.nearest("step1500", pythia) == ["step1000", "step2000"]
    assert hub.nearest("step_30k", registry.REVISION_SERIES["multiberts"]) == ["step_20k", "step_40k"]
    # a commit hash ending in digits is no checkpoint at that step: only names with a step are ranked by it
    assert hub.nearest("step3", ["main", "86a1f2fd1b65542935321f9a1e3e85a45f954cf2", "step1", "step5"]) == \
        ["step1", "step5"]
