"""Pages: what every chapter page shows besides its narrative: the one figure style (``plots``), the provenance box,
Colab badge and glued numbers (``report``), and what a chapter asks of a Colab runtime (``budget``). They present
numbers and never change one (``anisotropy.fingerprint.NOT_NUMERIC_PACKAGES``).

May import: the foundation modules, ``data``, ``measure``, ``models``.
"""
