"""Fixtures for the patch-queue tooling tests: throwaway queues in tmp dirs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flaxpq import sdist
from flaxpq.project import REPO_ROOT, Project


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        'markers', 'cold_install: installs from a fresh clone with empty caches; '
        'needs the package registry (tests/tooling/test_cold_install.py)')


@pytest.fixture(scope='session')
def pristine_sdist() -> Path:
    """The real pinned sdist (downloaded once into the cache, verified)."""
    return sdist.fetch(Project().pin())


@pytest.fixture
def queue(tmp_path: Path) -> Project:
    """An empty patch queue pinned like ours, outside any git checkout."""
    root = tmp_path / 'queue'
    (root / 'patches').mkdir(parents=True)
    shutil.copy(REPO_ROOT / 'upstream.toml', root / 'upstream.toml')
    (root / 'patches' / 'series').write_text('')
    return Project(root)
