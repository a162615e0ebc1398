"""Upstream's pre-commit hooks on the files our upstream-bound patches touch.

The hooks and their arguments come from the sdist's own
``.pre-commit-config.yaml`` (and the tools read their settings, e.g. ruff's,
from the sdist's ``pyproject.toml``). pre-commit itself would clone each hook
repository from GitHub; instead each hook repository is mapped to its
package on PyPI at the config's ``rev`` (``KNOWN_REPOS``), installed into a
venv of its own under ``build/hook-tools`` (one per package and version,
reused), and the hook's entry is run like pre-commit runs it: entry + args +
the files its ``files``/``exclude``/``types`` select.

A hook fails on a tree if it exits non-zero or changes files. Each hook runs
on the tree after the series and on the pristine tree, on the same files,
and only findings the series adds count: a changed line, a new message.
Each finding is blamed on the upstream-bound patches that touch its file
(those that added the line, if any did).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from flaxpq import QueueError
from flaxpq.gitqueue import git
from flaxpq.patchfile import Patch
from flaxpq.project import Project

CONFIG = '.pre-commit-config.yaml'
TOOLS_ENV = 'FLAXPQ_HOOK_TOOLS'
# Reads the config and tags files the way pre-commit does.
HELPER_PACKAGES = ('PyYAML==6.0.4', 'identify==2.6.20')
_MAX_DETAILS = 3


@dataclasses.dataclass(frozen=True)
class HookDef:
    """A hook as its repository's ``.pre-commit-hooks.yaml`` defines it."""

    entry: tuple[str, ...]
    types: tuple[str, ...] = ('file',)
    types_or: tuple[str, ...] = ()


# Hook repository -> (PyPI package, its hooks), from each repository's
# .pre-commit-hooks.yaml at the revs upstream pins. The package version is
# the config's rev without its leading "v".
KNOWN_REPOS: dict[str, tuple[str, dict[str, HookDef]]] = {
    'https://github.com/mwouts/jupytext': ('jupytext', {
        'jupytext': HookDef(('jupytext',)),
    }),
    'https://github.com/pre-commit/pre-commit-hooks': ('pre-commit-hooks', {
        'check-toml': HookDef(('check-toml',), types=('toml',)),
        'check-yaml': HookDef(('check-yaml',), types=('yaml',)),
        'check-json': HookDef(('check-json',), types=('json',)),
        'end-of-file-fixer': HookDef(('end-of-file-fixer',), types=('text',)),
        'trailing-whitespace': HookDef(('trailing-whitespace-fixer',), types=('text',)),
    }),
    'https://github.com/kynan/nbstripout': ('nbstripout', {
        'nbstripout': HookDef(('nbstripout',), types=('jupyter',)),
    }),
    'https://github.com/astral-sh/ruff-pre-commit': ('ruff', {
        'ruff': HookDef(('ruff', 'check', '--force-exclude'), types_or=('python', 'pyi')),
        'ruff-format': HookDef(('ruff', 'format', '--force-exclude'), types_or=('python', 'pyi')),
    }),
    'https://github.com/asottile/pyupgrade': ('pyupgrade', {
        'pyupgrade': HookDef(('pyupgrade',), types=('python',)),
    }),
    'https://github.com/google/pyink': ('pyink', {
        'pyink': HookDef(('pyink',), types_or=('python', 'pyi')),
    }),
}


@dataclasses.dataclass(frozen=True)
class Hook:
    """One hook of the config, resolved to a PyPI package and an entry."""

    id: str
    package: str
    version: str
    definition: HookDef
    args: tuple[str, ...]
    files: str
    exclude: str
    types: tuple[str, ...]
    types_or: tuple[str, ...]
    exclude_types: tuple[str, ...]

    @property
    def requirement(self) -> str:
        return f'{self.package}=={self.version}'

    def selects(self, path: str, tags: set[str]) -> bool:
        """pre-commit's file filter: files/exclude regexes, then the types."""
        return (
            bool(re.search(self.files, path))
            and not re.search(self.exclude, path)
            and tags.issuperset(self.types)
            and (not self.types_or or bool(tags & set(self.types_or)))
            and not tags & set(self.exclude_types)
        )


@dataclasses.dataclass(frozen=True)
class Finding:
    """Something a hook did to or said about a file."""

    path: str | None
    detail: str
    line: str | None = None  # the file's line it concerns, if known


@dataclasses.dataclass
class Report:
    """Problems blamed on patches, and what was run or skipped."""

    problems: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)


def tools_dir(project: Project) -> Path:
    """Where the tool venvs live: ``$FLAXPQ_HOOK_TOOLS`` or build/hook-tools."""
    if env := os.environ.get(TOOLS_ENV):
        return Path(env)
    return project.root / 'build' / 'hook-tools'


def tool_venv(tools: Path, requirements: tuple[str, ...]) -> Path:
    """A venv with exactly ``requirements``, made once per set of versions."""
    py = f'py{sys.version_info.major}.{sys.version_info.minor}'
    venv = tools / py / '+'.join(r.replace('==', '-') for r in requirements)
    if (venv / '.ready').exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    for command in (
        [sys.executable, '-m', 'venv', str(venv)],
        [str(venv / 'bin' / 'python'), '-m', 'pip', 'install', '--quiet',
         '--disable-pip-version-check', '--no-input', *requirements],
    ):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            tail = '\n'.join((result.stderr or result.stdout).strip().splitlines()[-3:])
            raise QueueError(f'cannot install {" ".join(requirements)} from the '
                             f'package registry:\n{tail}')
    (venv / '.ready').touch()
    return venv


def _helper(helper: Path, code: str, *args: str, cwd: Path) -> object:
    result = subprocess.run([str(helper / 'bin' / 'python'), '-c', code, *args],
                            cwd=cwd, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def load_config(helper: Path, tree: Path) -> dict:
    """The tree's ``.pre-commit-config.yaml`` as data."""
    code = 'import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))'
    return _helper(helper, code, str(tree / CONFIG), cwd=tree)  # type: ignore[return-value]


def file_tags(helper: Path, tree: Path, paths: list[str]) -> dict[str, set[str]]:
    """identify's tags of each path (as pre-commit computes them)."""
    code = ('import json, sys; from identify.identify import tags_from_path; '
            'print(json.dumps({p: sorted(tags_from_path(p)) for p in sys.argv[1:]}))')
    tags = _helper(helper, code, *paths, cwd=tree) if paths else {}
    return {path: set(t) for path, t in tags.items()}  # type: ignore[union-attr]


def resolve(config: dict) -> tuple[list[Hook], list[str]]:
    """The config's hooks we can run, and a skip note for each other one."""
    hooks, skipped = [], []
    top_files, top_exclude = config.get('files', ''), config.get('exclude', '^$')
    for repo in config.get('repos', []):
        url, rev = repo.get('repo', ''), str(repo.get('rev', ''))
        package, known = KNOWN_REPOS.get(url.removesuffix('.git'), ('', {}))
        for spec in repo.get('hooks', []):
            hook_id = spec.get('id', '?')
            stages = spec.get('stages', config.get('default_stages'))
            if url in ('local', 'meta'):
                skipped.append(f'skip {hook_id} ({url}): {url} hooks are not run by flaxpq')
            elif not package:
                skipped.append(f'skip {hook_id} ({url}): no PyPI package known for '
                               'this hook repository (pre-commit would clone it '
                               'from GitHub, which is not reachable)')
            elif hook_id not in known:
                skipped.append(f'skip {hook_id} ({url}): hook definition unknown '
                               'to flaxpq (add it to hooks.KNOWN_REPOS)')
            elif stages and not {'pre-commit', 'commit'} & set(stages):
                skipped.append(f'skip {hook_id}: runs only at stages {stages}')
            else:
                hooks.append(Hook(
                    id=hook_id, package=package, version=rev.removeprefix('v'),
                    definition=known[hook_id],
                    args=tuple(map(str, spec.get('args', ()))),
                    files=f'(?:{top_files})' + (f'(?:{spec["files"]})' if spec.get('files') else ''),
                    exclude=f'{top_exclude}|{spec.get("exclude", "^$")}',
                    types=tuple(spec.get('types', known[hook_id].types)),
                    types_or=tuple(spec.get('types_or', known[hook_id].types_or)),
                    exclude_types=tuple(spec.get('exclude_types', ())),
                ))
    return hooks, skipped


def run_hook(tree: Path, venv: Path, hook: Hook, files: list[str]) -> collections.Counter[Finding]:
    """Run ``hook`` on ``files`` of ``tree`` (a clean git checkout); return
    its findings and restore the tree."""
    entry = hook.definition.entry
    command = [str(venv / 'bin' / entry[0]), *entry[1:], *hook.args, *files]
    result = subprocess.run(command, cwd=tree, capture_output=True, text=True)
    git(tree, 'add', '--all')
    changes = git(tree, 'diff', '--cached', '-U0', '--no-color', '--no-renames',
                  '--no-ext-diff').stdout
    git(tree, 'reset', '--quiet', '--hard')
    findings: collections.Counter[Finding] = collections.Counter()
    path = None
    for line in changes.splitlines():
        if line.startswith('+++ '):
            path = line[6:] if line.startswith('+++ b/') else path
        elif line.startswith('--- '):
            path = line[6:] if line.startswith('--- a/') else path
        elif line[:1] in '+-' and path:
            verb = 'would add' if line[0] == '+' else 'would change'
            findings[Finding(path, f'{verb} {_short(line[1:])}', line[1:])] += 1
    # a hook that exits 0 passed (if it changed nothing): its talk is no finding
    output = (result.stdout + result.stderr) if result.returncode else ''
    for line in output.splitlines():
        for file in files:
            if file in line:
                # line and column numbers move with the patch; the text does not
                text = re.sub(rf'({re.escape(file)})(:\d+)+', r'\1', line.strip())
                findings[Finding(file, f'says {_short(text)}')] += 1
    if result.returncode != 0 and not findings:
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ['']
        findings[Finding(None, f'exits {result.returncode}: {_short(last[0])}')] += 1
    return findings


def _short(text: str, width: int = 100) -> str:
    text = repr(text)
    return text if len(text) <= width else text[: width - 3] + '...'


def blame(finding: Finding, patches: list[Patch], files: list[str]) -> list[Patch]:
    """The patches a finding is due to: those that added its line to its
    file, else those touching the file (or its jupytext pair), else all
    patches whose files the hook ran on."""
    touching = {p.name: [f for f in p.files() if f.path == finding.path] for p in patches}
    added = [p for p in patches
             if any(finding.line == text for f in touching[p.name] for _, text in f.added)]
    if added:
        return added
    if by_file := [p for p in patches if touching[p.name]]:
        return by_file
    stem = Path(finding.path or '').with_suffix('')
    if paired := [p for p in patches if any(Path(f.path).with_suffix('') == stem
                                            for f in p.files())]:
        return paired
    return [p for p in patches if any(f.path in files for f in p.files())]


def run(tree: Path, base: str, head: str, patches: list[Patch], tools: Path) -> Report:
    """Run the hooks of ``head``'s config on the files ``patches`` touch, at
    ``head`` and at ``base`` (refs of the git tree ``tree``); blame on
    ``patches`` the findings only ``head`` has."""
    report = Report()
    try:
        helper = tool_venv(tools, HELPER_PACKAGES)
    except QueueError as e:
        report.notes.append(f'skip all hooks: {e}')
        return report
    git(tree, 'checkout', '--quiet', '--force', '--detach', head)
    if not (tree / CONFIG).is_file():
        report.notes.append(f'skip all hooks: the tree has no {CONFIG}')
        return report
    hooks, skipped = resolve(load_config(helper, tree))
    report.notes += skipped
    touched = sorted({f.path for p in patches for f in p.files() if (tree / f.path).is_file()})
    tags = file_tags(helper, tree, touched)
    at_base = set(git(tree, 'ls-tree', '-r', '--name-only', base, '--', *touched).stdout.split())
    jobs = []
    for hook in hooks:
        try:
            venv = tool_venv(tools, (hook.requirement,))
        except QueueError as e:
            report.notes.append(f'skip {hook.id}: {e}')
            continue
        files = [path for path in touched if hook.selects(path, tags[path])]
        jobs.append((hook, venv, files))
    results: dict[str, collections.Counter[Finding]] = {}
    for ref in (base, head):
        git(tree, 'checkout', '--quiet', '--force', '--detach', ref)
        for hook, venv, files in jobs:
            present = [f for f in files if ref == head or f in at_base]
            start = time.perf_counter()
            found = run_hook(tree, venv, hook, present) if present else collections.Counter()
            results[hook.id] = found - results.get(hook.id, collections.Counter())
            if ref == head:
                report.notes.append(
                    f'{hook.id} ({hook.requirement}): {len(present)} file(s), '
                    f'{time.perf_counter() - start:.1f} s, '
                    f'{sum(results[hook.id].values()) or "no"} new finding(s)')
    for hook, _, files in jobs:
        report.problems += _problems(hook, results[hook.id], patches, files)
    return report


def _problems(hook: Hook, findings: collections.Counter[Finding],
              patches: list[Patch], files: list[str]) -> list[str]:
    grouped: dict[tuple[str, str | None], list[str]] = {}
    for finding in findings:
        for patch in blame(finding, patches, files):
            grouped.setdefault((patch.name, finding.path), []).append(finding.detail)
    problems = []
    for (name, path), details in sorted(grouped.items(), key=str):
        more = f'; and {len(details) - _MAX_DETAILS} more' if len(details) > _MAX_DETAILS else ''
        problems.append(
            f'{name}: pre-commit hook {hook.id} ({hook.requirement}) fails'
            f'{f" on {path}" if path else ""}: '
            f'{"; ".join(details[:_MAX_DETAILS])}{more}')
    return problems
