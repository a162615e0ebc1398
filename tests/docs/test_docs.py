"""Every ```python block of README.md and docs/*.md runs, file by file.

Blocks of one file run in order in one fresh interpreter (8 simulated CPU
devices), so later blocks may use names defined earlier. Blocks meant as
illustration only use another fence language (```text, ```bash).
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
PAGES = sorted([REPO_ROOT / 'README.md', *(REPO_ROOT / 'docs').glob('*.md')])
PAGES_WITH_CODE = [p for p in PAGES if FENCE.search(p.read_text())]


def python_blocks(page: Path) -> list[str]:
    return FENCE.findall(page.read_text())


@pytest.mark.parametrize('page', PAGES_WITH_CODE, ids=lambda p: p.name)
def test_python_blocks_run(page: Path, tmp_path: Path) -> None:
    script = tmp_path / f'{page.stem}.py'
    script.write_text('\n'.join(python_blocks(page)))
    env = {**os.environ, 'JAX_PLATFORMS': 'cpu',
           'XLA_FLAGS': '--xla_force_host_platform_device_count=8'}
    result = subprocess.run([sys.executable, str(script)], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


def test_the_user_guide_has_code() -> None:
    assert any(p.name == 'sharding-stacked-layers.md' for p in PAGES_WITH_CODE)
