"""What a chapter will ask of a runtime: the cost model. A chapter's requests under given parameters (a ``Plan``:
``Checkpoint`` measurements and data sources, ``Training`` runs, and ``Work`` it computes itself) are written by the
chapter itself, in its module's ``plan(p, out)`` (``chapters.plans.plan(chapter, params, profile)`` finds it by
name); this package turns them into estimates of download, disk, GPU and host memory and time on a Colab GPU (a T4
unless another kind of ``GPUS`` is named), computed from the registry's parameter counts, the recipes' sizes and the
chapter's sample sizes (never typed by hand).

**Parts.** A part is what one session runs before the chapter can resume: the unit whose results are stored when it
ends. One checkpoint's measurement (a model, or one revision of a series: each is stored under its own key as it
ends), one training run (read once complete), or one piece of the chapter's own work. A chapter run again after a
disconnect reads every finished part from its store and goes on with the next, so a chapter may span sessions while
each part must fit one. ``parts(plan)`` derives them from the plan (``Part``: download, disk, GPU and host memory,
minutes on every kind of GPU); ``part_problems`` and ``fit`` say what does not fit a ``Runtime``, the machine a
profile assumes (``runtime(profile)``, its ``runtime:`` line: ``RUNTIMES``, Colab's limits written once in
``COLAB``); ``plan_rows`` and ``plan_table`` are what ``python -m anisotropy plan`` prints and the performance appendix
shows.

``estimate(plan, gpu)`` gives a chapter's sizes and minutes on that kind of GPU, its parts one after another in one
runtime, with the minutes on every kind beside; ``table`` is what a chapter page shows, ``describe`` and ``summary``
its sentences, and ``problems`` says what would not fit a free Colab runtime, part by part. The estimates are rough by
design (stated on the page): the download assumes ``HUB_MB_PER_S``, the compute a fixed share of the GPU's peak rate
(``EFFICIENCY``) at the dtype's rate (a training recipe's ``precision``: float16 autocast on CUDA by default).

GPU memory counts the weights, one forward pass's activations (``forward_bytes``) and what a measurement keeps where
the model is; a training run's weights, gradients, optimiser state and activations (``training_gpu_bytes``). Host
memory counts what the measuring code holds on the CPU side, derived from what it allocates: Paper 2's per-layer pools
(``measure.batches.BatchedLayer``: ``pool_bytes``) and Section 3's per-example sums with their bootstrap interval
(``experiments.layerwise.FirstMoments``: ``per_example_bytes``), and a training run's data preparation
(``preparation_bytes``). tests/test_plan_measured.py checks these formulas against what the code allocates at real
sizes. Disk counts hf-xet's chunk cache (``xet_chunk_cache_gib``) and a training run's checkpoints. A model whose size
the registry does not know is listed as unknown, never counted as 0.

The modules, by concept (every name above stays importable from here, ``budget.<name>``: they were one module,
``pages/budget.py``, before it was split):

- ``runtimes``: the kinds of GPU, Colab's limits, the runtimes a profile names, the rates every estimate assumes;
- ``requests``: what a chapter's plan holds (``Plan``, ``Checkpoint``, ``Training``, ``Work``);
- ``training``: a training run's compute, GPU memory and data preparation, from its recipe;
- ``sizes``: a checkpoint's measurement: positions, flops, weights, activations, GPU and host memory;
- ``parts``: a plan's parts, ``estimate``, and what does not fit a runtime (``part_problems``, ``fit``, ``problems``);
- ``tables``: what a page and the ``plan`` command show (``table``, ``describe``, ``summary``, ``plan_table``).

May import: the foundation modules, ``data``, ``measure``, ``models``.
"""

from anisotropy.pages.budget.runtimes import (  # noqa: F401
    BYTES, CHARS_PER_TOKEN, CNN_MB_PER_IMAGE, COLAB, CPU_TFLOPS, EFFICIENCY, FREE_GPU, GIB, GPUS, GpuKind,
    HOST_RAM_LIMIT_GIB, HUB_MB_PER_S, IMAGE_SIZE, LOAD_S, NORMALS_PER_S, RUNTIMES, RUNTIME_GIB, Runtime,
    STORED_HALF, XET_CHUNK_CACHE_DEFAULT_BYTES, XET_CHUNK_CACHE_ENV, gpu_seconds, runtime)
from anisotropy.pages.budget.requests import (  # noqa: F401
    Checkpoint, Plan, Training, Work)
from anisotropy.pages.budget.training import (  # noqa: F401
    CORPUS_CHARS, DEFAULT_PRECISION, ENCODE_BYTES_PER_CHAR, ENCODE_BYTES_PER_TOKEN, PREPARATION_CHUNK_CHARS,
    TEXT_BYTES_PER_CHAR, TOKENIZE_CHARS_PER_S, corpus_tokens, encoding_bytes, precision, preparation_bytes,
    preparation_seconds, recipe_flops, recipe_params, token_array_gib, training_gpu_bytes, training_positions,
    training_seconds)
from anisotropy.pages.budget.sizes import (  # noqa: F401
    IMAGE_PATCHES, SPEECH_FRAMES, WHISPER_FRAMES, batch_metric_flops, checkpoint_gpu_gib, checkpoint_metric_flops,
    download_gib, forward_bytes, forward_flops, held_bytes, host_ram_bytes, layer_stats_bytes, metric_bytes,
    metric_flops, n_params, per_example_bytes, pool_bytes, state_widths, text_positions, weights_gib,
    xet_chunk_cache_gib)
from anisotropy.pages.budget.parts import (  # noqa: F401
    Part, cpu_minutes, estimate, fit, gib_text, hint, minutes_text, part_problems, parts, problems,
    training_disk_gib, training_host_bytes, unknown_sizes, with_article)
from anisotropy.pages.budget.tables import (  # noqa: F401
    PLAN_COLUMNS, describe, other_gpus, plan_rows, plan_table, summary, table)
from anisotropy.pages.budget.sizes import _shape  # noqa: F401  (tests read a model's shape through it)
