"""Data sources: deterministic sampling, the offline synthetic speech, and one-line failures for what is missing."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import signal

from anisotropy.data import (sources as data, common, docstrings as data_docstrings, images as data_images, prose,
                             speech, wikipedia)
from anisotropy import hub


def test_prose_is_deterministic_and_matches_text_samples():
    a = data.load("prose", 12, seed=4)
    assert a == data.load("prose", 12, seed=4) == prose.text_samples(12, seed=4)
    assert a != data.load("prose", 12, seed=5)
    assert len(set(a)) == 12 and all(len(t) >= 80 for t in a)  # without replacement
    assert all(len(t) >= 400 for t in data.load("prose", 5, min_chars=400))
    assert data.modality("prose") == "text" and data.modality("librispeech") == "speech"


def test_resonator_peaks_at_its_formant():
    """The formant filter's frequency response (analytic, scipy.signal.freqz) peaks at the requested frequency and
    has unit gain at DC."""
    rate, f, bw = speech.SAMPLING_RATE, 730.0, 80.0
    impulse = np.zeros(4096)
    impulse[0] = 1.0
    h = speech._resonator(impulse, f, bw, rate)
    freqs, resp = signal.freqz(h, worN=8192, fs=rate)
    assert abs(freqs[np.argmax(np.abs(resp))] - f) < 10
    assert abs(resp[0]) == pytest.approx(1.0, rel=1e-3)


def test_synthetic_speech_sounds_like_voiced_speech():
    clips = data.load("synthetic-speech", 6, seed=0, seconds=(1.0, 2.0))
    again = data.load("synthetic-speech", 6, seed=0, seconds=(1.0, 2.0))
    assert all(np.array_equal(a["array"], b["array"]) for a, b in zip(clips, again))
    for clip in clips:
        x, rate = clip["array"], clip["sampling_rate"]
        assert rate == 16_000 and x.dtype == np.float32 and 1.0 <= len(x) / rate <= 2.0
        assert clip["text"] is None and set(clip["vowels"].split()) <= set(speech.VOWELS)
        assert 0.2 < np.abs(x).max() <= 0.8
        # Pitch: the autocorrelation of the loudest 100 ms peaks at a lag of one glottal period (90-220 Hz, declining).
        frame = 1600
        energy = np.convolve(x**2, np.ones(frame), "valid")
        seg = x[np.argmax(energy): np.argmax(energy) + frame].astype(np.float64)
        ac = np.correlate(seg, seg, "full")[frame - 1:]
        lo, hi = rate // 250, rate // 60
        f0 = rate / (lo + np.argmax(ac[lo:hi]))
        assert 60 <= f0 <= 250, f0
        # Pauses: some 20 ms frames are near silence.
        rms = np.sqrt(np.convolve(x**2, np.ones(320) / 320, "valid")[::320])
        assert (rms < 0.02 * rms.max()).any()
    with_text = data.load("synthetic-speech", 2, seed=0, transcripts=True)
    assert with_text[0]["text"] == with_text[0]["vowels"]


def test_synthetic_shapes():
    imgs = data.load("synthetic-shapes", 4, seed=1, size=48)
    assert len(imgs) == 4 and imgs[0].shape == (48, 48, 3) and imgs[0].dtype == np.uint8
    assert np.array_equal(imgs[2], data.load("synthetic-shapes", 4, seed=1, size=48)[2])


def test_enwik8_raw_windows_from_a_provided_file(tmp_path, monkeypatch):
    raw = ("<page><title>Anarchism</title> naïve café " * 200).encode()
    (tmp_path / "enwik8").write_bytes(raw)
    monkeypatch.setenv("ANISOTROPY_ENWIK8", str(tmp_path / "enwik8"))
    texts = data.load("enwik8", 5, seed=3, chars=64, clean=False)
    assert texts == data.load("enwik8", 5, seed=3, chars=64, clean=False)
    assert all(t and t in raw.decode() for t in texts)  # partial UTF-8 at the edges dropped, nothing invented
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(ValueError, match="fewer than one window"):
        data.load("enwik8", 2, path=tmp_path / "empty", clean=False)


DUMP = """<mediawiki><page><title>Cat</title><revision><text xml:space="preserve">{{Taxobox | name = Cat}}
The '''cat''' (''Felis catus'') is a [[mammal|small mammal]].&lt;ref&gt;Smith 2001, p. 3&lt;/ref&gt;
[[Image:Cat poster.jpg|thumb|A [[cat]] sitting]]
== History ==
* Cats were [http://example.org domesticated] in the [[Near East]].&lt;!-- check --&gt;
{| class="wikitable"
| a || b
|}
&lt;math&gt;x^2&lt;/math&gt;&lt;code&gt;print(1)&lt;/code&gt;
[[Category:Felines]] [[fr:Chat]]</text></revision></page>
<page><title>Kat</title><revision><text xml:space="preserve">#REDIRECT [[Cat]]</text></revision></page></mediawiki>
"""


def test_enwik8_is_cleaned_as_the_second_paper_describes(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "cache"))
    (tmp_path / "enwik8").write_text(DUMP)
    text = wikipedia.enwik8_text(tmp_path / "enwik8")
    assert text == "The cat (Felis catus) is a small mammal.\n\nHistory\nCats were domesticated in the Near East."
    for gone in ("{{", "[[", "ref", "<", "&lt;", "''", "Category", "Chat", "x^2", "print", "wikitable", "REDIRECT"):
        assert gone not in text, gone
    windows = wikipedia.enwik8(3, seed=1, chars=20, path=tmp_path / "enwik8")
    assert all(len(w) == 20 and w in text for w in windows)
    assert list((tmp_path / "cache").glob("enwik8-*.clean.txt")), "the cleaned text is cached"


def test_enwik8_alphabet_is_the_cleaned_texts_against_the_papers_205(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "cache"))
    (tmp_path / "enwik8").write_text(DUMP.replace("small mammal", "small mammal of Zürich"))
    alphabet = wikipedia.enwik8_alphabet(tmp_path / "enwik8")
    # the markup's characters ({, [, |, <, =, *, ', ^, _) are gone; what the prose uses is counted once
    # = sorted(set("The cat (Felis catus) is a small mammal of Zürich.\n\nHistory\nCats were domesticated in the Near
    # East.")), the cleaned text of the test above with the one word added
    assert alphabet == "\n ().CEFHNTZacdefhilmnorstuwyü"
    assert wikipedia.compare_alphabet(alphabet) == ("30 distinct characters (1 of them outside ASCII), 175 fewer than the "
                                               "205 the second paper reports")
    assert wikipedia.compare_alphabet("".join(map(chr, range(32, 237)))).endswith(
        "(109 of them outside ASCII), as many as the 205 the second paper reports")
    assert wikipedia.compare_alphabet("".join(map(chr, range(32, 240)))).startswith("208 distinct characters (112 of them "
                                                                               "outside ASCII), 3 more than")


@pytest.fixture
def served(tmp_path):
    """A folder served over HTTP on 127.0.0.1 (a stand-in for the Hutter Prize page)."""
    import functools
    import http.server
    import threading

    folder = tmp_path / "www"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *args: None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def _zip(path, text: str) -> str:
    import hashlib
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        z.writestr("enwik8", text)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_enwik8_is_downloaded_once_and_verified(served, tmp_path, monkeypatch):
    folder, url = served
    digest = _zip(folder / "enwik8.zip", DUMP)
    cache = tmp_path / "cache"
    monkeypatch.setenv("ANISOTROPY_CACHE", str(cache))
    monkeypatch.delenv("ANISOTROPY_ENWIK8", raising=False)
    # A wrong checksum: refused in one line, and nothing is kept under any name.
    monkeypatch.setenv("ANISOTROPY_ENWIK8_URL", f"{url}/enwik8.zip#sha256={'0' * 64}")
    with pytest.raises(common.DataUnavailableError, match=f"has SHA-256 {digest}, not 0000") as err:
        data.load("enwik8", 2, chars=20)
    assert "\n" not in str(err.value)
    assert not cache.exists() or not any(cache.iterdir())
    # The right one: downloaded into the cache, then read from there (the server's copy can go).
    monkeypatch.setenv("ANISOTROPY_ENWIK8_URL", f"{url}/enwik8.zip#sha256={digest}")
    first = data.load("enwik8", 2, chars=20)
    assert (cache / "enwik8.zip").read_bytes() == (folder / "enwik8.zip").read_bytes()
    (folder / "enwik8.zip").unlink()
    assert data.load("enwik8", 2, chars=20) == first
    # A URL without its checksum is refused before anything is fetched.
    monkeypatch.setenv("ANISOTROPY_ENWIK8_URL", f"{url}/enwik8.zip")
    with pytest.raises(common.DataUnavailableError, match="must end with #sha256="):
        wikipedia.enwik8_url()


def test_enwik8_default_url_is_fetched_with_pooch_into_the_cache(served, tmp_path, monkeypatch):
    # No mirror set: the module's own URL and checksum (here pointing at the local server) are what pooch fetches.
    folder, url = served
    digest = _zip(folder / "enwik8.zip", DUMP)
    cache = tmp_path / "cache"
    monkeypatch.setenv("ANISOTROPY_CACHE", str(cache))
    monkeypatch.delenv("ANISOTROPY_ENWIK8", raising=False)
    monkeypatch.delenv("ANISOTROPY_ENWIK8_URL", raising=False)
    monkeypatch.setattr(wikipedia, "ENWIK8_TIMEOUT", 5)
    monkeypatch.setattr(wikipedia, "ENWIK8_URL", f"{url}/missing.zip#sha256={digest}")
    with pytest.raises(common.DataUnavailableError, match=f"could not be downloaded from {url}/missing.zip .*404"):
        wikipedia.download_enwik8()
    assert not cache.exists() or not any(cache.iterdir()), "a failed download leaves nothing behind"
    monkeypatch.setattr(wikipedia, "ENWIK8_URL", f"{url}/enwik8.zip#sha256={digest}")
    path = wikipedia.download_enwik8()
    assert path == (cache / "enwik8.zip").resolve() and sorted(p.name for p in cache.iterdir()) == ["enwik8.zip"]
    assert path.read_bytes() == (folder / "enwik8.zip").read_bytes()
    assert wikipedia.enwik8_path() == cache / "enwik8.zip"


def test_missing_or_offline_sources_fail_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path))
    monkeypatch.delenv("ANISOTROPY_ENWIK8", raising=False)
    monkeypatch.setenv("ANISOTROPY_ENWIK8_URL", "http://127.0.0.1:9/enwik8.zip#sha256=" + "0" * 64)  # nothing listens
    with pytest.raises(common.DataUnavailableError) as err:
        data.load("enwik8", 3)
    msg = str(err.value)
    assert "\n" not in msg and "could not be downloaded from http://127.0.0.1:9/enwik8.zip" in msg
    assert not list(tmp_path.iterdir()), "a failed download leaves nothing behind"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for source, repo in (("wikitext-103", "Salesforce/wikitext"), ("librispeech", "openslr/librispeech_asr"),
                         ("imagenette", "frgfm/imagenette")):
        with pytest.raises(hub.Unavailable) as err:
            data.load(source, 3)
        msg = str(err.value)
        assert "\n" not in msg and repo in msg and err.value.__cause__ is None, msg


def test_bad_requests():
    with pytest.raises(ValueError, match="did you mean 'prose'"):
        data.load("prosee", 3)
    with pytest.raises(ValueError, match="n must be >= 1"):
        data.load("prose", 0)
    with pytest.raises(ValueError, match="prose corpus .* is empty"):
        data.load("prose", 3, min_chars=10**7)
    with pytest.raises(ValueError, match="n >= 1"):
        data.load("synthetic-speech", 0)


# ---------------------------------------------------------------------------------------------------------------------
# Real spoken English (eSpeak NG) and photographs
# ---------------------------------------------------------------------------------------------------------------------

needs_espeak = pytest.mark.skipif(__import__("importlib").util.find_spec("espeakng_loader") is None,
                                  reason="espeakng-loader (eSpeak NG) is not installed")
needs_photos = pytest.mark.skipif(__import__("importlib").util.find_spec("skimage") is None,
                                  reason="scikit-image (the photographs) is not installed")


@needs_espeak
def test_espeak_speech_is_deterministic_in_any_order_and_any_process():
    import subprocess
    import sys

    a = data.load("espeak-speech", 3, seed=1)
    data.load("espeak-speech", 2, seed=7)  # something else spoken in between
    b = data.load("espeak-speech", 3, seed=1)
    for x, y in zip(a, b):
        assert x["text"] == y["text"] and x["voice"] == y["voice"]
        np.testing.assert_array_equal(x["array"], y["array"])
    code = ("import hashlib; from anisotropy.data import sources as data; "
            "print(hashlib.sha256(data.load('espeak-speech', 3, seed=1)[2]['array'].tobytes()).hexdigest())")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    import hashlib

    assert other == hashlib.sha256(a[2]["array"].tobytes()).hexdigest()


@needs_espeak
def test_espeak_speech_is_english_prose_in_every_voice_at_16_khz():
    clips = data.load("espeak-speech", len(speech.ESPEAK_VOICES), seed=0, sentences=[1, 2])
    assert [c["voice"] for c in clips] == list(speech.ESPEAK_VOICES)
    for c in clips:
        assert c["sampling_rate"] == 16_000 and c["array"].dtype == np.float32
        assert 0.05 < np.abs(c["array"]).max() <= 1.0
        words = len(c["text"].split())
        seconds = c["array"].size / 16_000
        assert 1.0 < words / seconds < 5.0  # 150-180 words per minute is 2.5-3 words per second (plus pauses)
        assert c["text"] in " ".join(speech.spoken_sentences()) or all(
            s in speech.spoken_sentences() for s in c["text"].replace(". ", ".\n").splitlines())
    long = data.load("espeak-speech", 2, seed=0, sentences=[8, 8], max_seconds=10.0)
    assert all(c["array"].size <= 10 * 16_000 for c in long)


@needs_espeak
def test_resampling_to_16_khz_keeps_frequencies():
    from anisotropy.data import espeak

    t = np.arange(espeak.NATIVE_RATE) / espeak.NATIVE_RATE
    tone = (0.5 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    out = espeak.resample_16k(tone)
    assert out.size == 16_000
    spectrum = np.abs(np.fft.rfft(out))
    assert np.argmax(spectrum) == 440  # 1-second signal: bin k is k Hz
    assert abs(np.abs(out[1000:-1000]).max() - 0.5) < 0.01


@needs_espeak
def test_spoken_sentences_hold_only_words():
    sentences = speech.spoken_sentences()
    assert len(sentences) > 100
    for s in sentences:
        assert s.endswith(".") and not any(ch.isdigit() or ch in "()[]{}_=<>*/\\`\"" for ch in s)
        assert 6 <= len(s.split()) <= 24


@needs_photos
def test_photos_are_deterministic_crops_at_the_requested_size():
    a = data.load("photos", 6, seed=0, size=64)
    b = data.load("photos", 6, seed=0, size=64)
    c = data.load("photos", 6, seed=1, size=64)
    assert all(x.shape == (64, 64, 3) and x.dtype == np.uint8 for x in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert len(data_images.photo_library()) == len(data_images.PHOTOS) == 15


@needs_photos
def test_a_full_crop_of_a_photo_is_the_photo_itself(monkeypatch):
    """With the whole pool one square photograph and crops of its full side at its own size, a crop is the photograph
    or its mirror image: cropping and flipping take pixels from the right place."""
    square = np.random.default_rng(0).integers(0, 256, size=(48, 48, 3), dtype=np.uint8)
    monkeypatch.setattr(data_images, "photo_library", lambda: [square])
    for crop in data_images.photos(4, seed=3, size=48, min_fraction=1.0):
        assert np.array_equal(crop, square) or np.array_equal(crop, square[:, ::-1])


# ---- the docstring corpus ----------------------------------------------------------------------------------------

def test_docstring_paragraphs_keep_running_text_only():
    keep = data_docstrings.docstring_paragraph("Return the sum of the array elements over the given axis, treating missing "
                                    "values as zero.")
    assert keep == ("Return the sum of the array elements over the given axis, treating missing values as zero.")
    # inline markup reduced to its text, lines joined
    assert data_docstrings.docstring_paragraph("Construct a :class:`~torch.nn.Module` from the [`PreTrainedModel`] weights\n"
                                    "and keep ``strict`` checking on.") == (
        "Construct a Module from the PreTrainedModel weights and keep strict checking on.")
    # the leading prose of a block is kept up to a section header or an indented parameter table
    assert data_docstrings.docstring_paragraph("Compute the mean of the tensor along every axis it has.\nArgs:\n    x: a tensor"
                                    ) == "Compute the mean of the tensor along every axis it has."
    for bad in (">>> import torch\n>>> torch.zeros(3)",  # doctest
                "x : array_like\n    The input array, of any shape and any numeric type here.",  # parameter table
                "Parameters\n----------",  # heading
                "- the first item of a list that is long enough to pass the length test.",  # list item
                "Set ``x = 1`` before calling the function so that the loop starts at one.",  # code
                "see https://example.org for the details of this very long explanation here.",  # no capital
                "Return the value",  # too short, no full stop
                ".. note:: This directive is long enough to be mistaken for a paragraph of text."):
        assert data_docstrings.docstring_paragraph(bad) is None, bad


def test_docstring_walk_visits_definitions_in_ast_walk_order():
    import ast
    import inspect

    nested = '''
"""Module."""
def f():
    """F."""
    def g():
        """G."""
    x = [lambda: 1 for _ in range(3)]
try:
    class A:
        """A."""
        async def m(self):
            """M."""
except ValueError:
    def h():
        """H."""
else:
    def k():
        """K."""
match 1:
    case 1:
        class B:
            """B."""
if True:
    with open("x") as fh:
        for _ in fh:
            def w():
                """W."""
'''
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for source in (nested, inspect.getsource(data), inspect.getsource(ast)):
        tree = ast.parse(source)
        walked = [n for n in ast.walk(tree) if isinstance(n, kinds)]
        assert [n for n in data_docstrings._definitions(tree) if isinstance(n, kinds)] == walked
    docs = [ast.get_docstring(n) for n in data_docstrings._definitions(ast.parse(nested)) if isinstance(n, kinds)]
    assert docs == ["Module.", "F.", "G.", "A.", "K.", "M.", "H.", "B.", "W."]  # by depth


def test_docstring_corpus_is_deduplicated_split_by_document_and_hashed(monkeypatch):
    corpus = data_docstrings.build_docstring_corpus(("pygments", "no_such_package_here"))
    assert set(corpus.packages) == {"pygments"}  # an absent package is left out, and named nowhere
    assert len(corpus.train) > 100 and corpus.documents["train"] > corpus.documents["validation"] > 0
    everything = corpus.train + corpus.validation
    assert len({data_docstrings._template_key(p) for p in everything}) == len(everything)  # no copies, not even templated ones
    assert all(data_docstrings.docstring_paragraph(p) == p for p in everything)  # every paragraph passes the filter as it is
    assert corpus == data_docstrings.build_docstring_corpus(("pygments",))  # deterministic, content hash included
    # held out by document: the files of the validation side never contribute to training
    docs = dict(data_docstrings._package_documents("pygments"))
    held = [d for d in docs if data_docstrings._is_validation_document(d)]
    assert all(data_docstrings._is_validation_document(d) == (d in held) for d in docs)
    train_text = set(corpus.train)
    assert not any(p in train_text for d in held for p in docs[d])
    # a changed paragraph is a different corpus
    monkeypatch.setattr(data_docstrings, "_package_documents", lambda package: [
        (d, [p.replace("template", "templates") for p in ps]) for d, ps in docs.items()])
    assert data_docstrings.build_docstring_corpus(("pygments",)).content_hash != corpus.content_hash


def test_docstring_corpus_is_cached_and_keys_the_recipes(tmp_path, monkeypatch):
    from anisotropy.training import recipes

    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path))
    monkeypatch.setattr(data_docstrings, "DOCSTRING_PACKAGES", ("pygments",))
    real = data_docstrings.docstring_corpus
    real.cache_clear()
    recipes.data_fingerprint.cache_clear()
    recipes.split_paragraphs.cache_clear()
    try:
        first = data_docstrings.docstring_corpus()
        assert len(list((tmp_path / "corpora").glob("docstrings-*.json.gz"))) == 1
        data_docstrings.docstring_corpus.cache_clear()
        monkeypatch.setattr(data_docstrings, "build_docstring_corpus", lambda *a: pytest.fail("should come from the cache"))
        assert data_docstrings.docstring_corpus() == first
        assert recipes.split_paragraphs("docstrings") == (list(first.train), list(first.validation))
        sample = data.load("docstrings", 5, seed=1)
        assert sample == data.load("docstrings", 5, seed=1) and set(sample) <= set(first.validation)
        recipe = recipes.Recipe(suite="s", kind="mlm", corpus="docstrings")
        before = recipe.hash
        data_docstrings.docstring_corpus.cache_clear()
        recipes.data_fingerprint.cache_clear()
        monkeypatch.setattr(data_docstrings, "docstring_corpus", lambda: data_docstrings.DocstringCorpus(
            first.train, first.validation, first.packages, first.documents, "0" * 16))
        assert recipe.hash != before  # another content hash, other weights
    finally:  # the corpus of one package must not stay in the caches of this process
        real.cache_clear()
        recipes.data_fingerprint.cache_clear()
        recipes.split_paragraphs.cache_clear()


def test_wikitext_is_drawn_without_replacement_and_capped_at_its_lines(monkeypatch):
    """Paper 1 draws its WikiText samples without replacement: asked for more lines than the filtered split holds,
    the loader gives every line once, with one warning line, never a duplicate."""
    from anisotropy.data import wikipedia

    lines = [f"line {i} " + "x" * 80 for i in range(50)]
    monkeypatch.setattr(wikipedia, "wikitext_lines", lambda split="validation", min_chars=80: lines)
    few = wikipedia.wikitext(20, seed=1)
    assert len(few) == len(set(few)) == 20 and set(few) <= set(lines)
    with pytest.warns(wikipedia.SampleCappedWarning, match=r"has 50 lines .* fewer than the 2,000 asked"):
        every = wikipedia.wikitext(2000, seed=1)
    assert sorted(every) == sorted(lines)
