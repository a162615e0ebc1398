"""The PR kit (`apply-upstream`, `upstream-report`) on a stand-in clone of
upstream: the pristine sdist as a git repo (docs/upstream-pr.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from flaxpq import QueueError, checks, cli, gitqueue, upstream
from flaxpq.project import Project
from tests.tooling.helpers import SPMD_EDIT, commit_edit, make_queue, message, upstream_clone

SENDER = 'Ada Sender <ada@example.org>'
OPTIMIZER_EDIT = ('flax/nnx/training/optimizer.py', 'class OptArray(OptState):',
                  'class OptArray(OptState):  # patched')
SPMD_AGAIN = ('flax/nnx/spmd.py', 'helpers (patched)', 'helpers (patched twice)')
TEST_EDIT = ('tests/nnx/spmd_test.py', 'class TestSPMD(parameterized.TestCase):',
             'class TestSPMD(parameterized.TestCase):  # patched')


@pytest.fixture
def no_user_git_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('GIT_CONFIG_GLOBAL', os.devnull)
    monkeypatch.setenv('GIT_CONFIG_NOSYSTEM', '1')


@pytest.fixture
def series(queue: Project, pristine_sdist: Path, tmp_path: Path) -> list[str]:
    """first <- second (Depends-on), an independent third, one of ours."""
    return make_queue(queue, pristine_sdist, tmp_path, [
        (SPMD_EDIT, message('clarify add_axis docstring')),
        (SPMD_AGAIN, message('clarify it again', 'Builds on the first.',
                             'Depends-on: clarify-add_axis-docstring.patch')),
        (OPTIMIZER_EDIT, message('mark OptArray', 'Body.\n\nSecond paragraph.',
                                 'Signed-off-by: Ada Sender <ada@example.org>')),
        (TEST_EDIT, message('tests: our local marker', forwarded='not-needed')),
    ])


@pytest.fixture
def clone(pristine_sdist: Path, tmp_path: Path, no_user_git_config: None) -> Path:
    """A stand-in clone of upstream, with no git identity configured."""
    return upstream_clone(pristine_sdist, tmp_path / 'clone')


def diff(repo: Path, a: str, b: str) -> str:
    return gitqueue.git(repo, 'diff', '--full-index', a, b).stdout


def test_one_branch_per_upstream_bound_patch(
    queue: Project, series: list[str], clone: Path, tmp_path: Path
) -> None:
    first, second, third, ours = series
    assert cli.main(['--root', str(queue.root), 'apply-upstream', '--checkout', str(clone),
                     '--author', SENDER, '--prefix', 'pq']) == 0
    branches = gitqueue.git(clone, 'branch', '--format=%(refname:short)').stdout.split()
    assert sorted(branches) == sorted(['main', *(f'pq/{n.removesuffix(".patch")}'
                                                for n in (first, second, third))])
    assert gitqueue.git(clone, 'symbolic-ref', '--short', 'HEAD').stdout.strip() == 'main'
    # each branch's diff is its patch (with its dependencies): the same as the
    # materialized series' commits (upstream, first, second, third, ours)
    tree = tmp_path / 'tree'
    for branch, commit in ((first, 'HEAD~3'), (second, 'HEAD~2')):
        assert diff(clone, 'main', f'pq/{branch[:-6]}') == diff(tree, 'upstream', commit)
    assert diff(clone, 'main', f'pq/{third[:-6]}') == diff(tree, 'HEAD~2', 'HEAD~1')
    log = gitqueue.git(clone, 'log', '--format=%an <%ae>|%cn <%ce>|%B%x00',
                       'main..pq/' + second[:-6]).stdout
    commits = [c.strip() for c in log.split('\0') if c.strip()]
    assert len(commits) == 2
    for commit in commits:
        author, committer, text = commit.split('|', 2)
        assert author == committer == SENDER
        assert 'Bug:' not in text and 'Forwarded:' not in text and 'Depends-on:' not in text
    assert commits[0].endswith('clarify it again\n\nBuilds on the first.')
    third_message = gitqueue.git(clone, 'log', '-1', '--format=%B', 'pq/' + third[:-6]).stdout
    assert third_message == ('mark OptArray\n\nBody.\n\nSecond paragraph.\n\n'
                             'Signed-off-by: Ada Sender <ada@example.org>\n\n')


def test_sender_defaults_to_git_config_and_must_be_set(queue: Project, series: list[str], clone: Path) -> None:
    with pytest.raises(QueueError, match='--author "Name <email>"'):
        upstream.sender(clone)
    with pytest.raises(QueueError, match='is not "Name <email>"'):
        upstream.sender(clone, 'just a name')
    gitqueue.git(clone, 'config', 'user.name', 'Bo Config')
    gitqueue.git(clone, 'config', 'user.email', 'bo@example.org')
    assert upstream.sender(clone) == upstream.Sender('Bo Config', 'bo@example.org')


def test_failing_patch_is_named_and_the_clone_left_clean(queue: Project, series: list[str], clone: Path) -> None:
    first, second, third, _ = series
    # upstream moved the line `first` edits: neither it nor `second` applies
    commit_edit(clone, 'flax/nnx/spmd.py', '# Transform axis change helpers',
                '# Axis change helpers', 'upstream moves on\n')
    who = upstream.Sender('Ada Sender', 'ada@example.org')
    with pytest.raises(QueueError) as error:
        upstream.apply_upstream(queue, clone, who, 'pq')
    assert f'patch {first} does not apply to {clone}' in str(error.value)
    assert 'strict git am' in str(error.value)
    assert not (clone / '.git' / 'rebase-apply').exists()
    assert gitqueue.git(clone, 'status', '--porcelain').stdout == ''
    assert gitqueue.git(clone, 'symbolic-ref', '--short', 'HEAD').stdout.strip() == 'main'
    assert gitqueue.git(clone, 'branch', '--list', 'pq/*').stdout == ''

    rows = upstream.report(queue, clone, who, 'nightly',
                           [sys.executable, '-c', 'import sys; print(sys.argv[1:])'])
    assert [(r.patch, r.applies, r.tests) for r in rows] == [
        (first, 'conflicts', '-'), (second, 'conflicts', '-'),
        (third, 'strict', 'none touched')]
    assert rows[0].detail.startswith('strict: error: patch failed: flax/nnx/spmd.py')
    assert 'three-way: error: Failed to merge in the changes.' in rows[0].detail
    table = upstream.markdown(rows, 'main')
    assert f'| `{first}` | conflicts | - |' in table
    assert gitqueue.git(clone, 'status', '--porcelain').stdout == ''


def test_report_tries_three_way_and_runs_the_touched_tests(
    queue: Project, pristine_sdist: Path, tmp_path: Path, no_user_git_config: None,
) -> None:
    (name,) = make_queue(queue, pristine_sdist, tmp_path, [
        (TEST_EDIT, message('tests: mark TestSPMD'))])
    clone = upstream_clone(pristine_sdist, tmp_path / 'clone')
    # a context line of the hunk changes: strict fails, three-way merges
    commit_edit(clone, 'tests/nnx/spmd_test.py', 'import optax\n',
                'import optax  # moved\n', 'upstream moves on\n')
    summary = tmp_path / 'summary.md'
    code = cli.main(['--root', str(queue.root), 'upstream-report', '--checkout', str(clone),
                     '--author', SENDER, '--summary', str(summary), '--test-command',
                     f'{sys.executable} -c "import sys; sys.exit(len(sys.argv) != 2)"'])
    assert code == 0
    assert f'| `{name}` | three-way | pass | tests/nnx/spmd_test.py |' in summary.read_text()


def test_report_skips_ours_only_patches_and_check_applies_them(
    queue: Project, pristine_sdist: Path, series: list[str], clone: Path
) -> None:
    first, second, third, ours = series
    rows = upstream.report(queue, clone, upstream.sender(clone, SENDER), 'pq', None)
    assert [row.patch for row in rows] == [first, second, third]
    assert [p.name for p in upstream.upstream_bound(queue)] == [first, second, third]
    # check applies the `Forwarded: not-needed` patch like any other
    path = queue.patches_dir / ours
    path.write_bytes(path.read_bytes().replace(
        b'-class TestSPMD(parameterized.TestCase):\n',
        b'-class TestSPMD(parameterized.TestCase):  # not upstream\n'))
    problems = '\n'.join(checks.run_all(queue, pristine_sdist, hooks=False))
    assert f'{ours}: does not apply alone to pristine upstream' in problems
