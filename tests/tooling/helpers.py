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


def message(subject: str, body: str = 'A throwaway change made by the tooling tests.',
            *trailers: str, forwarded: str = 'no') -> str:
    """A commit message following our patch header rules (docs/maintainers.md)."""
    lines = ['Bug: https://github.com/google/flax/issues/5112', f'Forwarded: {forwarded}',
             *trailers]
    return f'{subject}\n\n{body}\n\n' + '\n'.join(lines) + '\n'


GOOD_MESSAGE = message('clarify add_axis docstring')
# Edits of pristine upstream that do not overlap: (path, old, new).
SPMD_EDIT = ('flax/nnx/spmd.py', '# Transform axis change helpers',
             '# Transform axis change helpers (patched)')


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


def make_queue(queue: Project, sdist_path: Path, tmp_path: Path,
               commits: list[tuple[tuple[str, str, str], str]]) -> list[str]:
    """Make ``queue`` hold exactly one patch per (edit, message) on pristine
    upstream; return the series. The tree stays in ``tmp_path / 'tree'``."""
    gitqueue.write_queue(queue.patches_dir, {})
    tree = tmp_path / 'tree'
    gitqueue.materialize(queue, sdist_path, tree, force=True)
    for (path, old, new), msg in commits:
        commit_edit(tree, path, old, new, msg)
    gitqueue.export(queue, tree)
    return queue.series()


def upstream_clone(sdist_path: Path, dest: Path) -> Path:
    """A stand-in clone of upstream: the pristine sdist as commit 1 of main."""
    gitqueue.unpack_sdist(sdist_path, dest)
    gitqueue.git(dest, 'init', '--quiet', '--initial-branch=main')
    gitqueue.git(dest, 'add', '--all', '--force')
    gitqueue.git(dest, 'commit', '--quiet', '-m', 'upstream')
    return dest


def run(*args: str | Path, cwd: Path | None = None) -> str:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout
