"""Executable reproduction of two papers on anisotropy in Transformer representations.

The public API (``__all__``, documented in ``anisotropy.api`` and on the book's API page): ``mean_cosine``,
``sigma1_share``, ``twonn``, ``isotropic_null``, ``profile`` and ``load``. One module per concept; see
ARCHITECTURE.md at the repository root for the data flow.
"""

import os

__version__ = "0.1.0"

# transformers imports jax and TensorFlow when it starts (its image transforms) whenever they are installed: the
# tests' dadapy brings jax, and a Colab runtime has both. Measured on the 2-core build machine with jax installed,
# `import transformers; transformers.PreTrainedModel` took 12.2 CPU-s, 9.0 without; every chapter kernel, Dask worker
# and test process pays it. The book runs no Flax or TensorFlow model. Set here, before any module of the package
# imports transformers, so that it holds wherever the package runs (and its child processes inherit it); a value
# already set in the environment is kept.
FRAMEWORK_DEFAULTS = {"USE_FLAX": "0", "USE_TF": "0"}
for _name, _value in FRAMEWORK_DEFAULTS.items():
    os.environ.setdefault(_name, _value)
del _name, _value

# The public API. Its module imports nothing heavy: each function imports what it computes with (torch, transformers,
# pandas, scipy: 3-8 s on the 2-core build machine) only when called, so `import anisotropy` stays as cheap as before
# for the command line's start, every Dask worker and every chapter kernel (measured with `python -X importtime`).
from anisotropy.api import isotropic_null, load, mean_cosine, profile, sigma1_share, twonn  # noqa: E402

__all__ = ["mean_cosine", "sigma1_share", "twonn", "isotropic_null", "profile", "load"]
