"""The requirement that installs a clone's commit, for teammates and CI.

``python -m flaxpq requirement``, run in a clone, prints the line for a
``requirements.txt`` or ``pyproject.toml``'s ``dependencies``: the clone's
remote URL (``origin``) at its commit's 40 digits, which any machine that
can reach the remote installs; only a clone without a remote gets its own
path, which works on this machine alone.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from flaxpq import QueueError

# user@host:path, git's scp-like form for ssh (no scheme, a colon before any slash)
SCP_LIKE = re.compile(r'^(?P<host>[^/:]+@[^/:]+|[^/:]{2,}):(?P<path>.*)$')


def git(clone: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(['git', '-C', str(clone), *args], capture_output=True, text=True)


def pip_url(remote: str, clone: Path) -> str:
    """``remote`` (a URL of ``git remote get-url``) as a pip VCS URL."""
    if re.match(r'^[a-z][a-z0-9+.-]*://', remote):
        return f'git+{remote}'
    scp = SCP_LIKE.match(remote)
    if scp:
        return f"git+ssh://{scp['host']}/{scp['path']}"
    return f'git+file://{(clone / remote).resolve()}'  # a path, relative to the clone


def requirement(clone: Path, package: str) -> tuple[str, str | None]:
    """The requirement for ``clone``'s HEAD, and a note for stderr where
    others cannot install it (no remote, or a commit the remote lacks)."""
    head = git(clone, 'rev-parse', '--verify', 'HEAD^{commit}')
    if head.returncode:
        raise QueueError(f'{clone} is not a git clone with a commit: {head.stderr.strip()}')
    commit = head.stdout.strip()
    remote = git(clone, 'remote', 'get-url', 'origin')
    if remote.returncode:
        return (f'{package} @ git+file://{clone.resolve()}@{commit}',
                'note: the clone has no remote (origin): this path installs on this '
                'machine only; push the clone somewhere and run this again')
    line = f'{package} @ {pip_url(remote.stdout.strip(), clone)}@{commit}'
    on_remote = git(clone, 'branch', '--remotes', '--contains', commit, 'origin/*').stdout
    if not on_remote.strip():
        return line, (f'note: origin has no branch with {commit[:12]} yet (as far as this '
                      'clone knows): push it before others install this line')
    return line, None
