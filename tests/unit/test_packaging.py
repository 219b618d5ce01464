"""Every package of the source tree is in the distribution: a subpackage missing from
``pyproject.toml`` works from the checkout (the editable install maps the roots) and fails only
in an installed copy, such as the Docker image (``ModuleNotFoundError`` at node start)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed_in_pyproject() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    directories = setuptools["package-dir"]
    assert listed == set(directories), "packages and package-dir name the same packages"
    found = set()
    for name, directory in directories.items():
        for init in (ROOT / directory).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / directory)
            if "tests" in relative.parts:
                continue
            found.add(".".join([name, *relative.parts]))
    assert found - listed == set(), f"packages missing from pyproject.toml: {found - listed}"
