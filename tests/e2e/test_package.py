"""What an install carries: the search spaces, the default job and the baselines are package data.

The wheel is built from a copy of what setuptools reads (pyproject.toml, setup.py, README.md, autosync/), not
in the checkout: an in-place build reuses build/lib, so a file deleted from the package could still be in it.
`.ci/run` goes further: it installs the wheel in a new virtual environment and runs commands from /tmp.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path

import pytest

from autosync.data import BASELINE_DIR, DATA_DIR, DEFAULT_JOB_PATH, SPACE_DIR

REPO = Path(__file__).resolve().parents[2]


def test_top_level_folders_are_the_package_data():
    """One copy of each file: the repository's search_spaces/ and baselines/ are the package's folders."""
    assert (REPO / "search_spaces").resolve() == SPACE_DIR.resolve()
    assert (REPO / "baselines").resolve() == BASELINE_DIR.resolve()
    assert DEFAULT_JOB_PATH.resolve() == (REPO / "baselines" / "digits_default.yaml").resolve()
    assert sorted(p.stem for p in SPACE_DIR.glob("*.yaml")) == [
        "batch_split", "composed", "policy", "static_k", "switch_point"]


def _setuptools_builds_wheels() -> bool:
    """Whether this environment can build the wheel itself (`--no-build-isolation`: seconds, no index)."""
    try:
        major, minor = (int(x) for x in version("setuptools").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    # setuptools carries bdist_wheel itself from 70.1; before that it needs the `wheel` package.
    return (major, minor) >= (70, 1) or (major >= 68 and find_spec("wheel") is not None)


@pytest.mark.slow
def test_wheel_ships_spaces_default_job_and_baselines(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "autosync", source / "autosync",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
    isolation = ["--no-build-isolation"] if _setuptools_builds_wheels() else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", *isolation,
                    "-w", str(tmp_path / "dist")], check=True, timeout=600)
    (wheel,) = (tmp_path / "dist").glob("autosync-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        expected = {f"autosync/data/{p.relative_to(DATA_DIR).as_posix()}"
                    for folder in (SPACE_DIR, BASELINE_DIR) for p in folder.glob("*.yaml")}
        expected |= {f"autosync/data/{p.relative_to(DATA_DIR).as_posix()}"  # the Sync-Switch logs replay reads
                     for p in (DATA_DIR / "sync_switch_logs").rglob("*") if p.is_file()}
        assert expected <= names, sorted(expected - names)
        for name in expected:  # the files themselves, not links or stale copies
            assert archive.read(name) == (DATA_DIR / name.removeprefix("autosync/data/")).read_bytes(), name
    default = f"autosync/data/{DEFAULT_JOB_PATH.relative_to(DATA_DIR).as_posix()}"
    assert default in names
    assert {"autosync/data/search_spaces/static_k.yaml", "autosync/data/baselines/family_quick.yaml",
            "autosync/data/baselines/family_stragglers.yaml"} <= names
    assert not any(n.startswith(("search_spaces/", "baselines/", "tests/")) for n in names), sorted(names)


@pytest.mark.slow
def test_the_docs_site_builds_strict(tmp_path):
    """`mkdocs build --strict` as .ci/run runs it: a page missing from the nav, a broken link or anchor, or a
    docstring mkdocstrings cannot render fails it (mkdocs.yml, docs/)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                           cwd=REPO, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "reference" / "api" / "index.html").is_file()
