"""Relative links of README.md and docs/*.md point to files that exist and,
with a ``#fragment``, to a heading of that file (GitHub's anchor rule)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT

PAGES = sorted([REPO_ROOT / 'README.md', REPO_ROOT / 'CHANGELOG.md',
                *(REPO_ROOT / 'docs').glob('*.md')])
LINK = re.compile(r'\]\(([^)\s]+)\)')
CODE = re.compile(r'^```.*?^```$', re.MULTILINE | re.DOTALL)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces to ``-``."""
    headings = re.findall(r'^#+ (.*)$', CODE.sub('', page.read_text()), re.MULTILINE)
    return {re.sub(r'[^\w\- ]', '', h.strip().lower()).replace(' ', '-') for h in headings}


@pytest.mark.parametrize('page', PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(CODE.sub('', page.read_text())):
        if re.match(r'[a-z]+:', target):
            continue  # https:, mailto:
        path, _, fragment = target.partition('#')
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif fragment and file.suffix == '.md' and fragment not in anchors(file):
            broken.append(target)
    assert not broken, broken


# A target with a line break in it renders as text, not as a link, and
# LINK above does not see it.
SPLIT_LINK = re.compile(r'\]\(([^)\s]*\s[^)]*)\)')


@pytest.mark.parametrize('page', PAGES, ids=lambda p: p.name)
def test_no_link_target_is_split_across_lines(page: Path) -> None:
    assert not SPLIT_LINK.findall(CODE.sub('', page.read_text()))


def test_a_split_link_is_found() -> None:
    assert SPLIT_LINK.findall('see ([guide](sharding-\nlayers.md#x)) and [a](b.md)') == [
        'sharding-\nlayers.md#x']
