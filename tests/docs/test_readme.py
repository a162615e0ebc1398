"""The README's copies of outputs are what the programs print.

Its opening error block is what vanilla flax 0.12.12 prints for the Quick
start, and the maintainers' guide's copy of ``make demo``'s table is what
``examples/compare.py`` prints for vanilla (the registry's wheel) and ours
(this venv). ``...`` in a
copy elides what varies (``tests/docs/elide.py``). The duration table's guard
is in ``tests/docs/test_durations.py``. The README stays under 9,000 bytes,
its diff is made of the lines vanilla and ours print, the jax it says is
tested is the pinned one, and (asking the registry: ``registry`` tests, which
``make test-newest`` runs) the jax pip gives today and what ``"jax[tpu]"``
resolves to are what it says.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT
from tests.docs.elide import assert_matches

README = (REPO_ROOT / 'README.md').read_text()
MAINTAINERS = (REPO_ROOT / 'docs' / 'maintainers.md').read_text()
DEVICE_VARIABLES = ('XLA_FLAGS', 'JAX_PLATFORMS', 'JAX_NUM_CPU_DEVICES')
TRACEBACK = 'Traceback (most recent call last):'
# A line of Python's warnings module: "path:line: SomeWarning: message".
WARNING_LINE = re.compile(r'^\S.*:\d+: \w*Warning: ')


def from_the_traceback(stderr: str) -> str:
    """``stderr`` from its traceback on, where only warnings come before it.

    On a TPU host, jax warns at import that transparent hugepages are not
    enabled (a ``UserWarning``, its line and the source line under it) before
    any traceback; any other text before the traceback is kept and fails the
    comparison.
    """
    start = stderr.find(TRACEBACK)
    if start <= 0:
        return stderr
    before = stderr[:start].splitlines()
    if all(WARNING_LINE.match(line) or line.startswith(' ') for line in before):
        return stderr[start:]
    return stderr


def test_warnings_before_the_traceback_are_dropped_and_nothing_else() -> None:
    warning = ('/x/jax/_src/cloud_tpu_init.py:90: UserWarning: Transparent hugepages are '
               'not enabled. TPU runtime startup ...\n  warnings.warn(\n')
    error = f'{TRACEBACK}\n  File "q.py", line 1\nValueError: x\n'
    assert from_the_traceback(warning + error) == error
    assert from_the_traceback(error) == error
    assert from_the_traceback('something else\n' + error) == 'something else\n' + error


def block_after(heading: str, fence: str, text: str = README) -> str:
    """The first ```fence block after the line matching ``heading``."""
    match = re.search(heading + r'.*?^```' + fence + r'\n(.*?)^```$', text,
                      re.MULTILINE | re.DOTALL)
    assert match, f'no ```{fence} block after {heading!r}'
    return match[1]


def test_the_opening_error_is_what_vanilla_prints_for_the_quick_start(
    vanilla_flax: Path, tmp_path: Path
) -> None:
    opening_error = block_after(r'\A', 'text')
    quick_start = block_after(r'^## Quick start$', 'python')
    script = tmp_path / 'quickstart.py'
    script.write_text(quick_start)
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_VARIABLES}
    env['PYTHONPATH'] = str(vanilla_flax)
    result = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout
    assert_matches(opening_error, from_the_traceback(result.stderr),
                   'the Quick start on vanilla')
    # It stops at nnx.Optimizer, as its comment and "Is my model affected?" say.
    assert re.search(r'^    optimizer = nnx\.Optimizer\(model', result.stderr, re.MULTILINE), \
        result.stderr


@pytest.mark.slow
def test_the_demo_table_is_what_make_demo_prints(vanilla_python: str) -> None:
    """``make demo``'s last step with this venv as ours (``make demo`` adds venvs)."""
    copy = block_after(r'^`make demo` prints', 'text', MAINTAINERS)
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'examples' / 'compare.py'),
         '--vanilla', vanilla_python, '--ours', sys.executable],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert_matches(copy, result.stdout, 'examples/compare.py')


def test_the_readme_stays_short() -> None:
    assert len(README.encode()) <= 9000, len(README.encode())


def test_the_diff_is_vanilla_then_ours_from_the_printed_blocks() -> None:
    """"What changes for you": each ``-`` line is one vanilla prints (the
    4-layer run the README shows), each ``+`` line one the Quick start
    prints on ours, for the same quantity."""
    diff = block_after(r'^## What changes for you$', 'diff').splitlines()
    vanilla = block_after(r'^To see #5112 on vanilla', 'text').splitlines()
    ours = block_after(r'^It prints \(jax', 'text').splitlines()
    removed = [line[1:] for line in diff if line.startswith('-')]
    added = [line[1:] for line in diff if line.startswith('+')]
    assert len(removed) == len(added) == len(diff) / 2, diff
    assert set(removed) <= set(vanilla) and set(added) <= set(ours), (diff, vanilla, ours)
    assert [line.split(':')[0] for line in removed] == [line.split(':')[0] for line in added]


def stated_versions(claim: str) -> list[str]:
    """The bold versions of the README's paragraph that starts with ``claim``."""
    said = ' '.join(README.split())
    start = said.index(claim)
    return re.findall(r'\*\*([\d.]+)\*\*', said[start:said.index('**TPU.**', start)])


def test_the_tested_jax_is_the_pinned_one() -> None:
    """The README's tested jax is what requirements/test.txt pins for CI."""
    tested, _today = stated_versions('**jax.** Tested with')
    pins = (REPO_ROOT / 'requirements' / 'test.txt').read_text()
    assert f'jax=={tested}\n' in pins and f'jaxlib=={tested}\n' in pins, (tested, pins)


def resolved(requirement: str, tmp_path: Path) -> dict[str, str]:
    """What pip installs for ``requirement`` into an empty environment today
    (``pip install --dry-run --report``: the registry's answer, nothing installed)."""
    report = tmp_path / 'report.json'
    subprocess.run([sys.executable, '-m', 'pip', 'install', '--quiet', '--dry-run',
                    '--ignore-installed', '--report', str(report), requirement],
                   check=True, capture_output=True, text=True, timeout=600)
    return {item['metadata']['name']: item['metadata']['version']
            for item in json.loads(report.read_text())['install']}


@pytest.mark.registry
def test_pip_gives_the_jax_the_readme_says(tmp_path: Path) -> None:
    _tested, today = stated_versions('**jax.** Tested with')
    versions = resolved('jax', tmp_path)
    assert (versions['jax'], versions['jaxlib']) == (today, today), versions


@pytest.mark.registry
def test_jax_tpu_resolves_to_what_the_readme_says(tmp_path: Path) -> None:
    said = ' '.join(README.split())
    claim = re.search(r'Today it resolves to jax ([\d.]+) with libtpu ([\d.]+)', said)
    assert claim, 'the README says what "jax[tpu]" resolves to'
    versions = resolved('jax[tpu]', tmp_path)
    assert (versions['jax'], versions['libtpu']) == (claim[1], claim[2]), versions
    # The stack of the TPU run that docs/maintainers.md records.
    assert f'jax[tpu]=={claim[1]}' in MAINTAINERS and f'libtpu {claim[2]}' in MAINTAINERS


USER_PAGES = ['README.md', 'docs/sharding-stacked-layers.md', 'docs/compatibility.md',
              'docs/bad-inputs.md', 'docs/install-offline.md',
              'docs/migration-per-example-grads.md']


def test_user_pages_carry_no_series_history() -> None:
    """A user page names no series label (``nnxaxis.12``): the version a
    user has is ``0.12.12+nnxaxis.N``; the history is CHANGELOG.md's and
    docs/maintainers.md's."""
    named = {page: re.findall(r'nnxaxis\.\d+', (REPO_ROOT / page).read_text())
             for page in USER_PAGES}
    assert not any(named.values()), named


def pytest_in(folder: Path, filters: list[str]) -> subprocess.CompletedProcess[str]:
    """pytest, with ``filters`` as its ``filterwarnings``, on a test module
    that imports orbax.checkpoint, in ``folder``."""
    folder.mkdir()
    (folder / 'pyproject.toml').write_text(
        f'[tool.pytest.ini_options]\nfilterwarnings = {json.dumps(filters)}\n')
    (folder / 'test_imports.py').write_text(
        'import orbax.checkpoint\n\n\ndef test_imported():\n    assert orbax.checkpoint\n')
    return subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                           '-p', 'no:xdist', '-p', 'no:randomly'], cwd=folder,
                          capture_output=True, text=True, timeout=300)


def test_the_orbax_filter_the_readme_gives_silences_jax_0_12_1s_warning(tmp_path: Path) -> None:
    """With jax 0.12.1 (``make test-newest``), ``import orbax.checkpoint``
    warns, so a project whose pytest makes warnings errors fails to collect;
    the README's ``filterwarnings`` line lets it pass. Skipped on other jax
    versions (CI's pin, 0.12.0.1, does not warn)."""
    said = ' '.join(README.split())
    claim = re.search(r'With jax ([\d.]+), `import orbax.checkpoint` warns .*?'
                      r'`filterwarnings` takes `"([^"]+)"`', said)
    assert claim, 'the README gives the filter'
    import jax
    if jax.__version__ != claim[1]:
        pytest.skip(f'jax {jax.__version__} here; the README speaks of jax {claim[1]}')
    strict = pytest_in(tmp_path / 'strict', ['error'])
    assert strict.returncode != 0, strict.stdout
    assert ('DeprecationWarning: jax.sharding.SingleDeviceSharding is deprecated'
            in strict.stdout), strict.stdout[-3000:]
    filtered = pytest_in(tmp_path / 'filtered', ['error', claim[2]])
    assert filtered.returncode == 0, filtered.stdout[-3000:]
