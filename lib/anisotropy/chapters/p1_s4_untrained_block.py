"""The untrained-block page (Paper 1, Section 4): what it asks of a runtime."""

from __future__ import annotations

import inspect

from anisotropy.experiments import block
from anisotropy.measure import taps
from anisotropy.pages import budget


def plan(p: dict, out: budget.Plan) -> None:
    """The reference models whose hidden-state norms the page compares with (``experiments.block.reference_norms``,
    at its default batch size): ``reference_texts`` texts each, into ``taps.extract``'s own accumulator (a
    ``LayerStats`` per state with its default reservoir). Only pretrained references are downloaded."""
    batch = inspect.signature(block.reference_norms).parameters["batch_size"].default
    reservoir = inspect.signature(taps.extract).parameters["reservoir_size"].default
    names = list(p["reference_models"]) if p["reference_variant"] == "pretrained" else []
    out.checkpoints += [budget.Checkpoint(m, None, p["reference_texts"], p["reference_max_length"], batch=batch,
                                          stats_reservoir=reservoir) for m in names]
