"""Formats: one module per family of weight formats other than ``transformers``' own (CTranslate2, GGUF, image
models, rxnmapper's SMILES ALBERT, a split sentence-transformers zip), each its reader and converter.
``models.conversion`` dispatches to them.

May import: the foundation modules, ``models.weights``.
"""
