"""The benchmarks run (smoke mode), ours against vanilla in one run.

Only what is size-independent is asserted: our optimizer state is at the
ideal bytes per device, our train step communicates exactly what vanilla
with the documented workaround does, and the scaling models' Variable count
grows with the number of stacks (4 per stack) for both, and, where valgrind
and gcc are installed, the callgrind instruction counts ran for both. Timings
and counts at smoke sizes mean nothing.
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
    config = results['config']
    for layers in config['variable_scaling']:
        entry = results['variable_scaling'][str(layers)]
        stacks = layers // config['group_size']
        for label in ('ours', 'vanilla+workaround'):
            assert entry[label]['groups'] == stacks, entry[label]
            assert entry[label]['variables'] == 4 * stacks, entry[label]
    instructions = results['instructions']
    unavailable = bench.instructions_unavailable()
    if unavailable is not None:
        assert instructions == {'skipped': unavailable}
        return
    for case in config['instruction_cases']:
        for label in ('ours', 'vanilla+workaround'):
            counts = instructions[case][label]['instructions']
            assert set(counts) == set(bench.INSTRUCTIONS), counts
            assert all(count > 0 for values in counts.values() for count in values), counts
