"""materialize / export / check on throwaway queues, with the real sdist."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from flaxpq import QueueError, checks, gitqueue, sdist
from flaxpq.project import Project
from tests.tooling.helpers import commit_edit, make_patch


def test_tampered_sdist_is_refused_naming_both_hashes(
    pristine_sdist: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tampered = tmp_path / pristine_sdist.name
    shutil.copy(pristine_sdist, tampered)
    with tampered.open('ab') as f:
        f.write(b'\0')
    monkeypatch.setenv(sdist.SDIST_ENV, str(tampered))
    pin = Project().pin()
    with pytest.raises(QueueError) as error:
        sdist.fetch(pin)
    message = str(error.value)
    assert pin.sha256 in message
    assert sdist.sha256_of(tampered) in message
    assert 'Refusing' in message


def test_offline_without_sdist_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(sdist.SDIST_ENV, raising=False)
    monkeypatch.setenv('FLAXPQ_CACHE', str(tmp_path / 'empty-cache'))
    # pip with no index and no config: as offline as it gets.
    monkeypatch.setenv('PIP_CONFIG_FILE', os.devnull)
    monkeypatch.setenv('PIP_NO_INDEX', '1')
    with pytest.raises(QueueError, match=sdist.SDIST_ENV):
        sdist.fetch(Project().pin())


def test_materialize_gives_pristine_commit_then_one_commit_per_patch(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    name = make_patch(queue, pristine_sdist, tmp_path)
    tree = tmp_path / 'again'
    assert gitqueue.materialize(queue, pristine_sdist, tree) == [name]
    log = gitqueue.git(tree, 'log', '--format=%s').stdout.splitlines()
    assert log == ['clarify add_axis docstring',
                   f'{pristine_sdist.name} (pristine upstream sdist)']
    assert '(patched)' in (tree / 'flax/nnx/spmd.py').read_text()
    # the pristine commit is byte-for-byte the sdist
    assert gitqueue.git(tree, 'diff', '--quiet', gitqueue.UPSTREAM_TAG,
                        'HEAD~1', check=False).returncode == 0


def test_reexport_without_edits_changes_no_byte(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    name = make_patch(queue, pristine_sdist, tmp_path)
    before = (queue.patches_dir / name).read_bytes()
    tree = tmp_path / 'again'
    gitqueue.materialize(queue, pristine_sdist, tree)
    assert gitqueue.export(queue, tree) == []
    assert (queue.patches_dir / name).read_bytes() == before
    assert name == 'clarify-add_axis-docstring.patch'
    assert before.startswith(b'From 0000000000000000000000000000000000000000')
    assert b'Subject: clarify add_axis docstring\n' in before
    assert checks.run_all(queue, pristine_sdist, hooks=False) == []


def test_export_refuses_uncommitted_edits(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    tree = tmp_path / 'tree'
    gitqueue.materialize(queue, pristine_sdist, tree)
    (tree / 'flax/nnx/spmd.py').write_text('# edited, not committed\n')
    with pytest.raises(QueueError, match='uncommitted'):
        gitqueue.export(queue, tree)


def test_materialize_refuses_to_clobber_a_tree(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    tree = tmp_path / 'tree'
    gitqueue.materialize(queue, pristine_sdist, tree)
    with pytest.raises(QueueError, match='export'):
        gitqueue.materialize(queue, pristine_sdist, tree)


def test_broken_patch_stops_with_its_name_and_leaves_the_tree(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    name = make_patch(queue, pristine_sdist, tmp_path)
    patch = queue.patches_dir / name
    # Corrupt a context line: git am must refuse (no fuzz, no 3-way).
    data = patch.read_bytes()
    broken = data.replace(b'\n # ---', b'\n # -x-', 1)
    assert broken != data
    patch.write_bytes(broken)
    tree = tmp_path / 'broken'
    with pytest.raises(QueueError) as error:
        gitqueue.materialize(queue, pristine_sdist, tree)
    message = str(error.value)
    assert f'patch {name} does not apply' in message
    assert 'flax/nnx/spmd.py' in message  # git's own reason
    assert (tree / '.git' / 'rebase-apply').is_dir()  # left for inspection
    problems = checks.run_all(queue, pristine_sdist, hooks=False)
    assert any(name in p and 'does not apply' in p for p in problems)
    assert f'{name}: does not apply alone to pristine upstream' in '\n'.join(problems)


def test_check_reports_series_headers_and_version_py(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    tree = tmp_path / 'tree'
    gitqueue.materialize(queue, pristine_sdist, tree)
    commit_edit(tree, 'flax/version.py', "'0.12.12'", "'0.12.12.dev'",
                'bump version\n')
    gitqueue.export(queue, tree)
    (queue.patches_dir / 'stray.patch').write_bytes(b'')
    problems = '\n'.join(checks.run_all(queue, pristine_sdist, hooks=False))
    assert 'bump-version.patch touches flax/version.py' in problems
    assert 'bump-version.patch: no body' in problems
    assert 'bump-version.patch: needs one `Forwarded: no|<PR URL>|not-needed` trailer' in problems
    assert 'stray.patch is not listed in patches/series' in problems


def test_check_finds_upstream_files_tracked_in_our_git(
    queue: Project, pristine_sdist: Path, tmp_path: Path
) -> None:
    gitqueue.git(queue.root, 'init', '--quiet')
    tree = tmp_path / 'tree'
    gitqueue.materialize(queue, pristine_sdist, tree)
    (queue.root / 'tests').mkdir()
    shutil.copy(tree / 'flax/nnx/spmd.py', queue.root / 'tests' / 'helpers.py')
    (queue.root / 'flax').mkdir()
    (queue.root / 'flax' / 'ours.py').write_text('x = 1\n')
    gitqueue.git(queue.root, 'add', '--all')
    problems = '\n'.join(checks.run_all(queue, pristine_sdist, hooks=False))
    assert 'tests/helpers.py: same bytes as upstream flax/nnx/spmd.py' in problems
    assert 'flax/ours.py: tracked under an upstream folder' in problems


@pytest.mark.slow
def test_our_repository_passes_check(pristine_sdist: Path) -> None:
    """All checks, upstream's pre-commit hooks included, on patches/."""
    assert checks.run_all(Project(), pristine_sdist) == []

