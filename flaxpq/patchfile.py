"""One patch file of the series: its header, our trailers, and its diff.

A patch is ``git format-patch`` output. Its message is a subject, a short
body, and a last paragraph of trailers; ours are ``Bug:``, ``Forwarded:``
and ``Depends-on:`` (docs/maintainers.md). They track the patch here and
are stripped from the commits that go upstream (:func:`upstream_message`).
"""

from __future__ import annotations

import dataclasses
import email
import email.policy
import functools
import re
from pathlib import Path

from flaxpq import QueueError
from flaxpq.gitqueue import git
from flaxpq.project import Project

# Our tracking trailers: never part of an upstream commit.
OUR_TRAILERS = ('Bug', 'Forwarded', 'Depends-on')
NOT_NEEDED = 'not-needed'
_HUNK_START = re.compile(r'^@@ -\S+ \+(\d+)')


@dataclasses.dataclass
class FileDiff:
    """What one patch does to one file: added lines (new line number, text)
    and the count of removed ones. ``old_path`` differs from ``path`` for a
    rename."""

    path: str
    old_path: str
    added: list[tuple[int, str]]
    removed: int


@dataclasses.dataclass(frozen=True)
class Patch:
    """A parsed patch file."""

    name: str
    path: Path
    subject: str
    body: list[str]  # the message between subject and trailers
    trailers: list[tuple[str, str]]  # the last paragraph, if all trailers
    diff: bytes  # from the first ``diff --git`` on

    @property
    def stem(self) -> str:
        return self.name.removesuffix('.patch')

    def trailer(self, key: str) -> list[str]:
        """The values of trailer ``key`` (case-insensitive), in order."""
        return [v for k, v in self.trailers if k.lower() == key.lower()]

    @property
    def depends_on(self) -> list[str]:
        return self.trailer('Depends-on')

    @property
    def upstream_bound(self) -> bool:
        """Meant for upstream: not marked ``Forwarded: not-needed``."""
        return NOT_NEEDED not in self.trailer('Forwarded')

    def files(self) -> list[FileDiff]:
        try:
            return parse_diff(self.diff)
        except QueueError as e:
            raise QueueError(
                f'{self.name}: git cannot read its diff ({e}). Materialize the '
                'series, fix the commit, and `python -m flaxpq export`.') from e

    def upstream_body(self) -> str:
        """The body and the trailers other than ours (the upstream commit's)."""
        kept = '\n'.join(f'{k}: {v}' for k, v in self.trailers if k not in OUR_TRAILERS)
        return '\n\n'.join(p for p in ('\n'.join(self.body).strip(), kept) if p)

    def upstream_message(self) -> str:
        """The upstream commit's message: subject, then the upstream body."""
        return '\n\n'.join(p for p in (self.subject, self.upstream_body()) if p) + '\n'


def read(path: Path) -> Patch:
    """Parse ``path`` (``git format-patch`` output)."""
    data = path.read_bytes()
    head, sep, diff = data.partition(b'\ndiff --git ')
    diff = b'diff --git ' + diff if sep else b''
    text = head.decode('utf-8', 'replace')
    headers, _, message = text.partition('\n\n')
    mail = email.message_from_string(headers + '\n\n', policy=email.policy.default)
    subject = ' '.join(str(mail.get('Subject', '')).split())
    # git am stops the message at the first `---` line
    message = message.split('\n---\n', 1)[0].strip('\n')
    trailers = parse_trailers(f'{subject}\n\n{message}\n', path.parent)
    lines = message.splitlines()
    if trailers:  # they are the last paragraph
        lines = lines[:_last_paragraph(lines)]
    while lines and not lines[-1].strip():
        lines.pop()
    return Patch(path.name, path, subject, lines, trailers, diff)


def parse_trailers(message: str, cwd: Path) -> list[tuple[str, str]]:
    """The trailers of a commit message as ``git interpret-trailers --parse``
    finds them: (key, value), in order."""
    parsed = git(cwd, 'interpret-trailers', '--parse', input=message).stdout
    return [(key, value.strip()) for key, _, value in
            (line.partition(':') for line in parsed.splitlines())]


def _last_paragraph(lines: list[str]) -> int:
    """Index of the first line of the last paragraph (0 if only one)."""
    for i in range(len(lines) - 1, -1, -1):
        if not lines[i].strip():
            return i + 1
    return 0


def read_series(project: Project) -> list[Patch]:
    """The patches of ``patches/series`` that exist, in order."""
    return [
        read(project.patches_dir / name)
        for name in project.series()
        if (project.patches_dir / name).is_file()
    ]


def dependencies(patches: list[Patch], patch: Patch) -> list[Patch]:
    """The patches ``patch`` needs (its ``Depends-on:``, transitively), in
    series order; names that are not earlier in the series are ignored (the
    header check reports them)."""
    order = {p.name: i for i, p in enumerate(patches)}
    by_name = {p.name: p for p in patches}
    needed: set[str] = set()
    todo = list(patch.depends_on)
    while todo:
        name = todo.pop()
        if name in by_name and name not in needed and order[name] < order[patch.name]:
            needed.add(name)
            todo.extend(by_name[name].depends_on)
    return [p for p in patches if p.name in needed]


@functools.cache
def parse_diff(diff: bytes) -> list[FileDiff]:
    """Each file of ``diff``: paths and counts from ``git apply --numstat``,
    and its added lines with their new line numbers."""
    if not diff:
        return []
    text = diff.decode('utf-8', 'replace')
    fields = git(Path.cwd(), 'apply', '--numstat', '-z', input=text).stdout.split('\0')
    files = []
    for field in filter(None, fields):
        _, removed, path = field.split('\t')
        files.append(FileDiff(path, path, [], 0 if removed == '-' else int(removed)))
    file = line_no = -1
    for line in text.splitlines():
        if line.startswith('diff --git '):
            file, line_no = file + 1, -1  # no hunk of this file yet
        elif line_no < 0 and line.startswith('rename from '):  # numstat names the new path
            files[file].old_path = line.removeprefix('rename from ')
        elif match := _HUNK_START.match(line):
            line_no = int(match[1])
        elif line_no >= 0 and line[:1] in ('+', ' ', ''):  # '': a context line stripped
            if line[:1] == '+':
                files[file].added.append((line_no, line[1:]))
            line_no += 1
    return files
