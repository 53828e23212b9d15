"""The one build step pyproject.toml cannot express; everything else is configured there."""

import compileall
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext


class BuildExtAndBytecode(build_ext):
    """Build the C extensions, then, for an editable install (``pip install -e .``, the README's),
    byte-compile the package where it is. pip byte-compiles the files of a regular install; an
    editable install's are compiled on first import only, and never where the environment sets
    PYTHONDONTWRITEBYTECODE (CI images, containers): every command then compiled its ~120 modules
    again (0.1-0.2 s of a 1 s ``analyze``)."""

    def finalize_options(self) -> None:
        """The extensions compile side by side (one per core): the scanner alone takes ~2.5 s,
        the other four ~1.5 s, one after another on a clean install."""
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1
        super().finalize_options()

    def run(self) -> None:
        super().run()
        if self.inplace or getattr(self, "editable_mode", False):
            compileall.compile_dir(str(Path(__file__).resolve().parent / "perfreport"), quiet=1)


setup(cmdclass={"build_ext": BuildExtAndBytecode})
