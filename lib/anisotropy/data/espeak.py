"""Spoken English offline: the eSpeak NG speech synthesiser, from the library and voice data that the PyPI package
``espeakng-loader`` ships in its wheel, called through ``ctypes`` (no system install, no network).

eSpeak NG is a formant synthesiser: it turns text into phonemes with its English dictionaries and rules, then
phonemes into sound with a source-filter model of the vocal tract. Its speech is robotic but intelligible, and it
not deterministic by itself: it draws noise (breath, roughness) from random generators seeded from the clock, and it keeps state from one utterance to the next (a repeated sentence comes out different). So every
utterance is synthesised in a child forked from a process that has initialised eSpeak and never spoken, after
both generators are seeded with ``RAND_SEED``: then the same text, voice, rate and pitch give the same samples in any order and in any
process. It synthesises at
22,050 Hz; ``speak`` resamples to 16 kHz (the rate of the speech models) by the exact rational factor 320/441.

``speak(text, voice="en-us", variant=None, rate=170, pitch=50) -> float32 waveform`` is the one entry point;
``VOICES`` lists English voices of the data and ``VARIANTS`` voice variants (male and female timbres).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import threading
from functools import lru_cache

import numpy as np

NATIVE_RATE = 22_050  # what espeak_Initialize reports for the bundled data
SAMPLING_RATE = 16_000
# English voices of the bundled data (espeak-ng-data/lang/gmw): accents of American, British (received
# pronunciation, Scottish, Lancastrian, West Midlands) and Caribbean English.
VOICES = ("en-us", "en-gb-x-rp", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029")
# Voice variants (espeak-ng-data/voices/!v): timbres and pitch ranges; None = the voice's default (male).
VARIANTS = (None, "m3", "f2", "f3", "m7", "f4")

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_ESPEAK_RATE, _ESPEAK_PITCH = 1, 3
_EE_OK = 0
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)
RAND_SEED = 0  # libc srand() seed set before every utterance
_LOCK = threading.Lock()  # eSpeak NG keeps global state: one synthesis at a time per process
_chunks: list[np.ndarray] = []


class EspeakUnavailableError(RuntimeError):
    """The espeakng-loader package (which ships the eSpeak NG library and data) is not installed or does not load."""


def _collect(samples, n, events) -> int:
    if n > 0:
        _chunks.append(np.ctypeslib.as_array(samples, shape=(n,)).copy())
    return 0  # 0 = go on


_callback = _CALLBACK(_collect)  # kept referenced for the life of the process


@lru_cache(maxsize=1)
def _library():
    try:
        import espeakng_loader
    except ImportError:
        raise EspeakUnavailableError("eSpeak NG is not available: pip install espeakng-loader==0.2.4 (it ships the "
                                     "library and its voice data)") from None
    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_SetSynthCallback.argtypes = [_CALLBACK]
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_Synth.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                                 ctypes.c_uint, ctypes.POINTER(ctypes.c_uint), ctypes.c_void_p]
    rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, espeakng_loader.get_data_path().encode(), 0)
    if rate != NATIVE_RATE:
        raise EspeakUnavailableError(f"eSpeak NG initialised at {rate} Hz, expected {NATIVE_RATE}")
    lib.espeak_SetSynthCallback(_callback)
    return lib


def available() -> bool:
    """Whether eSpeak NG loads here."""
    try:
        _library()
        return True
    except (EspeakUnavailableError, OSError):
        return False


def version() -> str:
    """Version of the package that ships the library (for provenance)."""
    from importlib.metadata import version as _version

    return _version("espeakng-loader")


@lru_cache(maxsize=1)
def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def _synthesize_here(lib, text: str, name: str, rate: int, pitch: int) -> tuple[int, np.ndarray]:
    data = text.encode("utf-8") + b"\0"
    # eSpeak NG draws noise (breath, roughness) from its own generator, seeded from the clock at start-up, and from
    # the C library's rand(): seed both.
    if hasattr(lib, "espeak_ng_SetRandSeed"):
        lib.espeak_ng_SetRandSeed(ctypes.c_long(RAND_SEED))
    try:
        _libc().srand(RAND_SEED)
    except OSError:
        pass
    if lib.espeak_SetVoiceByName(name.encode()) != _EE_OK:
        return -1, np.zeros(0, dtype=np.int16)
    lib.espeak_SetParameter(_ESPEAK_RATE, int(rate), 0)
    lib.espeak_SetParameter(_ESPEAK_PITCH, int(pitch), 0)
    _chunks.clear()
    status = lib.espeak_Synth(data, len(data), 0, 0, 0, 0, None, None)
    samples = np.concatenate(_chunks) if _chunks else np.zeros(0, dtype=np.int16)
    _chunks.clear()
    return status, samples


def _synthesize_forked(lib, text: str, name: str, rate: int, pitch: int) -> tuple[int, np.ndarray]:
    """Speak in a forked child (the parent never speaks, so every child starts from the same state); the child sends
    the status and the samples back through a pipe and exits at once."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: eSpeak and the pipe only, then _exit (no cleanup handlers of the parent run)
        try:
            os.close(read_fd)
            status, samples = _synthesize_here(lib, text, name, rate, pitch)
            payload = struct.pack("<iQ", status, samples.size) + samples.astype("<i2").tobytes()
            view = memoryview(payload)
            while view:
                view = view[os.write(write_fd, view):]
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        payload = fh.read()
    os.waitpid(pid, 0)
    if len(payload) < 12:
        raise RuntimeError(f"the eSpeak NG child process died without an answer for {text[:40]!r}")
    status, n = struct.unpack_from("<iQ", payload)
    return status, np.frombuffer(payload, dtype="<i2", count=n, offset=12).astype(np.int16)


def synthesize(text: str, voice: str = "en-us", variant: str | None = None, rate: int = 170,
               pitch: int = 50) -> np.ndarray:
    """eSpeak NG's int16 samples at its native 22,050 Hz for ``text`` spoken by ``voice`` (+ ``variant``) at ``rate``
    words per minute and ``pitch`` (0-100, 50 = the voice's normal pitch). Deterministic (see the module docstring);
    where ``os.fork`` does not exist (Windows) it speaks in this process, and repeated utterances may differ."""
    lib = _library()
    name = voice + (f"+{variant}" if variant else "")
    with _LOCK:
        speak_once = _synthesize_forked if hasattr(os, "fork") else _synthesize_here
        status, samples = speak_once(lib, text, name, rate, pitch)
    if status == -1:
        raise ValueError(f"eSpeak NG has no voice {name!r} (voices: {', '.join(VOICES)}; variants: "
                         f"{', '.join(v for v in VARIANTS if v)})")
    if status != _EE_OK:
        raise RuntimeError(f"espeak_Synth failed with status {status} for voice {name!r}")
    return samples


def resample_16k(samples: np.ndarray) -> np.ndarray:
    """22,050 Hz -> 16,000 Hz by the exact ratio 320/441 (polyphase filter), as float32 in [-1, 1]."""
    from scipy.signal import resample_poly

    return resample_poly(np.asarray(samples, dtype=np.float64) / 32768.0, 320, 441).astype(np.float32)


def speak(text: str, voice: str = "en-us", variant: str | None = None, rate: int = 170,
          pitch: int = 50) -> np.ndarray:
    """``text`` spoken by eSpeak NG, as a float32 waveform at 16 kHz (leading and trailing silence trimmed to 50 ms)."""
    wave = resample_16k(synthesize(text, voice, variant, rate, pitch))
    loud = np.flatnonzero(np.abs(wave) > 1e-3)
    if loud.size:
        pad = SAMPLING_RATE // 20
        wave = wave[max(0, loud[0] - pad): loud[-1] + pad]
    return wave
