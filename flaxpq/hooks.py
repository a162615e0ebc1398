"""Upstream's pre-commit hooks on the files our upstream-bound patches touch: new findings only.

pre-commit runs the hooks (:mod:`flaxpq.precommit`); this module is the baseline and
the blame. A hook fails on a tree if it exits non-zero or changes files. Each hook
runs on the tree after the series and on the pristine tree, on the same files, and
only findings the series adds count: a changed line, a new message. Each finding is
blamed on the upstream-bound patches that touch its file (those that added the line,
if any did).
"""

from __future__ import annotations

import collections
import dataclasses
import re
import time
from pathlib import Path

from flaxpq import QueueError
from flaxpq.gitqueue import git
from flaxpq.patchfile import Patch
from flaxpq.precommit import PreCommit

CONFIG = '.pre-commit-config.yaml'
_MAX_DETAILS = 3


@dataclasses.dataclass(frozen=True)
class Finding:
    """Something a hook did to or said about a file."""

    path: str | None
    detail: str
    line: str | None = None  # the file's line it concerns, if known


Findings = collections.Counter[Finding]


@dataclasses.dataclass
class Report:
    """Problems blamed on patches, and what was run or skipped."""

    problems: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)


def run(tree: Path, base: str, head: str, patches: list[Patch], tools: Path) -> Report:
    """Run the hooks of ``head``'s config on the files ``patches`` touch, at ``head`` and
    at ``base`` (refs of the git tree ``tree``); blame on ``patches`` the findings only
    ``head`` has."""
    git(tree, 'checkout', '--quiet', '--force', '--detach', head)
    touched = sorted({f.path for p in patches for f in p.files() if (tree / f.path).is_file()})
    if not (tree / CONFIG).is_file():
        return Report(notes=[f'skip all hooks: the tree has no {CONFIG}'])
    if not touched:
        return Report(notes=['skip all hooks: the upstream-bound patches touch no file'])
    try:
        pre_commit = PreCommit(tree, tools, CONFIG)
    except QueueError as e:
        return Report(notes=[f'skip all hooks: {e}'])
    report = Report(notes=pre_commit.skipped)
    picked = {hook: pre_commit.picks(hook, touched) for hook in pre_commit.hooks}
    at_base = set(git(tree, 'ls-tree', '-r', '--name-only', base, '--', *touched).stdout.split())
    results: dict[str, Findings] = {}
    for ref in (base, head):
        git(tree, 'checkout', '--quiet', '--force', '--detach', ref)
        for hook, requirement in pre_commit.hooks.items():
            files = [f for f in picked[hook] if ref == head or f in at_base]
            start = time.perf_counter()
            found = run_hook(tree, pre_commit, hook, files) if files else Findings()
            results[hook] = found - results.get(hook, Findings())
            if ref == head:
                report.notes.append(f'{hook} ({requirement}): {len(files)} file(s), '
                                    f'{time.perf_counter() - start:.1f} s, '
                                    f'{sum(results[hook].values()) or "no"} new finding(s)')
    for hook, requirement in pre_commit.hooks.items():
        report.problems += _problems(f'{hook} ({requirement})', results[hook], patches,
                                     picked[hook])
    return report


def run_hook(tree: Path, pre_commit: PreCommit, hook: str, files: list[str]) -> Findings:
    """Run ``hook`` on ``files`` of ``tree`` (a clean git checkout); return its findings
    and restore the tree."""
    result = pre_commit.run(hook, files)
    git(tree, 'add', '--all')
    changes = git(tree, 'diff', '--cached', '-U0', '--no-color', '--no-renames').stdout
    git(tree, 'reset', '--quiet', '--hard')
    findings, path = Findings(), None
    for line in changes.splitlines():
        if line.startswith(('+++ ', '--- ')):
            path = line[6:] if line[4:6] in ('a/', 'b/') else path  # not /dev/null
        elif line[:1] in '+-' and path:
            verb = 'would add' if line[0] == '+' else 'would change'
            findings[Finding(path, f'{verb} {_short(line[1:])}', line[1:])] += 1
    # A hook that exits 0 passed (if it changed nothing): its talk is no finding. pre-commit
    # fails a hook that changed files too, and names the hook's own exit code if not 0.
    output = result.stdout + result.stderr
    code = re.search(r'^- exit code: (-?\d+)$', output, re.MULTILINE)
    own = result.returncode and '- files were modified by this hook' not in output
    for line in output.splitlines() if code or own else []:
        for file in (file for file in files if file in line):
            # line and column numbers move with the patch; the text does not
            text = re.sub(rf'({re.escape(file)})(:\d+)+', r'\1', line.strip())
            findings[Finding(file, f'says {_short(text)}')] += 1
    if (code or own) and not findings:
        last = output.strip().splitlines()[-1:] or ['']
        exit_code = code[1] if code else result.returncode
        findings[Finding(None, f'exits {exit_code}: {_short(last[0])}')] += 1
    return findings


def blame(finding: Finding, patches: list[Patch], files: list[str]) -> list[Patch]:
    """The patches a finding is due to: those that added its line to its file, else those
    touching the file (or its jupytext pair), else all patches whose files the hook ran on."""
    stem = Path(finding.path or '').with_suffix('')
    *preferred, fallback = (
        [p for p in patches if any(f.path == finding.path and finding.line in dict(f.added).values()
                                   for f in p.files())],
        [p for p in patches if any(f.path == finding.path for f in p.files())],
        [p for p in patches if any(Path(f.path).with_suffix('') == stem for f in p.files())],
        [p for p in patches if any(f.path in files for f in p.files())],
    )
    return next((found for found in preferred if found), fallback)


def _problems(hook: str, findings: Findings, patches: list[Patch], files: list[str]) -> list[str]:
    grouped: dict[tuple[str, str | None], list[str]] = {}
    for finding in findings:
        for patch in blame(finding, patches, files):
            grouped.setdefault((patch.name, finding.path), []).append(finding.detail)
    problems = []
    for (name, path), details in sorted(grouped.items(), key=str):
        more = f'; and {len(details) - _MAX_DETAILS} more' if len(details) > _MAX_DETAILS else ''
        problems.append(f'{name}: pre-commit hook {hook} fails{f" on {path}" if path else ""}: '
                        f'{"; ".join(details[:_MAX_DETAILS])}{more}')
    return problems


def _short(text: str, width: int = 100) -> str:
    text = repr(text)
    return text if len(text) <= width else text[: width - 3] + '...'
