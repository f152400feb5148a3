"""Experiments: the papers' protocols, each measuring models through the results store: layer-wise geometry (Paper 1,
Section 3), the untrained block (Section 4), queries and keys along training (Section 5), Paper 2's per-layer protocol
(``spectral``) and its planted clouds, and the book's ablation.

May import: the foundation modules, ``data``, ``measure``, ``models``, ``training``, ``pages``.
"""
