"""Data sources: deterministic sampling, the offline synthetic speech, and one-line failures for what is missing."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import signal

from anisotropy import data, hub


def test_prose_is_deterministic_and_matches_text_samples():
    a = data.load("prose", 12, seed=4)
    assert a == data.load("prose", 12, seed=4) == data.text_samples(12, seed=4)
    assert a != data.load("prose", 12, seed=5)
    assert len(set(a)) == 12 and all(len(t) >= 80 for t in a)  # without replacement
    assert all(len(t) >= 400 for t in data.load("prose", 5, min_chars=400))
    assert data.modality("prose") == "text" and data.modality("librispeech") == "speech"


def test_resonator_peaks_at_its_formant():
    """The formant filter's frequency response (analytic, scipy.signal.freqz) peaks at the requested frequency and
    has unit gain at DC."""
    rate, f, bw = data.SAMPLING_RATE, 730.0, 80.0
    impulse = np.zeros(4096)
    impulse[0] = 1.0
    h = data._resonator(impulse, f, bw, rate)
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
        assert clip["text"] is None and set(clip["vowels"].split()) <= set(data.VOWELS)
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
    text = data.enwik8_text(tmp_path / "enwik8")
    assert text == "The cat (Felis catus) is a small mammal.\n\nHistory\nCats were domesticated in the Near East."
    for gone in ("{{", "[[", "ref", "<", "&lt;", "''", "Category", "Chat", "x^2", "print", "wikitable", "REDIRECT"):
        assert gone not in text, gone
    windows = data.enwik8(3, seed=1, chars=20, path=tmp_path / "enwik8")
    assert all(len(w) == 20 and w in text for w in windows)
    assert list((tmp_path / "cache").glob("enwik8-*.clean.txt")), "the cleaned text is cached"


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
    with pytest.raises(data.DataUnavailableError, match=f"has SHA-256 {digest}, not 0000") as err:
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
    with pytest.raises(data.DataUnavailableError, match="must end with #sha256="):
        data.enwik8_url()


def test_missing_or_offline_sources_fail_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path))
    monkeypatch.delenv("ANISOTROPY_ENWIK8", raising=False)
    monkeypatch.setenv("ANISOTROPY_ENWIK8_URL", "http://127.0.0.1:9/enwik8.zip#sha256=" + "0" * 64)  # nothing listens
    with pytest.raises(data.DataUnavailableError) as err:
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
