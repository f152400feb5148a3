"""Executable reproduction of two papers on anisotropy in Transformer representations.

One module per concept; see ARCHITECTURE.md at the repository root for the data flow.
"""

__version__ = "0.1.0"
