"""Helpers for the tooling tests: edit a materialized tree, export a patch."""

from __future__ import annotations

import subprocess
from pathlib import Path

from flaxpq import gitqueue
from flaxpq.project import Project


def commit_edit(
    tree: Path, path: str, old: str, new: str, message: str
) -> None:
    """Replace ``old`` by ``new`` once in ``tree/path`` and commit it."""
    file = tree / path
    text = file.read_text()
    assert text.count(old) == 1, f'{old!r} not unique in {path}'
    file.write_text(text.replace(old, new))
    gitqueue.git(tree, 'commit', '--quiet', '-a', '-m', message)


GOOD_MESSAGE = (
    'nnx: clarify add_axis docstring\n\n'
    'A throwaway change made by the tooling tests.\n\n'
    'Bug: https://github.com/google/flax/issues/5112\n'
    'Forwarded: no\n'
)


def make_patch(queue: Project, sdist_path: Path, tmp_path: Path,
               path: str = 'flax/nnx/spmd.py',
               old: str = '# Transform axis change helpers',
               new: str = '# Transform axis change helpers (patched)',
               message: str = GOOD_MESSAGE) -> str:
    """Materialize ``queue``, commit one edit, export it; return its name."""
    tree = tmp_path / 'tree'
    gitqueue.materialize(queue, sdist_path, tree, force=True)
    commit_edit(tree, path, old, new, message)
    gitqueue.export(queue, tree)
    (name,) = queue.series()
    return name


def run(*args: str | Path, cwd: Path | None = None) -> str:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout
