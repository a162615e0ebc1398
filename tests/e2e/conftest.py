"""Fixtures for the end-to-end tests: vanilla flax, for side-by-side runs."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from flaxpq.project import Project


@pytest.fixture(scope='session')
def vanilla_flax(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the registry's pristine flax wheel, unpacked.

    Put first on PYTHONPATH, it shadows our installed flax while every other
    dependency stays the venv's, so both run with the same jax and optax.
    """
    pin = Project().pin()
    dest = tmp_path_factory.mktemp('vanilla')
    subprocess.run(
        [sys.executable, '-m', 'pip', 'download', '--quiet', '--no-deps',
         '--only-binary', ':all:', f'{pin.package}=={pin.version}', '-d', dest],
        check=True, capture_output=True)
    (wheel,) = dest.glob('*.whl')
    site = dest / 'site'
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return site
