"""The wheel ships every subpackage of the folders pyproject maps into the package.

A folder missing from pyproject's `packages` passes lint and the tests (the editable
install finds it through its parent's folder) but is absent from the wheel; only a
real build shows it.
"""

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _package_dir() -> dict[str, str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping: dict[str, str] = pyproject["tool"]["setuptools"]["package-dir"]
    return mapping


def _source_packages(package_dir: dict[str, str]) -> set[str]:
    """Every folder with an __init__.py under the mapped folders, as a package name."""
    names = set()
    for package, folder in package_dir.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            relative = init.parent.relative_to(base)
            names.add(".".join((package, *relative.parts)))
    return names


def _build_wheel(tmp_path: Path, package_dir: dict[str, str]) -> Path:
    # Build from a copy so setuptools' build/ and egg-info never touch the checkout.
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in {folder.split("/")[0] for folder in package_dir.values()}:
        shutil.copytree(ROOT / folder, source / folder, ignore=ignore)
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
        + ["--no-build-isolation", "--no-index", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=240,
    )
    (wheel,) = out.glob("retrieval_pipeline-*.whl")
    return wheel


def test_wheel_contains_every_subpackage_of_the_mapped_folders(tmp_path: Path) -> None:
    # The build runs offline (no isolation), so the venv's own setuptools builds it.
    pytest.importorskip("setuptools", reason="the venv has no setuptools to build")
    package_dir = _package_dir()
    expected = _source_packages(package_dir)
    assert "retrieval_pipeline.tools.store" in expected  # nested folders are found

    with zipfile.ZipFile(_build_wheel(tmp_path, package_dir)) as wheel:
        files = set(wheel.namelist())
    shipped = {
        name.removesuffix("/__init__.py").replace("/", ".")
        for name in files
        if name.endswith("/__init__.py")
    }

    assert sorted(expected - shipped) == []
    assert "retrieval_pipeline/py.typed" in files
    assert any(
        name.startswith("retrieval_pipeline/tools/store/migrations/")
        and name.endswith(".sql")
        for name in files
    )
