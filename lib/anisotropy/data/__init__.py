"""Data: every source of raw examples the chapters measure and the self-trained models read (text, speech, images,
reactions), each in a module of its own, and ``sources``, the one entry point (``sources.load(source, n, seed)``).

May import: the foundation modules (``anisotropy.paths``, ``hub``, ``errors``, ...).
"""
