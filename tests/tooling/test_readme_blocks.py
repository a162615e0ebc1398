"""The README's install blocks where they cannot go on: pasted alone into
``bash -eu`` in a new folder, a block whose ``fork`` is unset or no clone
stops at its first line, and one on a machine without Python 3.12 or newer
stops at its pick, each with a sentence that says what to do, before
anything is made. The blocks' installs are ``test_readme_install.py``'s
(slow)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT
from tests.tooling.test_readme_install import pip_block, uv_block

BLOCKS = {'pip': pip_block, 'uv': uv_block}
# A Python older than 3.12 (or a pyenv shim that fails): the version check fails.
TOO_OLD = '#!/bin/sh\nexit 1\n'


def paste(block: str, folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    folder.mkdir()
    return subprocess.run(['bash', '-eu', '-c', block], env=env, cwd=folder,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize('fork', [None, '', 'no-such-folder', 'tests'])
@pytest.mark.parametrize('which', BLOCKS)
def test_without_a_clone_a_block_says_what_to_set(
    which: str, fork: str | None, tmp_path: Path
) -> None:
    """``fork`` unset, empty, a missing folder, or a folder that is no clone."""
    env = {k: v for k, v in os.environ.items() if k != 'fork'}
    if fork is not None:
        env['fork'] = str(REPO_ROOT / fork) if fork == 'tests' else fork
    result = paste(BLOCKS[which](), tmp_path / 'project', env)
    assert result.returncode != 0
    assert result.stderr == "Set fork to your clone's path: fork=~/src/flax-nnxaxis\n", \
        result.stderr
    assert list((tmp_path / 'project').iterdir()) == []


@pytest.mark.parametrize('which', BLOCKS)
def test_without_python_312_a_block_points_to_pyenv_install(which: str, tmp_path: Path) -> None:
    """pyenv installed with no version, every ``python3*`` on PATH too old."""
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
    result = paste(BLOCKS[which](), tmp_path / 'project', env)
    assert result.returncode != 0
    assert result.stderr.startswith('find-python: no Python >= 3.12 found'), result.stderr
    assert "Install one (e.g. 'pyenv install 3.12')" in result.stderr, result.stderr
    assert list((tmp_path / 'project').iterdir()) == []
