"""One module per chapter: what a page prints from numbers.

``chapters.<chapter>`` (named as ``notebooks/<chapter>.md``) holds the helpers that chapter's page calls to turn its
results into table rows and sentences: formatting, picking rows, wording a summary. The notebook keeps the narrative,
its parameters and a few calls (``from anisotropy.chapters import <chapter> as chapter``); a verdict word on a page
comes from a rule of the claims ledger (``claims.ledger``, ``claims.rules``), never from a cut-off written here. These
modules present numbers that the library computed: ``fingerprint`` counts them as not numeric
(``NOT_NUMERIC_PACKAGES``), and no library module imports one.

May import: the foundation modules, ``data``, ``measure``, ``models``, ``training``, ``experiments``, ``pages``,
``claims``.
"""
