"""Book: building the book: papermill execution and the parallel build (``runner``), the kernels that execute chapters,
parameter sweeps, the machine's calibration and the command line (``python -m anisotropy``).

May import: the foundation modules, ``data``, ``measure``, ``models``, ``training``, ``experiments``, ``pages``,
``claims``.
"""
