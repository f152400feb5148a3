"""One module per chapter: what a page prints from numbers, and what the chapter asks of a runtime.

``chapters.<chapter>`` (named as ``notebooks/<chapter>.md``) holds the helpers that chapter's page calls to turn its
results into table rows and sentences: formatting, picking rows, wording a summary; and, for a chapter that downloads,
measures or trains, its ``plan(p, out)``: the checkpoints, data and training it requests with its parameters ``p``
(a ``pages.budget.Plan``), the one description of the chapter that the Colab budget reads. ``plans`` finds a
chapter's plan by name (``plans.plan``) and gives a page its run with its plan (``plans.apply``, the first call of
every page). The notebook keeps the narrative, its parameters and a few calls (``from anisotropy.chapters import
<chapter> as chapter``); a verdict word on a page comes from a rule of the claims ledger (``claims.ledger``,
``claims.rules``), never from a cut-off written here. These modules present numbers that the library computed:
``fingerprint`` counts them as not numeric (``NOT_NUMERIC_PACKAGES``). Only the chapters themselves and ``book``, the
layer above, import a chapter module.

May import: the foundation modules, ``data``, ``measure``, ``models``, ``training``, ``experiments``, ``pages``,
``claims``.
"""
