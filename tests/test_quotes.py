"""Every claim of the two papers quotes the paper's own words, in the section it names: read from the papers' text
(``$ANISOTROPY_PAPERS``, else ``../shared/papers`` beside the checkout), never from a hand-kept list."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from anisotropy.claims import ledger as claims

ROOT = Path(__file__).resolve().parents[1]
FILES = {"1": "paper1.md", "2": "paper2.txt"}


def _folder() -> Path | None:
    for candidate in (os.environ.get("ANISOTROPY_PAPERS"), ROOT.parent / "shared" / "papers"):
        if candidate and Path(candidate, FILES["1"]).is_file() and Path(candidate, FILES["2"]).is_file():
            return Path(candidate)
    return None


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _label(heading: str) -> str | None:
    """A heading's section label as the ledger writes it: "3.1", "Appendix B", "Abstract", "Conclusion"."""
    heading = heading.strip()
    if m := re.fullmatch(r"(\d(?:\.\d+)*)\s+\S.*", heading):
        return m.group(1)
    if m := re.fullmatch(r"([A-D])\s+\S.*", heading):
        return f"Appendix {m.group(1)}"
    if heading in ("Abstract", "Conclusion", "Limitations", "Ethics Statement", "Acknowledgements", "References"):
        return heading
    return None


def sections(paper: str, raw: str) -> list[tuple[int, str]]:
    """(offset in the collapsed text, label) of each section heading, in order: Markdown headings in Paper 1; in
    Paper 2's text, lines that are a numbered section title or one of the unnumbered ones."""
    found, offset = [], 0
    for line in raw.splitlines():
        stripped = line.strip()
        if paper == "1":
            label = _label(stripped.lstrip("#").strip()) if stripped.startswith("#") else None
        else:
            label = _label(stripped) if len(stripped) < 80 and not stripped.endswith(".") else None
        if label is not None:
            found.append((offset, label))
        if stripped:
            offset += len(_collapse(stripped)) + 1
    return found


def section_at(headings: list[tuple[int, str]], position: int) -> str | None:
    before = [label for offset, label in headings if offset <= position]
    return before[-1] if before else None


def where(quote: str, text: str) -> list[int]:
    """The offsets of the quote's parts ("..." or "…" between them) found in order in ``text``; raises
    ``ValueError`` naming the first part that is not there."""
    parts = [_collapse(p) for p in re.split(r"\.\.\.|…", quote) if p.strip()]
    found, start = [], 0
    for part in parts:
        at = text.find(part, start)
        if at < 0:
            raise ValueError(f"not in the paper's text: {part!r}")
        found.append(at)
        start = at + len(part)
    return found


def check(claim, papers: dict[str, tuple[str, list]]) -> str | None:
    """None when ``claim``'s quote is its paper's words in the section it names, else what is wrong."""
    text, headings = papers[claim.paper]
    if claim.quote in ("", claims.UNVERIFIED):
        return "quotes no sentence"
    try:
        at = where(claim.quote, text)
    except ValueError as err:
        return str(err)
    found = section_at(headings, at[0])
    if found != claim.section:
        return f"the quote stands in section {found!r}, the claim names {claim.section!r}"
    return None


@pytest.fixture(scope="module")
def papers():
    folder = _folder()
    if folder is None:
        pytest.skip("the papers' text is not here (set ANISOTROPY_PAPERS to the folder of paper1.md and paper2.txt)")
    out = {}
    for paper, name in FILES.items():
        raw = Path(folder, name).read_text()
        out[paper] = (_collapse(raw), sections(paper, raw))
    return out


def test_every_claim_of_the_papers_quotes_its_words_in_the_section_it_names(papers):
    problems = {c.id: p for c in claims.ledger() if c.paper in FILES and (p := check(c, papers)) is not None}
    assert problems == {}


def test_the_section_labels_are_the_papers_own(papers):
    labels = {paper: {label for _, label in headings} for paper, (_, headings) in papers.items()}
    assert {"2", "3.1", "3.2", "3.3", "4.2", "4.4", "5", "6", "Conclusion", "Appendix A", "Appendix D"} <= labels["1"]
    assert {"Abstract", "4.1", "4.2", "4.3", "5"} <= labels["2"]
    for c in claims.ledger():
        if c.paper in FILES:
            assert c.section in labels[c.paper], (c.id, c.section)


def test_the_checker_refuses_an_altered_quote_a_wrong_section_and_none(papers):
    import dataclasses

    claim = claims.claim("p1-s3.2-speech-above-0.2")
    assert check(claim, papers) is None
    altered = dataclasses.replace(claim, quote=claim.quote.replace("at least 0.2", "at least 0.3"))
    assert check(altered, papers).startswith("not in the paper's text")
    assert "stands in section '3.2'" in check(dataclasses.replace(claim, section="3.1"), papers)
    assert check(dataclasses.replace(claim, quote=claims.UNVERIFIED), papers) == "quotes no sentence"
    # parts joined by "..." must each be there, in order
    split = dataclasses.replace(claim, quote="Notably, speech models ... at least 0.2.")
    assert check(split, papers) is None
    backwards = dataclasses.replace(claim, quote="at least 0.2. ... Notably, speech models")
    assert check(backwards, papers).startswith("not in the paper's text")
    # Paper 2's review copy: a line number inside a sentence is not the paper's words
    bell = claims.claim("p2-f1-encoders-consistent")
    assert check(dataclasses.replace(bell, quote=bell.quote.replace("...", "011")), papers) is None  # the raw text
    assert check(dataclasses.replace(bell, quote=bell.quote.replace(" ... ", " ")), papers).startswith(
        "not in the paper's text")


# ---- every number a rule is given is written where the reader sees the claim -----------------------------------------

_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:\s*/\s*(\d+))?(\s*%)?")


def numbers_in_params(value) -> list[float]:
    """Every number in a claim's ``params`` (nested lists and mappings included; names and flags are not numbers)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers_in_params(v)]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in numbers_in_params(v)]
    return []


def numbers_written(text: str) -> set[float]:
    """The numbers a text writes: 0.5, 5%, 1/3 (as 0.05 and 0.333...), 16,384 (thousands commas dropped); a digit
    inside a name (p1-s4, d_h) is not one."""
    found = set()
    for m in _NUMBER.finditer(re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)):
        value = float(m.group(1))
        if m.group(2):
            value /= float(m.group(2))
        if m.group(3):
            value /= 100
        found.add(value)
    return found


def unwritten_numbers(claim) -> list[float]:
    """The numbers of ``claim.params`` that its text does not write: a paper's claim in its quote or in the book's
    reading of it (``reading_why``), a claim of the book's or the counterpoint's in its wording or its quantity."""
    text = f"{claim.quote} {claim.reading_why}" if claim.paper in FILES else f"{claim.claim} {claim.quantity}"
    written = numbers_written(text)
    return [n for n in numbers_in_params(claim.params)
            if not any(abs(n - w) <= 1e-3 * max(1.0, abs(n)) for w in written)]


def test_every_number_a_rule_is_given_is_in_the_quote_or_the_books_reading():
    """A threshold of the book's is said where the claim is shown (``reading_why``), and one of the paper's is in its
    sentence: a threshold edited in claims.yml without its quote or reading fails here."""
    problems = {c.id: missing for c in claims.ledger() if (missing := unwritten_numbers(c))}
    assert problems == {}


def test_an_edited_threshold_is_caught_and_the_written_forms_are_read():
    import dataclasses

    speech = claims.claim("p1-s3.2-speech-above-0.2")  # the paper's own 0.2, in its sentence
    assert unwritten_numbers(speech) == []
    assert unwritten_numbers(dataclasses.replace(speech, params={"threshold": 0.25})) == [0.25]
    bell = claims.claim("p2-f1-decoders-bell")
    edited = dataclasses.replace(bell, params={**bell.params, "min_ratio": bell.params["min_ratio"] * 1.2})
    assert unwritten_numbers(edited) == [bell.params["min_ratio"] * 1.2]
    assert numbers_written("at least 90% of 2+ runs, 1/3 of the layers, d = 16,384 (p1-s4, d_h)") == {
        0.9, 2.0, 1 / 3, 16384.0}
    assert numbers_in_params({"band": [0.2, 0.8], "stack": "decoder", "high": {"models": ["a"]}, "on": True}) == [
        0.2, 0.8]
