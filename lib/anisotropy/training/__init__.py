"""Training: the small-model trainer of the self-trained checkpoint suites (MultiBERTs and Pythia in miniature): the
recipes that determine a run's weights, the tasks it optimises, its checkpoints on disk, and the training loop.
Measurements of a self-trained checkpoint do not depend on this code: the checkpoint's own key holds the trainer's
fingerprint (``anisotropy.fingerprint.TRAINER``).

May import: the foundation modules, ``data``, ``measure``, ``models``.
"""
