"""The invariants of the patch queue, as CI enforces them (``flaxpq check``)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import subprocess
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

from flaxpq import QueueError, gitqueue, patchfile
from flaxpq import hooks as hooks_mod
from flaxpq import precommit
from flaxpq.project import Project

# Patch headers (docs/maintainers.md): subjects as upstream writes them today
# (none of 2026's NNX commits has an `[area]` prefix), short bodies.
AREA_PREFIX = re.compile(r'^\[[A-Za-z][\w./-]*\]')
# Upstream's own changelog: merged NNX changes never touch it.
UPSTREAM_CHANGELOG = 'CHANGELOG.md'
MAX_WIDTH = 72
MAX_BODY_LINES = 12
URL = re.compile(r'^https?://\S+$')
FORWARDED = ('no', patchfile.NOT_NEEDED)
# DEP-3 fields and our trailers: none may reach an upstream commit message.
DEP3_FIELD = re.compile(
    r'^(Bug(-[\w-]+)?|Forwarded|Depends-on|Origin|Applied-Upstream|'
    r'Last-Update|Description|Author)\s*:', re.IGNORECASE)
FORBIDDEN_PATHS = ('flax/version.py',)
# Top-level folders of the upstream sdist that must never appear in our repo.
UPSTREAM_DIRS = ('flax/', 'flaxlib_src/', 'docs_nnx/', 'docs/_ext/')


def series_matches_files(project: Project) -> list[str]:
    series = project.series()
    on_disk = sorted(p.name for p in project.patches_dir.glob('*.patch'))
    problems = []
    if len(set(series)) != len(series):
        problems.append(f'patches/series lists a patch twice: {series}')
    for name in sorted(set(series) - set(on_disk)):
        problems.append(f'patches/series names {name}, which does not exist')
    for name in sorted(set(on_disk) - set(series)):
        problems.append(f'patches/{name} is not listed in patches/series')
    return problems


def patch_headers(project: Project) -> list[str]:
    """Each patch has an upstream-style subject, a short body and our trailers
    (docs/maintainers.md, "Patch headers")."""
    patches = patchfile.read_series(project)
    order = {p.name: i for i, p in enumerate(patches)}
    problems = []
    for patch in patches:
        problems += [f'{patch.name}: {p}' for p in _header_problems(patch, order)]
        for dep in patch.depends_on:
            if dep not in order or order[dep] >= order[patch.name]:
                problems.append(f'{patch.name}: `Depends-on: {dep}` names no '
                                'earlier patch of patches/series')
            elif patch.upstream_bound and not patches[order[dep]].upstream_bound:
                problems.append(f'{patch.name}: goes upstream but depends on {dep}, '
                                f'which is `Forwarded: {patchfile.NOT_NEEDED}`')
    ours_only = [p.name for p in patches if not p.upstream_bound]
    for patch in patches[len(patches) - len(ours_only):]:
        if patch.upstream_bound:
            problems.append(
                f'{patch.name}: goes upstream but comes after {ours_only[0]} '
                f'(`Forwarded: {patchfile.NOT_NEEDED}`); patches that are ours '
                'only come last in patches/series')
    return problems


def _header_problems(patch: patchfile.Patch, order: dict[str, int]) -> list[str]:
    problems = []
    subject = patch.subject
    if not subject:
        problems.append('no subject: a summary like an upstream PR title')
    if patch.upstream_bound and (prefix := AREA_PREFIX.match(subject)):
        problems.append(f'subject {subject!r} starts with {prefix.group()!r}: '
                        'upstream subjects have no `[area]` prefix (e.g. '
                        '`keep out_sharding aligned with array rank`)')
    if patch.upstream_bound and any(
            f.path == UPSTREAM_CHANGELOG for f in patch.files()):
        problems.append(f'touches {UPSTREAM_CHANGELOG}: upstream-bound patches '
                        "leave upstream's changelog alone (our CHANGELOG.md "
                        'keeps the series history)')
    if len(subject) > MAX_WIDTH or subject.endswith('.'):
        problems.append(f'subject is {len(subject)} columns or ends with a period '
                        f'(at most {MAX_WIDTH}, no period, like a PR title)')
    prose = [line for line in patch.body if line.strip()]
    if not prose:
        problems.append('no body: say what changes and why in a short paragraph')
    if len(prose) > MAX_BODY_LINES:
        problems.append(
            f'body has {len(prose)} lines (at most {MAX_BODY_LINES}): keep the '
            'what and why short; the long reasoning goes into docs/upstream-pr.md')
    if wide := [i for i, line in enumerate(patch.body, 3) if len(line) > MAX_WIDTH]:
        problems.append(f'body lines over {MAX_WIDTH} columns: message lines '
                        f'{", ".join(map(str, wide))} (line 1 is the subject)')
    # `Bug:` names the upstream issue where there is one (optional)
    bugs, forwarded = patch.trailer('Bug'), patch.trailer('Forwarded')
    problems += [f'`Bug: {b}` is not a URL' for b in bugs if not URL.match(b)]
    if len(forwarded) != 1:
        problems.append('needs one `Forwarded: no|<PR URL>|not-needed` trailer, '
                        f'has {len(forwarded)}')
    problems += [f'`Forwarded: {f}` is not no, not-needed or a PR URL'
                 for f in forwarded if f not in FORWARDED and not URL.match(f)]
    if len(set(patch.depends_on)) != len(patch.depends_on):
        problems.append('a `Depends-on:` trailer is repeated')
    return problems


def trailer_leaks(project: Project) -> list[str]:
    """No DEP-3 field or trailer of ours is left in an upstream commit message
    (apply-upstream strips only the final trailer paragraph)."""
    problems = []
    for patch in patchfile.read_series(project):
        if not patch.upstream_bound:
            continue
        for line in patch.upstream_message().splitlines():
            if DEP3_FIELD.match(line):
                problems.append(
                    f'{patch.name}: {line.strip()!r} would reach the upstream '
                    'commit; our trailers go in the last paragraph only, other '
                    'DEP-3 fields not at all')
    return problems


def long_lines(project: Project, line_length: int) -> list[str]:
    """No added line of an upstream-bound patch's .py file is over
    ``line_length`` columns (upstream's ruff line-length)."""
    problems = []
    for patch in patchfile.read_series(project):
        if not patch.upstream_bound:
            continue
        for diff in patch.files():
            if diff.path.endswith('.py'):
                problems += [
                    f'{patch.name}: {diff.path}:{number}: {len(text)} columns '
                    f'(upstream allows {line_length})'
                    for number, text in diff.added if len(text) > line_length
                ]
    return problems


def upstream_line_length(sdist: Path) -> int:
    """``[tool.ruff] line-length`` of the sdist's pyproject.toml (80 if unset)."""
    with tarfile.open(sdist) as tar:
        for member in tar:
            if member.name.count('/') == 1 and member.name.endswith('/pyproject.toml'):
                f = tar.extractfile(member)
                data = tomllib.loads(f.read().decode()) if f else {}
                return int(data.get('tool', {}).get('ruff', {}).get('line-length', 80))
    return 80


def line_counts(project: Project) -> list[str]:
    """A table: lines added/removed per patch under flax/, tests/ and elsewhere."""
    rows = [('patch', 'flax/', 'tests/', 'other', 'forwarded')]
    for patch in patchfile.read_series(project):
        counts = {area: [0, 0] for area in ('flax/', 'tests/', 'other')}
        for diff in patch.files():
            area = next((a for a in ('flax/', 'tests/') if diff.path.startswith(a)), 'other')
            counts[area][0] += len(diff.added)
            counts[area][1] += diff.removed
        rows.append((patch.name, *(f'+{a} -{r}' for a, r in counts.values()),
                     ', '.join(patch.trailer('Forwarded')) or '-'))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ['  '.join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
            for row in rows]


def forbidden_touches(project: Project) -> list[str]:
    problems = []
    for patch in patchfile.read_series(project):
        touched = {path for diff in patch.files() for path in (diff.path, diff.old_path)}
        for path in sorted(touched & set(FORBIDDEN_PATHS)):
            problems.append(
                f'{patch.name} touches {path}: the version is stamped at '
                'build time, never patched (the series goes upstream).'
            )
    return problems


def applies_and_reexports(project: Project, sdist: Path, tree: Path) -> list[str]:
    """Strict ``git am`` of the series into ``tree``, then a re-export that
    changes no byte."""
    try:
        gitqueue.materialize(project, sdist, tree)
    except QueueError as e:
        return [str(e)]
    exported = gitqueue.format_patches(tree)
    problems = []
    if list(exported) != project.series():
        problems.append(
            f're-export gives series {list(exported)}, patches/series says '
            f'{project.series()}'
        )
    for name, data in exported.items():
        path = project.patches_dir / name
        if path.is_file() and path.read_bytes() != data:
            problems.append(
                f'{name}: re-export differs from the committed file; run '
                '`python -m flaxpq export` from a freshly materialized tree.'
            )
    return problems


def tracked_upstream_files(project: Project, sdist: Path) -> list[str]:
    """No file tracked in our git is an upstream file, by path or by content."""
    try:
        listed = subprocess.run(
            ['git', 'ls-files', '-z'], cwd=project.root, check=True,
            capture_output=True,
        ).stdout.decode().split('\0')
    except (OSError, subprocess.CalledProcessError):
        return []  # not a git checkout (e.g. an unpacked sdist of ours)
    upstream_digests: dict[str, str] = {}
    with tarfile.open(sdist) as tar:
        for member in tar:
            f = tar.extractfile(member) if member.isfile() else None
            if f is not None and member.size:
                digest = hashlib.sha256(f.read()).hexdigest()
                upstream_digests[digest] = member.name.split('/', 1)[1]
    problems = []
    for name in filter(None, listed):
        if name.startswith(UPSTREAM_DIRS):
            problems.append(f'{name}: tracked under an upstream folder')
            continue
        path = project.root / name
        if path.is_file() and path.stat().st_size:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest in upstream_digests:
                problems.append(
                    f'{name}: same bytes as upstream {upstream_digests[digest]}'
                )
    return problems


def applies_alone(project: Project, tree: Path) -> list[str]:
    """Each patch applies strictly to pristine upstream (``tree``'s
    ``upstream`` tag) by itself, or after exactly its ``Depends-on:``
    patches (transitively), in series order."""
    patches = patchfile.read_series(project)
    problems = []
    for patch in patches:
        needed = patchfile.dependencies(patches, patch)
        gitqueue.git(tree, 'checkout', '--quiet', '--force', '--detach',
                     gitqueue.UPSTREAM_TAG)
        for applied in [*needed, patch]:
            result = gitqueue.git(tree, 'am', '--keep', '--no-3way', '--quiet',
                                  str(applied.path), check=False)
            if result.returncode != 0:
                gitqueue.git(tree, 'am', '--abort', check=False)
                what = 'does not apply' if applied is patch else f'needs {applied.name}, which does not apply'
                after = f'after {", ".join(p.name for p in needed)}' if needed else 'alone'
                reason = '; '.join(line for line in (result.stderr + result.stdout).splitlines()
                                   if line.startswith('error:'))
                problems.append(
                    f'{patch.name}: {what} {after} to pristine upstream (strict '
                    f'git am: {reason or "failed"}); name the patches it needs '
                    'with `Depends-on:` or make it independent')
                break
    return problems


def upstream_hooks(project: Project, tree: Path, head: str,
                   tools: Path | None = None) -> hooks_mod.Report:
    """Upstream's pre-commit hooks on the files of the upstream-bound patches,
    ``tree`` holding the series at ``head`` over the ``upstream`` tag."""
    bound = [p for p in patchfile.read_series(project) if p.upstream_bound]
    return hooks_mod.run(tree, gitqueue.UPSTREAM_TAG, head, bound,
                         tools or precommit.tools_dir(project))


@dataclasses.dataclass
class Check:
    """One check's outcome: problems, extra lines to print, and its time."""

    name: str
    problems: list[str]
    seconds: float
    info: list[str] = dataclasses.field(default_factory=list)


HOOKS_CHECK = 'upstream pre-commit hooks'  # the slow one: it may install tools


def run_checks(project: Project, sdist: Path, *, hooks: bool = True,
               tools: Path | None = None,
               on_start: Callable[[str], None] | None = None,
               on_done: Callable[[Check], None] | None = None) -> list[Check]:
    """All checks, each timed. ``hooks=False`` skips upstream's pre-commit
    hooks (the slowest check, and the only one that installs tools).

    ``on_start`` gets each check's name before it runs, ``on_done`` each
    outcome as soon as it is known (``flaxpq check`` prints progress so).
    """
    results: list[Check] = []

    def record(check: Check) -> None:
        results.append(check)
        if on_done:
            on_done(check)

    def timed(name: str, check: Callable[[], list[str] | hooks_mod.Report]) -> None:
        if on_start:
            on_start(name)
        start = time.perf_counter()
        outcome = check()
        problems, info = (outcome.problems, outcome.notes) if isinstance(
            outcome, hooks_mod.Report) else (outcome, [])
        record(Check(name, problems, time.perf_counter() - start, info))

    timed('series matches patches/', lambda: series_matches_files(project))
    timed('patch headers', lambda: patch_headers(project))
    timed('no trailers upstream', lambda: trailer_leaks(project))
    timed('version.py untouched', lambda: forbidden_touches(project))
    timed('line length', lambda: long_lines(project, upstream_line_length(sdist)))
    timed('lines per patch', lambda: hooks_mod.Report(notes=line_counts(project)))
    with tempfile.TemporaryDirectory(prefix='flaxpq-check-') as tmp:
        tree = Path(tmp) / 'tree'
        timed('series applies, re-export', lambda: applies_and_reexports(project, sdist, tree))
        series_applies = not results[-1].problems
        if (tree / '.git').is_dir():  # else the series names missing files
            head = gitqueue.git(tree, 'rev-parse', 'HEAD').stdout.strip()
            gitqueue.git(tree, 'am', '--abort', check=False)
            timed('each patch applies alone', lambda: applies_alone(project, tree))
        if hooks and series_applies:
            timed(HOOKS_CHECK, lambda: upstream_hooks(project, tree, head, tools))
        elif hooks:
            record(Check(HOOKS_CHECK, [], 0.0, ['skipped: the series does not apply']))
    timed('no upstream files tracked', lambda: tracked_upstream_files(project, sdist))
    return results


def run_all(project: Project, sdist: Path, **options: object) -> list[str]:
    """The problems of all checks (``run_checks`` for the details)."""
    return [p for check in run_checks(project, sdist, **options)  # type: ignore[arg-type]
            for p in check.problems]
