"""How to cite and under which licence: LICENSE is the MIT licence pyproject.toml declares, held by the book's author
of ``_config.yml``; CITATION.cff is a valid Citation File Format 1.2.0 file that names the book as software at the
repository ``report.repository()`` reads, and both papers as the references book/references.bib gives; the book's
introduction says how to cite with the same URLs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from test_readme import published_url

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CFF = yaml.safe_load((ROOT / "CITATION.cff").read_text())

# The keys of the CFF 1.2.0 schema (schema.json of citation-file-format 1.2.0): its required keys, and the keys it
# allows (additionalProperties is false) for the file, a reference, a person and an entity.
REQUIRED = {"cff-version", "message", "title", "authors"}
TOP_KEYS = {"abstract", "authors", "cff-version", "commit", "contact", "date-released", "doi", "identifiers",
            "keywords", "license", "license-url", "message", "preferred-citation", "references", "repository",
            "repository-artifact", "repository-code", "title", "type", "url", "version"}
REFERENCE_REQUIRED = {"authors", "title", "type"}
REFERENCE_KEYS = {"abbreviation", "abstract", "authors", "collection-doi", "collection-title", "collection-type",
                  "commit", "conference", "contact", "copyright", "data-type", "database", "database-provider",
                  "date-accessed", "date-downloaded", "date-published", "date-released", "department", "doi",
                  "edition", "editors", "editors-series", "end", "entry", "filename", "format", "identifiers",
                  "institution", "isbn", "issn", "issue", "issue-date", "issue-title", "journal", "keywords",
                  "languages", "license", "license-url", "loc-end", "loc-start", "location", "medium", "month",
                  "nihmsid", "notes", "number", "number-volumes", "pages", "patent-states", "pmcid", "publisher",
                  "recipients", "repository", "repository-artifact", "repository-code", "scope", "section", "senders",
                  "start", "status", "term", "thesis-type", "title", "translators", "type", "url", "version", "volume",
                  "volume-title", "year", "year-original"}
PERSON_KEYS = {"address", "affiliation", "alias", "city", "country", "email", "family-names", "fax", "given-names",
               "name-particle", "name-suffix", "orcid", "post-code", "region", "tel", "website"}
ENTITY_KEYS = {"address", "alias", "city", "country", "date-end", "date-start", "email", "fax", "location", "name",
               "orcid", "post-code", "region", "tel", "website"}


def _agents_are_valid(agents) -> bool:
    """A CFF list of authors: each a person (family-names, no name) or an entity (a name)."""
    return isinstance(agents, list) and bool(agents) and all(
        set(a) <= PERSON_KEYS and "family-names" in a if "name" not in a else set(a) <= ENTITY_KEYS for a in agents)


def bib_entries() -> dict[str, dict[str, str]]:
    """book/references.bib: key -> fields (one ``name = {value}`` per line, as the file writes them)."""
    text = (ROOT / "book" / "references.bib").read_text()
    entries = {}
    for key, body in re.findall(r"^@\w+\{([^,]+),\n(.*?)\n\}", text, flags=re.M | re.S):
        entries[key] = dict(re.findall(r"^\s*([\w-]+) = \{(.*)\},?$", body, flags=re.M))
    return entries


def test_the_licence_is_mit_held_by_the_books_author():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert f"Copyright (c) {CONFIG['copyright']} {CONFIG['author']}\n" in text
    assert "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND" in text
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]


def test_citation_cff_has_the_structure_cff_1_2_0_requires():
    assert REQUIRED <= set(CFF) <= TOP_KEYS, set(CFF) - TOP_KEYS
    assert CFF["cff-version"] == "1.2.0" and CFF["type"] == "software"
    assert _agents_are_valid(CFF["authors"])
    for ref in CFF["references"]:
        assert REFERENCE_REQUIRED <= set(ref) <= REFERENCE_KEYS, set(ref) - REFERENCE_KEYS
        assert _agents_are_valid(ref["authors"])
        assert set(ref["conference"]) <= ENTITY_KEYS and set(ref["publisher"]) <= ENTITY_KEYS
        assert isinstance(ref["year"], int) and ref["start"] < ref["end"]


def test_citation_cff_names_the_book_where_config_says_it_lives():
    from anisotropy.pages import report

    url, _ = report.repository()
    assert CFF["repository-code"] == url and CFF["url"] == published_url(url)
    assert CFF["title"] == CONFIG["title"] and CFF["authors"] == [{"name": CONFIG["author"]}]
    assert str(CFF["version"]) == PROJECT["version"] and CFF["license"] == PROJECT["license"]


def test_citation_cff_cites_both_papers_as_references_bib_does():
    bib = bib_entries()
    assert [r["title"] for r in CFF["references"]] == [bib[k]["title"] for k in ("godey2024anisotropy",
                                                                                  "razzhigaev2024shape")]
    for ref in CFF["references"]:
        entry = next(e for e in bib.values() if e["title"] == ref["title"])
        families = [a.split(",")[0].strip() for a in entry["author"].split(" and ")]
        assert [f"{a.get('name-particle', '')} {a['family-names']}".strip() for a in ref["authors"]] == families
        assert ref["collection-title"] == entry["booktitle"] and str(ref["year"]) == entry["year"]
        assert f"{ref['start']}--{ref['end']}" == entry["pages"] and ref["url"] == entry["url"]
    assert [len(r["authors"]) for r in CFF["references"]] == [3, 6]


def test_the_introduction_says_how_to_cite_with_the_configs_urls():
    """book/intro.md is static Markdown: its URLs are checked here against ``report.repository()``."""
    from anisotropy.pages import report

    url, branch = report.repository()
    intro = (ROOT / "book" / "intro.md").read_text()
    section = intro.split("## How to cite", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"https://[^\s)>]+", section)) == {url, f"{url}/blob/{branch}/CITATION.cff"}
    assert CONFIG["title"] in " ".join(section.split()) and "godey2024anisotropy" in section
    assert "razzhigaev2024shape" in section
