"""Fetch the pinned upstream sdist with pip and verify its sha256."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from flaxpq import QueueError
from flaxpq.project import CACHE_ENV, Pin, cache_dir

SDIST_ENV = 'FLAXPQ_SDIST'


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open('rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, pin: Pin) -> Path:
    """Return ``path`` if its sha256 is the pinned one; refuse it otherwise."""
    found = sha256_of(path)
    if found != pin.sha256:
        raise QueueError(
            f'sha256 mismatch for {path}:\n'
            f'  expected {pin.sha256} (upstream.toml)\n'
            f'  found    {found}\n'
            'Refusing to use it. Delete the file and fetch again, or point '
            f'{SDIST_ENV} at a genuine {pin.sdist}.'
        )
    return path


def fetch(pin: Pin) -> Path:
    """The verified pinned sdist: from $FLAXPQ_SDIST, the cache, or pip."""
    if env := os.environ.get(SDIST_ENV):
        path = Path(env)
        if not path.is_file():
            raise QueueError(f'{SDIST_ENV}={env} is not a file.')
        return verify(path, pin)
    cached = cache_dir() / pin.sdist
    if cached.is_file():
        return verify(cached, pin)
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cached.parent) as tmp:
        downloaded = _pip_download(pin, Path(tmp))
        verify(downloaded, pin)
        os.replace(downloaded, cached)
    return cached


def _pip_download(pin: Pin, dest: Path) -> Path:
    command = [
        sys.executable, '-m', 'pip', 'download',
        '--no-deps', '--no-binary', ':all:', '--ignore-requires-python',
        '--disable-pip-version-check', '--dest', str(dest),
        f'{pin.package}=={pin.version}',
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    path = dest / pin.sdist
    if result.returncode != 0 or not path.is_file():
        raise QueueError(
            f'could not download {pin.sdist} with pip '
            f'(exit {result.returncode}):\n{_tail(result.stderr or result.stdout)}\n'
            f'Offline? Set {SDIST_ENV}=/path/to/{pin.sdist}, or place the '
            f'file in {cache_dir()} (or set {CACHE_ENV} to a folder holding '
            'it). Inside an isolated build, pip must be importable: it is in '
            "pyproject.toml's [build-system] requires."
        )
    return path


def _tail(text: str, lines: int = 15) -> str:
    return '\n'.join(text.strip().splitlines()[-lines:])
