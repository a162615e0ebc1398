"""Materialize the patch queue as a git repo, and export it back.

The materialized tree is a git repository whose first commit is the pristine
sdist (tagged ``upstream``) and whose following commits are the patches of
``patches/series``, one commit each, applied with ``git am``. ``export`` turns
those commits back into ``patches/`` with ``git format-patch`` and pinned
flags, so that a re-export without edits changes no byte.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from flaxpq import QueueError
from flaxpq.project import Project

UPSTREAM_TAG = 'upstream'
BRANCH = 'patched'
# Pinned so that the output depends on the commits alone, not on the user's
# git configuration (format.* settings) or the date: a re-export without edits
# changes no byte.
FORMAT_PATCH_FLAGS = (
    '--keep-subject',  # no "[PATCH n/m]" prefix: the subject is the commit's, as git am keeps it
    '--no-stat',  # no diffstat: it changes with every edit and adds nothing git am reads
    '--no-signature',  # no "-- \n2.x.y" footer naming the exporter's git version
    '--zero-commit',  # "From 000...0": a commit's hash changes when any commit below it does
    '--full-index',  # full blob hashes: stable whatever abbreviation length git picks
    '--find-renames',  # a moved file is a rename, whatever diff.renames says
    '--diff-algorithm=myers',  # the same hunks whatever diff.algorithm says
    '--no-notes',  # git notes of the exporter's repo stay out
    '--no-cover-letter',  # one file per patch, no 0000-cover-letter.patch
    '--no-thread',  # no In-Reply-To/References headers with message ids
    '--no-attach',  # the diff inline, not a MIME attachment (format.attach)
    '--no-encode-email-headers',  # a non-ASCII subject stays readable, not =?UTF-8?q?
    # git's default is 64 (or format.filenameMaxLength): 100 keeps a whole
    # 72-column subject in the file name, which the series lists
    '--filename-max-length=100',
)
_PRISTINE_DATE = '2000-01-01T00:00:00+0000'
_NUMBER_PREFIX = re.compile(r'^\d{4}-')


class PatchError(QueueError):
    """A patch of the series does not apply: ``patch`` names it, ``reason`` is git's."""

    def __init__(self, message: str, patch: str, reason: str) -> None:
        super().__init__(message)
        self.patch, self.reason = patch, reason


def git(
    repo: Path, *args: str, check: bool = True, env: dict[str, str] | None = None,
    user_config: bool = False, input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run git in ``repo`` (``input`` on its stdin); the user's global/system
    config is ignored unless ``user_config`` (for commits in the user's own
    checkouts)."""
    env = {**os.environ, **(env or {})}
    if not user_config:
        env.update(
            GIT_CONFIG_GLOBAL=os.devnull,
            GIT_CONFIG_NOSYSTEM='1',
            GIT_AUTHOR_NAME=env.get('GIT_AUTHOR_NAME', 'flaxpq'),
            GIT_AUTHOR_EMAIL=env.get('GIT_AUTHOR_EMAIL', 'flaxpq@localhost'),
            GIT_COMMITTER_NAME=env.get('GIT_COMMITTER_NAME', 'flaxpq'),
            GIT_COMMITTER_EMAIL=env.get('GIT_COMMITTER_EMAIL', 'flaxpq@localhost'),
        )
    result = subprocess.run(
        ['git', *args], cwd=repo, env=env, capture_output=True, text=True, input=input,
    )
    if check and result.returncode != 0:
        raise QueueError(
            f'git {" ".join(args)} failed in {repo}:\n'
            f'{result.stderr.strip() or result.stdout.strip()}'
        )
    return result


def unpack_sdist(sdist: Path, dest: Path) -> None:
    """Unpack the sdist's single top folder as ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter='data')
        (top,) = Path(tmp).iterdir()
        os.replace(top, dest)


def materialize(
    project: Project, sdist: Path, dest: Path, *, force: bool = False
) -> list[str]:
    """Pristine sdist as the first commit of ``dest``, then ``git am`` each patch.

    Returns the names of the applied patches. A patch that does not apply
    stops with its name and git's reason, leaving ``dest`` mid-``git am``.
    """
    series = project.series()
    missing = [n for n in series if not (project.patches_dir / n).is_file()]
    if missing:
        raise QueueError(f'patches/series names missing files: {missing}')
    if dest.exists():
        if not force:
            raise QueueError(
                f'{dest} exists. It may hold edits not yet exported: run '
                '`python -m flaxpq export` first, then materialize with --force.'
            )
        shutil.rmtree(dest)
    unpack_sdist(sdist, dest)
    git(dest, 'init', '--quiet', f'--initial-branch={BRANCH}')
    git(dest, 'add', '--all', '--force')
    git(
        dest, 'commit', '--quiet', '--no-verify',
        '-m', f'{sdist.name} (pristine upstream sdist)',
        env={'GIT_AUTHOR_DATE': _PRISTINE_DATE, 'GIT_COMMITTER_DATE': _PRISTINE_DATE},
    )
    git(dest, 'tag', UPSTREAM_TAG)
    for name in series:
        result = git(
            dest, 'am', '--keep', '--no-3way', '--committer-date-is-author-date',
            '--quiet', str(project.patches_dir / name), check=False,
        )
        if result.returncode != 0:
            raise PatchError(
                f'patch {name} does not apply to the pristine {sdist.name}'
                f'{_applied_after(series, name)}:\n'
                f'{(result.stderr or result.stdout).strip()}\n'
                f'The tree is left in {dest} for inspection: '
                f'`git -C {dest} am --show-current-patch=diff`; fix the '
                f'files, `git -C {dest} add -A && git -C {dest} am --continue`, '
                'then export. Or `git am --abort`.',
                name, (result.stderr or result.stdout).strip(),
            )
    return series


def _applied_after(series: list[str], name: str) -> str:
    before = series[: series.index(name)]
    return f' after {", ".join(before)}' if before else ''


def format_patches(src: Path) -> dict[str, bytes]:
    """``upstream..HEAD`` of ``src`` as {file name: patch bytes}, in order."""
    if git(src, 'status', '--porcelain', '--untracked-files=no').stdout.strip():
        raise QueueError(
            f'{src} has uncommitted changes to tracked files: commit them (or '
            'fixup/amend into the right patch commit) before exporting.'
        )
    with tempfile.TemporaryDirectory() as tmp:
        listed = git(
            src, 'format-patch', *FORMAT_PATCH_FLAGS, '--output-directory', tmp,
            f'{UPSTREAM_TAG}..HEAD',
        ).stdout.split()
        patches: dict[str, bytes] = {}
        for path in map(Path, listed):
            name = _NUMBER_PREFIX.sub('', path.name)
            if name in patches:
                raise QueueError(
                    f'two commits export to {name}: give them distinct subjects.'
                )
            patches[name] = path.read_bytes()
    return patches


def write_queue(patches_dir: Path, patches: dict[str, bytes]) -> list[str]:
    """Make ``patches_dir`` hold exactly ``patches`` and their series.

    Files whose bytes are unchanged are not rewritten. Returns changed paths.
    """
    patches_dir.mkdir(parents=True, exist_ok=True)
    wanted = dict(patches)
    wanted['series'] = ''.join(f'{name}\n' for name in patches).encode()
    changed = []
    for old in patches_dir.glob('*.patch'):
        if old.name not in wanted:
            old.unlink()
            changed.append(str(old))
    for name, data in wanted.items():
        path = patches_dir / name
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
            changed.append(str(path))
    return changed


def export(project: Project, src: Path) -> list[str]:
    """Regenerate ``patches/`` and ``series`` from the commits of ``src``."""
    return write_queue(project.patches_dir, format_patches(src))


def mbox(project: Project) -> bytes:
    """The series as one mbox, in order: what ``git am`` or a mailer takes."""
    return b''.join((project.patches_dir / name).read_bytes() for name in project.series())
