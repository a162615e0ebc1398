"""The README's install blocks where they cannot go on, and the Python they
pick in a folder pinned by ``.python-version``.

Each block is pasted alone into a new folder, into ``bash -eu -c`` and, as
into an interactive shell (no ``-e``: a failing line does not stop the next
one by itself), into a plain ``bash`` that reads it from stdin. Where
``fork`` names no clone, a block prints one line; on a machine without
Python 3.12 or newer it stops at find-python's message; where the clone
gives no requirement, at flaxpq's; each time before anything is made. In a
folder pinned to 3.12 while pyenv's global Python is older (a test double
of pyenv), its first steps give the requirement and an interpreter that is
3.12 in any folder. The blocks' installs are ``test_readme_install.py``'s
(slow)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT
from tests.tooling.helpers import BLOCKS, SET_FORK, first_steps, pyenv_double

# A Python older than 3.12 (or a pyenv shim that fails): the version check fails.
TOO_OLD = '#!/bin/sh\nexit 1\n'
SHELLS = ['bash -eu', 'pasted']


def paste(block: str, folder: Path, env: dict[str, str],
          shell: str = 'bash -eu') -> subprocess.CompletedProcess[str]:
    """``block`` in a new shell in ``folder``: ``bash -eu -c``, or (``pasted``)
    a plain ``bash`` reading it from stdin, as an interactive shell runs it."""
    folder.mkdir(exist_ok=True)
    command, stdin = (['bash', '-eu', '-c', block], None) if shell == 'bash -eu' else (['bash'], block)
    return subprocess.run(command, input=stdin, env=env, cwd=folder,
                          capture_output=True, text=True, timeout=60)


def made(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def in_each_block_and_shell(test: Callable[..., None]) -> Callable[..., None]:
    """``test`` for each block (``which``), pasted into each shell (``shell``)."""
    return pytest.mark.parametrize('shell', SHELLS)(pytest.mark.parametrize('which', BLOCKS)(test))


@pytest.mark.parametrize('fork', [None, '', 'no-such-folder', 'tests'])
@in_each_block_and_shell
def test_without_a_clone_a_block_says_what_to_set(
    which: str, fork: str | None, shell: str, tmp_path: Path
) -> None:
    """``fork`` unset, empty, a missing folder, or a folder that is no clone:
    the one sentence, nothing else printed, nothing made."""
    env = {k: v for k, v in os.environ.items() if k != 'fork'}
    if fork is not None:
        env['fork'] = str(REPO_ROOT / fork) if fork == 'tests' else fork
    result = paste(BLOCKS[which](), tmp_path / 'project', env, shell)
    assert result.returncode != 0
    assert (result.stdout, result.stderr) == ('', SET_FORK)
    assert made(tmp_path / 'project') == []


@in_each_block_and_shell
def test_without_python_312_a_block_points_to_pyenv_install(
    which: str, shell: str, tmp_path: Path
) -> None:
    """pyenv installed with no version, every ``python3*`` on PATH too old:
    find-python's message and nothing after it."""
    stubs = tmp_path / 'bin'
    stubs.mkdir()
    for name in ('python3', 'python3.12', 'python3.13', 'python3.14'):
        (stubs / name).write_text(TOO_OLD)
        (stubs / name).chmod(0o755)
    root = tmp_path / 'pyenv'
    (root / 'versions').mkdir(parents=True)
    (stubs / 'pyenv').write_text(f'#!/bin/sh\n[ "$1" = root ] && echo {root}\n')
    (stubs / 'pyenv').chmod(0o755)
    env = {'PATH': f'{stubs}:/usr/bin:/bin', 'HOME': str(tmp_path), 'fork': str(REPO_ROOT)}
    result = paste(BLOCKS[which](), tmp_path / 'project', env, shell)
    assert result.returncode != 0
    alone = subprocess.run([REPO_ROOT / 'scripts' / 'find-python'], env=env,
                           capture_output=True, text=True)
    assert alone.stderr.startswith('find-python: no Python >= 3.12 found'), alone.stderr
    assert "Install one (e.g. 'pyenv install 3.12')" in alone.stderr, alone.stderr
    assert (result.stdout, result.stderr) == ('', alone.stderr)
    assert made(tmp_path / 'project') == []


@in_each_block_and_shell
def test_without_a_requirement_a_block_stops_at_flaxpqs_error(
    which: str, shell: str, tmp_path: Path
) -> None:
    """A ``fork`` with our scripts and flaxpq that is no git clone:
    ``flaxpq requirement`` says so, in one line, and nothing runs after it."""
    fork = tmp_path / 'copy'
    for name in ('scripts', 'flaxpq'):
        shutil.copytree(REPO_ROOT / name, fork / name)
    shutil.copy(REPO_ROOT / 'upstream.toml', fork)
    env = {**os.environ, 'fork': str(fork)}
    result = paste(BLOCKS[which](), tmp_path / 'project', env, shell)
    if 'find-python:' in result.stderr:
        pytest.skip('no Python 3.12 on this machine')
    assert result.returncode != 0
    assert result.stdout == ''
    (line,) = result.stderr.splitlines()
    assert line.startswith(f'error: {fork} is not a git clone with a commit'), result.stderr
    assert made(tmp_path / 'project') == []


# Python 3.11 as the global version: too old for find-python and for flaxpq.
PYTHON_311 = ('#!/bin/sh\necho "flaxpq requires Python >= 3.12; this is Python 3.11.7" >&2\n'
              'exit 2\n')


@pytest.mark.parametrize('which', BLOCKS)
def test_in_a_folder_pinned_to_312_the_first_steps_give_3_12_and_the_requirement(
    which: str, tmp_path: Path
) -> None:
    """pyenv (a test double) whose global Python is 3.11, a project folder
    pinned to 3.12 by ``.python-version``: the block's Python is 3.12 in the
    clone too, where the shim would run 3.11, so the requirement comes out."""
    root = tmp_path / 'pyenv'
    shims = pyenv_double(root, '3.11.7', {
        '3.11.7': PYTHON_311, '3.12.1': f'#!/bin/sh\nexec "{sys.executable}" "$@"\n'})
    project = tmp_path / 'project'
    project.mkdir()
    (project / '.python-version').write_text('3.12.1\n')
    env = {'PATH': f'{shims}:/usr/bin:/bin', 'HOME': str(tmp_path), 'PYENV_ROOT': str(root),
           'fork': str(REPO_ROOT)}
    block = first_steps(BLOCKS[which](), 'printf "%s\\n" "$py" "$req"')
    result = paste(block, project, env)
    assert result.returncode == 0, result.stderr
    python, requirement = result.stdout.splitlines()
    assert not python.startswith(str(shims)), python
    assert requirement.startswith('flax @ git+'), requirement
    elsewhere = subprocess.run([python, '-c', 'import sys; print(sys.version_info >= (3, 12))'],
                               cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert elsewhere.stdout == 'True\n', elsewhere.stdout + elsewhere.stderr
    assert made(project) == ['.python-version']
