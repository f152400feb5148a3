"""A Sphinx extension of the book: rendering stops at once, in one line, when the executed chapters are not there.

``_toc.yml`` points at ``book/executed/<chapter>.ipynb``, which papermill writes (``make book``) and git ignores. Run
on a fresh clone, ``jupyter-book build .`` would otherwise render a book of missing pages with a warning per chapter.
"""

from pathlib import Path


def missing_chapters(root: Path) -> list[str]:
    """The chapters of ``root``'s ``_toc.yml`` (``profiles.toc_chapters``) with no notebook under ``book/executed/``,
    as toc entries (``book/executed/<chapter>``)."""
    from anisotropy.profiles import EXECUTED, toc_chapters

    entries = [f"{EXECUTED.as_posix()}/{name}" for name in toc_chapters(root)]
    return [e for e in entries if not (root / f"{e}.ipynb").is_file()]


def _check(app, config) -> None:
    missing = missing_chapters(Path(app.srcdir))
    if missing:
        # SystemExit, not a Sphinx error: Jupyter Book would wrap that in two tracebacks and a box
        raise SystemExit(f"error: {len(missing)} chapter(s) of _toc.yml not executed ({missing[0]}.ipynb ...): run "
                         "`make book`, which executes every chapter with papermill and then renders the book.")


def setup(app):
    app.connect("config-inited", _check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
