"""Fetch the pinned upstream sdist with pip and verify its sha256.

pip stays the fetching tool: it honours the user's index, proxy, certificate
and credential configuration. Two things make it work inside a build:

* the environment pip or uv set for the running build hook is scrubbed
  (:func:`pip_environment`), so the nested pip does not take our
  ``backend-path`` for the backend of the packages it prepares;
* ``--only-binary=:all: --no-binary=<package>``: only the pinned package comes
  as an sdist; the build requirements pip needs to read its metadata
  (setuptools, setuptools-scm and theirs) come as wheels, never built from
  source.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from flaxpq import QueueError
from flaxpq.project import CACHE_ENV, Pin, cache_dir

SDIST_ENV = 'FLAXPQ_SDIST'
OFFLINE_HELP = 'docs/install-offline.md'

# Set by pip or uv for the build hook that runs us. Inherited by a nested pip,
# they make its own builds look for their backend in our backend-path (our
# issue 12: a cold `pip install` failed so) or share the outer pip's tracker.
_HOOK_VARIABLE_PREFIXES = ('_PYPROJECT_HOOKS_', 'UV_INTERNAL__')
_HOOK_VARIABLES = frozenset({'PIP_BUILD_TRACKER', 'PIP_REQ_TRACKER'})

# pip's own lines about where it looked and why it failed: what a failed
# download shows (its retries repeat one warning; the last one is enough).
_PIP_SAYS = ('Looking in indexes:', 'Looking in links:')


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open('rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, pin: Pin, *, advice: str) -> Path:
    """Return ``path`` if its sha256 is the pinned one; refuse it otherwise.

    ``advice`` says what to do about a mismatch where ``path`` came from.
    """
    found = sha256_of(path)
    if found != pin.sha256:
        raise QueueError(
            f'sha256 mismatch for {path}:\n'
            f'  expected {pin.sha256} (upstream.toml)\n'
            f'  found    {found}\n'
            f'Refusing to use it. {advice}'
        )
    return path


def fetch(pin: Pin) -> Path:
    """The verified pinned sdist: from $FLAXPQ_SDIST, the cache, or pip."""
    if env := os.environ.get(SDIST_ENV):
        path = Path(env)
        if not path.is_file():
            raise QueueError(f'{SDIST_ENV}={env} is not a file.')
        return verify(path, pin, advice=(
            f'This file is not the pinned release {pin.sdist} (another version, '
            'a rebuilt or repacked sdist, or an incomplete copy). Point '
            f'{SDIST_ENV} at the registry\'s {pin.sdist}, e.g. the path '
            '`python -m flaxpq fetch` prints on a connected machine, or unset '
            f'{SDIST_ENV} to let the build download it.'))
    cached = cache_dir() / pin.sdist
    if cached.is_file():
        return verify(cached, pin, advice=(
            f'The cached copy is damaged or not the pinned release: delete '
            f'{cached} and build again, or point {SDIST_ENV} at a genuine '
            f'{pin.sdist}.'))
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cached.parent) as tmp:
        downloaded = _pip_download(pin, Path(tmp))
        verify(downloaded, pin, advice=(
            'The package index pip uses (your pip configuration: index-url, '
            'find-links) served a different file under this name. Use an '
            f'index that mirrors the registry unchanged, or set {SDIST_ENV} '
            f'to a genuine {pin.sdist}.'))
        os.replace(downloaded, cached)
    return cached


def pip_environment() -> dict[str, str]:
    """``os.environ`` without what pip or uv set for the hook that runs us.

    The user's own settings (``PIP_INDEX_URL``, proxies, ``PIP_CACHE_DIR``,
    ...) stay: the nested pip downloads like theirs would. ``PYTHONPATH``
    stays too: inside pip's isolated build it is what makes the build
    environment's pip importable.
    """
    return {
        name: value for name, value in os.environ.items()
        if name not in _HOOK_VARIABLES and not name.startswith(_HOOK_VARIABLE_PREFIXES)
    }


def pip_download_args(pin: Pin) -> list[str]:
    """``pip download`` arguments for the pinned sdist alone.

    pip applies the format options in order: ``:all:`` first, then the
    package's own exception, so only the pinned package may (must) be an
    sdist and its build requirements are wheels. No
    ``--ignore-requires-python``: the backend already refused Pythons the
    release does not support.
    """
    return [
        'download', '--no-deps', '--only-binary=:all:', f'--no-binary={pin.package}',
        '--disable-pip-version-check', f'{pin.package}=={pin.version}',
    ]


def _pip_download(pin: Pin, dest: Path) -> Path:
    args = pip_download_args(pin)
    result = subprocess.run(
        [sys.executable, '-m', 'pip', *args, '--dest', str(dest)],
        capture_output=True, text=True, env=pip_environment(),
    )
    path = dest / pin.sdist
    if result.returncode == 0 and path.is_file():
        return path
    said = pip_said(f'{result.stdout}\n{result.stderr}')
    raise QueueError(
        f'could not download {pin.sdist}: pip exited with {result.returncode}. pip said:\n'
        f'{_indent(said)}\n'
        f'Offline or behind a firewall? Build offline ({OFFLINE_HELP}): '
        f'set {SDIST_ENV}=/path/to/{pin.sdist} (`python -m flaxpq fetch` '
        'on a connected machine prints where it is), or place the file in '
        f'{cache_dir()} (or set {CACHE_ENV} to a folder holding it). '
        f'Otherwise, to see all of pip\'s output, run `python -m pip {shlex.join(args)}`.'
    )


def pip_said(output: str) -> str:
    """pip's own lines of a failed run: where it looked, its last warning
    (e.g. the connection that broke) and its errors; else its last lines."""
    lines = [line.strip() for line in output.splitlines()]
    looked = [line for line in lines if line.startswith(_PIP_SAYS)]
    warned = [line for line in lines if line.startswith('WARNING:')][-1:]
    errors = [line for line in lines if line.startswith('ERROR:')]
    return '\n'.join([*looked, *warned, *errors] if warned or errors else lines[-10:])


def tail(text: str, lines: int = 15) -> str:
    return '\n'.join(text.strip().splitlines()[-lines:])


def _indent(text: str) -> str:
    return '\n'.join(f'  {line}' for line in text.splitlines())
