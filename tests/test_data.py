"""Data sources: deterministic sampling, the offline synthetic speech, and one-line failures for what is missing."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import signal

from anisotropy import data


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


def test_enwik8_windows_from_a_provided_file(tmp_path, monkeypatch):
    raw = ("<page><title>Anarchism</title> naïve café " * 200).encode()
    (tmp_path / "enwik8").write_bytes(raw)
    monkeypatch.setenv("ANISOTROPY_ENWIK8", str(tmp_path / "enwik8"))
    texts = data.load("enwik8", 5, seed=3, chars=64)
    assert texts == data.load("enwik8", 5, seed=3, chars=64)
    assert all(t and t in raw.decode() for t in texts)  # partial UTF-8 at the edges dropped, nothing invented
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(ValueError, match="fewer than one window"):
        data.load("enwik8", 2, path=tmp_path / "empty")


def test_missing_or_offline_sources_fail_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path))
    monkeypatch.delenv("ANISOTROPY_ENWIK8", raising=False)
    with pytest.raises(data.DataUnavailableError) as err:
        data.load("enwik8", 3)
    assert "\n" not in str(err.value) and "mattmahoney.net" in str(err.value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for source, repo in (("wikitext-103", "Salesforce/wikitext"), ("librispeech", "openslr/librispeech_asr"),
                         ("imagenette", "frgfm/imagenette")):
        with pytest.raises(data.DataUnavailableError) as err:
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
