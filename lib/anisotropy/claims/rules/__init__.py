"""Rules: what a claim's rule returns and the registry of rules (``common``), and the rules of each part of the papers
(``p1_s3``, ``p1_s4``, ``p1_s5``, ``p2``) and of the book's ablation.

May import: the foundation modules, ``data``, ``measure``, ``models``, ``training``, ``experiments``, ``pages``,
``claims``.
"""
