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
import re
from pathlib import Path

from flaxpq.project import Project

# Our tracking trailers: never part of an upstream commit.
OUR_TRAILERS = ('Bug', 'Forwarded', 'Depends-on')
NOT_NEEDED = 'not-needed'
_TRAILER = re.compile(r'^([A-Za-z][A-Za-z0-9-]*):\s*(.*)$')
_HUNK = re.compile(r'^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@')


@dataclasses.dataclass
class FileDiff:
    """What one patch does to one file: added lines (new line number, text)."""

    path: str
    added: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    removed: int = 0


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
        return parse_diff(self.diff.decode('utf-8', 'replace'))

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
    lines = message.split('\n---\n', 1)[0].strip('\n').splitlines()
    trailers: list[tuple[str, str]] = []
    last = _last_paragraph(lines)
    if last and all(_TRAILER.match(line) for line in lines[last:]):
        for line in lines[last:]:
            key, value = _TRAILER.match(line).groups()  # type: ignore[union-attr]
            trailers.append((key, value.strip()))
        lines = lines[:last]
    while lines and not lines[-1].strip():
        lines.pop()
    return Patch(path.name, path, subject, lines, trailers, diff)


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


def parse_diff(diff: str) -> list[FileDiff]:
    """Added lines (with their new line numbers) and removed counts per file."""
    files: list[FileDiff] = []
    old_left = new_left = line_no = 0
    for line in diff.splitlines():
        if old_left or new_left:
            if line.startswith('\\'):
                continue
            tag, text = line[:1], line[1:]
            if tag == '+':
                files[-1].added.append((line_no, text))
                line_no, new_left = line_no + 1, new_left - 1
            elif tag == '-':
                old_left -= 1
                files[-1].removed += 1
            else:
                line_no, old_left, new_left = line_no + 1, old_left - 1, new_left - 1
        elif line.startswith('diff --git '):
            files.append(FileDiff(line.split(' b/', 1)[-1]))
        elif match := _HUNK.match(line):
            old, start, new = match.groups()
            old_left = 1 if old is None else int(old)
            new_left = 1 if new is None else int(new)
            line_no = int(start)
    return files
