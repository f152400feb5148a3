"""Speech sources, as ``{"array", "sampling_rate", "text"}`` dicts at 16 kHz: sentences of the prose spoken by eSpeak
NG's English voices (offline default), synthetic vowel-like utterances (a source-filter model), and LibriSpeech
clean validation (paper profile).
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from anisotropy import hub
from anisotropy.data import espeak
from anisotropy.data.common import DataUnavailableError, sample
from anisotropy.data.prose import prose_paragraphs


# ---------------------------------------------------------------------------------------------------------------------
# Synthetic speech (offline default for speech models)
# ---------------------------------------------------------------------------------------------------------------------

SAMPLING_RATE = 16_000
# Formant frequencies F1-F3 (Hz) of adult vowels (Peterson & Barney 1952, rounded): the spectral envelope that makes a
# vowel recognisable. Bandwidths grow with frequency.
VOWELS = {"a": (730, 1090, 2440), "i": (270, 2290, 3010), "u": (300, 870, 2240), "e": (530, 1840, 2480),
          "o": (570, 840, 2410), "ae": (660, 1720, 2410)}
_BANDWIDTHS = (80.0, 100.0, 140.0)


def _resonator(signal: np.ndarray, freq: float, bandwidth: float, rate: int) -> np.ndarray:
    """Two-pole resonance at ``freq`` Hz (bandwidth in Hz) with unit gain at DC:
    y[t] = g x[t] + 2 r cos(w) y[t-1] - r^2 y[t-2], r = exp(-pi bandwidth / rate), w = 2 pi freq / rate."""
    from scipy.signal import lfilter

    r = np.exp(-np.pi * bandwidth / rate)
    w = 2 * np.pi * freq / rate
    a = [1.0, -2 * r * np.cos(w), r * r]
    return lfilter([sum(a)], a, signal)


def _ramp(n: int, rate: int, ms: float = 15.0) -> np.ndarray:
    """Raised-cosine attack and release of ``ms`` milliseconds over ``n`` samples."""
    k = min(n // 2, int(rate * ms / 1000))
    env = np.ones(n)
    if k > 0:
        rise = 0.5 - 0.5 * np.cos(np.linspace(0, np.pi, k))
        env[:k], env[n - k:] = rise, rise[::-1]
    return env


def synthetic_utterance(rng: np.random.Generator, seconds: float, rate: int = SAMPLING_RATE) -> tuple[np.ndarray, str]:
    """One vowel-like utterance (source-filter model) and the sequence of its vowels.

    A glottal source (sawtooth pulses at a pitch f0 that starts at 90-220 Hz, declines by up to 25 % over the utterance
    with a slow intonation wave and 1 % jitter) is shaped by three formant resonators per vowel, scaled by a speaker's
    vocal-tract factor (0.85-1.15). Syllables of 120-320 ms, some preceded by a fricative (high-passed noise), are
    grouped into words separated by 80-300 ms pauses; a faint noise floor runs under everything.
    """
    from scipy.signal import butter, sosfilt, sawtooth

    total = int(seconds * rate)
    t = np.arange(total) / rate
    f0 = rng.uniform(90, 220) * (1 - rng.uniform(0.0, 0.25) * t / max(seconds, 1e-9))
    f0 = f0 * (1 + 0.06 * np.sin(2 * np.pi * rng.uniform(0.5, 2.0) * t + rng.uniform(0, 2 * np.pi)))
    f0 = f0 * (1 + 0.01 * rng.standard_normal(total))
    source = sawtooth(2 * np.pi * np.cumsum(f0) / rate)
    tract = rng.uniform(0.85, 1.15)
    hiss = butter(4, rng.uniform(2500, 5000), btype="highpass", fs=rate, output="sos")
    out = np.zeros(total)
    vowels, pos, left_in_word = [], 0, rng.integers(1, 5)
    while pos < total:
        if rng.random() < 0.3:  # fricative onset
            n = min(int(rng.uniform(0.05, 0.12) * rate), total - pos)
            out[pos:pos + n] += 0.3 * sosfilt(hiss, rng.standard_normal(n)) * _ramp(n, rate, 10)
            pos += n
        n = min(int(rng.uniform(0.12, 0.32) * rate), total - pos)
        if n <= 0:
            break
        name = list(VOWELS)[rng.integers(len(VOWELS))]
        seg = source[pos:pos + n]
        for f, bw in zip(VOWELS[name], _BANDWIDTHS):
            seg = _resonator(seg, f * tract, bw, rate)
        out[pos:pos + n] += seg / (np.abs(seg).max() + 1e-9) * rng.uniform(0.5, 1.0) * _ramp(n, rate)
        vowels.append(name)
        pos += n
        left_in_word -= 1
        if left_in_word == 0:  # pause between words
            pos += int(rng.uniform(0.08, 0.3) * rate)
            left_in_word = rng.integers(1, 5)
    out += 0.003 * rng.standard_normal(total)
    out *= rng.uniform(0.3, 0.8) / (np.abs(out).max() + 1e-9)
    return out.astype(np.float32), " ".join(vowels)


def synthetic_speech(n: int, seed: int = 0, seconds: tuple[float, float] = (1.0, 4.0),
                     transcripts: bool = False) -> list[dict]:
    """``n`` synthetic utterances at 16 kHz of ``seconds`` (uniform range) each, as
    ``{"array", "sampling_rate", "text", "vowels"}`` dicts. ``text`` is None unless ``transcripts=True``, which puts
    the vowel sequence there (a label of the synthesis, not words: Whisper's decoder is then fed it)."""
    if n <= 0:
        raise ValueError(f"synthetic_speech needs n >= 1 samples, got n={n}")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        array, vowels = synthetic_utterance(rng, float(rng.uniform(*seconds)))
        out.append({"array": array, "sampling_rate": SAMPLING_RATE, "text": vowels if transcripts else None,
                    "vowels": vowels})
    return out

# eSpeak NG voices ("voice+variant") of espeak-speech: American, British RP and Lancashire accents, male timbres and
# one female. Whisper tiny.en transcribes these best among eSpeak's English voices (measured here on four prose
# sentences: word error rates of about 0.2-0.3; eSpeak's Scottish, West Midlands and Caribbean voices and most female
# variants come out at 0.4-0.9).
ESPEAK_VOICES = ("en-us", "en-us+m7", "en-gb-x-rp", "en-gb-x-rp+m3", "en-gb-x-gbclan", "en-us+f3")
_SPOKEN = re.compile(r"[A-Z][A-Za-z ,;'-]*[a-z]\.")


@lru_cache(maxsize=None)
def spoken_sentences(min_words: int = 6, max_words: int = 24) -> tuple[str, ...]:
    """Sentences of the offline prose that can be read aloud and transcribed: letters, spaces, commas, semicolons,
    apostrophes and hyphens only (no code, numbers or symbols), ending with a full stop, ``min_words`` to
    ``max_words`` words; in corpus order, without duplicates."""
    out = []
    for paragraph in prose_paragraphs():
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", paragraph):
            sentence = sentence.strip()
            if _SPOKEN.fullmatch(sentence) and min_words <= len(sentence.split()) <= max_words:
                out.append(sentence)
    return tuple(dict.fromkeys(out))


def espeak_speech(n: int, seed: int = 0, voices: tuple[str, ...] | list[str] = ESPEAK_VOICES,
                  sentences: tuple[int, int] | list[int] = (1, 1), rates: tuple[int, int] | list[int] = (150, 180),
                  pitches: tuple[int, int] | list[int] = (40, 60), max_seconds: float = 28.0) -> list[dict]:
    """``n`` clips of spoken English: each reads ``sentences`` (a range) consecutive-in-draw prose sentences
    (``spoken_sentences``) in one of ``voices`` (cycled, so every voice speaks), at a rate (words per minute) and
    pitch drawn from their ranges; eSpeak NG output resampled to 16 kHz. A clip longer than ``max_seconds`` (Whisper
    reads 30-second windows) loses its last sentences. Returns ``{"array", "sampling_rate", "text", "voice", "rate",
    "pitch"}`` dicts; deterministic given the arguments (``data.espeak`` synthesises deterministically)."""
    if n <= 0:
        raise ValueError(f"espeak_speech needs n >= 1 samples, got n={n}")
    pool = spoken_sentences()
    rng = np.random.default_rng(seed)
    low, high = int(sentences[0]), int(sentences[1])
    out = []
    for i in range(n):
        k = int(rng.integers(low, high + 1))
        texts = [pool[j] for j in rng.choice(len(pool), size=k, replace=False)]
        voice, _, variant = voices[i % len(voices)].partition("+")
        rate = int(rng.integers(rates[0], rates[1] + 1))
        pitch = int(rng.integers(pitches[0], pitches[1] + 1))
        while True:
            text = " ".join(texts)
            wave = espeak.speak(text, voice, variant or None, rate, pitch)
            if wave.size <= max_seconds * espeak.SAMPLING_RATE or len(texts) == 1:
                break
            texts = texts[:-1]
        out.append({"array": wave[: int(max_seconds * espeak.SAMPLING_RATE)], "sampling_rate": espeak.SAMPLING_RATE,
                    "text": text, "voice": voices[i % len(voices)], "rate": rate, "pitch": pitch})
    return out

# Only the validation shards of the "clean" config: naming the config would download and prepare every split of it
# (train.100 and train.360 too, about 30 GB) for a few hundred validation utterances.
LIBRISPEECH_FILES = {"validation": "clean/validation/*.parquet"}


def librispeech(n: int, seed: int = 0) -> list[dict]:
    """``n`` utterances of LibriSpeech clean validation as ``{"array", "sampling_rate", "text"}`` (16 kHz).

    Paper 1 used Common Voice 11, which is no longer on the Hugging Face Hub; LibriSpeech (read English audiobooks)
    is the paper profile's replacement. Only the validation files are downloaded; the FLAC audio is decoded with
    ``soundfile`` (``datasets`` would need ``torchcodec`` and FFmpeg).
    """
    import io

    try:
        import soundfile
    except ImportError:
        raise DataUnavailableError("LibriSpeech's FLAC audio needs the soundfile package: pip install "
                                   "'anisotropy[colab]' (or pip install soundfile)") from None
    import datasets

    ds = hub.dataset("openslr/librispeech_asr", "LibriSpeech", data_files=LIBRISPEECH_FILES, split="validation")
    ds = ds.cast_column("audio", datasets.Audio(decode=False))
    idx = sample(len(ds), n, seed, "LibriSpeech validation")
    out = []
    for i in idx:
        row = ds[int(i)]
        array, rate = soundfile.read(io.BytesIO(row["audio"]["bytes"]), dtype="float32")
        out.append({"array": array, "sampling_rate": int(rate), "text": row["text"]})
    return out
