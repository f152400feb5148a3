"""Claims: the ledger of every testable claim of both papers (``ledger`` and its table ``claims.yml``), the rules that
decide them (``rules``, one module per part of the papers), and the book's one definition of a run that learnt
(``learnt``).

May import: the foundation modules, ``data``, ``measure``, ``models``, ``training``, ``experiments``, ``pages``.
"""
