"""The drift page (Paper 1, Section 3): what it asks of a runtime."""

from __future__ import annotations

import dataclasses

from anisotropy.chapters import plans
from anisotropy.pages import budget


def plan(p: dict, out: budget.Plan) -> None:
    """The models of the three Section 3 pages with their parameters (the profiles give both the same values, through
    YAML anchors): when those pages ran in this runtime the drift page reads their stored measurements and loads
    nothing (``Checkpoint.reused_from``); on a fresh runtime (an empty store) it measures every one of them itself."""
    common = dict(variant=p["variant"], batch_size=p["batch_size"], device=p.get("device"))
    parts = {
        "p1_s3_token_level": dict(common, models=p["token_models"], pretrained=p.get("pretrained", []),
                                  source=p["text_source"], n_samples=p["n_texts"], max_length=p["token_max_length"]),
        "p1_s3_character_level": dict(common, models=p["char_models"], pretrained=p.get("pretrained_char", []),
                                      source=p["text_source"], n_samples=p["n_char_texts"],
                                      max_length=p["char_max_length"], per_model=p.get("char_per_model") or {}),
        "p1_s3_modalities": dict(common, speech_models=p["speech_models"], vit_models=p["vit_models"],
                                 cnn_models=p["cnn_models"], speech_source=p["speech_source"],
                                 n_speech=p["n_speech"], image_source=p["image_source"], n_images=p["n_images"],
                                 per_model=p.get("per_model") or {}),
    }
    for chapter, params in parts.items():
        part = plans.plan(chapter, params, out.profile)
        names = {"n_samples": "n_char_texts" if chapter == "p1_s3_character_level" else "n_texts",
                 "max_length": "char_max_length" if chapter == "p1_s3_character_level" else "token_max_length"}
        out.checkpoints += [dataclasses.replace(c, reused_from=chapter,
                                                sized_by=tuple(names.get(k, k) for k in c.sized_by))
                            for c in part.checkpoints]
        out.data += part.data
    out.notes.append("reuses the measurements the three Section 3 chapters stored (same models, same data) when they "
                     "ran in this runtime; the estimates are a fresh runtime's, which measures them all")
