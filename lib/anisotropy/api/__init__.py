"""The public API: what ``import anisotropy`` exports (``anisotropy.__all__``), for a researcher's own vectors and
models: the two papers' measures of a set of vectors (``mean_cosine``, ``sigma1_share``, ``twonn``), the isotropic
reference they are read against (``isotropic_null``), one model's per-layer table (``profile``) and the one loader
(``load``). Each is a thin, documented door to the function of the library that computes it, with an example that
the tests run (``tests/test_api.py``). The package's ``__init__`` imports this module, which imports nothing heavy:
each function imports what it computes with only when called, so ``import anisotropy`` stays cheap.

A set of vectors is an (n, d) numpy array or torch tensor (any float dtype, any device; an (..., d) array is read as
rows), with an optional ``mask`` of the rows to keep; rows that are zero, NaN or inf are left out
(``measure.statistics``).

May import: the foundation modules, ``measure``, ``models``, ``experiments``.
"""

from __future__ import annotations

__all__ = ["mean_cosine", "sigma1_share", "twonn", "isotropic_null", "profile", "load"]


def mean_cosine(x, mask=None) -> float:
    """Paper 1's anisotropy: the mean cosine similarity over all ordered pairs i != j of the rows,
    (||sum_i u_i||^2 - n) / (n (n - 1)) with u_i = x_i / ||x_i||; exact, in O(n d)
    (``measure.statistics.mean_cosine``).

    Vectors that all point the same way give 1; the six vectors +e_i and -e_i of R^3 sum to zero, so
    (0 - 6) / (6 x 5) = -0.2:

    >>> import numpy as np
    >>> import anisotropy
    >>> round(anisotropy.mean_cosine(np.tile([0.6, 0.8], (5, 1))), 12)
    1.0
    >>> anisotropy.mean_cosine(np.vstack([np.eye(3), -np.eye(3)]))
    -0.2
    """
    from anisotropy.measure import statistics  # cost: pulls torch (~4 s) into `import anisotropy`

    return statistics.mean_cosine(x, mask)


def sigma1_share(x, mask=None) -> float:
    """Paper 2's anisotropy: sigma_1^2 / sum_i sigma_i^2 of the centred rows X - mean, the top direction's share of
    the variance (dimensionless, in [1/d, 1]; ``measure.statistics.sigma1_share``).

    Points on a line (a rank-one cloud) give 1; the vectors +e_i and -e_i of R^3 spread their variance evenly, 1/3:

    >>> import numpy as np
    >>> import anisotropy
    >>> line = np.random.default_rng(0).standard_normal((100, 1)) * np.array([[1.0, 2.0, 3.0]])
    >>> round(anisotropy.sigma1_share(line), 12)
    1.0
    >>> round(anisotropy.sigma1_share(np.vstack([np.eye(3), -np.eye(3)])), 12)
    0.333333333333
    """
    from anisotropy.measure import statistics  # cost: pulls torch (~4 s) into `import anisotropy`

    return statistics.sigma1_share(x, mask)


def twonn(x, discard_fraction: float = 0.1, mask=None) -> float:
    """The TwoNN intrinsic dimension of the rows (Facco et al. 2017): the ratios mu_i = r2_i / r1_i of each point's
    second and first nearest-neighbour distances follow F(mu) = 1 - mu^(-d); d is the least-squares slope through
    the origin of -log(1 - F_emp(mu)) on log(mu), the largest ``discard_fraction`` of the ratios dropped, as
    scikit-dimension's ``TwoNN`` and DADApy do (``measure.twonn.twonn_dimension``; duplicate rows are removed
    first).

    Points drawn uniformly in the unit cube of R^3 give about 3: within 0.25 at 2000 points (the estimate's standard
    error is about d / sqrt(n), 0.07 here; the cube's faces bias it slightly down):

    >>> import numpy as np
    >>> import anisotropy
    >>> cube = np.random.default_rng(0).uniform(size=(2000, 3))
    >>> abs(anisotropy.twonn(cube) - 3) < 0.25
    True
    """
    from anisotropy.measure.twonn import twonn_dimension  # cost: pulls torch (~2.5 s) into `import anisotropy`

    return twonn_dimension(x, discard_fraction, mask)


def isotropic_null(d: int, q=0.95):
    """The exact ``q``-quantile (a number or an array of them) of the cosine of two independent isotropic vectors in
    dimension ``d`` (Paper 1, Appendix B): (1 + cos) / 2 ~ Beta((d - 1) / 2, (d - 1) / 2), so the 0.95-quantile, the
    reference line a layer's mean cosine is read against, shrinks like 1.645 / sqrt(d) (``measure.baseline``).

    In R^3 the cosine is uniform on [-1, 1], so its quantiles are 2 q - 1; at d = 768 (BERT's width) the
    0.95-quantile is the Beta distribution's, about 1.645 / sqrt(768):

    >>> import numpy as np
    >>> import anisotropy
    >>> from scipy import stats
    >>> np.round(anisotropy.isotropic_null(3, q=[0.05, 0.5, 0.95]), 12).tolist()
    [-0.9, 0.0, 0.9]
    >>> a = (768 - 1) / 2
    >>> bool(np.isclose(anisotropy.isotropic_null(768), 2 * stats.beta(a, a).ppf(0.95) - 1, rtol=1e-12))
    True
    >>> round(float(anisotropy.isotropic_null(768)) * 768 ** 0.5, 3)
    1.645
    """
    import numpy as np

    from anisotropy.measure import baseline  # cost: pulls scipy and pandas (~1.2 s) into `import anisotropy`

    quantile = baseline.isotropic_cosine_quantile(np.asarray(q, dtype=float), int(d))
    return float(quantile) if np.ndim(quantile) == 0 else quantile


def profile(model, *, text=None, images=None, audio=None, source: str = "prose", n: int | None = None, seed: int = 0,
            max_length: int = 128, device=None, dtype: str | None = None, variant: str = "pretrained"):
    """One model's tidy per-layer table (a pandas DataFrame, one row per layer): both papers' measures of its hidden
    states, as ``python -m anisotropy profile`` writes it (``experiments.model_profile``, whose docstring lists the
    columns). ``model``: a registry name, a Hub id (``owner/name@revision``), a ``save_pretrained`` folder of any text,
    image or speech model transformers' ``AutoModel`` loads, or a ``.gguf`` file. The examples: a ``text`` file (one
    per line), a folder of ``images`` or of ``audio`` files, else ``n`` examples (256) of a named ``source`` drawn with
    ``seed``; ``max_length`` tokens per text at most. ``device`` ("cpu", "cuda", default: the GPU when there is one),
    ``dtype`` ("float16", ...); ``variant`` "untrained" (true size) or "tiny" (toy size): a registry entry's random
    weights. Measured once, then read from the results store (``ANISOTROPY_RESULTS``).

    The registry's toy GPT-2 (two blocks of width 32) on 16 paragraphs of the offline prose:

    >>> import anisotropy
    >>> table = anisotropy.profile("gpt2", variant="tiny", n=16)
    >>> table[["layer", "dim"]].values.tolist()
    [[0, 32], [1, 32], [2, 32]]
    >>> table.columns[:12].tolist()  # doctest: +NORMALIZE_WHITESPACE
    ['model', 'label', 'display', 'stack', 'data', 'layer', 'relative_depth', 'dim', 'n', 'n_examples',
     'mean_cosine', 'mean_cosine_low']
    >>> bool((table["null_q95"] == anisotropy.isotropic_null(32)).all())
    True
    """
    from anisotropy.experiments import model_profile  # cost: pulls torch/transformers (~4 s) into `import anisotropy`

    return model_profile.tidy(model_profile.profile(
        model, text=text, images=images, audio=audio, source=source, n=n, seed=seed, max_length=max_length,
        device=device, dtype=dtype, variant=variant))


def load(model, variant: str = "pretrained", revision: str | None = None, device="cpu", dtype=None):
    """The one loader (``models.registry.load_any``): a registry name, a Hub id, a ``save_pretrained`` folder or a
    ``.gguf`` file, as ``Loaded(model, preprocessor, spec, variant, ...)`` with the model in eval mode on ``device``.
    ``variant``: "pretrained" (the Hub's weights, at ``revision``), or a registry entry's "untrained" (true size) or
    "tiny" (toy size) random weights. ``spec.layout`` says how its layers are read (``measure.taps``).

    >>> import anisotropy
    >>> loaded = anisotropy.load("bert-base-uncased", variant="tiny")
    >>> type(loaded.model).__name__, loaded.spec.modality, loaded.spec.layout
    ('BertModel', 'text', 'hidden_states')
    >>> loaded.model.config.hidden_size, loaded.model.config.num_hidden_layers
    (32, 2)
    """
    from anisotropy.models import registry  # cost: reads the model table (~0.15 s) in `import anisotropy`

    return registry.load_any(model, revision=revision, device=device, dtype=dtype, variant=variant)
