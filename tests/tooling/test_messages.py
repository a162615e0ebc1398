"""flaxpq's messages name only commands the user pages present.

A message that tells a user to run ``make <target>`` or ``python -m flaxpq
<command>`` sends them to the README (or the pages it links for installing
offline and for maintainers) to find out what that is; each such command
must be there.
"""

from __future__ import annotations

import re

from flaxpq.project import REPO_ROOT

MAKE = re.compile(r'`make ([a-z][\w-]*)`')
FLAXPQ = re.compile(r'`python -m flaxpq ([a-z][\w-]*)')


def named_commands() -> set[str]:
    """Every ```make X``` and ```python -m flaxpq X``` in flaxpq's sources."""
    commands = set()
    for source in sorted((REPO_ROOT / 'flaxpq').glob('*.py')):
        text = source.read_text()
        commands |= {f'make {target}' for target in MAKE.findall(text)}
        commands |= {f'python -m flaxpq {command}' for command in FLAXPQ.findall(text)}
    return commands


def test_flaxpq_messages_name_only_commands_the_user_pages_present() -> None:
    readme = '\n'.join((REPO_ROOT / page).read_text() for page in (
        'README.md', 'docs/install-offline.md', 'docs/maintainers.md'))
    commands = named_commands()
    assert 'make test' in commands and 'python -m flaxpq export' in commands, commands
    missing = sorted(c for c in commands if not re.search(rf'\b{re.escape(c)}\b', readme))
    assert not missing, f'named in flaxpq/ but on no user page: {missing}'
