"""A chapter's requests, as its module's ``plan(p, out)`` writes them (``chapters.plans.plan`` finds it by name): a
``Plan`` of ``Checkpoint`` measurements and data sources, ``Training`` runs and ``Work`` the chapter computes itself;
``Plan.requests`` are the (hub id, revision) pairs it loads from the Hub."""
from __future__ import annotations

from dataclasses import dataclass, field

from anisotropy.models import registry
from anisotropy.pages.budget.training import PREPARATION_CHUNK_CHARS, recipe_flops


@dataclass(frozen=True)
class Checkpoint:
    """One download-and-measure: a registry model at a revision, ``examples`` of ``positions`` each, read in
    ``dtype`` in batches of ``batch``; ``release``: deleted from the cache once measured; ``passes``: times it is
    loaded and run (downloaded once: a checkpoint loaded twice stays in the cache until its last pass).

    What it holds on the host while measured: ``pool`` > 0, Paper 2's shuffled pool of that many vectors per hidden
    state (``measure.batches.BatchedLayer``), measured ``metric_batch`` vectors at a time (``extra_states``: states beyond
    the layers, e.g. the split final norm);
    ``per_example``, Section 3's sum of unit vectors per example and layer (``experiments.layerwise.FirstMoments``).
    ``metrics``: the per-batch statistics measured on each pooled batch (``measure.batches.BATCH_METRICS`` names);
    ``robust``: with ``sigma1_share``, the robust readings too (``measure.batches.ROBUST_METRICS``: two more shares).
    ``stats_reservoir``: the measurement keeps a ``measure.metrics.LayerStats`` per hidden state with a reservoir of
    that many rows (``measure.taps.extract``'s default accumulator), where the model is (``layer_stats_bytes``).

    ``reused_from``: the chapter whose stored measurement of this checkpoint (same model, data and sizes) the chapter
    reads when that chapter ran before it with the same store (a full build, or the same Colab runtime); only a fresh
    runtime, with an empty store, loads it here.

    ``variant``: "pretrained" (downloaded, unless the registry has it from a local package) or "untrained" (random
    weights at true size, made here: nothing downloaded). ``on_cpu``: measured on the CPU whatever the runtime has
    (the chapter's device is "cpu"): its device memory is host memory and its passes run at ``CPU_TFLOPS``.
    ``sized_by``: the chapter's parameters that size this measurement (dotted for a key of a dict parameter), the
    ones ``chapters.plans`` suggests changing when it does not fit."""

    model: str
    revision: str | None = None
    examples: int = 0
    positions: int = 128
    dtype: str = "float32"
    batch: int = 8
    release: bool = False
    passes: int = 1
    pool: int = 0
    metric_batch: int = 0
    extra_states: int = 0
    per_example: bool = False
    reused_from: str = ""
    metrics: tuple[str, ...] = ()
    stats_reservoir: int | None = None
    robust: bool = True
    variant: str = "pretrained"
    on_cpu: bool = False
    sized_by: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Training:
    """One training run of a chapter: ``recipe`` (a suite's specification, ``training.recipes.Recipe`` fields) for one
    seed, named ``name``, shown with the runs of its ``group``; ``at_once``: the runs trained at the same time (``training.trainer.train_many``'s worker
    processes), which share the GPU and the host's memory; ``sized_by`` as ``Checkpoint``'s; ``chunk_chars``: the
    characters its data preparation tokenizes at once (None: the whole corpus; ``preparation_bytes``)."""

    name: str
    recipe: dict = field(compare=False, hash=False)
    group: str = ""
    at_once: int = 1
    sized_by: tuple[str, ...] = field(default=(), compare=False)
    chunk_chars: int | None = PREPARATION_CHUNK_CHARS


@dataclass(frozen=True)
class Work:
    """What a chapter computes itself, neither a checkpoint's measurement nor training (Appendix B's Monte Carlo
    pairs, Section 4's block, the planted clouds): ``host_bytes`` it holds on the host at its peak, ``device_bytes`` on
    the chapter's device (a GPU's memory, or host memory where the chapter runs on the CPU: ``on_cpu``, or the
    runtime has no GPU), ``cpu_flops`` run on the CPU (NumPy's products) and ``cpu_seconds`` of other CPU work
    (random draws: ``NORMALS_PER_S``), ``device_flops`` in ``dtype`` on the chapter's device; ``sized_by`` as
    ``Checkpoint``'s."""

    name: str
    host_bytes: float = 0.0
    device_bytes: float = 0.0
    cpu_flops: float = 0.0
    cpu_seconds: float = 0.0
    device_flops: float = 0.0
    dtype: str = "float32"
    on_cpu: bool = False
    sized_by: tuple[str, ...] = field(default=(), compare=False)
    group: str = ""  # the row of ``plan_table`` it is shown in (default: its name)


@dataclass
class Plan:
    """A chapter's requests: checkpoints, data sources with their example counts, training runs (``runs``) and what
    it computes itself (``work``). A chapter fills it from its parameters (its module's ``plan(p, out)``, found by
    name by ``chapters.plans.plan``)."""

    chapter: str
    checkpoints: list[Checkpoint] = field(default_factory=list)
    data: list[tuple[str, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    profile: str = "paper"  # where the suites a chapter trains are defined (the checkpoint_suites chapter's)
    trained: list[str] = field(default_factory=list)  # the profile's suites a measuring chapter trains first
    runs: list[Training] = field(default_factory=list)
    work: list[Work] = field(default_factory=list)
    chunk_chars: int | None = PREPARATION_CHUNK_CHARS  # characters the trainer tokenizes at once (None: all)

    def train(self, recipe: dict, runs: int, suite: str = "", names=None, at_once: int = 1,
              sized_by: tuple[str, ...] = (), group: str = "") -> None:
        """Add ``runs`` trainings of ``recipe`` (one ``Training`` each, named by ``names`` or "<group> run <i>",
        shown together as ``group``: default the suite, else the recipe's kind), and the corpus it reads unless the
        offline prose (a training corpus: listed with 0 examples, its whole training split); ``suite``: the profile's
        suite the runs are of, which a measuring chapter trains first (named on the page); ``at_once``: how many
        runs train at the same time."""
        group = group or suite or recipe.get("kind", "training")
        names = list(names) if names is not None else [f"{group} run {i + 1}" for i in range(runs)]
        self.runs += [Training(name, dict(recipe), group, max(1, at_once), tuple(sized_by), self.chunk_chars)
                      for name in names[:runs]]
        if suite:
            self.trained.append(suite)
        if recipe.get("corpus", "prose") != "prose":
            self.data.append((recipe["corpus"], 0))

    @property
    def training_flops(self) -> float:
        """The compute of every training run (``recipe_flops`` each)."""
        return sum(recipe_flops(r.recipe) for r in self.runs)

    @property
    def requests(self) -> list[tuple[str, str | None]]:
        """(hub id, revision) of every checkpoint the chapter loads from the Hub on a fresh runtime (an empty results
        store), as ``models.registry.load`` asks for it."""
        return _hub_locations(self.checkpoints)

    @property
    def build_requests(self) -> list[tuple[str, str | None]]:
        """The ``requests`` it makes in a full build, where the chapters it runs after have stored their measurements:
        none of the checkpoints another chapter measured for it (``Checkpoint.reused_from``)."""
        return _hub_locations([c for c in self.checkpoints if not c.reused_from])

    @property
    def reused_from(self) -> list[str]:
        """The chapters whose stored measurements this chapter reuses when they ran in this runtime."""
        return list(dict.fromkeys(c.reused_from for c in self.checkpoints if c.reused_from))


def _hub_locations(checkpoints) -> list[tuple[str, str | None]]:
    out = []
    for c in checkpoints:
        s = registry.spec(c.model)
        if not s.local_package and c.variant == "pretrained":
            out.append(s.hub_location(c.revision))
    return out

