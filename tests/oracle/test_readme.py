"""README and docs cells that say what vanilla does, produced by running vanilla.

The probes keep their ``readme.`` names, which docs/compatibility.md cites.

- the probes of ``tests/oracle/probes/readme.py``: each side's report is
  asserted exactly (vanilla's is the README's vanilla cell);
- ``tests/e2e/test_user_reports.py`` says which of its tests fail on vanilla:
  run it under vanilla (in ``make oracle-long``: 19 tests, minutes of CPU);
- (``docs/bad-inputs.md``'s quoted exceptions are checked against the real
  outcomes in ``tests/reliability/test_bad_inputs.py``, which runs both.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from flaxpq.project import REPO_ROOT
from tests.oracle.programs import Program
from tests.support.workers import SELF_CHECK, Pair

NOT_IN_MESH = ['ValueError', "Resource axis: layers of P('layers', 'a', 'b') is not found in "
               "mesh: ('a', 'b')."]
# Per probe: (vanilla's report, ours' report).
TUPLE = lambda *entries: {'form': 'tuple', 'entries': list(entries)}  # noqa: E731
CLAIMS: dict[str, tuple[Any, Any]] = {
    # docs/compatibility.md, "Metadata never moves data" (the README: transforms
    # move no data): nnx.vmap(spmd_axis_name='a'). Vanilla leaves the
    # metadata per-layer (no entry for the stacked axis); the array is sharded
    # along 'a' on Auto meshes only (JAX batches sharding constraints there).
    # Ours gives the metadata the entry and moves nothing: arrays as vanilla.
    'readme.spmd_axis_name_metadata_and_sharding': (
        {'auto': {'out_sharding': TUPLE(None, 'b'), 'sharding': ['a', None, 'b']},
         'explicit': {'out_sharding': TUPLE(None, 'b'), 'sharding': [None, None, 'b']}},
        {'auto': {'out_sharding': TUPLE('a', None, 'b'), 'sharding': ['a', None, 'b']},
         'explicit': {'out_sharding': TUPLE('a', None, 'b'),
                      'sharding': [None, None, 'b']}}),
    # docs/compatibility.md, Linen over bridge.ToLinen: bridge.ToNNX over a
    # stack named 'layers' (not a mesh axis) runs on vanilla; ours raises what
    # creating that Variable raises.
    'readme.to_nnx_of_stack_named_without_mesh_axis': (
        {'to_nnx': None, 'variable': NOT_IN_MESH},
        {'to_nnx': NOT_IN_MESH, 'variable': NOT_IN_MESH}),
}


@pytest.mark.parametrize('name', sorted(CLAIMS))
def test_readme_claim(oracle: Pair, name: str) -> None:
    vanilla, ours = oracle.run(Program(f'probe {name}', custom=f'probe:{name}'))
    want_vanilla, want_ours = CLAIMS[name]
    assert vanilla.probe == want_vanilla
    assert ours.probe == (want_vanilla if SELF_CHECK else want_ours)


def run_under(site: Path | None, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    path = [str(REPO_ROOT)] if site is None else [str(site), str(REPO_ROOT)]
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(path)}
    return subprocess.run([sys.executable, *args], env=env, cwd=REPO_ROOT, text=True,
                          capture_output=True, **kwargs)


# Regression guards in tests/e2e/test_user_reports.py: vanilla runs these.
PASS_ON_VANILLA = {'test_named_layer_axis_sharded_by_the_gspmd_recipe'}
LONG = os.environ.get('ORACLE_RANDOM') == '1' or os.environ.get('ORACLE_LONG') == '1'


@pytest.mark.skipif(SELF_CHECK or not LONG,
                    reason='runs vanilla alone, minutes of CPU: make oracle-long')
def test_user_reports_fail_on_vanilla(vanilla_flax: Path, tmp_path: Path) -> None:
    """tests/e2e/test_user_reports.py fails on vanilla but for its guards."""
    report = tmp_path / 'junit.xml'
    run_under(vanilla_flax, ['-m', 'pytest', '-p', 'no:xdist', '-p', 'no:cacheprovider', '-q',
                             f'--junitxml={report}', 'tests/e2e/test_user_reports.py'],
              timeout=1800)
    cases = list(ET.parse(report).getroot().iter('testcase'))
    assert cases, 'no test ran'
    failed = {c.get('name'): any(child.tag == 'failure' for child in c) for c in cases}
    wrong = [name for name, fails in failed.items()
             if fails == (name.split('[')[0] in PASS_ON_VANILLA)]
    assert not wrong, f'on vanilla these do not fail, or fail though listed as guards: {wrong}'
