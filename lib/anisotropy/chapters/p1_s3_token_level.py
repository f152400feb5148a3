"""The token-level page (Paper 1, Section 3): what it asks of a runtime."""

from __future__ import annotations

from anisotropy.pages import budget


def examples(p: dict, model: str, n: int) -> int:
    """The examples a Section 3 page with parameters ``p`` gives ``model``: ``n``, unless ``per_model`` sets its
    own."""
    return int((p.get("per_model") or {}).get(model, {}).get("n", n))


def plan(p: dict, out: budget.Plan) -> None:
    """Every model of ``models`` (when ``variant`` is pretrained) and of ``pretrained`` on ``n_samples`` texts of
    ``max_length`` tokens (``per_model`` may change a model's count), read ``batch_size`` at a time, one sum of unit
    vectors per text and layer (``experiments.layerwise.FirstMoments``)."""
    names = (list(p["models"]) if p["variant"] == "pretrained" else []) + list(p.get("pretrained", []))
    out.checkpoints += [budget.Checkpoint(m, None, examples(p, m, p["n_samples"]), p["max_length"],
                                          batch=p.get("batch_size", 8), per_example=True) for m in names]
    out.data.append((p["source"], p["n_samples"]))
