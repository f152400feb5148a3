"""Pages: what every chapter page shows besides its narrative: the one figure style (``plots``), the provenance box,
Colab badge and glued numbers (``report``), and what a chapter's plan asks of a Colab runtime (``budget``, the cost
model; each chapter writes its plan in its own module of ``chapters``, which hands it down). They present numbers and
never change one (``anisotropy.fingerprint.NOT_NUMERIC_PACKAGES``).

May import: the foundation modules, ``data``, ``measure``, ``models``.
"""
