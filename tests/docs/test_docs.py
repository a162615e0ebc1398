"""Every ```python block of README.md and docs/*.md runs, file by file.

Blocks of one file run in order in one fresh interpreter, as a reader pastes
them, so later blocks may use names defined earlier. The interpreter gets no
device setup: ``XLA_FLAGS`` and ``JAX_PLATFORMS`` are removed from its
environment (``make test`` exports both), and it runs in an empty folder, so
a page whose code needs 8 devices must set them up in its own first block.
Blocks meant as illustration only use another fence language (```text,
```bash). Where a page shows what its code prints (a ```text block after
"It prints ...:"), the page must print exactly that.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT

FENCE = re.compile(r'^```python\n(.*?)^```$', re.MULTILINE | re.DOTALL)
# A page's expected output: a ```text block right after "It prints ...:".
PRINTS = re.compile(r'^It prints[^\n]*:\n\n```text\n(.*?)^```$', re.MULTILINE | re.DOTALL)
PAGES = sorted([REPO_ROOT / 'README.md', *(REPO_ROOT / 'docs').glob('*.md')])
PAGES_WITH_CODE = [p for p in PAGES if FENCE.search(p.read_text())]
# What would give a page devices its own code does not set up.
DEVICE_VARIABLES = ('XLA_FLAGS', 'JAX_PLATFORMS')


def python_blocks(text: str) -> list[str]:
    return FENCE.findall(text)


def run_blocks(text: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """The ``python`` blocks of a page, in order, in one fresh interpreter."""
    script = folder / 'page.py'
    script.write_text('\n'.join(python_blocks(text)))
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_VARIABLES}
    return subprocess.run([sys.executable, str(script)], env=env, cwd=folder,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize('page', PAGES_WITH_CODE, ids=lambda p: p.name)
def test_python_blocks_run(page: Path, tmp_path: Path) -> None:
    text = page.read_text()
    result = run_blocks(text, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    if expected := PRINTS.findall(text):  # e.g. the README's Quick start
        assert result.stdout == ''.join(expected)


def test_the_device_flags_of_the_test_run_do_not_reach_the_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flags of the test run (``make test`` exports them) do not leak in."""
    monkeypatch.setenv('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
    monkeypatch.setenv('JAX_PLATFORMS', 'cpu')
    page = ("```python\nimport os\n"
            "assert 'XLA_FLAGS' not in os.environ, os.environ['XLA_FLAGS']\n"
            "assert 'JAX_PLATFORMS' not in os.environ, os.environ['JAX_PLATFORMS']\n"
            "```\n")
    result = run_blocks(page, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]


def test_the_user_guide_has_code() -> None:
    assert any(p.name == 'sharding-stacked-layers.md' for p in PAGES_WITH_CODE)
