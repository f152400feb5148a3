"""A Sphinx extension of the book: no running figure numbers ("Fig. 4") before the captions of the HTML book.

A reproduced figure's caption names the paper's figure ("Paper 1, Figure 1"); Sphinx's own running number beside it
only confuses. ``numfig: false`` in ``_config.yml`` is not enough: the LaTeX extension that Jupyter Book loads
(sphinx-jupyterbook-latex) sets ``numfig = True`` for every builder when the configuration is read. Once the builder
is known, this turns the numbers off again for the HTML builders (a PDF keeps them).
"""


def _no_figure_numbers(app) -> None:
    if app.builder.format == "html":
        app.config.numfig = False


def setup(app):
    app.connect("builder-inited", _no_figure_numbers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
