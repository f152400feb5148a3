"""The claims ledger: every testable claim of the two papers as data (``claims.yml``), evaluated on a chapter's results
with the rules that decide them, and where the verdicts are kept.

A claim (``Claim``) names the chapter whose results decide it, the frame(s) it reads and a rule (``rules.RULES``; the
rules of each part of the papers are in ``claims.rules.p1_s3``, ``claims.rules.p1_s4``, ``claims.rules.p1_s5``, ``claims.rules.ablation`` and
``claims.rules.p2``). A chapter evaluates its own claims once its results are computed::

    verdicts = claims.evaluate("p1_s3_modalities", P, layers=frame)
    claims.show(verdicts)

``evaluate`` selects the rows a claim may be decided on (its ``scope``: the paper's pretrained models only, the
paper's checkpoint series or the book's self-trained stand-ins, or anything), runs the rule, and stores the verdict
rows in the results store under the ``"claims"`` namespace, keyed by chapter, profile and the chapter's resolved
parameters. The closing chapter gathers them with ``gather(profile)``, looking up for each chapter the key its run
under that profile (without overrides) has written: a chapter run alone and the whole book store the same rows, and
a run with other parameters (a sweep point) does not stand for the profile.

A rule is a function of the selected frame(s) and the claim's ``params`` returning an ``Outcome`` (see ``rules``).

The same namespace mechanism keeps the per-model summary that Appendix B's Figure 18 draws (``record_measured`` in
the chapters that measure models, ``gather_measured`` in Appendix B).
"""

from __future__ import annotations

import hashlib
import html
from functools import lru_cache
from typing import NamedTuple
from pathlib import Path

import pandas as pd

from anisotropy import fingerprint, profiles, results
# The rule modules register their rules in RULES when imported: the ledger looks a claim's rule up there by name.
from anisotropy.claims.rules import ablation, book, p1_s3, p1_s4, p1_s5, p2  # noqa: F401
from anisotropy.claims import stand_ins
from anisotropy.claims.rules.common import RULES, Outcome
from anisotropy.claims.table import PAPER_NAMES, READING_BOOK, SCOPES, UNVERIFIED, Claim, read_claim  # noqa: F401
from anisotropy.claims.words import FAILS, HOLDS, PARTLY, UNTESTABLE  # ledger.HOLDS ... as before
from anisotropy.models import registry
from anisotropy.pages import report


LEDGER = Path(__file__).resolve().with_name("claims.yml")
NAMESPACE = "claims"  # results/<NAMESPACE>/: the verdict rows of every chapter and profile
MEASURED = "claims_measured"  # results/<MEASURED>/: per-model mean cosines for Figure 18
#: Chapters whose pages gather what other chapters stored, and the namespace they read (the runner re-executes them
#: when that changes: ``stamp_inputs``).
GATHERERS = {"appendix_b_isotropic": MEASURED, "what_holds_up": NAMESPACE}
#: Chapters that record per-model mean cosines for Figure 18.
MEASURING_CHAPTERS = ("p1_s3_token_level", "p1_s3_character_level", "p1_s3_modalities", "p2_layer_profiles")


# ---- the ledger -------------------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _read_ledger() -> tuple[Claim, ...]:
    import yaml

    found = tuple(read_claim(entry) for entry in yaml.safe_load(LEDGER.read_text())["claims"])
    ids = [c.id for c in found]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"claims.yml: duplicate ids {duplicates}")
    return found


def ledger() -> list[Claim]:
    """Every claim of ``claims.yml``, in its order (checked on reading: unique ids, known rules, papers and scopes,
    see ``table.claim_schema``)."""
    return list(_read_ledger())


def for_chapter(chapter: str) -> list[Claim]:
    return [c for c in ledger() if c.chapter == chapter]


def claim(claim_id: str) -> Claim:
    return next(c for c in ledger() if c.id == claim_id)


# ---- evaluating a chapter's claims ---------------------------------------------------------------------------------

def _origin(frame: pd.DataFrame) -> pd.Series:
    if "origin" in frame.columns:
        return frame["origin"]
    if "variant" in frame.columns:
        return frame["variant"]
    return pd.Series("", index=frame.index)


def _names(frame: pd.DataFrame) -> list[str]:
    for column in ("label", "run", "model"):
        if column in frame.columns:
            return [str(v) for v in dict.fromkeys(frame[column])]
    return []


def _measured_words(frames: list[pd.DataFrame], models) -> str:
    """"this profile measured 3 of them, untrained (bert-base-uncased, ...)" and the like."""
    seen: dict[str, set] = {}
    for frame in frames:
        if "model" not in frame.columns:
            continue
        for model, o in zip(frame["model"], _origin(frame)):
            if model in models:
                seen.setdefault(str(o), set()).add(model)
    if not seen:
        return "none of them was measured under this profile"
    parts = []
    for origin, names in seen.items():
        listed = [m for m in models if m in names]
        shown = ", ".join(listed[:4]) + (" …" if len(listed) > 4 else "")
        parts.append(f"{len(listed)} of them {'as tiny random models' if origin == 'tiny' else origin} ({shown})")
    return "this profile measured " + "; ".join(parts)


REAL_STAND_IN = "stand-in (real pretrained models, not the paper's)"


def _real_label(name: str) -> str:
    """The registry's display name, which says the quantisation where the weights are quantised."""
    try:
        return registry.spec(name).display
    except registry.UnknownModelError:
        return name


#: Rules that a claim about *every* model it names (or every layer of every model) uses: they are decided only when
#: every model the claim names was measured, or, on real stand-ins, when each of them has a stand-in of its own kind.
EVERY_MODEL = frozenset({"models_above_null", "most_layers_above_null", "some_layer_above_null", "every_layer_above",
                         "close_to_isotropic", "falls_with_depth", "final_norm_lowers", "part_above", "only_exception",
                         "correlated_except", "not_correlated", "tests_disagree"})


def _partly(c: Claim, measured: list[str], stand_in: bool) -> str | None:
    """Why an every-model claim cannot be decided on ``measured`` (None when it can): the paper's models it names
    that were not measured, or, on stand-ins, those that no stand-in of their own kind stands for."""
    if c.rule not in EVERY_MODEL or c.scope != "pretrained":
        return None
    if not stand_in:
        missing = [m for m in c.models if m not in measured]
        return f"{PARTLY} (missing: {', '.join(missing)})" if missing else None
    missing = [m for m in c.models if not any(stand_ins.covers(c, s, m) for s in measured)]
    if not missing:
        return None
    kinds = list(dict.fromkeys(stand_ins.kind_words(stand_ins.model_kind(m) or {}) for m in missing))
    return (f"{PARTLY} (missing: {', '.join(missing)}; no real stand-in is a {' or a '.join(kinds)} model)")


class Selection(NamedTuple):
    """What ``_select`` finds for a claim: the frames it may be decided on (None: not testable here), what they hold
    (``tested_on``), why not (when None), the question of ``stand_ins.QUESTIONS`` the verdict answers, and the
    measured real models not of the claim's kind (``stand_ins.not_of_kind``'s words, "" when none)."""
    frames: list[pd.DataFrame] | None
    tested_on: str = ""
    why: str = ""
    question: str = ""
    unfit: str = ""


def _select(c: Claim, frames: list[pd.DataFrame]) -> Selection:
    """The ``Selection`` of ``frames`` for ``c``. A ``training`` claim with a ``stack`` parameter (Paper 2's are about
    decoders) reads the runs of that stack only; a real stand-in decides only a claim of its kind."""
    if c.scope == "any":
        return Selection(frames, ", ".join(n for f in frames for n in _names(f)[:6]), "", c.question or "setup")
    stack = c.params.get("stack") if c.scope == "training" else None
    if stack is not None:
        frames = [f[f["stack"] == stack] if "stack" in f.columns else f for f in frames]
    decided = []
    for frame in frames:
        if "model" not in frame.columns:  # a frame of the setup (e.g. the untrained block), not of the models
            decided.append(frame)
            continue
        paper = frame[(_origin(frame) == "pretrained") & frame["model"].isin(c.models)]
        decided.append(paper)
    model_frames = [f for f, raw in zip(decided, frames) if "model" in raw.columns]
    if model_frames and all(len(f) for f in model_frames):
        names = sorted({m for f in model_frames for m in f["model"]})
        if (partly := _partly(c, names, stand_in=False)) is not None:
            return Selection(None, "", partly)
        missing = [m for m in c.models if m not in names]
        note = f" (not measured: {', '.join(missing)})" if missing and c.scope == "pretrained" and len(missing) < len(
            c.models) else ""
        return Selection(decided, ", ".join(names) + note, "", c.question or "papers")
    unfit = ""
    if c.real_models:
        measured = [m for m in c.real_models if any(m in set(f.get("model", ())) for f in frames)]
        unfit = stand_ins.not_of_kind(c, measured)
        fitting = [m for m in c.real_models if stand_ins.of_kind(c, m)]
        real = [f[(_origin(f) == "pretrained") & f["model"].isin(fitting)] if "model" in f.columns else f
                for f in frames]
        if fitting and all(len(f) for f in real):
            names = [m for m in fitting if any(m in set(f.get("model", ())) for f in real)]
            if (partly := _partly(c, names, stand_in=True)) is not None:
                return Selection(None, "", partly + (f"; {unfit}" if unfit else ""))
            shown = f"{REAL_STAND_IN}: {', '.join(_real_label(m) for m in names)}"
            return Selection(real, shown + (f"; {unfit}" if unfit else ""), "", "real", unfit)
    if c.scope == "training":
        stand_in = [f[_origin(f) == "self-trained"] if "model" in f.columns else f for f in frames]
        if all(len(f) for f in stand_in):
            runs = sorted({n for f in stand_in for n in _names(f)})
            return Selection(stand_in, "stand-in (the book's self-trained runs): " + ", ".join(runs), "", "self-trained")
        kind = f" {stack}" if stack else ""
        return Selection(None, "", f"needs the checkpoints of {', '.join(c.models[:3])}{' …' if len(c.models) > 3 else ''} "
                          f"(paper profile) or the book's self-trained{kind} runs; neither was measured")
    return Selection(None, "", f"needs the pretrained {', '.join(c.models[:5])}{' …' if len(c.models) > 5 else ''} "
                      f"(the paper profile); {_measured_words(frames, c.models)}" + (f"; {unfit}" if unfit else ""))


def _with_stack(frames: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The chapter's frames, each frame without a ``stack`` column given one by label from a frame that has both
    (Paper 2's layer averages from its per-layer profiles), so that a claim about decoders reads decoder runs."""
    known = {}
    for frame in frames.values():
        if frame is not None and {"label", "stack"} <= set(frame.columns):
            known.update(zip(frame["label"], frame["stack"]))
    if not known:
        return frames
    return {name: f.assign(stack=f["label"].map(known)) if f is not None and "label" in f.columns
            and "stack" not in f.columns else f for name, f in frames.items()}


def verdict_rows(chapter: str, profile: str, frames: dict[str, pd.DataFrame],
                 unavailable: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per claim of ``chapter``: the ledger's fields, ``verdict`` (holds / does not hold / not testable
    here), ``value`` (what decided it), ``why`` (why not testable), ``tested_on`` and ``profile``."""
    rows = []
    frames = _with_stack(frames)
    for c in for_chapter(chapter):
        missing = [name for name in c.input if name not in frames or frames[name] is None]
        value, why, tested, question = "", "", "", ""
        lost = [m for m in c.models if m in (unavailable or {})]
        if missing:
            verdict, why = UNTESTABLE, f"this page did not compute {', '.join(missing)}"
        elif lost:  # a model the claim needs was requested but could not be had here
            verdict = UNTESTABLE
            why = "needs " + "; ".join(f"{m}, which could not be measured here ({unavailable[m]})" for m in lost)
        else:
            selection = _select(c, [frames[name] for name in c.input])
            selected, tested, why, question = selection.frames, selection.tested_on, selection.why, selection.question
            if selected is None:
                verdict = UNTESTABLE
            else:
                outcome = RULES[c.rule](*selected, **c.params)
                value = outcome.value
                verdict = verdict_word(outcome)
                if outcome.holds is None:
                    why = f"the measured models cannot decide it: {outcome.value}" + (
                        f"; {selection.unfit}" if selection.unfit else "")
                    question = ""
        rows.append({"id": c.id, "paper": c.paper, "source": c.source, "section": c.section, "figure": c.figure,
                     "chapter": c.chapter, "claim": c.claim, "evidence": c.evidence, "quantity": c.quantity,
                     "scope": c.scope, "verdict": verdict, "value": value, "why": why, "tested_on": tested,
                     "stand_in": tested.startswith("stand-in"), "question": question, "profile": profile})
    return pd.DataFrame(rows, columns=["id", "paper", "source", "section", "figure", "chapter", "claim", "evidence",
                                       "quantity", "scope", "verdict", "value", "why", "tested_on", "stand_in",
                                       "question", "profile"])


def verdict_word(outcome: Outcome) -> str:
    return UNTESTABLE if outcome.holds is None else HOLDS if outcome.holds else FAILS


def _key(chapter: str, profile: str, parameters: dict, what: str) -> dict:
    # The rules' code is part of the key, as for every stored result (results.Store.cached), so a gathering page
    # never reads verdicts that another version of the rules wrote.
    return {"what": what, "chapter": chapter, "profile": profile, "parameters": parameters, "_code": _code()}


def _code() -> str:
    return fingerprint.of("claims.ledger")


def _save(store: results.Store, namespace: str, key: dict, frame: pd.DataFrame) -> None:
    store.save(namespace, key, frame, code={"modules": ["claims.ledger"], "fingerprint": key["_code"]})


def evaluate(chapter: str, resolved, store: results.Store | None = None, skipped=(), **frames) -> pd.DataFrame:
    """Decide every claim ``chapter`` owns on ``frames`` (name -> DataFrame, as the ledger's ``input`` names them),
    store the rows under the chapter, its profile and its resolved parameters, and return them. A claim that needs a
    model the chapter requested but could not measure (``skipped``: ``experiments.layerwise.Skipped`` rows) is not testable here,
    with that model's one-line reason, after ``PARTLY`` for a checkpoint of a run (a ref with a ``step``: the rest of
    the run was measured)."""
    # a model that could not be had here blocks a claim only if it could have decided it: its pretrained weights or
    # checkpoints, not an untrained variant (a claim about pretrained models is then decided as if it was never asked)
    unavailable = {s.ref.name: (f"{PARTLY}: " if getattr(s.ref, "step", None) is not None else "") + s.reason
                   for s in skipped if getattr(s.ref, "variant", None) not in ("untrained", "tiny")}
    rows = verdict_rows(chapter, resolved.profile, frames, unavailable)
    _save(store or results.Store(), NAMESPACE, _key(chapter, resolved.profile, resolved.values, "verdicts"), rows)
    return rows


def expected_parameters(chapter: str, profile: str) -> dict:
    """The parameters a run of ``chapter`` under ``profile`` without overrides resolves (``profiles.apply``): the
    profile's value where it sets one, the parameters cell's default elsewhere."""
    defaults = profiles.chapter_parameters(profiles.DEFAULT, chapter)
    wanted = profiles.chapter_parameters(profile, chapter)
    for name in profiles.RUNTIME:
        defaults.pop(name, None)
    return {name: wanted.get(name, default) for name, default in defaults.items()}


def _chapters() -> list[str]:
    """The chapters that own claims, in the book's order where there is a checkout (else the ledger's)."""
    owners = list(dict.fromkeys(c.chapter for c in ledger()))
    try:
        order = profiles.chapters()
    except Exception:  # noqa: BLE001 - no checkout (Colab): the ledger's order
        return owners
    return [c for c in order if c in owners] + [c for c in owners if c not in order]


def _stored(namespace: str, chapter: str, profile: str, what: str, store: results.Store):
    key = _key(chapter, profile, expected_parameters(chapter, profile), what)
    return store.load(namespace, key) if store.has(namespace, key) else None


def gather(profile: str, store: results.Store | None = None) -> pd.DataFrame:
    """Every claim of the ledger with its verdict under ``profile``: the rows each owning chapter stored when it ran
    under that profile; a claim whose chapter has not run so (or ran before the claim entered the ledger) is "not
    testable here", saying which chapter to run."""
    store = store or results.Store()
    parts = []
    for chapter in _chapters():
        stored = _stored(NAMESPACE, chapter, profile, "verdicts", store)
        expected = verdict_rows(chapter, profile, {})  # the ledger's rows, all untestable
        if stored is None:
            expected["why"] = f"the chapter {chapter} has not run under the {profile} profile"
            parts.append(expected)
            continue
        stale = expected[~expected["id"].isin(stored["id"])].assign(
            why=f"new in the ledger since {chapter} last ran: run it again")
        current = stored[stored["id"].isin(expected["id"])]
        parts.append(pd.concat([current, stale], ignore_index=True))
    frame = pd.concat(parts, ignore_index=True) if parts else verdict_rows("", profile, {})
    order = {c.id: i for i, c in enumerate(ledger())}
    return frame.sort_values("id", key=lambda s: s.map(order)).reset_index(drop=True)


def tally(frame: pd.DataFrame) -> dict:
    """Counts per verdict: ``{"holds": n, "does not hold": n, "not testable here": n}``."""
    return {v: int((frame["verdict"] == v).sum()) for v in (HOLDS, FAILS, UNTESTABLE)}


def by_question(frame: pd.DataFrame) -> pd.DataFrame:
    """Decided verdicts counted by the question they answer: one row per question of ``stand_ins.QUESTIONS``, in
    order, by its short label; columns holds, does not hold and decided (their sum). The undecided verdicts are
    ``tally``'s. A decided verdict that names no question of ``QUESTIONS`` is an error, so that no line counts a
    verdict that does not answer it."""
    decided = frame[frame["verdict"] != UNTESTABLE]
    unknown = sorted(set(decided["question"].fillna("")) - set(stand_ins.QUESTIONS))
    if unknown:
        raise ValueError(f"decided verdicts that answer no question of the tally: {unknown}")
    rows = {}
    for key, (label, _) in stand_ins.QUESTIONS.items():
        part = decided[decided["question"] == key]
        rows[label] = {HOLDS: int((part["verdict"] == HOLDS).sum()), FAILS: int((part["verdict"] == FAILS).sum())}
    out = pd.DataFrame.from_dict(rows, orient="index", columns=[HOLDS, FAILS])
    out["decided"] = out.sum(axis=1)
    return out


def show(frame: pd.DataFrame, columns=("source", "claim", "evidence", "verdict", "question", "why")):
    """The claims table a chapter page shows: the claim, the paper's evidence, this profile's verdict, the question
    it answers (``stand_ins.QUESTIONS``: the papers' models, the papers' setup, other real models, the book's training
    runs) and why (the value that decided it, or why it is not testable, with what it was tested on). A claim that is
    the book's reading of its paper says so in its source and why after its wording (``Claim.reading``)."""
    if frame.empty:
        from IPython.display import HTML

        return HTML("<p><em>No claim of the ledger is decided on this page: its results serve the chapters that "
                    "decide them.</em></p>")
    shown = frame.copy()
    reason = []
    for r in shown.itertuples():
        if r.verdict == UNTESTABLE:
            reason.append(r.why)
        else:
            reason.append(f"{r.value}" + (f" [tested on: {r.tested_on}]" if r.tested_on else ""))
    shown["why"] = reason
    if "question" in shown.columns:
        shown["question"] = [stand_ins.QUESTIONS[q][0] if q in stand_ins.QUESTIONS else "none: not decided"
                             for q in shown["question"].fillna("")]
    else:
        columns = tuple(c for c in columns if c != "question")
    if "claim" in columns and "id" in shown.columns:  # a claim that is the book's reading says why, next to it
        why_reading = {c.id: c.reading_why for c in ledger() if c.reading == READING_BOOK}
        shown["claim"] = [f"{text} [the book's reading: {why_reading[i]}]" if i in why_reading else text
                          for i, text in zip(shown["id"], shown["claim"])]
    for column in columns:  # text may hold "<" (p < 0.05); the chapter column may hold a link built by the caller
        if column != "chapter":
            shown[column] = shown[column].astype(str).map(html.escape)
    names = {"source": "source", "claim": "claim", "evidence": "paper's evidence", "verdict": "verdict here",
             "question": "decided on", "why": "why (value, or what would decide it)", "chapter": "chapter", "id": "id"}
    table = shown[list(columns)].rename(columns=names)
    widths = {"source": "5.5em", "claim": "12em", "paper's evidence": "8em", "verdict here": "5em", "decided on": "5em",
              "why (value, or what would decide it)": "13em", "chapter": "5em"}
    styles = {name: [{"selector": "td, th", "props": f"min-width: {width}"}]
              for name, width in widths.items() if name in table.columns}
    return (table.style.hide(axis="index").set_table_attributes('class="claims-table"')
            .set_table_styles(styles, overwrite=False).map(_verdict_style, subset=["verdict here"]))


def _verdict_style(value: str) -> str:
    colour = {HOLDS: "#1b7837", FAILS: "#b2182b"}.get(value, "#555555")
    return f"color: {colour}; font-weight: bold"


def glue_tally(prefix: str, frame: pd.DataFrame) -> None:
    """Glue ``<prefix>_holds``, ``_fails``, ``_untestable`` and ``_total`` for the narrative."""
    counts = tally(frame)
    for name, key in (("holds", HOLDS), ("fails", FAILS), ("untestable", UNTESTABLE)):
        report.glue(f"{prefix}_{name}", counts[key])
    report.glue(f"{prefix}_total", len(frame))


VERDICT_CLAIM = "__claim"  # suffix of the glue that names the claim a glued verdict sentence comes from


def glue_verdict(name: str, rows: pd.DataFrame, claim_id: str) -> None:
    """Glue ``name`` = the row of ``claim_id`` among ``rows`` (what ``evaluate`` returned on this page) as "<verdict>
    (<what decided it, or why not>)", and ``<name>__claim`` = the claim's id: a sentence on a page that states a
    verdict is the ledger row itself, and a test checks each against the stored rows (tests/test_pipeline.py)."""
    report.glue(name, verdict_text(rows, claim_id))
    report.glue(f"{name}{VERDICT_CLAIM}", claim_id)


def verdict_text(rows: pd.DataFrame, claim_id: str) -> str:
    """The row of ``claim_id`` among ``rows`` (``evaluate`` or ``verdict_rows``) in words: "<verdict> (<what decided
    it, or why not>)". A page that reads a claim's rule on another cut of its data than the ledger's (Paper 2's
    blocks-only layer average) words that reading with it, beside the ledger's own row (``glue_verdict``)."""
    row = rows.set_index("id").loc[claim_id]
    detail = row["why"] if row["verdict"] == UNTESTABLE else row["value"]
    return f"{row['verdict']} ({detail})" if str(detail) else str(row["verdict"])


# ---- Figure 18's points: per-model mean cosines of every chapter that measures models ------------------------------

def measured_summary(layers: pd.DataFrame) -> pd.DataFrame:
    """Per model: label, registry name, origin, family, its median layer dimension, its layer mean cosines' mean,
    minimum and maximum, the means of its layers' interval ends (``mean_cosine_low`` / ``_high``; the point where a
    layer has no interval) and of their isotropic references (``reference``: 0, or a non-negative layer's support
    null; ``rules.p1_s3.reference``), from rows of the layer-wise frame: label, model, layer, dim, mean_cosine, and
    variant or origin, family or stack."""
    # cost: pulls torch (~2 s) into the claims ledger, which reads stored numbers only
    from anisotropy.experiments.layerwise import null_q95

    if layers.empty:
        return pd.DataFrame(columns=["label", "model", "origin", "family", "dim", "mean_cosine", "min_cosine",
                                     "max_cosine", "n_layers", "mean_cosine_low", "mean_cosine_high", "reference",
                                     "null_q95"])
    frame = layers.assign(origin=_origin(layers), _low=p1_s3.lower(layers), _high=p1_s3.upper(layers),
                          _reference=p1_s3.reference(layers))
    if "family" not in frame.columns:
        frame["family"] = frame["stack"]
    dim_column = "dim" if "dim" in frame.columns else "d"
    out = frame.groupby("label", sort=False).agg(
        model=("model", "first"), origin=("origin", "first"), family=("family", "first"),
        dim=(dim_column, "median"), mean_cosine=("mean_cosine", "mean"), min_cosine=("mean_cosine", "min"),
        max_cosine=("mean_cosine", "max"), n_layers=("mean_cosine", "size"), mean_cosine_low=("_low", "mean"),
        mean_cosine_high=("_high", "mean"), reference=("_reference", "mean")).reset_index()
    out["dim"] = out["dim"].round().astype(int)
    out["null_q95"] = null_q95(out["dim"])
    return out


def record_measured(resolved, layers: pd.DataFrame, store: results.Store | None = None) -> pd.DataFrame:
    """Store this chapter's per-model summary (``measured_summary``) for Figure 18, keyed like its verdicts."""
    summary = measured_summary(layers).assign(chapter=resolved.chapter)
    _save(store or results.Store(), MEASURED, _key(resolved.chapter, resolved.profile, resolved.values, "measured"),
          summary)
    return summary


def gather_measured(profile: str, store: results.Store | None = None) -> pd.DataFrame:
    """Every model the measuring chapters stored under ``profile``, once (the same weights measured by two chapters,
    same registry name or checkpoint folder and origin: the first chapter in the book's order wins)."""
    store = store or results.Store()
    parts = [f for chapter in MEASURING_CHAPTERS
             if (f := _stored(MEASURED, chapter, profile, "measured", store)) is not None]
    if not parts:
        return measured_summary(pd.DataFrame())
    frame = pd.concat(parts, ignore_index=True).drop_duplicates("label")
    return frame.drop_duplicates(["model", "origin"]).reset_index(drop=True)


# ---- the runner's stamp for a chapter that owns or gathers claims ----------------------------------------------------

def _owned_digest(chapter: str) -> str | None:
    """A digest of the ledger entries ``chapter`` owns, of the source of their rules and of what selects the models
    that decide them (``stand_ins`` too): a changed claim, rule or selection changes the chapter's stamp, so its
    verdicts are computed again (its measurements come back from the store)."""
    import inspect

    owned = for_chapter(chapter)
    if not owned:
        return None
    digest = hashlib.sha256()
    for c in owned:
        digest.update(repr(c).encode() + repr(sorted(c.params.items())).encode())
        digest.update(inspect.getsource(RULES[c.rule]).encode())
    for helper in (_select, _partly, _with_stack, verdict_rows, stand_ins):
        digest.update(inspect.getsource(helper).encode())
    return digest.hexdigest()[:16]


def stamp_inputs(chapter: str, profile: str, store: results.Store | None = None) -> str | None:
    """What the runner adds to a chapter's stamp besides its source and parameters, so that the chapter is executed
    again when it changes: for a chapter that owns claims, its ledger entries and their rules (``_owned_digest``);
    for a chapter that gathers other chapters' stored rows (``GATHERERS``), a digest of those rows under
    ``profile``. None for every other chapter."""
    namespace = GATHERERS.get(chapter)
    owned = _owned_digest(chapter)
    if namespace is None:
        return owned
    store = store or results.Store()
    owners = MEASURING_CHAPTERS if namespace == MEASURED else _chapters()
    what = "measured" if namespace == MEASURED else "verdicts"
    digest = hashlib.sha256((owned or "").encode())
    for owner in owners:
        key = _key(owner, profile, expected_parameters(owner, profile), what)
        digest.update(owner.encode() + (store.read_bytes(namespace, key) if store.has(namespace, key) else b"-"))
    digest.update(LEDGER.read_bytes())
    return digest.hexdigest()[:16]


__all__ = ["Claim", "Outcome", "RULES", "ledger", "for_chapter", "claim", "evaluate", "verdict_rows", "gather",
           "tally", "by_question", "show", "glue_tally", "expected_parameters", "measured_summary", "record_measured",
           "gather_measured", "stamp_inputs", "HOLDS", "FAILS", "UNTESTABLE"]
