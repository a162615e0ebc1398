"""Reading one patch file: the trailers git finds, the files and added lines
git's numstat and the hunks give (no sdist needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flaxpq import QueueError, gitqueue, patchfile


def format_patch(repo: Path, message: str) -> Path:
    """The last commit of ``repo`` as a patch file, exported as ours are."""
    gitqueue.git(repo, 'commit', '--quiet', '-a', '-m', message)
    out = repo / 'out'
    gitqueue.git(repo, 'format-patch', *gitqueue.FORMAT_PATCH_FLAGS, '-o', str(out), '-1')
    (patch,) = out.iterdir()
    return patch


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repo with a.py (5 lines) and old.txt committed."""
    repo = tmp_path / 'repo'
    repo.mkdir()
    gitqueue.git(repo, 'init', '--quiet')
    (repo / 'a.py').write_text(''.join(f'line {i}\n' for i in range(1, 6)))
    (repo / 'old.txt').write_text('moved\n' * 20)
    gitqueue.git(repo, 'add', '.')
    gitqueue.git(repo, 'commit', '--quiet', '-m', 'start')
    return repo


def test_files_give_added_lines_with_their_numbers_removed_counts_and_renames(
    repo: Path
) -> None:
    (repo / 'a.py').write_text('line 1\nnew 2\nline 3\nline 4\nline 5\nnew 6\n')
    gitqueue.git(repo, 'mv', 'old.txt', 'new.txt')
    patch = patchfile.read(format_patch(repo, 'edit\n\nBody.\n\nForwarded: no\n'))
    files = {f.path: f for f in patch.files()}
    assert files['a.py'].added == [(2, 'new 2'), (6, 'new 6')]
    assert files['a.py'].removed == 1
    assert (files['new.txt'].old_path, files['new.txt'].added) == ('old.txt', [])


def test_trailers_are_the_last_paragraph_git_parses_and_leave_the_body(repo: Path) -> None:
    (repo / 'a.py').write_text('changed\n')
    patch = patchfile.read(format_patch(
        repo, 'edit a\n\nWhy: it reads better.\nSecond line.\n\n'
        'Bug: https://x.org/1\nForwarded: no\nDepends-on: other.patch\nSigned-off-by: Me <m@x>\n'))
    assert patch.body == ['Why: it reads better.', 'Second line.']
    assert patch.trailers == [('Bug', 'https://x.org/1'), ('Forwarded', 'no'),
                              ('Depends-on', 'other.patch'), ('Signed-off-by', 'Me <m@x>')]
    assert patch.upstream_message() == (
        'edit a\n\nWhy: it reads better.\nSecond line.\n\nSigned-off-by: Me <m@x>\n')


def test_a_last_paragraph_that_is_not_all_trailers_stays_body(repo: Path) -> None:
    (repo / 'a.py').write_text('changed\n')
    patch = patchfile.read(format_patch(repo, 'edit a\n\nBody.\n\nBug: #12\nnot a trailer\n'))
    assert patch.trailers == []
    assert patch.body == ['Body.', '', 'Bug: #12', 'not a trailer']


def test_a_diff_git_cannot_read_names_the_patch_and_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / 'broken.patch'
    path.write_bytes(b'Subject: broken\n\nBody.\n---\ndiff --git a/x b/x\n@@ -1 +1 @@\n')
    with pytest.raises(QueueError, match=r'(?s)broken\.patch: git cannot read its diff .*export'):
        patchfile.read(path).files()
