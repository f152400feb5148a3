"""Book: building the book: papermill execution and the parallel build (``runner``), the kernels that execute chapters,
parameter sweeps, the machine's calibration and the command line (``python -m anisotropy``). It is the top layer: it
builds the book out of the chapters, and may read a chapter's module (its plan, ``chapters.plans``).

May import: the foundation modules, ``data``, ``measure``, ``models``, ``training``, ``experiments``, ``pages``,
``claims``, ``chapters``.
"""
