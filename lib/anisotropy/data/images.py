"""Image sources, as (H, W, 3) uint8 arrays: crops of the photographs bundled with scikit-image and matplotlib
(offline default), procedurally generated shapes (labelled, so that a small vision model can be trained on them),
and Imagenette and ImageNet validation images (paper profile).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from anisotropy import hub
from anisotropy.data.common import DataUnavailableError, sample


SHAPES = ("disc", "square", "triangle", "ring", "cross", "stripes")


def synthetic_shapes(n: int, size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` RGB images (uint8, shape (n, size, size, 3)) of one coloured shape on a noisy background, and labels.

    Label ``k`` is the index of the shape in ``SHAPES``; position, scale, colours and noise are random, so the task
    needs shape recognition rather than colour statistics.
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    images = np.empty((n, size, size, 3), dtype=np.uint8)
    labels = rng.integers(0, len(SHAPES), size=n)
    for i, label in enumerate(labels):
        cx, cy = rng.uniform(0.3, 0.7, size=2)
        r = rng.uniform(0.15, 0.28)
        dx, dy = xx - cx, yy - cy
        shape = SHAPES[label]
        if shape == "disc":
            mask = dx**2 + dy**2 < r**2
        elif shape == "square":
            mask = (np.abs(dx) < r * 0.85) & (np.abs(dy) < r * 0.85)
        elif shape == "triangle":
            mask = (dy < r * 0.8) & (dy > -r) & (np.abs(dx) < (dy + r) * 0.6)
        elif shape == "ring":
            d2 = dx**2 + dy**2
            mask = (d2 < r**2) & (d2 > (0.55 * r) ** 2)
        elif shape == "cross":
            mask = ((np.abs(dx) < r * 0.3) & (np.abs(dy) < r)) | ((np.abs(dy) < r * 0.3) & (np.abs(dx) < r))
        else:  # stripes inside a square window
            mask = (np.abs(dx) < r) & (np.abs(dy) < r) & (np.sin(dx * 40 / (r * 8)) > 0)
        background = rng.uniform(0, 255, size=3)
        foreground = rng.uniform(0, 255, size=3)
        img = np.where(mask[..., None], foreground, background) + rng.normal(0, 12, size=(size, size, 3))
        images[i] = np.clip(img, 0, 255).astype(np.uint8)
    return images, labels

# (package, path inside it, what it shows): colour photographs first, then greyscale ones (read as RGB).
PHOTOS = (
    ("skimage", "data/astronaut.png", "astronaut Eileen Collins (NASA)"),
    ("skimage", "data/coffee.png", "a cup of coffee"),
    ("skimage", "data/chelsea.png", "Chelsea the cat"),
    ("skimage", "data/rocket.jpg", "a rocket on the launch pad (NASA)"),
    ("skimage", "data/motorcycle_left.png", "a motorcycle (Middlebury stereo set)"),
    ("skimage", "data/hubble_deep_field.jpg", "the Hubble eXtreme Deep Field (NASA)"),
    ("skimage", "data/retina.jpg", "a human retina (fundus photograph)"),
    ("skimage", "data/ihc.png", "immunohistochemistry stain (microscopy)"),
    ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg", "Grace Hopper"),
    ("skimage", "data/camera.png", "a cameraman (greyscale)"),
    ("skimage", "data/coins.png", "Greek coins (greyscale)"),
    ("skimage", "data/moon.png", "the surface of the moon (greyscale)"),
    ("skimage", "data/grass.png", "grass (greyscale)"),
    ("skimage", "data/gravel.png", "gravel (greyscale)"),
    ("skimage", "data/brick.png", "a brick wall (greyscale)"),
)


@lru_cache(maxsize=None)
def _photo(package: str, relative: str) -> np.ndarray:
    import importlib.util

    from PIL import Image

    found = importlib.util.find_spec(package)
    if found is None or found.origin is None:
        raise DataUnavailableError(f"the photographs of {package} are not installed: pip install "
                                   f"{'scikit-image' if package == 'skimage' else package}")
    with Image.open(Path(found.origin).parent / relative) as im:
        return np.asarray(im.convert("RGB"))


def photo_library() -> list[np.ndarray]:
    """Every photograph of ``PHOTOS`` as an (H, W, 3) uint8 array."""
    return [_photo(package, relative) for package, relative, _ in PHOTOS]


def photos(n: int, seed: int = 0, size: int = 224, min_fraction: float = 0.3) -> list[np.ndarray]:
    """``n`` square crops of the bundled photographs as (size, size, 3) uint8 arrays: photograph drawn uniformly,
    side between ``min_fraction`` and 1 of its shorter side, position uniform, mirrored with probability 1/2,
    resized with a bicubic filter (PIL). Deterministic given the arguments. Crops of the same photograph overlap,
    so they are not independent images: 15 photographs are the whole pool."""
    from PIL import Image

    if n <= 0:
        raise ValueError(f"photos needs n >= 1 samples, got n={n}")
    library = photo_library()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        image = library[int(rng.integers(len(library)))]
        h, w = image.shape[:2]
        side = int(round(rng.uniform(min_fraction, 1.0) * min(h, w)))
        top, left = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        crop = Image.fromarray(image[top:top + side, left:left + side]).resize((size, size), Image.BICUBIC)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        out.append(np.asarray(crop))
    return out


# Textbook organic reactions as reaction SMILES, written here (rxnmapper ships only two examples, in its README):
# reactants and reagents, ">>", the product, in the USPTO style rxnmapper's ALBERT was trained on. Each was written by
# hand from the named reaction; they are inputs for the masked-token check and the character-level chapter, not a

# Imagenette's 320-pixel validation images in the Hub's Parquet conversion (data_dir="320px" would fetch train too).
IMAGENETTE_FILES = {"validation": "320px/validation/*.parquet"}


def _hub_images(repo: str, what: str, n: int, seed: int, **kwargs) -> list[np.ndarray]:
    ds = hub.dataset(repo, what, split="validation", **kwargs)
    idx = sample(len(ds), n, seed, f"{what} validation")
    key = "image" if "image" in ds.column_names else ds.column_names[0]
    return [np.asarray(ds[int(i)][key].convert("RGB")) for i in idx]


def images(n: int, seed: int = 0, size: int = 128) -> list[np.ndarray]:
    """``n`` synthetic shape images of ``size`` pixels as a list of (size, size, 3) uint8 arrays."""
    if n <= 0:
        raise ValueError(f"synthetic shapes need n >= 1 samples, got n={n}")
    return list(synthetic_shapes(n, size=size, seed=seed)[0])


def imagenette(n: int, seed: int = 0) -> list[np.ndarray]:
    """``n`` images of Imagenette's 320px validation split. The repository's main branch holds a loading script
    (refused by datasets >= 4); the Hub's Parquet conversion has one folder per resolution, not a config of that
    name. Only its validation files are fetched."""
    return _hub_images("frgfm/imagenette", "Imagenette", n, seed, revision="refs/convert/parquet",
                       data_files=IMAGENETTE_FILES)


def imagenet(n: int, seed: int = 0) -> list[np.ndarray]:
    """``n`` images of ImageNet-1k's validation split (gated on the Hub)."""
    return _hub_images("ILSVRC/imagenet-1k", "ImageNet-1k (gated: accept its terms on the Hub and log in)", n, seed)
