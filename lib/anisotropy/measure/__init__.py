"""Measure: the statistics both papers rest on and the hooks that collect the vectors they are computed on. Pure
functions of arrays and models: no model loading, no data source, no results store.

May import: the foundation modules.
"""
