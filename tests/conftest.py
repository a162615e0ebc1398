"""Shared fixtures: vanilla flax, for side-by-side runs (e2e, oracle, realcode)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from tests.registry import download_registry_wheel


@pytest.fixture(scope='session')
def vanilla_flax(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the registry's pristine flax wheel, unpacked.

    Put first on PYTHONPATH, it shadows our installed flax while every other
    dependency stays the venv's, so both run with the same jax and optax.
    """
    dest = tmp_path_factory.mktemp('vanilla')
    wheel = download_registry_wheel(dest)
    site = dest / 'site'
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return site


@pytest.fixture
def vanilla_python(vanilla_flax: Path, tmp_path: Path) -> str:
    """An 'interpreter' that runs this venv's Python with vanilla flax first."""
    wrapper = tmp_path / 'vanilla-python'
    wrapper.write_text(
        '#!/bin/sh\n'
        f'PYTHONPATH="{vanilla_flax}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)
