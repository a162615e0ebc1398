"""flaxpq: a patch queue over the pinned upstream Flax release.

Upstream Flax never lives in this repository. It enters at build time as the
pinned sdist (``upstream.toml``), verified by sha256; our changes live as
``git format-patch`` files listed in ``patches/series``.

Modules, in the order the data flows:

* :mod:`flaxpq.project` -- where things are (pin, patches, work and cache dirs).
* :mod:`flaxpq.sdist` -- fetch the pinned sdist with pip and verify its hash.
* :mod:`flaxpq.gitqueue` -- materialize (sdist + ``git am``) and export
    (``git format-patch``) the patch queue.
* :mod:`flaxpq.patchfile` -- one patch: subject, body, our trailers, diff.
* :mod:`flaxpq.checks` -- the invariants CI enforces on the queue.
* :mod:`flaxpq.hooks` -- upstream's pre-commit hooks: new findings only, blamed.
* :mod:`flaxpq.precommit` -- pre-commit runs them from a ``repo: local`` config.
* :mod:`flaxpq.upstream` -- the PR kit: one upstream branch per patch.
* :mod:`flaxpq.wheel` -- build the patched ``flax`` wheel, stamping the label.
* :mod:`flaxpq.backend` -- the PEP 517 in-tree build backend.
* :mod:`flaxpq.cli` -- ``python -m flaxpq ...``.

This module must import on any Python 3: the backend and ``python -m flaxpq``
use :func:`python_too_old` before importing anything else of ours.
"""

from __future__ import annotations

import sys

MIN_PYTHON = (3, 12)  # upstream flax's Requires-Python (0.12.12: >=3.12)
_MIN = '.'.join(map(str, MIN_PYTHON))
# How to get such a venv, also where `python3.12` is a pyenv shim that fails
# unless 3.12 is selected, and offline: uv is given the interpreter's path,
# since `uv venv --python 3.12` stops at such a shim or downloads a CPython of
# its own, and no `--seed`, which needs pip in uv's cache or the index; a uv
# venv has no pip, `uv pip install` fills it (README.md, "Install";
# tests/tooling/test_build_errors.py runs these offline on empty caches).
NEW_PYTHON_HOWTO = (
    f'`python{_MIN} -m venv .venv`; with pyenv, `"$(pyenv prefix {_MIN})/bin/python" '
    f'-m venv .venv` (`pyenv install {_MIN}` first if it has none; that needs the network); '
    f'with uv, given that interpreter: `uv venv --python "$(pyenv prefix {_MIN})/bin/python" '
    f'.venv`, or `uv venv --python "$(command -v python{_MIN})" .venv` without pyenv '
    f'(a uv venv has no pip: install into it with `uv pip install`)'
)


def python_too_old(what: str, remedy: str) -> str | None:
    """The one-line ``error:`` refusing ``what`` on this Python, or None.

    ``remedy`` says what to do once there is a new enough environment; the
    message ends with how to make one.
    """
    if sys.version_info >= MIN_PYTHON:
        return None
    return (
        f'error: {what} requires Python >= {_MIN}, like upstream flax; this is '
        f'Python {sys.version.split()[0]} ({sys.executable}). {remedy} '
        f'Make a Python {_MIN}+ venv with {NEW_PYTHON_HOWTO}.'
    )


class QueueError(Exception):
    """A failure the user can act on; the message says what to do."""
