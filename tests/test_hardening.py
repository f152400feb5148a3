"""Hardening (issue 10): every bad input gives one clear paragraph and writes nothing; a run killed by a real signal
resumes without recomputing what finished; the same profile and seed give identical results.

The tables ``BAD_INPUTS`` (refused, with the message each gives) and ``CONVERTED_INPUTS`` (accepted after a
conversion, with what the conversion must give) list every bad input tried. Inputs whose handling is still missing in
another module were once ``xfail(strict=True)``; all are handled now.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from conftest import (CHAPTER_S, PYTHON, SMOKE_BUILD_S, book_env, communicate_guarded, copy_repo, hang_guard, run_cli, run_guarded, wait_for)

# A chapter-shaped notebook that exists only in the tests' copies of the repository: two parameters with what they
# allow (PROBE_ALLOWED, added to the copy's allowed.yml) and a parameter value that makes a cell raise.
PROBE = "hardening_probe"
PROBE_SOURCE = '''---
jupytext:
  text_representation: {extension: .md, format_name: myst}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
# Hardening probe

```{code-cell} ipython3
:tags: [parameters]
profile = "local"
n = 3  # repetitions
mode = "ok"  # "fail": the next cell raises, "die": its kernel is killed
```

```{code-cell} ipython3
from anisotropy import profiles; from anisotropy.pages import report

P = profiles.apply("hardening_probe", globals())
report.provenance(P)
```

```{code-cell} ipython3
if mode == "fail":
    raise ValueError(f"deliberate failure with n={n}")
if mode == "die":  # as the kernel of a run that exhausts the memory: killed by the out-of-memory killer
    import os, signal
    os.kill(os.getpid(), signal.SIGKILL)
```
'''


PROBE_ALLOWED = f"{PROBE}:\n  n: {{at_least: 1}}\n  mode: {{one_of: [ok, fail, die]}}\n"


def add_probe(root: Path) -> Path:
    (root / "notebooks" / f"{PROBE}.md").write_text(PROBE_SOURCE)
    with open(root / "lib" / "anisotropy" / "profiles" / "allowed.yml", "a") as fh:
        fh.write(PROBE_ALLOWED)
    return root


@pytest.fixture(scope="module")
def probe_repo(tmp_path_factory) -> Path:
    """A copy of the repository with the probe notebook (and its output-free .ipynb for plain papermill)."""
    root = add_probe(copy_repo(tmp_path_factory.mktemp("hardening") / "repo"))
    import jupytext
    import nbformat

    nb = jupytext.read(root / "notebooks" / f"{PROBE}.md")
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nbformat.write(nb, root / "notebooks" / f"{PROBE}.ipynb")
    return root


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory) -> Path:
    """Offline tokenizers trained by registry.load go here, not into the project's .cache."""
    return tmp_path_factory.mktemp("cache")


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


# ---- the table of bad inputs ----------------------------------------------------------------------------------------

@dataclass
class Ctx:
    repo: Path  # a copy of the repository with the probe notebook
    tmp: Path
    monkeypatch: pytest.MonkeyPatch


@dataclass
class Bad:
    id: str
    what: str
    action: Callable[[Ctx], str]  # returns the message the user sees
    expect: str  # regular expression the message must match
    ours: bool = True  # False: the message is printed by a tool we do not control (papermill's CLI)


def cli(*args: str) -> Callable[[Ctx], str]:
    """The CLI refuses: exit status 1, one paragraph on stderr, no traceback."""
    def action(ctx: Ctx) -> str:
        proc = run_cli(ctx.repo, *args)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert proc.stderr.startswith("error: "), proc.stderr
        return proc.stderr
    return action


def raises(exc_type, fn: Callable[[Ctx], object]) -> Callable[[Ctx], str]:
    def action(ctx: Ctx) -> str:
        with pytest.raises(exc_type) as info:
            fn(ctx)
        return str(info.value)
    return action


def papermill_cli(*params: str) -> Callable[[Ctx], str]:
    """Plain papermill on the committed-style .ipynb, bypassing our runner: the chapter's provenance call checks."""
    def action(ctx: Ctx) -> str:
        out = ctx.tmp / "out.ipynb"
        proc = run_guarded([PYTHON, "-m", "papermill", f"notebooks/{PROBE}.ipynb", str(out), *params,
                            "--cwd", str(ctx.repo)], expected_s=CHAPTER_S, cwd=ctx.repo, env=book_env(ctx.repo),
                           capture_output=True, text=True)
        assert proc.returncode != 0
        out.unlink(missing_ok=True)  # the user's own output file, not ours
        plain = re.sub(r"\x1b\[[0-9;]*m", "", proc.stderr)
        lines = [ln for ln in plain.splitlines() if ln.startswith("ProfileError: ")]
        assert lines, proc.stderr[-3000:]
        return lines[-1]
    return action


def _store(ctx: Ctx):
    from anisotropy import results

    return results.Store(ctx.tmp / "results")


def test_every_error_a_user_can_fix_is_one_type_and_the_cli_prints_it_as_one_paragraph(monkeypatch, capsys):
    from anisotropy.book import cli, runner
    from anisotropy import errors, executor, profiles, results

    assert profiles.ProfileError is errors.ProfileError  # the old name still works
    for kind in (profiles.ProfileError, results.StoreError, executor.ExecutorError, runner.RunnerError):
        assert issubclass(kind, errors.UserError)

    def unreachable(*args, **kwargs):
        raise results.StoreError("The results store s3://nowhere cannot be reached.")

    monkeypatch.setattr(runner, "execute", unreachable)
    assert cli.main(["run", "appendix_b_isotropic"]) == 1
    assert capsys.readouterr().err == "error: The results store s3://nowhere cannot be reached.\n"


def _computation(frame: pd.DataFrame | None = None):
    """A chapter's computation giving ``frame``; without one, a computation that fails if it runs. Both have the same
    code, hence the same key (the key holds a computation's own code)."""
    return lambda: frame if frame is not None else pytest.fail("a corrupted result was recomputed")


def _stored(store, key: dict, frame: pd.DataFrame) -> Path:
    """Store ``frame`` under ``key`` as a chapter does, and return the Parquet file written."""
    before = set(store.root.rglob("*.parquet"))
    store.cached("chapter", key, _computation(frame))
    return (set(store.root.rglob("*.parquet")) - before).pop()


@pytest.mark.parametrize("damage", ["garbage", "cut in half"])
def test_a_stored_result_that_cannot_be_read_is_computed_again_with_one_warning(tmp_path, damage):
    """A Parquet file overwritten or cut off (a write interrupted on a network drive) is a cache miss: the frame is
    computed and stored anew, and one warning line names the file; the next read is the new frame, silently."""
    import warnings

    from anisotropy import results

    store = results.Store(tmp_path / "results")
    first = pd.DataFrame({"x": np.arange(1000.0)})
    path = _stored(store, {"model": "m"}, first)
    path.write_bytes(b"not a parquet file" if damage == "garbage" else path.read_bytes()[: path.stat().st_size // 2])
    again = pd.DataFrame({"x": np.arange(1000.0) + 1})
    with pytest.warns(results.RecomputedWarning) as caught:
        got = store.cached("chapter", {"model": "m"}, _computation(again))
    message = str(caught[0].message)
    assert re.fullmatch(r"The stored result .*/chapter/[0-9a-f]{16}\.parquet cannot be read .* Computing it again\.",
                        message) and "\n" not in message
    pd.testing.assert_frame_equal(got, again)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pd.testing.assert_frame_equal(store.cached("chapter", {"model": "m"}, _computation()), again)


def corrupt_sidecar(ctx: Ctx):
    store = _store(ctx)
    path = _stored(store, {"model": "m", "layer": 3}, pd.DataFrame({"x": [1.0]}))
    path.with_suffix(".json").write_text('{"key": {"model": "m", "lay')
    store.frames("chapter")


def load_model(name: str, variant: str):
    from anisotropy.models import registry

    return registry.load(name, variant=variant)


def text_samples(n: int):
    from anisotropy.data import prose

    return prose.text_samples(n)


def _offline(ctx: Ctx):
    ctx.monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def load_offline_uncached(ctx: Ctx):
    from anisotropy.models import registry

    _offline(ctx)
    registry.load("bert-base-uncased")


def load_gated(ctx: Ctx):
    import huggingface_hub

    from anisotropy import hub
    from anisotropy.models import memory, registry

    # As on a machine with network but no token: the Hub answers, nobody is logged in, memory is plentiful.
    ctx.monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    ctx.monkeypatch.delenv("HF_TOKEN", raising=False)
    ctx.monkeypatch.setattr(hub, "reachable", lambda timeout=3.0: True)
    ctx.monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    ctx.monkeypatch.setattr(memory, "available_bytes", lambda device: 2**50)
    registry.load("llama-2-7b")


def load_too_big(ctx: Ctx):
    from anisotropy.models import memory, registry

    ctx.monkeypatch.setattr(memory, "available_bytes", lambda device: 2**30)  # a 1 GiB device
    registry.load("opt-1.3b", variant="untrained")


def _tiny_bert(ctx: Ctx):
    from anisotropy.models import registry

    return registry.load("bert-base-uncased", variant="tiny")


def _checkpoint(ctx: Ctx, damage: Callable[[Path], None]) -> Path:
    """A self-trained-style checkpoint folder (save_pretrained of a tiny BERT and its tokenizer), then damaged."""
    loaded = _tiny_bert(ctx)
    folder = ctx.tmp / "step-100"
    loaded.model.save_pretrained(folder)
    loaded.preprocessor.save_pretrained(folder)
    damage(folder)
    return folder


def load_checkpoint(damage: Callable[[Path], None]) -> Callable[[Ctx], None]:
    def fn(ctx: Ctx):
        from anisotropy.models import registry

        registry.load(_checkpoint(ctx, damage))
    return fn


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:1000])


def extract_from(model: str, examples: Callable[[], list], **kw) -> Callable[[Ctx], None]:
    def fn(ctx: Ctx):
        from anisotropy.models import registry
        from anisotropy.measure import taps

        taps.extract(registry.load(model, variant="tiny"), examples(), **kw)
    return fn


def load_data(source: str, n: int, **options):
    from anisotropy.data import sources as data

    return data.load(source, n, seed=0, **options)


def load_uncached_dataset(ctx: Ctx):
    _offline(ctx)
    ctx.monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    load_data("wikitext-103", 8)  # a hub corpus of the papers, not cached here


MISSING = "missing in another module; see the hardening report"
BAD_INPUTS = [
    # -- profiles and parameters: runner and CLI --------------------------------------------------------------------
    Bad("unknown-profile", "a mistyped profile name",
        cli("run", "appendix_b_isotropic", "--profile", "locl"), r"Unknown profile 'locl'\. Did you mean 'local'\?"),
    Bad("unknown-profile-build", "a mistyped profile for the whole book",
        cli("build", "--profile", "papr"), r"Unknown profile 'papr'\. Did you mean 'paper'\? Known profiles: "),
    Bad("unknown-chapter", "a mistyped chapter name",
        cli("run", "appendix_b", "--profile", "smoke"), r"No notebook 'appendix_b'.*Did you mean 'appendix_b_isotropic'"),
    Bad("unknown-parameter", "a parameter the notebook does not have",
        cli("run", "appendix_b_isotropic", "--profile", "smoke", "-p", "n_pair=10"),
        r"unknown parameter 'n_pair' \(did you mean 'n_pairs'\?\)"),
    Bad("wrong-type", "a word where a number is expected",
        cli("run", "appendix_b_isotropic", "--profile", "smoke", "-p", "n_pairs=many"),
        r"parameter 'n_pairs' should be a number like 40000, got 'many'"),
    Bad("wrong-list-element", "a list with an element of the wrong kind",
        cli("run", "appendix_b_isotropic", "--profile", "smoke", "-p", "dims=[16, x]"),
        r"parameter 'dims' should be a list of numbers"),
    Bad("no-equals-sign", "a parameter without a value",
        cli("run", "appendix_b_isotropic", "--profile", "smoke", "-p", "n_pairs"),
        r"Parameters are written name=value, got 'n_pairs'"),
    Bad("out-of-range", "a value below the range the notebook declares",
        cli("run", PROBE, "--profile", "smoke", "-p", "n=0"), r"parameter 'n': 0 is below the allowed range \(at least 1\)"),
    Bad("negative-count", "a negative sample size for a real chapter: refused before its kernel starts",
        cli("run", "appendix_b_isotropic", "--profile", "smoke", "-p", "n_pairs=-5"),
        r"parameter 'n_pairs': -5 is below the allowed range \(at least 1\)"),
    Bad("not-a-choice", "a value outside the choices the notebook declares",
        cli("run", PROBE, "--profile", "smoke", "-p", "mode=maybe"), r"parameter 'mode': 'maybe' is not one of 'ok', 'fail', 'die'"),
    Bad("malformed-list", "a list whose bracket is not closed: one line naming the parameter, no YAML traceback",
        cli("run", "appendix_b_isotropic", "--profile", "smoke", "-p", "dims=[16,32"),
        r"parameter 'dims': cannot read '\[16,32' as a value .*a list in brackets such as \[16, 32\]"),
    Bad("sweep-bad-point", "one bad value in a sweep grid: refused before the first point runs",
        cli("sweep", "appendix_b_isotropic", "--profile", "smoke", "-p", "n_pairs=100,many"),
        r"parameter 'n_pairs' should be a number like 40000, got 'many'"),
    Bad("misspelt-papermill", "a misspelt parameter name passed to plain papermill -p (papermill only warns)",
        papermill_cli("-p", "nn", "3"), r"ProfileError: Notebook 'hardening_probe': unknown parameter 'nn' \(did you "
        r"mean 'n'\?\)", ours=False),
    Bad("wrong-type-papermill", "a wrong kind passed to plain papermill -p (the chapter's provenance call checks)",
        papermill_cli("-p", "n", "many"), r"ProfileError: Notebook 'hardening_probe': parameter 'n' should be a number",
        ours=False),
    # -- the results store ------------------------------------------------------------------------------------------
    Bad("corrupted-sidecar", "a stored result's JSON sidecar cut short",
        raises(Exception, corrupt_sidecar), r"The sidecar .*/chapter/[0-9a-f]{16}\.json .*cannot be read.*Delete it"),
    # -- models: registry --------------------------------------------------------------------------------------------
    Bad("unknown-model", "a mistyped model name",
        raises(Exception, lambda ctx: load_model("bert-base-uncasd", "tiny")),
        r"unknown model 'bert-base-uncasd' \(did you mean 'bert-base-uncased'"),
    Bad("offline-uncached-model", "a pretrained model requested offline that is not in the cache",
        raises(Exception, load_offline_uncached), r"bert-base-uncased is not in the local Hugging Face cache .*offline"),
    Bad("gated-model", "a gated model without a token", raises(Exception, load_gated),
        r"meta-llama/Llama-2-7b-hf is gated: accept its licence at https://huggingface.co/meta-llama/Llama-2-7b-hf"),
    Bad("model-too-big", "a model that does not fit the device (estimated before loading)",
        raises(Exception, load_too_big), r"opt-1\.3b \(1\.32B parameters\) needs about 5\.4 GiB .* 1\.0 GiB is free"),
    Bad("checkpoint-without-weights", "a checkpoint folder whose weights file is missing",
        raises(Exception, load_checkpoint(lambda f: (f / "model.safetensors").unlink())),
        r"model\.safetensors.*step-100|step-100.*model\.safetensors"),
    Bad(
        "checkpoint-without-config", "a checkpoint folder whose config.json is missing",
        raises(Exception, load_checkpoint(lambda f: (f / "config.json").unlink())), r"step-100.*config\.json"),
    Bad(
        "checkpoint-truncated-weights", "a checkpoint folder whose weights file is cut short",
        raises(Exception, load_checkpoint(lambda f: _truncate(f / "model.safetensors"))),
        r"step-100.*model\.safetensors"),
    # -- corpora and examples: data, taps ---------------------------------------------------------------------------
    Bad("empty-corpus", "no examples at all",
        raises(ValueError, extract_from("bert-base-uncased", lambda: [])), r"the corpus is empty"),
    Bad("empty-sample", "asking the prose corpus for zero paragraphs",
        raises(ValueError, lambda ctx: text_samples(0)), r"needs n >= 1"),
    Bad("all-padding-batch", "examples with no token left once padding and special tokens are excluded",
        raises(ValueError, extract_from("bert-base-uncased", lambda: ["", ""])),
        r"no vector was kept .* padding or special tokens \(keep_special=False\)"),
    Bad("wrong-modality", "text given to a vision model",
        raises(ValueError, extract_from("vit-base", lambda: ["a sentence"])),
        r"vit-base is a vision model but the examples look like text"),
    Bad("offline-uncached-dataset", "a hub corpus requested offline that is not in the cache",
        raises(Exception, load_uncached_dataset),
        r"WikiText-103 \(Salesforce/wikitext\) is not in the local cache and the Hub is offline"),
    Bad("unknown-data-source", "a mistyped corpus name",
        raises(ValueError, lambda ctx: load_data("wikitext103", 8)), r"unknown data source 'wikitext103' \(did you mean "
                                                                   r"'wikitext-103'"),
    Bad("missing-corpus-file", "a corpus read from a file that is not there (enwik8)",
        raises(Exception, lambda ctx: load_data("enwik8", 8, path=ctx.tmp / "enwik8.zip")),
        r"enwik8 not found \(looked at .*enwik8\.zip.*\): download http://mattmahoney\.net/dc/enwik8\.zip"),
    Bad("zero-examples", "asking a corpus for zero examples",
        raises(ValueError, lambda ctx: load_data("prose", 0)), r"n must be >= 1, got 0"),
]


def _audio(seconds: float, rate: int, channels: int = 0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    wave = (0.5 * np.sin(2 * np.pi * 220 * t) + 0.1 * np.sin(2 * np.pi * 1500 * t)).astype(np.float32)
    return np.stack([wave] * channels) if channels else wave


def _rgb(h: int = 32, w: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _rgba() -> np.ndarray:
    return np.concatenate([_rgb(), np.full((32, 32, 1), 255, np.uint8)], axis=-1)


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=lambda b: b.id)
def test_bad_input_gives_one_clear_paragraph_and_writes_nothing(bad, probe_repo, tmp_path, monkeypatch, model_cache):
    monkeypatch.setenv("ANISOTROPY_CACHE", str(model_cache))
    monkeypatch.setenv("ANISOTROPY_RESULTS", str(tmp_path / "results"))
    before = files_under(probe_repo)
    message = bad.action(Ctx(probe_repo, tmp_path, monkeypatch)).strip()
    assert re.search(bad.expect, message, flags=re.S), message
    if bad.ours:
        assert "Traceback" not in message and "\n\n" not in message and len(message) < 1200, message
    assert files_under(probe_repo) == before, "a refused input left files behind"


# ---- inputs that are converted rather than refused ------------------------------------------------------------------

def _n_vectors(model: str, examples: list, model_cache: Path) -> dict[int, int]:
    from anisotropy.models import registry
    from anisotropy.measure import taps

    stats = taps.extract(registry.load(model, variant="tiny"), examples)
    return {layer: s.n for layer, s in stats.items()}


def _first_layer_rows(model: str, examples: list) -> np.ndarray:
    from anisotropy.models import registry
    from anisotropy.measure import taps

    stats = taps.extract(registry.load(model, variant="tiny"), examples, reservoir_size=4096)
    return np.asarray(stats[0].sample)


@dataclass
class Converted:
    id: str
    what: str
    check: Callable[[Path], None]


def same_frames_as_16khz(ctx_cache: Path):
    # 1 s at 8 kHz is resampled to 1 s at 16 kHz: as many frames (20 ms each) as the same second recorded at 16 kHz.
    at_16k = _n_vectors("wav2vec2-base", [{"array": _audio(1.0, 16000), "sampling_rate": 16000}], ctx_cache)
    at_8k = _n_vectors("wav2vec2-base", [{"array": _audio(1.0, 8000), "sampling_rate": 8000}], ctx_cache)
    assert at_8k == at_16k and at_16k[0] == 49


def stereo_is_one_second(ctx_cache: Path):
    mono = _n_vectors("wav2vec2-base", [{"array": _audio(1.0, 16000), "sampling_rate": 16000}], ctx_cache)
    stereo = _n_vectors("wav2vec2-base", [{"array": _audio(1.0, 16000, channels=2), "sampling_rate": 16000}],
                        ctx_cache)
    assert stereo == mono  # two channels of one second are one second of sound, not two


def patches_per_image(examples: Callable[[], list]) -> Callable[[Path], None]:
    def check(ctx_cache: Path):
        got = _n_vectors("vit-base", examples(), ctx_cache)
        n = len(examples())
        assert set(got.values()) == {16 * n}  # tiny ViT: 32x32 input, 8x8 patches, CLS excluded
    return check


def same_as_uint8(ctx_cache: Path):
    as_uint8 = _first_layer_rows("vit-base", [_rgb()])
    as_float = _first_layer_rows("vit-base", [_rgb() / 255.0])
    np.testing.assert_allclose(as_float, as_uint8, rtol=1e-5, atol=1e-5)


def _pil(mode: str):
    from PIL import Image

    return Image.fromarray(_rgb()).convert(mode)


CONVERTED_INPUTS = [
    Converted("audio-8khz", "audio at 8 kHz with its sampling rate: resampled to 16 kHz", same_frames_as_16khz),
    Converted("audio-stereo", "two-channel audio: mixed to mono (or refused)", stereo_is_one_second),
    Converted("image-grayscale-array", "an (H, W) grayscale array: repeated to 3 channels",
              patches_per_image(lambda: [_rgb()[..., 0]])),
    Converted("image-pil-L", "a PIL image in mode L: converted to RGB", patches_per_image(lambda: [_pil("L")])),
    Converted("image-pil-P", "a PIL image in palette mode P: converted to RGB", patches_per_image(lambda: [_pil("P")])),
    Converted("image-channels-first", "a (3, H, W) array: moved to channels last",
              patches_per_image(lambda: [np.moveaxis(_rgb(), -1, 0)])),
    Converted("image-wrong-size", "images of other sizes (70x50, 64x48): resized by the model's processor",
              patches_per_image(lambda: [_rgb(70, 50), _rgb(64, 48, seed=1)])),
    Converted("image-rgba", "an RGBA image: alpha dropped (or refused naming the 4 channels)",
                           patches_per_image(lambda: [_rgba()])),
    Converted("image-float-0-1", "a float image in [0, 1]: the same vectors as its uint8 version",
                           same_as_uint8),
]


@pytest.mark.parametrize("case", CONVERTED_INPUTS, ids=lambda c: c.id)
def test_convertible_input_is_converted(case, monkeypatch, model_cache):
    monkeypatch.setenv("ANISOTROPY_CACHE", str(model_cache))
    case.check(model_cache)


# ---- parameter rules ------------------------------------------------------------------------------------------------

def test_allowed_ranges_are_read_from_allowed_yml_and_refuse_what_they_say(probe_repo, tmp_path):
    from anisotropy import profiles

    rules = profiles.read_allowed(probe_repo / "lib" / "anisotropy" / "profiles" / "allowed.yml")[PROBE]
    assert rules == {"n": profiles.Rule(at_least=1), "mode": profiles.Rule(one_of=("ok", "fail", "die"))}
    assert rules["mode"].violation("maybe") == "'maybe' is not one of 'ok', 'fail', 'die'"
    interval = profiles.Rule(at_least=0, at_most=1)
    assert interval.text == "in [0, 1]"
    assert interval.violation(1) is None and interval.violation([0.0, 0.5]) is None
    assert interval.violation([0.5, 1.5]) == "1.5 is above the allowed range (in [0, 1])"
    assert interval.violation(-0.1) == "-0.1 is below the allowed range (in [0, 1])"
    open_interval = profiles.Rule(above=0, below=1)
    assert open_interval.text == "> 0, < 1"
    assert open_interval.violation(0) and open_interval.violation(1) and open_interval.violation(0.5) is None
    at_least = profiles.Rule(at_least=2)
    assert at_least.violation([2, 16]) is None and at_least.violation([16, 1]) == "1 is below the allowed range (at least 2)"
    assert at_least.violation(True) is None and at_least.violation(float("nan")) is None  # bounds are for numbers
    # A wrong entry is one line naming it, never a rule that quietly checks nothing.
    wrong = {"n: {at_lest: 1}": r"x\.n\.at_lest: unknown key; a rule holds at_least, at_most, above, below and one_of\.",
             "n: {at_least: 1, above: 0}": r"x\.n: at_least and above both bound the same side; give one\.",
             "n: {at_least: 5, at_most: 1}": r"x\.n: the range is empty \(in \[5, 1\]\)\.",
             "n: {}": r"x\.n: a rule gives at_least, at_most, above, below or one_of\.",
             "n: {at_least: many}": r"x\.n\.at_least: Input should be a valid number.*\(got 'many'\)\."}
    for i, (entry, message) in enumerate(wrong.items()):
        path = tmp_path / str(i) / "allowed.yml"
        path.parent.mkdir()
        path.write_text(f"x:\n  {entry}\n")
        with pytest.raises(profiles.ProfileError, match=rf"^allowed\.yml: {message}$"):
            profiles.read_allowed(path)


# What people type for a number, and what Python's float() and int() make of it (the truth the parser is held to).
NUMBERS_READ = ["0", "1e3", "2e4", "+3", ".5", "-1", "1_000", "2.5e3", "1.0", "5e-2", "1E3", "-0.25", "3.", "017",
                "1_000.5", "1e1_0", " 7 "]
NUMBERS_PYTHON_ONLY = ["inf", "nan", "-Infinity", "1e400", "\u0661\u0662"]  # float() reads them; no parameter means them
NOT_NUMBERS = ["1e", "e3", "1.2.3", "--1", "+-1", "1_", "_1", "1__0", "0x10", "1,5", "", "1 000", ".", "1e3.5", "abc"]


def _reads(parse, text):
    try:
        return parse(text)
    except ValueError:
        return None


def test_one_number_parser_reads_numbers_as_python_does():
    from anisotropy import profiles

    for text in NUMBERS_READ:
        value, as_int = profiles.number(text), _reads(int, text)
        assert value == float(text), text
        # an int where int() reads one, and where an exponent writes a whole number (1e3: a count, as people write one)
        assert isinstance(value, int) == (as_int is not None or ("e" in text.lower() and float(text).is_integer())), text
    for text in NUMBERS_PYTHON_ONLY:
        assert _reads(float, text) is not None and profiles.number(text) is None, text
    for text in NOT_NUMBERS:
        assert _reads(float, text) is None and _reads(int, text) is None, text  # Python refuses them too
        assert profiles.number(text) is None, text


def test_the_command_line_and_the_profiles_read_a_number_alike():
    """``-p name=value`` (``cli._parse_assignments``) and a YAML file of the profiles (``profiles.read_yaml``: the
    profiles and allowed.yml) give the same value as ``profiles.number`` for every spelling, where YAML 1.1 alone
    reads 1e3 as a word and 017 as octal 15; a word stays a word."""
    from anisotropy import profiles
    from anisotropy.book.cli import _parse_assignments

    for text in (t.strip() for t in NUMBERS_READ):
        value = profiles.number(text)
        assert _parse_assignments([f"x={text}"]) == {"x": value} == profiles.read_yaml(f"x: {text}"), text
        assert type(_parse_assignments([f"x={text}"])["x"]) is type(value) is type(profiles.read_yaml(f"x: {text}")["x"])
    assert _parse_assignments(["x=1e3,2e3"], as_grid=True) == {"x": [1000, 2000]} == profiles.read_yaml("x: [1e3, 2e3]")
    for word in ("1:30", "inf", "0x10", "1_", "post_ln"):
        assert _parse_assignments([f"x={word}"]) == {"x": word} == profiles.read_yaml(f"x: {word}"), word


# ---- one report for a failing cell, and the build goes on ------------------------------------------------------------

@pytest.mark.slow
def test_failing_cell_gives_one_report_and_the_build_keeps_going(repo_copy):
    add_probe(repo_copy)
    # The probe first, a real chapter after it: the build must run the second one before reporting the first. Only
    # those two: the other chapters would add a whole smoke build (~5 minutes here) and show nothing more; the second
    # is one that runs after no other chapter.
    (repo_copy / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nparts:\n  - caption: Probe\n    chapters:\n"
        f"      - file: book/executed/{PROBE}\n      - file: book/executed/appendix_performance\n")
    with open(repo_copy / "lib" / "anisotropy" / "profiles" / "smoke.yml", "a") as fh:
        fh.write(f"  {PROBE}:\n    n: 7\n    mode: fail\n")
    # one chapter at a time, so the second can only run after the first failed (two at a time, either may end first);
    # the build starts the longest chapter by the reference build first (book.runner.longest_first): the probe is
    # made the longest there
    reference = repo_copy / "benchmarks" / "results" / "build_reference.json"
    times = json.loads(reference.read_text())
    times["chapters_cpu_seconds"][PROBE] = 10 * max(times["chapters_cpu_seconds"].values())
    reference.write_text(json.dumps(times))
    proc = run_cli(repo_copy, "build", "--profile", "smoke", "--jobs", "1")
    assert proc.returncode == 1
    partial = repo_copy / "book" / "executed" / f".{PROBE}.partial.ipynb"
    line = next(i for i, text in enumerate(PROBE_SOURCE.splitlines(), 1) if text.startswith('if mode == "fail"'))
    assert proc.stderr.splitlines() == [
        "error: 1 chapter(s) failed; the book was not rendered:",
        f"  - {PROBE}: code cell 3 (notebooks/{PROBE}.md, line {line}) raised ValueError: deliberate failure with n=7",
        f"    partially executed notebook: {partial}",
    ]
    names = [n for n in re.findall(r"^\[\d+/\d+\] (\S+)", proc.stdout, flags=re.M)]
    assert names == [PROBE, "appendix_performance"]  # went on after the failure
    assert re.search(rf"\] {PROBE} .* FAILED$", proc.stdout, flags=re.M)
    assert partial.is_file() and not (repo_copy / "book" / "executed" / f"{PROBE}.ipynb").exists()
    assert (repo_copy / "book" / "executed" / "appendix_performance.ipynb").is_file()
    assert not (repo_copy / "_build" / "html").exists()


@pytest.mark.slow
def test_dead_kernel_gives_one_report(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    add_probe(repo)
    proc = run_cli(repo, "run", PROBE, "--profile", "smoke", "-p", "mode=die")
    assert proc.returncode == 1
    partial = repo / "book" / "executed" / f".{PROBE}.partial.ipynb"
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, proc.stderr
    assert re.fullmatch(rf"error: {PROBE}: the kernel failed \(DeadKernelError: .*\); kernel messages: "
                        rf"{re.escape(str(repo / '_build' / 'logs' / PROBE))}\.log", lines[0]), lines[0]
    assert lines[1] == f"    partially executed notebook: {partial}"
    assert not (repo / "book" / "executed" / f"{PROBE}.ipynb").exists()


# ---- interrupted work -----------------------------------------------------------------------------------------------

def kill_tree(proc: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to the process and every process it started (the notebook kernel runs in its own session)."""
    import psutil

    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for p in family:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=hang_guard(5))  # returns as soon as all are gone


def spawn(root: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "anisotropy", *args], cwd=root, env=book_env(root), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def mtimes(folder: Path, pattern: str) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_mtime_ns for p in folder.rglob(pattern) if p.is_file()}


@pytest.mark.slow
def test_killed_sweep_resumes_where_it_stopped(repo_copy):
    # One worker: the points one after another, so that "the first finished, the second not yet" is a state to catch
    # (tests/test_scale.py kills a worker of a parallel sweep).
    args = ("sweep", "appendix_b_isotropic", "--profile", "smoke", "-p", "seed=101,102", "--workers", "1")
    sweeps = repo_copy / "book" / "sweeps" / "appendix_b_isotropic"
    store = repo_copy / "results"
    finished = lambda: sorted(p.name for p in sweeps.glob("appendix_b_isotropic__*.ipynb"))  # noqa: E731
    first, second = (f"appendix_b_isotropic__seed={s}.ipynb" for s in (101, 102))

    # 1. SIGTERM (a pre-empted job) once the first point is finished: a clean stop with one line saying how to resume.
    proc = spawn(repo_copy, *args)
    wait_for(lambda: first in finished(), proc, "the first sweep point finished")
    proc.send_signal(signal.SIGTERM)
    out, err = communicate_guarded(proc, expected_s=CHAPTER_S, what="the interrupted sweep's exit")
    kill_tree(proc, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    # the line may be followed by what the interpreter prints as it exits (a coroutine of the interrupted notebook
    # client collected unawaited, seen once under --dist loadfile), so it is looked for, not read from the end
    assert any(line.startswith("interrupted (SIGTERM): finished notebooks and results are kept")
               for line in err.splitlines()), err
    assert finished() == [first]

    # 2. Again, and SIGKILL everything while the second point is mid-execution (its partial notebook exists).
    partial = sweeps / f".{second.removesuffix('.ipynb')}.partial.ipynb"
    stale = mtime(partial)  # left by the first run, if it got that far
    proc = spawn(repo_copy, *args)
    wait_for(lambda: mtime(partial) not in (None, stale), proc, "the second point started")
    kill_tree(proc, signal.SIGKILL)
    proc.communicate()
    assert finished() == [first], "a killed notebook must never carry a finished notebook's name"
    notebooks_then, results_then = mtimes(sweeps, "*.ipynb"), mtimes(store, "*")
    own = store / "appendix_b_isotropic"  # the chapter's results (results/claims/ holds its claims verdicts)
    stored_keys = [json.loads((store / k).read_text())["key"] for k in results_then
                   if k.endswith(".json") and k.startswith("appendix_b_isotropic/")]
    assert {k["seed"] for k in stored_keys} >= {101}

    # 3. A third run finishes the sweep: the first point is reused, nothing stored is recomputed.
    proc = run_cli(repo_copy, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^\[1/2\] appendix_b_isotropic__seed=101 .* reused$", proc.stdout, flags=re.M), proc.stdout
    assert re.search(r"^\[2/2\] appendix_b_isotropic__seed=102 .* \d+\.\d s \(\d+ s CPU\)$", proc.stdout, flags=re.M), \
        proc.stdout
    assert mtimes(sweeps, first) == {first: notebooks_then[first]}
    now = mtimes(store, "*")
    assert {k: now[k] for k in results_then} == results_then, "a finished result was written again"
    keys = [json.loads(p.read_text())["key"] for p in own.rglob("*.json")]
    assert sorted(k["seed"] for k in keys) == [101, 102]
    # each sweep point stores its own claims verdicts, keyed by its parameters
    verdicts = [json.loads(p.read_text())["key"] for p in (store / "claims").rglob("*.json")]
    assert sorted(k["parameters"]["seed"] for k in verdicts) == [101, 102]
    table = pd.read_csv(sweeps / "sweep.csv")
    assert table["seed"].tolist() == [101, 102] and table["error"].isna().all()
    assert not partial.exists()


KILLED_WRITER = r'''
import os, sys, signal, pathlib
import pandas as pd
from anisotropy import results

root, stage = sys.argv[1], sys.argv[2]
frame = pd.DataFrame({"x": range(1000)})

def stuck(path, data):
    with open(path, "wb") as fh:  # half of what would be written, then wait to be killed
        fh.write(data[: len(data) // 2])
        fh.flush()
    signal.pause()

if stage == "data":
    original = pd.DataFrame.to_parquet
    def to_parquet(self, path, **kw):
        original(self, path, **kw)
        stuck(path, pathlib.Path(path).read_bytes())
    pd.DataFrame.to_parquet = to_parquet
else:
    pathlib.Path.write_text = lambda self, text, *a, **k: stuck(self, text.encode())
results.Store(root).cached("chapter", {"model": "m", "layer": 4}, eval(sys.argv[3], {"pd": pd}))
'''
# The writer's computation, compiled from the same text by the test: the same code, hence the same key.
WRITER_COMPUTATION = 'lambda: pd.DataFrame({"x": range(1000)})'


@pytest.mark.parametrize("stage", ["data", "sidecar"])
def test_result_killed_mid_write_is_never_taken_for_complete(stage, tmp_path):
    from anisotropy import results

    root = tmp_path / "results"
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    proc = subprocess.Popen([PYTHON, str(script), str(root), stage, WRITER_COMPUTATION], env=book_env(tmp_path),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    target = ".parquet." if stage == "data" else ".json."
    wait_for(lambda: any(target in p.name and p.stat().st_size > 0 for p in root.rglob("*.tmp")), proc,
             f"the {stage} write started")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    store, key, calls = results.Store(root), {"model": "m", "layer": 4}, []
    counted = types.SimpleNamespace(DataFrame=lambda data: calls.append(1) or pd.DataFrame(data))
    compute = eval(WRITER_COMPUTATION, {"pd": counted})
    assert not store.has("chapter", store.code_key(key, compute)[0])  # the key the writer's result has
    assert store.frames("chapter").empty
    frame = store.cached("chapter", key, compute)
    assert calls == [1] and frame["x"].tolist() == list(range(1000))
    pd.testing.assert_frame_equal(results.Store(root).cached("chapter", key, compute), frame)
    assert calls == [1]  # read back, not recomputed


TRAINER = r'''
import sys

from anisotropy.training import trainer as training
recipe = training.Recipe(suite="killed", kind="clm", steps=30, width=32, depth=2, heads=2, seq_len=32,
                         vocab_size=320, batch_size=8, warmup=4, lr=3e-3, n_checkpoints=5, eval_every=0, eval_size=16)
done = training.train(recipe, out_dir=sys.argv[1], progress=False, threads=1)
print(" ".join(str(c.step) for c in done))
'''


@pytest.mark.slow
def test_killed_training_resumes_and_keeps_finished_checkpoints(tmp_path):
    out = tmp_path / "checkpoints"
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    command = [PYTHON, str(script), str(out)]
    proc = subprocess.Popen(command, env=book_env(tmp_path), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    complete = lambda: [p for p in out.rglob("step-*") if (p / "training_state.json").is_file()]  # noqa: E731
    wait_for(lambda: len(complete()) >= 3, proc, "three checkpoints were written")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    then = {p.name: (p / "model.safetensors").stat().st_mtime_ns for p in complete()}
    for folder in complete():  # a checkpoint that counts as finished has every file
        assert {"config.json", "model.safetensors"} <= {f.name for f in folder.iterdir()}, folder
    done = run_guarded(command, expected_s=CHAPTER_S, env=book_env(tmp_path), text=True, capture_output=True)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [int(s) for s in done.stdout.split()]
    assert steps[-1] == 30 and len(steps) == 5
    now = {p.name: (p / "model.safetensors").stat().st_mtime_ns for p in complete()}
    assert {k: now[k] for k in then} == then, "a finished checkpoint was written again"


# ---- determinism ----------------------------------------------------------------------------------------------------

def stored_frames(store: Path) -> dict[str, pd.DataFrame]:
    return {p.relative_to(store).as_posix(): pd.read_parquet(p) for p in store.rglob("*.parquet")
            if p.with_suffix(".json").is_file()}


@pytest.mark.slow
def test_same_profile_and_seed_give_identical_results(smoke_book, tmp_path):
    from anisotropy import results
    from anisotropy.book import runner

    again = copy_repo(tmp_path / "again")
    code = "import sys; from anisotropy.book import runner; sys.exit(any(o.error for o in runner.execute_all('smoke')))"
    proc = run_guarded([PYTHON, "-c", code], expected_s=SMOKE_BUILD_S, what="the smoke chapters, again", cwd=again,
                       env=book_env(again), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, second = stored_frames(smoke_book / "results"), stored_frames(again / "results")
    assert second and set(second) <= set(first), "the second run stored results under other keys"
    timings = list(results.WALL_CLOCK_FIELDS)  # how long a run took is the one thing allowed to differ
    for key, frame in second.items():
        pd.testing.assert_frame_equal(frame.drop(columns=timings, errors="ignore"),
                                      first[key].drop(columns=timings, errors="ignore"), check_exact=True, obj=key)
    compared = 0
    for name in runner.chapters():
        a = runner.glued_values(smoke_book / "book" / "executed" / f"{name}.ipynb", wall_clock=False)
        b = runner.glued_values(again / "book" / "executed" / f"{name}.ipynb", wall_clock=False)
        assert a == b, name
        compared += len(a)
    assert compared > 50, "too few glued numbers were compared"


def test_parameters_take_numbers_in_every_spelling_and_grids_of_lists():
    """What people type: 5e-2 (YAML 1.1 reads it as a string), 1E3, .5, -3; a sweep's grid of numbers in those
    spellings and a grid whose points are lists."""
    from anisotropy.book.cli import _parse_assignments

    got = _parse_assignments(["lr=5e-2", "n=1e3", "m=2.5e3", "f=.5", "neg=-3", "x=1.0", "models=[gpt2, bert-base-uncased]",
                              "word=post_ln"])
    assert got == {"lr": 0.05, "n": 1000, "m": 2500, "f": 0.5, "neg": -3, "x": 1.0, "models": ["gpt2", "bert-base-uncased"],
                   "word": "post_ln"}
    assert type(got["n"]) is int and type(got["x"]) is float
    grid = _parse_assignments(["lr=5e-2,1e-1", "seed=0,1,2", "variants=[post_ln],[pre_ln, gpt2]", "dims=[16, 32]"],
                              as_grid=True)
    assert grid == {"lr": [0.05, 0.1], "seed": [0, 1, 2], "variants": [["post_ln"], ["pre_ln", "gpt2"]],
                    "dims": [[16, 32]]}
