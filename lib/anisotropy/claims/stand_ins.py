"""Which measured model may decide a claim, and which of four questions its verdict answers.

A model's kind is (modality, objective, architecture, unit): ``ModelSpec.kind``, from ``models.yml``. A claim is
about the kinds of the paper's models it names, or about the kind its ``kind:`` entry states (a mapping of some of
those four keys to one value or a list, e.g. ``{modality: vision, architecture: convolutional}`` for "convolutional
networks" of any objective). A real pretrained model stands in for a claim's models only when it is of the claim's
kind; one that is not is shown as measured and decides nothing. A claim about every model it names needs, for each
of them, a stand-in of exactly that model's kind: one Whisper does not stand for wav2vec 2.0 and HuBERT.

A verdict answers one of four questions (``QUESTIONS``): do the papers' own pretrained models or checkpoints show it;
does the papers' setup show it where the claim needs no pretrained model (an exact result, the untrained block of
Paper 1's Section 4); do other real pretrained models of the claim's kind show it; does a short training of a small
model (the book's own runs) show it.
"""

from __future__ import annotations

from anisotropy.models import registry, table

KIND_KEYS = ("modality", "objective", "architecture", "unit")

#: The four questions a verdict can answer: key -> (short label, the question in words). A claim that needs no
#: pretrained model (scope ``any``) answers "setup" unless it names another question (``Claim.question``).
QUESTIONS = {
    "papers": ("the papers' models", "Do the papers' own pretrained models or checkpoints show it?"),
    "setup": ("the papers' setup", "Does the papers' setup show it where it needs no pretrained model (an exact "
                                   "result, the untrained block of Paper 1's Section 4)?"),
    "real": ("other real models", "Do other real pretrained models of the claim's kind show it?"),
    "self-trained": ("the book's training runs", "Does a short training of a small model, the book's own, show it?"),
}


def kind_choices() -> dict[str, tuple[str, ...]]:
    """The values each key of a kind may take (the model table's vocabularies)."""
    return {"modality": table.MODALITIES, "objective": table.OBJECTIVES, "architecture": table.STACKS,
            "unit": table.UNITS}


def model_kind(name: str) -> dict[str, str] | None:
    """A registry model's kind as {key: value}; None for a name the registry does not know (a checkpoint folder)."""
    try:
        return dict(zip(KIND_KEYS, registry.spec(name).kind))
    except registry.UnknownModelError:
        return None


def _stated(claim) -> dict[str, tuple[str, ...]]:
    return {key: (value,) if isinstance(value, str) else tuple(value) for key, value in (claim.kind or {}).items()}


def claim_kinds(claim) -> list[dict[str, tuple[str, ...]]]:
    """What the claim is about: its stated ``kind`` (one pattern), else the distinct kinds of the models it names."""
    if claim.kind:
        return [_stated(claim)]
    found = []
    for name in claim.models:
        kind = model_kind(name)
        if kind is not None and (pattern := {k: (v,) for k, v in kind.items()}) not in found:
            found.append(pattern)
    return found


def _fits(kind: dict[str, str], pattern: dict[str, tuple[str, ...]]) -> bool:
    return all(kind[key] in values for key, values in pattern.items())


def of_kind(claim, name: str) -> bool:
    """Whether the model ``name`` is of a kind ``claim`` is about."""
    kind = model_kind(name)
    return kind is not None and any(_fits(kind, p) for p in claim_kinds(claim))


def covers(claim, stand_in: str, paper_model: str) -> bool:
    """Whether ``stand_in`` stands for ``paper_model`` in a claim about every model it names: of the claim's kind
    and of the paper model's own kind on all four keys (one Whisper does not stand for wav2vec 2.0)."""
    kind = model_kind(stand_in)
    return kind is not None and of_kind(claim, stand_in) and kind == model_kind(paper_model)


def kind_words(kind: dict) -> str:
    """"text causal-lm decoder, subword units" and the like (lists joined with "or")."""
    def word(key):
        value = kind.get(key)
        return " or ".join(value) if isinstance(value, (tuple, list)) else value
    parts = [word(k) for k in ("modality", "objective", "architecture") if kind.get(k)]
    unit = f", {word('unit')} units" if kind.get("unit") else ""
    return " ".join(parts) + unit


def about(claim) -> str:
    """The kinds ``claim`` is about, in words ("; " between kinds)."""
    return "; ".join(kind_words(p) for p in claim_kinds(claim)) or "any kind"


def not_of_kind(claim, names) -> str:
    """"measured but not of the claim's kind (...): A (kind); B (kind)" for the ``names`` that are not, else ""."""
    unfit = [n for n in names if not of_kind(claim, n)]
    if not unfit:
        return ""

    def label(name):
        try:
            return f"{registry.spec(name).display} ({kind_words(model_kind(name))})"
        except registry.UnknownModelError:
            return name
    return f"measured but not of the claim's kind ({about(claim)}), so deciding nothing: " + "; ".join(
        label(n) for n in unfit)
