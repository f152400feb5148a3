"""What differs between the transformers versions the library runs on, in one place: 4.57 (the book's pins,
constraints.txt) and 5.x (Colab's default runtime, ``pages/colab_runtime.txt``).

Image processors: transformers 4's default image processors compute with PIL and NumPy; transformers 5 names those
``<Name>Pil`` and gives the plain name to a torchvision backend (the default where torchvision is installed, as on
Colab), which resizes with torch's kernels; without torchvision its ``AutoImageProcessor`` cannot be used at all, and
SegFormer's processors neither. The library takes the PIL computation under every version, so an image is
preprocessed the same way wherever it runs: ``image_processor(name)`` for a class built from settings,
``image_processor_from(folder)`` for a saved one (no ``AutoImageProcessor``), ``image_processor_options()`` for
``AutoImageProcessor.from_pretrained`` of a Hub repository.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def transformers_major() -> int:
    """The installed transformers' major version (imported on first call, not with this module)."""
    import transformers

    return int(transformers.__version__.split(".")[0])


def image_processor_options() -> dict:
    """``AutoImageProcessor.from_pretrained``'s options that choose the PIL computation (none under 4, its default)."""
    return {"backend": "pil"} if transformers_major() >= 5 else {}


def image_processor(name: str):
    """The transformers image processor class ``name`` that computes with PIL: ``<name>Pil`` where transformers has it
    (5.x), else ``name`` itself (a ``...Fast`` or ``...Pil`` name is read as its plain one)."""
    import transformers

    name = name.removesuffix("Fast").removesuffix("Pil")
    return getattr(transformers, f"{name}Pil", None) or getattr(transformers, name)


def image_processor_from(folder) -> object:
    """The image processor a ``save_pretrained`` folder holds (its ``preprocessor_config.json``), computing with PIL."""
    import json
    from pathlib import Path

    config = json.loads((Path(folder) / "preprocessor_config.json").read_text())
    return image_processor(config["image_processor_type"]).from_pretrained(str(folder))
