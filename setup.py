"""Ships the top-level templates/ and registry/ inside the wheel, as engine/_shipped/.

In the repository they stay where users know them; `engine.resources` finds them in
either place. Everything else about the package is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("templates", "registry")


class BuildPyWithShipped(build_py):
    def run(self) -> None:
        super().run()
        for name in SHIPPED:
            target = Path(self.build_lib) / "engine" / "_shipped" / name
            shutil.copytree(Path(__file__).parent / name, target, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildPyWithShipped})
