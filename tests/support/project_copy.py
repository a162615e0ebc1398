"""A throwaway queue that builds like our project (the wheel and build-error tests)."""

from __future__ import annotations

import shutil

from flaxpq.project import REPO_ROOT, Project


def copy_of_our_project(queue: Project) -> None:
    """Give a throwaway queue our backend, so pip can build it."""
    shutil.copy(REPO_ROOT / 'pyproject.toml', queue.root)
    shutil.copytree(REPO_ROOT / 'flaxpq', queue.root / 'flaxpq',
                    ignore=shutil.ignore_patterns('__pycache__'))
