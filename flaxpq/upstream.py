"""The upstream PR kit: one branch per upstream-bound patch in a clone of
upstream flax, committed by the sender, without our tracking trailers.

Branch ``<prefix>/<patch stem>`` starts at the clone's HEAD and holds the
patch's ``Depends-on:`` patches (transitively, in series order), then the
patch: one commit each, authored and committed by the sender, with the
message of :meth:`flaxpq.patchfile.Patch.upstream_message`.
"""

from __future__ import annotations

import dataclasses
import email.utils
import re
import subprocess
import tempfile
from pathlib import Path

from flaxpq import QueueError, patchfile
from flaxpq.gitqueue import git
from flaxpq.patchfile import Patch
from flaxpq.project import Project

_ADDRESS = re.compile(r'\s*([^<>]*[^<>\s])\s*<([^<>\s]+@[^<>\s]+)>\s*')
_TEST_FILE = re.compile(r'(^|/)(test_[^/]*|[^/]*_test)\.py$')


@dataclasses.dataclass(frozen=True)
class Sender:
    """Who sends the PRs: author and committer of every branch commit."""

    name: str
    email: str

    @property
    def env(self) -> dict[str, str]:
        return {f'GIT_{role}_{key}': value
                for role in ('AUTHOR', 'COMMITTER')
                for key, value in (('NAME', self.name), ('EMAIL', self.email))}


def sender(checkout: Path, author: str | None = None) -> Sender:
    """``author`` ("Name <email>"), else git's user.name/user.email there."""
    if author is not None:
        if not (match := _ADDRESS.fullmatch(author)):
            raise QueueError(f'--author {author!r} is not "Name <email>".')
        return Sender(*match.groups())
    name, mail = (git(checkout, 'config', key, check=False, user_config=True).stdout.strip()
                  for key in ('user.name', 'user.email'))
    if not (name and mail):
        raise QueueError(
            f'no sender identity: git has no user.name/user.email in {checkout}. '
            'Pass --author "Name <email>" or run `git config user.name ...` and '
            '`git config user.email ...` there.')
    return Sender(name, mail)


def mail(patch: Patch, who: Sender) -> bytes:
    """``patch`` as the mail ``git am`` turns into the upstream commit."""
    head = (f'From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n'
            f'From: {who.name} <{who.email}>\n'
            f'Date: {email.utils.formatdate(localtime=True)}\n'
            f'Subject: {patch.subject}\n\n'
            f'{patch.upstream_body()}\n---\n')
    return head.encode() + patch.diff


def upstream_bound(project: Project) -> list[Patch]:
    return [p for p in patchfile.read_series(project) if p.upstream_bound]


def _current(checkout: Path) -> str:
    ref = git(checkout, 'symbolic-ref', '--quiet', '--short', 'HEAD',
              check=False, user_config=True).stdout.strip()
    return ref or git(checkout, 'rev-parse', 'HEAD', user_config=True).stdout.strip()


def make_branch(checkout: Path, patches: list[Patch], patch: Patch, branch: str,
                base: str, who: Sender, *, three_way: bool = False) -> list[str]:
    """Create ``branch`` at ``base`` with ``patch`` and the patches it
    depends on; return their names. On failure, abort the ``git am``,
    delete the branch, go back to where the checkout was, and raise naming
    the patch."""
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return git(checkout, *args, check=check, env=who.env, user_config=True)

    back = _current(checkout)
    applied = [*patchfile.dependencies(patches, patch), patch]
    run('checkout', '--quiet', '-b', branch, base)
    with tempfile.TemporaryDirectory(prefix='flaxpq-pr-') as tmp:
        for p in applied:
            path = Path(tmp) / p.name
            path.write_bytes(mail(p, who))
            result = run('am', '--keep', '--quiet',
                         '--3way' if three_way else '--no-3way', str(path), check=False)
            if result.returncode != 0:
                run('am', '--abort', check=False)
                run('checkout', '--quiet', '--force', back)
                run('branch', '--quiet', '-D', branch)
                needed = '' if p is patch else f' (needed by {patch.name})'
                raise QueueError(
                    f'patch {p.name}{needed} does not apply to {checkout} at '
                    f'{base[:12]} ({"three-way" if three_way else "strict"} git am):\n'
                    f'{(result.stderr or result.stdout).strip()}\n'
                    f'{checkout} is back on {back}; branch {branch} was not made.')
    run('checkout', '--quiet', back)
    return [p.name for p in applied]


def _prepare(project: Project, checkout: Path, prefix: str) -> tuple[list[Patch], str]:
    if not (checkout / '.git').exists():
        raise QueueError(f'{checkout} is not a git checkout of upstream flax.')
    if git(checkout, 'status', '--porcelain', '--untracked-files=no',
           user_config=True).stdout.strip():
        raise QueueError(f'{checkout} has uncommitted changes; commit or stash them.')
    patches = upstream_bound(project)
    for patch in patches:
        branch = f'{prefix}/{patch.stem}'
        if git(checkout, 'rev-parse', '--verify', '--quiet', f'refs/heads/{branch}',
               check=False, user_config=True).returncode == 0:
            raise QueueError(f'{checkout} already has branch {branch}: delete it '
                             f'(`git -C {checkout} branch -D {branch}`) or pass another --prefix.')
    return patches, git(checkout, 'rev-parse', 'HEAD', user_config=True).stdout.strip()


def apply_upstream(project: Project, checkout: Path, who: Sender, prefix: str,
                   *, three_way: bool = False) -> dict[str, list[str]]:
    """One branch per upstream-bound patch; {branch: patches on it}. Stops at
    the first patch that does not apply (branches made before it stay)."""
    patches, base = _prepare(project, checkout, prefix)
    return {
        f'{prefix}/{patch.stem}': make_branch(
            checkout, patches, patch, f'{prefix}/{patch.stem}', base, who,
            three_way=three_way)
        for patch in patches
    }


@dataclasses.dataclass(frozen=True)
class Status:
    """How one patch fares on the checkout (a row of the nightly table)."""

    patch: str
    applies: str  # 'strict', 'three-way' or 'conflicts'
    tests: str  # 'pass', 'FAIL', 'none touched' or '-'
    detail: str = ''


def report(project: Project, checkout: Path, who: Sender, prefix: str,
           test_command: list[str] | None) -> list[Status]:
    """Each upstream-bound patch on the checkout, separately: strict, else
    three-way; then ``test_command`` + the test files the branch touches,
    run in the checkout on that branch. Never stops at a failure."""
    patches, base = _prepare(project, checkout, prefix)
    back = _current(checkout)
    rows = []
    for patch in patches:
        branch, errors, applied = f'{prefix}/{patch.stem}', [], []
        for three_way in (False, True):
            try:
                applied = make_branch(checkout, patches, patch, branch, base, who,
                                      three_way=three_way)
                break
            except QueueError as e:
                error = next((line for line in str(e).splitlines()
                              if line.startswith('error:')), str(e).splitlines()[0])
                errors.append(f'{"three-way" if three_way else "strict"}: {error}')
        if not applied:
            rows.append(Status(patch.name, 'conflicts', '-', '; '.join(errors)))
            continue
        how = 'three-way' if three_way else 'strict'
        by_name = {p.name: p for p in patches}
        tests = sorted({f.path for name in applied for f in by_name[name].files()
                        if _TEST_FILE.search(f.path) and f.path.startswith('tests/')})
        if test_command is None or not tests:
            rows.append(Status(patch.name, how, '-' if test_command is None else 'none touched'))
            continue
        git(checkout, 'checkout', '--quiet', branch, user_config=True)
        result = subprocess.run([*test_command, *tests], cwd=checkout,
                                capture_output=True, text=True)
        git(checkout, 'checkout', '--quiet', '--force', back, user_config=True)
        last = (result.stdout.strip().splitlines() or [''])[-1]
        rows.append(Status(patch.name, how, 'pass' if result.returncode == 0 else 'FAIL',
                           ' '.join(tests) + (f': {last}' if last else '')))
    return rows


def markdown(rows: list[Status], where: str) -> str:
    """The rows as a GitHub job summary table."""
    lines = [f'### Upstream-bound patches on {where}', '',
             '| patch | applies | tests | detail |', '| --- | --- | --- | --- |']
    lines += [f'| `{r.patch}` | {r.applies} | {r.tests} | {r.detail.replace("|", "/")} |'
              for r in rows]
    return '\n'.join(lines) + '\n'
