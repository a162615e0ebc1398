"""Real code nobody here wrote: MaxText's ``nnx_scan`` helpers on a (2, 4) mesh.

Target behaviour (invariant I4, ours): after MaxText's
``create_scanned_layers`` builds an FSDP x tensor-parallel stack and
``apply_scanned_layers`` trains it (with and without remat) through
``nnx.Optimizer(optax.adam)``, every Adam moment (mu, nu) is sharded exactly
like its parameter array, before and after training, and the loss is finite
and decreases.

Vanilla flax 0.12.12 runs the same program in a subprocess (the registry's
wheel first on PYTHONPATH). MaxText's helper writes the layer axis into the
sharding metadata itself, so there the metadata is right and vanilla's
optimizer state, which follows the metadata, agrees with the arrays: the two
flaxes give the same shardings and the same losses. A layer axis name without
a logical rule fails on both; ours names the fix.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flaxpq.project import REPO_ROOT, Project
from tests.support.checks import metadata_problems, optimizer_problems
from tests.realcode import maxtext_scan

PIN = Project().pin()
# MaxText 0.2.5 reads Variables through APIs flax 0.12 deprecates ('.value',
# 'sharding_names', Rngs.fork(split=)); not ours to fix.
pytestmark = [pytest.mark.filterwarnings('ignore::DeprecationWarning'),
              pytest.mark.slow]  # a real client, trained on both flaxes
CASES = [
    pytest.param({'layers': 4, 'param_scan_axis': 0, 'remat': False}, id='L4-axis0'),
    pytest.param({'layers': 4, 'param_scan_axis': 1, 'remat': True}, id='L4-axis1-remat'),
    pytest.param({'layers': 3, 'param_scan_axis': 0, 'remat': True}, id='L3-axis0-remat'),
    pytest.param({'layers': 4, 'param_scan_axis': 1, 'under_jit': True}, id='L4-axis1-jit'),
]


def run_program(arguments: dict[str, Any], vanilla: Path | None) -> dict[str, Any]:
    """``tests.realcode.maxtext_scan`` in a subprocess, under vanilla or ours."""
    path = [str(REPO_ROOT)] if vanilla is None else [str(vanilla), str(REPO_ROOT)]
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(path),
           'XLA_FLAGS': '--xla_force_host_platform_device_count=8'}
    result = subprocess.run(
        [sys.executable, '-m', 'tests.realcode.maxtext_scan', json.dumps(arguments)],
        env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_trains(report: dict[str, Any]) -> None:
    losses = report['losses']
    assert all(math.isfinite(loss) for loss in losses), losses
    assert all(b < a for a, b in zip(losses, losses[1:])), losses


@pytest.mark.parametrize('arguments', CASES)
def test_ours_adam_moments_sharded_like_each_parameter(arguments: dict[str, Any]) -> None:
    report = maxtext_scan.run(**arguments)
    assert report['flax_version'] == PIN.local_version
    assert 'error' not in report, report.get('traceback')
    assert report['remat_output_max_diff'] < 1e-5
    assert report['moment_mismatches_before'] == []
    assert report['moment_mismatches'] == []
    assert optimizer_problems(report) == []
    assert metadata_problems(report) == []
    assert report['params'] == report['before']['params'], 'training re-sharded a parameter'
    assert_trains(report)


@pytest.mark.parametrize('arguments', CASES[:2])
def test_vanilla_state_follows_metadata_which_maxtext_keeps_right(
    vanilla_flax: Path, arguments: dict[str, Any]
) -> None:
    theirs = run_program(arguments, vanilla=vanilla_flax)
    assert theirs['flax_version'] == PIN.version
    assert 'error' not in theirs, theirs.get('traceback')
    for path, leaf in theirs['opt_state'].items():
        param_path = path.split('/', 3)[3]  # opt_state/0/mu/<param path>
        assert leaf['spec'] == theirs['get_partition_spec'][param_path], path
    ours = maxtext_scan.run(**arguments)
    for key in ('params', 'opt_state', 'moment_mismatches', 'remat_output_max_diff'):
        assert theirs[key] == ours[key], key
    assert theirs['losses'] == pytest.approx(ours['losses'], rel=1e-5)


def test_layer_axis_without_a_rule_fails_as_on_vanilla_with_a_note(vanilla_flax: Path) -> None:
    """No rule maps 'layers' to a mesh axis: ``nnx.Optimizer`` raises
    vanilla's error on both flaxes, and ours adds a note naming the
    parameter, its out_sharding and the fix."""
    theirs = run_program({'layers_rule': False}, vanilla=vanilla_flax)
    ours = maxtext_scan.run(layers_rule=False)
    assert "Resource axis: layers of P('layers'" in theirs['error']
    assert ours['error'] == theirs['error']
    note = ours['traceback'].split(ours['error'].split(': ', 1)[1], 1)[1]
    assert 'Raised for the optimizer state of the Param at' in note
    assert 'out_sharding=' in note
    assert 'nnx.logical_axis_rules' in note
