"""README and docs cells that say what vanilla does, produced by running vanilla.

- the probes of ``tests/oracle/probes/readme.py``: each side's report is
  asserted exactly (vanilla's is the README's vanilla cell);
- ``tests/e2e/test_user_reports.py`` says every test there fails on vanilla:
  run it under vanilla, every test must fail;
- ``docs/bad-inputs.md`` quotes exceptions: each quoted one (its fragments
  between ``...``) must be an outcome of ``tests.reliability.test_bad_inputs``
  under vanilla or ours (a quoted note: one of ours' PEP 678 notes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from flaxpq.project import REPO_ROOT
from tests.oracle.conftest import SELF_CHECK, Pair
from tests.oracle.programs import Program

NOT_IN_MESH = ['ValueError', "Resource axis: layers of P('layers', 'a', 'b') is not found in "
               "mesh: ('a', 'b')."]
# Per probe: (vanilla's report, ours' report).
CLAIMS: dict[str, tuple[Any, Any]] = {
    # README, "What changes": nnx.vmap(spmd_axis_name='a'). Vanilla leaves the
    # metadata per-layer (no entry for the stacked axis); the array is sharded
    # along 'a' on Auto meshes only (JAX batches sharding constraints there).
    'readme.spmd_axis_name_metadata_and_sharding': (
        {'auto': {'out_sharding': ['tuple', [None, 'b']], 'sharding': ['a', None, 'b']},
         'explicit': {'out_sharding': ['tuple', [None, 'b']], 'sharding': [None, None, 'b']}},
        {'auto': {'out_sharding': ['tuple', ['a', None, 'b']], 'sharding': ['a', None, 'b']},
         'explicit': {'out_sharding': ['tuple', ['a', None, 'b']],
                      'sharding': ['a', None, 'b']}}),
    # README, Compatibility: bridge.ToNNX over a stack named 'layers' (not a
    # mesh axis) runs on vanilla; ours raises what creating that Variable raises.
    'readme.to_nnx_of_stack_named_without_mesh_axis': (
        {'to_nnx': None, 'variable': NOT_IN_MESH},
        {'to_nnx': NOT_IN_MESH, 'variable': NOT_IN_MESH}),
}


@pytest.mark.parametrize('name', sorted(CLAIMS))
def test_readme_claim(oracle: Pair, name: str) -> None:
    vanilla, ours = oracle.run(Program(f'probe {name}', custom=f'probe:{name}'))
    want_vanilla, want_ours = CLAIMS[name]
    assert vanilla['probe'] == want_vanilla
    assert ours['probe'] == (want_vanilla if SELF_CHECK else want_ours)


def run_under(site: Path | None, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    path = [str(REPO_ROOT)] if site is None else [str(site), str(REPO_ROOT)]
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(path)}
    return subprocess.run([sys.executable, *args], env=env, cwd=REPO_ROOT, text=True,
                          capture_output=True, **kwargs)


def test_user_reports_all_fail_on_vanilla(vanilla_flax: Path, tmp_path: Path) -> None:
    """tests/e2e/test_user_reports.py: "Every test here fails on vanilla"."""
    report = tmp_path / 'junit.xml'
    run_under(vanilla_flax, ['-m', 'pytest', '-p', 'no:xdist', '-p', 'no:cacheprovider', '-q',
                             f'--junitxml={report}', 'tests/e2e/test_user_reports.py'],
              timeout=900)
    cases = ET.parse(report).getroot().iter('testcase')
    outcomes = {f'{c.get("name")}': [child.tag for child in c] for c in cases}
    assert outcomes, 'no test ran'
    passed = [name for name, tags in outcomes.items() if 'failure' not in tags]
    assert not passed, f'these pass (or error, or skip) on vanilla: {passed}'


EXCEPTION = re.compile(r'^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.*)$')


def quoted_exceptions(text: str) -> list[tuple[str, str]]:
    """Exceptions docs/bad-inputs.md quotes: in ``text`` blocks and in backticks."""
    quoted: list[tuple[str, str]] = []
    for block in re.findall(r'```text\n(.*?)```', text, re.S):
        current: list[str] | None = None
        for line in block.splitlines():
            m = EXCEPTION.match(line)
            if m:
                current = [m.group(1), m.group(2)]
                quoted.append(current)  # type: ignore[arg-type]
            elif current is not None and line.strip():
                current[1] += ' ' + line.strip()
            else:
                current = None
    for span in re.findall(r'`([^`]+)`', re.sub(r'```.*?```', '', text, flags=re.S)):
        m = EXCEPTION.match(span)
        if m:
            quoted.append([m.group(1), m.group(2)])  # type: ignore[arg-type]
    return [(kind, message) for kind, message in quoted]


def bad_input_outcomes(site: Path | None) -> dict[str, Any]:
    done = run_under(site, ['-m', 'tests.reliability.test_bad_inputs'], timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])['outcomes']


def test_bad_inputs_doc_quotes_real_outcomes(vanilla_flax: Path) -> None:
    text = (REPO_ROOT / 'docs' / 'bad-inputs.md').read_text()
    quoted = quoted_exceptions(text)
    assert len(quoted) >= 5, quoted
    notes = lambda o: o.get('notes') if isinstance(o.get('notes'), str) else ' '.join(  # noqa: E731
        o.get('notes', []))
    raised = [(o['raised'], f'{o["message"]} {notes(o)}')
              for site in (vanilla_flax, None)
              for o in bad_input_outcomes(site).values()
              if isinstance(o, dict) and 'raised' in o]
    flat = lambda s: ' '.join(s.split())  # noqa: E731
    missing = []
    for kind, message in quoted:
        fragments = [flat(f).strip(' ,.():') for f in message.split('...')]
        fragments = [f for f in fragments if len(f) > 3]
        if not any(kind == got and all(f in flat(text_) for f in fragments)
                   for got, text_ in raised):
            missing.append(f'{kind}: {message}')
    assert not missing, 'docs/bad-inputs.md quotes outcomes no case gives:\n' + '\n'.join(missing)
