"""Shared fixtures: vanilla flax, for side-by-side runs (e2e, oracle, realcode)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.registry import download_registry_wheel


@pytest.fixture(scope='session')
def vanilla_flax(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the registry's pristine flax wheel, unpacked.

    Put first on PYTHONPATH, it shadows our installed flax while every other
    dependency stays the venv's, so both run with the same jax and optax.
    """
    dest = tmp_path_factory.mktemp('vanilla')
    wheel = download_registry_wheel(dest)
    site = dest / 'site'
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return site


@pytest.fixture
def vanilla_python(vanilla_flax: Path, tmp_path: Path) -> str:
    """An 'interpreter' that runs this venv's Python with vanilla flax first."""
    wrapper = tmp_path / 'vanilla-python'
    wrapper.write_text(
        '#!/bin/sh\n'
        f'PYTHONPATH="{vanilla_flax}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


# Our rule: a test that takes longer than this on an idle 2-core
# machine says why in its docstring. The run's end lists the tests over it
# and marks those without a docstring; it does not fail the run, as load
# stretches every duration.
LONG_TEST_SECONDS = 90


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.when == 'call':
        doc = getattr(getattr(item, 'function', None), '__doc__', None) or ''
        report.user_properties.append(('has_docstring', bool(doc.strip())))


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    long = sorted((report for outcome in ('passed', 'failed')
                   for report in terminalreporter.stats.get(outcome, [])
                   if report.when == 'call' and report.duration > LONG_TEST_SECONDS),
                  key=lambda report: -report.duration)
    if not long:
        return
    terminalreporter.write_sep('=', f'tests over {LONG_TEST_SECONDS} s (their docstrings say why)')
    for report in long:
        reason = '' if dict(report.user_properties).get('has_docstring') else (
            '   NO DOCSTRING: say why it is long')
        terminalreporter.write_line(f'{report.duration:6.0f} s  {report.nodeid}{reason}')
