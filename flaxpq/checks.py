"""The invariants of the patch queue, as CI enforces them (``flaxpq check``)."""

from __future__ import annotations

import hashlib
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

from flaxpq import QueueError, gitqueue
from flaxpq.project import Project

REQUIRED_TRAILERS = ('Bug:', 'Forwarded:')
FORBIDDEN_PATHS = ('flax/version.py',)
# Top-level folders of the upstream sdist that must never appear in our repo.
UPSTREAM_DIRS = ('flax/', 'flaxlib_src/', 'docs_nnx/', 'docs/_ext/')
_DIFF_HEADER = re.compile(rb'^diff --git a/(\S+) b/(\S+)$', re.MULTILINE)


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
    """Each patch has a subject, a body that says why, and DEP-3 trailers."""
    problems = []
    for name in project.series():
        path = project.patches_dir / name
        if not path.is_file():
            continue
        # With --no-stat the message runs up to the first diff.
        data = path.read_bytes().split(b'\ndiff --git ', 1)[0]
        header = data.split(b'\n---\n', 1)[0].decode('utf-8', 'replace')
        _, _, message = header.partition('\n\n')
        if not re.search(r'^Subject: \S', header, re.MULTILINE):
            problems.append(f'{name}: no Subject line')
        body = [line for line in message.splitlines() if line.strip()]
        prose = [l for l in body if not l.startswith(REQUIRED_TRAILERS)]
        if not prose:
            problems.append(f'{name}: no body saying what and why')
        for trailer in REQUIRED_TRAILERS:
            if not any(l.startswith(trailer) for l in body):
                problems.append(f'{name}: no `{trailer}` trailer')
    return problems


def touched_paths(patch: bytes) -> set[str]:
    paths: set[str] = set()
    for a, b in _DIFF_HEADER.findall(patch):
        paths.update((a.decode(), b.decode()))
    return paths


def forbidden_touches(project: Project) -> list[str]:
    problems = []
    for name in project.series():
        path = project.patches_dir / name
        if path.is_file():
            for touched in sorted(touched_paths(path.read_bytes()) & set(FORBIDDEN_PATHS)):
                problems.append(
                    f'{name} touches {touched}: the version is stamped at '
                    'build time, never patched (the series goes upstream).'
                )
    return problems


def applies_and_reexports(project: Project, sdist: Path) -> list[str]:
    """Strict ``git am`` of the series, then a re-export that changes no byte."""
    with tempfile.TemporaryDirectory(prefix='flaxpq-check-') as tmp:
        tree = Path(tmp) / 'tree'
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


def run_all(project: Project, sdist: Path) -> list[str]:
    problems = series_matches_files(project)
    problems += patch_headers(project)
    problems += forbidden_touches(project)
    problems += applies_and_reexports(project, sdist)
    problems += tracked_upstream_files(project, sdist)
    return problems
