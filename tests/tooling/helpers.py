"""Helpers for the tooling tests: edit a materialized tree, export a patch;
the README's install blocks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from flaxpq import gitqueue
from flaxpq.project import REPO_ROOT, Project

README = (REPO_ROOT / 'README.md').read_text()
# The sentence a block prints, alone, where ``fork`` names no clone.
SET_FORK = "Set fork to your clone's path: fork=~/src/flax-nnxaxis\n"


def section_blocks(heading: str, fence: str = 'bash') -> list[str]:
    """The ```fence blocks of the README's section ``heading``."""
    start = README.index(heading)
    section = README[start:README.index('\n## ', start)]
    return re.findall(rf'^```{fence}\n(.*?)^```$', section, re.MULTILINE | re.DOTALL)


def pip_block() -> str:
    return section_blocks('## Install')[0]


def uv_block() -> str:
    return section_blocks('## Install')[1]


BLOCKS = {'pip': pip_block, 'uv': uv_block}


def first_steps(block: str, then: str) -> str:
    """``block``'s lines up to its requirement (``req=...``), then ``then``,
    chained as the block chains its lines."""
    lines = block.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith('req='))
    return '\n'.join([*lines[:end + 1], then])


def back_to_vanilla(which: str) -> str:
    """The README's "Back to vanilla" line for pip or uv (its comment names it)."""
    (block,) = section_blocks('## Back to vanilla')
    (line,) = [line for line in block.splitlines() if line.endswith(f'# {which}')]
    return line


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


# pyenv's shim, as a test double: runs the command it is named after from the
# version that the cwd's .python-version names, else from the global version
# (ROOT/version), or fails as pyenv does where that version lacks it.
PYENV_SHIM = '''#!/bin/sh
root='{root}'
if [ -f .python-version ]; then version=$(cat .python-version); else version=$(cat "$root/version"); fi
exe="$root/versions/$version/bin/${{0##*/}}"
[ -x "$exe" ] || {{ echo "pyenv: ${{0##*/}}: command not found" >&2; exit 127; }}
exec "$exe" "$@"
'''


def pyenv_double(root: Path, global_version: str, versions: dict[str, str]) -> Path:
    """A pyenv root at ``root`` whose global version is ``global_version``:
    ``versions`` maps each version (``3.12.1``) to the text of its ``python``
    (``python3`` and ``python3.12`` link to it), and ``shims/`` holds the
    shims of python3 to python3.14. Returns ``shims/``, for the front of PATH."""
    for version, text in versions.items():
        python = root / 'versions' / version / 'bin' / 'python'
        python.parent.mkdir(parents=True)
        python.write_text(text)
        python.chmod(0o755)
        for name in ('python3', 'python' + '.'.join(version.split('.')[:2])):
            (python.parent / name).symlink_to('python')
    (root / 'version').write_text(f'{global_version}\n')
    shims = root / 'shims'
    shims.mkdir()
    for name in ('python3', 'python3.11', 'python3.12', 'python3.13', 'python3.14'):
        (shims / name).write_text(PYENV_SHIM.format(root=root))
        (shims / name).chmod(0o755)
    return shims
