"""``python -m flaxpq requirement``: the line that installs a clone's commit
on other machines (flaxpq/requirement.py). The install of its output from
another folder is tests/tooling/test_readme_install.py's (slow)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flaxpq.requirement import pip_url, requirement
from tests.tooling.builds import published_clone, run_ok



@pytest.mark.parametrize('remote, url', [
    ('https://github.com/org/flax-nnxaxis.git', 'git+https://github.com/org/flax-nnxaxis.git'),
    ('ssh://git@host:2222/org/repo.git', 'git+ssh://git@host:2222/org/repo.git'),
    ('git@github.com:org/flax-nnxaxis.git', 'git+ssh://git@github.com/org/flax-nnxaxis.git'),
    ('file:///srv/git/flax.git', 'git+file:///srv/git/flax.git'),
    ('/srv/git/flax.git', 'git+file:///srv/git/flax.git'),
    ('../published.git', 'git+file:///work/published.git'),
])
def test_a_remote_url_becomes_pips_vcs_url(remote: str, url: str) -> None:
    assert pip_url(remote, Path('/work/clone')) == url


def commit_repo(path: Path) -> str:
    run_ok('git', 'init', '--quiet', '-b', 'main', path)
    run_ok('git', '-C', path, '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit',
           '--quiet', '--allow-empty', '-m', 'one')
    return run_ok('git', '-C', path, 'rev-parse', 'HEAD').strip()


def test_a_clone_with_a_remote_gets_the_remote_at_its_full_commit(tmp_path: Path) -> None:
    commit = commit_repo(tmp_path / 'origin')
    run_ok('git', 'clone', '--quiet', tmp_path / 'origin', tmp_path / 'clone')
    line, note = requirement(tmp_path / 'clone', 'flax')
    assert line == f'flax @ git+file://{tmp_path / "origin"}@{commit}'
    assert note is None


def test_a_commit_the_remote_lacks_gets_a_note(tmp_path: Path) -> None:
    commit_repo(tmp_path / 'origin')
    run_ok('git', 'clone', '--quiet', tmp_path / 'origin', tmp_path / 'clone')
    run_ok('git', '-C', tmp_path / 'clone', '-c', 'user.name=t', '-c', 'user.email=t@t',
           'commit', '--quiet', '--allow-empty', '-m', 'two')
    line, note = requirement(tmp_path / 'clone', 'flax')
    new = run_ok('git', '-C', tmp_path / 'clone', 'rev-parse', 'HEAD').strip()
    assert line.endswith(f'@{new}')
    assert note and 'push it' in note and new[:12] in note, note


def test_a_clone_without_a_remote_gets_its_own_path_and_a_note(tmp_path: Path) -> None:
    commit = commit_repo(tmp_path / 'alone')
    line, note = requirement(tmp_path / 'alone', 'flax')
    assert line == f'flax @ git+file://{tmp_path / "alone"}@{commit}'
    assert note and 'this machine only' in note, note


def test_the_command_prints_the_line_alone_on_stdout(tmp_path: Path) -> None:
    """In a clone of a published copy of this repository (main at HEAD), as
    the README runs it."""
    published, clone, commit = published_clone(tmp_path)
    result = subprocess.run([sys.executable, '-m', 'flaxpq', 'requirement'], cwd=clone,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f'flax @ git+file://{published}@{commit}\n'
    assert result.stderr == ''
