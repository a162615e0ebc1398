"""The benchmarks run (smoke mode), ours against vanilla in one run.

Only what is size-independent is asserted: our optimizer state is at the
ideal bytes per device, and our train step communicates exactly what vanilla
with the documented workaround does. Timings at smoke sizes mean nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / 'benchmarks'))
import run as bench  # noqa: E402


@pytest.fixture
def vanilla_python(vanilla_flax: Path, tmp_path: Path) -> str:
    """An 'interpreter' that runs this venv's Python with vanilla flax first."""
    wrapper = tmp_path / 'vanilla-python'
    wrapper.write_text(
        '#!/bin/sh\n'
        f'PYTHONPATH="{vanilla_flax}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_benchmarks_smoke(vanilla_python: str) -> None:
    results = bench.run_smoke(sys.executable, vanilla_python)
    versions = results['versions']
    assert versions['ours']['flax'] != versions['vanilla']['flax'], versions
    assert results['checks']['memory: ours at ideal (per device)']
    assert results['checks']['collectives: ours == vanilla+workaround']
