"""The examples run, and print what they promise."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from flaxpq.project import REPO_ROOT, Project
from tests.support.devices import user_env

pytestmark = pytest.mark.slow  # whole programs, half a minute of CPU each


def run_example(name: str) -> str:
    """The example as a user runs it: it sets up its 8 simulated CPU devices
    itself, also on an accelerator host."""
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'examples' / name)], env=user_env(),
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_scan_over_layers_demo() -> None:
    out = run_example('scan_over_layers.py')
    assert f'flax {Project().pin().local_version}' in out
    specs = dict(re.findall(r'^  (\S+)\s+(P\(.*\))$', out, re.MULTILINE))
    params = {k: v for k, v in specs.items() if k.startswith('blocks/')}
    assert params['blocks/up/kernel'] == "P(None, 'fsdp', 'tensor')"
    for moment in ('mu', 'nu'):
        for path, spec in params.items():
            assert specs[f'opt_state/0/{moment}/{path}'] == spec, path
    losses = [float(x) for x in re.findall(r'loss (\S+)', out)]
    assert len(losses) == 3 and losses[2] < losses[1] < losses[0]
    assert 'checkpoint: restored into the abstract model' in out


def test_pipeline_layers_example_shards_the_layer_axis() -> None:
    out = run_example('pipeline_layers.py')
    specs = dict(re.findall(r'^  (\S+)\s+(P\(.*\))$', out, re.MULTILINE))
    assert specs['up/kernel'] == "P('layers', 'fsdp', 'tensor')"
    for path, spec in specs.items():
        assert spec.startswith("P('layers'"), (path, spec)
    assert "out_sharding ('layers', 'fsdp', 'tensor')" in out
    losses = [float(x) for x in re.findall(r'loss (\S+)', out)]
    assert len(losses) == 3 and losses[2] < losses[0]
