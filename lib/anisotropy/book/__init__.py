"""Book: building the book: the parallel build (``runner``), one chapter's papermill execution (``execution``), the
executed notebooks and their glued values (``notebooks``), the build's console (``console``), the kernels that execute
chapters, parameter sweeps, the machine's calibration and the command line (``python -m anisotropy``). It is the top
layer: it builds the book out of the chapters, and may read a chapter's module (its plan, ``chapters.plans``).

May import: the foundation modules, ``data``, ``measure``, ``models``, ``training``, ``experiments``, ``pages``,
``claims``, ``chapters``.
"""
