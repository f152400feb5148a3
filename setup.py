"""The wheel also carries the book's table of contents and the chapters' committed .ipynb copies (into
anisotropy/profiles/book/, ``anisotropy.profiles.PACKAGED``), which live outside lib/: with them an installed
``anisotropy chapters`` lists the chapters and their parameters without a checkout. Everything else is in
pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithChapters(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads the checkout itself
            return
        target = Path(self.build_lib, "anisotropy", "profiles", "book")
        (target / "notebooks").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HERE / "_toc.yml", target / "_toc.yml")
        for notebook in sorted((HERE / "notebooks").glob("*.ipynb")):
            shutil.copyfile(notebook, target / "notebooks" / notebook.name)


setup(cmdclass={"build_py": BuildPyWithChapters})
