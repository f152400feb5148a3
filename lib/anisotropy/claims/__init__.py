"""Claims: the ledger of every testable claim of both papers (``ledger`` and its table ``claims.yml``), the rules that
decide them (``rules``, one module per part of the papers), the book's one definition of a run that learnt
(``learnt``), and its one way to read a curve (``curves``: after warm-up, with intervals, by a named shape).

May import: the foundation modules, ``data``, ``measure``, ``models``, ``training``, ``experiments``, ``pages``.
"""
