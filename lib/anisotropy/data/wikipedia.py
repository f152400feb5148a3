"""English Wikipedia text of the paper profile: WikiText-103 raw (validation, from the Hub) and enwik8 (the Hutter
Prize file, downloaded once with its checksum verified, its articles cleaned as the second paper does).
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

from anisotropy import hub
from anisotropy.data.common import DataUnavailableError, sample
from anisotropy.paths import cache_dir


# The split's own Parquet files, at their paths in the Hub repository: naming the config (wikitext-103-raw-v1) makes
# datasets download and prepare every split, the two train shards (~300 MB) too, for a 1.3 MB validation split.
WIKITEXT_FILES = "wikitext-103-raw-v1/{split}-*.parquet"


def wikitext_lines(split: str = "validation", min_chars: int = 80) -> list[str]:
    """The lines of a WikiText-103 raw split with at least ``min_chars`` characters, headings dropped, in order; only
    that split's files are downloaded."""
    return [t for batch in wikitext_line_batches(split, min_chars) for t in batch]


def wikitext_line_batches(split: str = "validation", min_chars: int = 80, rows: int = 10_000):
    """``wikitext_lines`` a batch at a time (``rows`` rows of the split before filtering), read from the split's
    memory-mapped Arrow files: the train split's ~540 MB of text is never in memory at once."""
    ds = hub.dataset("Salesforce/wikitext", "WikiText-103", data_files={split: WIKITEXT_FILES.format(split=split)},
                     split=split)
    for batch in ds.iter(batch_size=rows):
        lines = [t.strip() for t in batch["text"]]
        yield [t for t in lines if len(t) >= min_chars and not t.startswith("=")]


class SampleCappedWarning(UserWarning):
    """A source asked for more examples than it holds gives all of them, each once."""


def wikitext(n: int, seed: int = 0, min_chars: int = 80) -> list[str]:
    """``n`` lines of WikiText-103 raw validation (``wikitext_lines``), drawn without replacement; when ``n`` exceeds
    the eligible lines, all of them once (a duplicate would narrow the bootstrap intervals), with one warning line."""
    lines = wikitext_lines("validation", min_chars)
    if n > len(lines):
        warnings.warn(f"WikiText-103 validation has {len(lines):,} lines of at least {min_chars} characters, fewer "
                      f"than the {n:,} asked: all of them are read, each once", SampleCappedWarning, stacklevel=2)
        n = len(lines)
    return [lines[i] for i in sample(len(lines), n, seed, "WikiText-103 (after filtering)")]


# ---- enwik8 ---------------------------------------------------------------------------------------------------------

# The Hutter Prize file: 36,445,475 bytes zipped, 10^8 bytes unzipped. A mirror is given as ANISOTROPY_ENWIK8_URL with
# its own checksum in the URL's fragment (pip's convention), e.g. "http://host/enwik8.zip#sha256=<hex>".
ENWIK8_URL = "http://mattmahoney.net/dc/enwik8.zip#sha256=547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc"
# Seconds the download may wait for the server to connect or to send the next bytes (requests' timeout).
ENWIK8_TIMEOUT = 60


def enwik8_url() -> tuple[str, str]:
    """(download URL, expected SHA-256) of enwik8.zip: ``ANISOTROPY_ENWIK8_URL`` or the Hutter Prize page."""
    url = os.environ.get("ANISOTROPY_ENWIK8_URL") or ENWIK8_URL
    address, _, fragment = url.partition("#sha256=")
    if not re.fullmatch(r"[0-9a-f]{64}", fragment):
        raise DataUnavailableError(f"ANISOTROPY_ENWIK8_URL must end with #sha256=<64 hex digits> (the checksum of "
                                   f"the file it names), got {url!r}")
    return address, fragment


def download_enwik8(folder: str | os.PathLike | None = None) -> Path:
    """Download enwik8.zip once into ``folder`` (default the cache), verify its SHA-256, and return its path.
    ``pooch.retrieve`` streams it to a temporary file beside it and renames it only once the checksum matches, so a
    partial or corrupted download never takes the final name."""
    import pooch

    address, expected = enwik8_url()
    target = Path(folder or cache_dir()) / "enwik8.zip"
    try:
        return Path(pooch.retrieve(address, known_hash=f"sha256:{expected}", fname=target.name, path=target.parent,
                                   progressbar=True,
                                   downloader=pooch.HTTPDownloader(progressbar=True, timeout=ENWIK8_TIMEOUT)))
    except ValueError as err:  # pooch's checksum mismatch ("... expected <hex> but got <hex>. ..."), file deleted
        got = re.search(r"but got ([0-9a-f]{64})", str(err))
        raise DataUnavailableError(f"enwik8 from {address} has SHA-256 {got[1] if got else 'of another file'}, not "
                                   f"{expected}: the download is damaged or not enwik8; nothing was kept") from None
    except OSError as err:  # requests' errors (connection refused, timeout, HTTP 404...) are OSErrors
        reason = " ".join(str(err).split())
        raise DataUnavailableError(f"enwik8 could not be downloaded from {address} ({reason}): connect to the network, "
                                   f"or put enwik8.zip into {target.parent} yourself") from None


def enwik8_path(path: str | os.PathLike | None = None, download: bool = True) -> Path:
    """Where enwik8 is read from: ``path``, else ``$ANISOTROPY_ENWIK8``, else ``cache_dir()/enwik8`` (or
    ``enwik8.zip``), else (``download``) a fresh verified download into the cache (``download_enwik8``)."""
    candidates = [Path(path)] if path else []
    if os.environ.get("ANISOTROPY_ENWIK8"):
        candidates.append(Path(os.environ["ANISOTROPY_ENWIK8"]))
    candidates += [cache_dir() / "enwik8", cache_dir() / "enwik8.zip"]
    for c in candidates:
        if c.is_file():
            return c
    if download and not path:
        return download_enwik8()
    raise DataUnavailableError(
        f"enwik8 not found (looked at {', '.join(str(c) for c in candidates)}): download "
        f"{enwik8_url()[0]} into {cache_dir()} or set ANISOTROPY_ENWIK8")


def _read_enwik8(file: Path) -> bytes:
    if file.suffix == ".zip":
        import zipfile

        with zipfile.ZipFile(file) as z:
            return z.read("enwik8")
    return file.read_bytes()


def _drop_nested(text: str, opening: str, closing: str) -> str:
    """``text`` without every (possibly nested) span from ``opening`` to its matching ``closing``."""
    out, depth, i = [], 0, 0
    while i < len(text):
        if text.startswith(opening, i):
            depth, i = depth + 1, i + len(opening)
        elif depth and text.startswith(closing, i):
            depth, i = depth - 1, i + len(closing)
        else:
            if not depth:
                out.append(text[i])
            i += 1
    return "".join(out)


_MEDIA = re.compile(r"\[\[(?:image|file|media|category|[a-z]{2,3}(?:-[a-z]+)?):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]",
                    flags=re.I)


def clean_wikitext(markup: str) -> str:
    """Plain English prose from one article's MediaWiki markup, as the second paper prepares enwik8: markup, code and
    media removed. Dropped: templates ``{{...}}``, tables ``{|...|}``, references, comments, ``<math>``/``<pre>``/
    ``<code>``/``<source>`` blocks and every other tag, image/file/media/category and interlanguage links, bold and
    italic quotes, list and indentation markers; kept: the text of internal links (``[[target|text]]`` -> text),
    external links' labels, headings' words."""
    import html as html_lib

    text = html_lib.unescape(markup)  # the dump escapes the article's markup (&lt;ref&gt;...)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"<(math|pre|code|source|syntaxhighlight|timeline|gallery)\b.*?</\1\s*>", " ", text,
                  flags=re.S | re.I)
    text = re.sub(r"<ref\b[^>]*/>", " ", text, flags=re.I)
    text = re.sub(r"<ref\b.*?</ref\s*>", " ", text, flags=re.S | re.I)
    text = re.sub(r"<[^>]+>", " ", text)
    text = _drop_nested(_drop_nested(text, "{{", "}}"), "{|", "|}")
    text = _MEDIA.sub(" ", text)
    text = re.sub(r"\[\[(?:[^\[\]|]*\|)?([^\[\]]*)\]\]", r"\1", text)
    text = re.sub(r"\[(?:https?|ftp)://\S+\s*([^\]]*)\]", r"\1", text)
    text = re.sub(r"'{2,}", "", text)
    text = re.sub(r"^=+\s*(.*?)\s*=+\s*$", r"\1", text, flags=re.M)
    text = re.sub(r"^[*#:;]+\s*", "", text, flags=re.M)
    text = re.sub(r"__[A-Z]+__", " ", text)
    text = re.sub(r"[ \t]*\n[ \t]*", "\n", re.sub(r"[ \t]+", " ", text))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def enwik8_text(path: str | os.PathLike | None = None) -> str:
    """The articles of enwik8 as plain prose (``clean_wikitext`` of every non-redirect page's text), joined by blank
    lines; cached in the cache folder under the SHA-256 of the file's content (cleaning 10^8 bytes takes a while)."""
    import hashlib

    file = enwik8_path(path)
    data = _read_enwik8(file)
    cached = cache_dir() / f"enwik8-{hashlib.sha256(data).hexdigest()[:16]}.clean.txt"
    if cached.is_file():
        return cached.read_text(encoding="utf-8")
    raw = data.decode("utf-8", errors="ignore")
    articles = []
    for body in re.findall(r"<text[^>]*>(.*?)</text>", raw, flags=re.S):
        if body.lstrip().upper().startswith("#REDIRECT"):
            continue
        cleaned = clean_wikitext(body)
        if cleaned:
            articles.append(cleaned)
    text = "\n\n".join(articles)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name("." + cached.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, cached)
    return text


# Distinct characters left in enwik8 once code, media and HTML tags are removed, as the second paper reports (its
# Section 2.1; it does not list them).
ENWIK8_PAPER_ALPHABET = 205


def enwik8_alphabet(path: str | os.PathLike | None = None) -> str:
    """The distinct characters of enwik8's cleaned articles (``enwik8_text``), in code-point order."""
    return "".join(sorted(set(enwik8_text(path))))


def compare_alphabet(alphabet: str) -> str:
    """The cleaned text's alphabet size against the second paper's 205, in words (with how many of the characters
    lie outside ASCII, the part of the alphabet a cleaning keeps or drops most easily)."""
    n, paper = len(alphabet), ENWIK8_PAPER_ALPHABET
    outside = sum(ord(c) > 127 for c in alphabet)
    against = "as many as" if n == paper else f"{abs(n - paper)} {'more' if n > paper else 'fewer'} than"
    return f"{n} distinct characters ({outside} of them outside ASCII), {against} the {paper} the second paper reports"


def enwik8(n: int, seed: int = 0, chars: int = 512, path: str | os.PathLike | None = None,
           clean: bool = True) -> list[str]:
    """``n`` windows of ``chars`` characters at seeded uniform offsets of enwik8: of its articles cleaned as the second
    paper does (``clean=True``, see ``clean_wikitext``), or of the raw XML dump decoded as UTF-8 (``clean=False``,
    partial characters at the window edges dropped)."""
    file = enwik8_path(path)
    if clean:
        text = enwik8_text(file)
        if len(text) <= chars:
            raise ValueError(f"enwik8 at {file} holds {len(text)} characters of prose, fewer than one window of "
                             f"{chars}")
        offsets = sample(len(text) - chars, n, seed, f"enwik8 at {file}")
        return [text[o:o + chars] for o in offsets]
    raw = _read_enwik8(file)
    if len(raw) <= chars:
        raise ValueError(f"enwik8 at {file} holds {len(raw)} bytes, fewer than one window of {chars}")
    offsets = sample(len(raw) - chars, n, seed, f"enwik8 at {file}")
    return [raw[o:o + chars].decode("utf-8", errors="ignore") for o in offsets]
