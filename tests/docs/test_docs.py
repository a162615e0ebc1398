"""Every ```python block of README.md and docs/*.md pastes and runs, page by page,
and runs as one file.

Blocks of one page are fed in order to one fresh standard REPL (``python
-i``, reading its standard input as a reader's paste), so later blocks may
use names defined earlier, and a page fails on what pasting hits: a blank
line inside an indented block (``IndentationError: unexpected indent``), a
statement right after an indented block without the blank line that ends it
(``SyntaxError``), and any exception (a traceback). The interpreter gets no device setup: ``XLA_FLAGS``,
``JAX_PLATFORMS`` and ``JAX_NUM_CPU_DEVICES`` are removed from its
environment (``make test`` exports the first two, ``make test-1dev`` the
third), and it runs in an empty folder, so a page whose code needs 8 devices
must set them up in its own first block (8 simulated CPU devices, also on an
accelerator host). The folder holds a copy of ``check_layout.py``, as the
README tells a reader to make (``cp "$fork/check_layout.py" .``). Blocks meant as illustration only use another fence
language (```text, ```bash). The REPL echoes what it echoes for a reader
(the value of an expression statement), and stdout must be exactly what the
page shows (its ```text blocks after "It prints ...:", in order; nothing
where it shows nothing), ``...`` in a copy eliding what varies between a
file run and a REPL, or a Python version and the next (``tests/docs/elide.py``:
JAX 0.12.0.1 prints the source line of an ``IndivisibleError`` as
``<file>:<line>:<column> (<module>)``: ``<stdin>:14:8`` pasted into
Python 3.12, ``<stdin>-25:14:8`` into 3.13). The
page's blocks, joined into one file and run with ``python``, print the same.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flaxpq.project import REPO_ROOT
from tests.docs.elide import assert_matches

FENCE = re.compile(r'^```python\n(.*?)^```$', re.MULTILINE | re.DOTALL)
# A page's expected output: a ```text block right after "It prints ...:".
PRINTS = re.compile(r'^It prints[^\n]*:\n\n```text\n(.*?)^```$', re.MULTILINE | re.DOTALL)
PAGES = sorted([REPO_ROOT / 'README.md', *(REPO_ROOT / 'docs').glob('*.md')])
PAGES_WITH_CODE = [p for p in PAGES if FENCE.search(p.read_text())]
# What would give a page devices its own code does not set up.
DEVICE_VARIABLES = ('XLA_FLAGS', 'JAX_PLATFORMS', 'JAX_NUM_CPU_DEVICES')


def python_blocks(text: str) -> list[str]:
    return FENCE.findall(text)


def reader_folder(folder: Path) -> Path:
    """``folder`` with the copy of ``check_layout.py`` the README has a reader make."""
    shutil.copy(REPO_ROOT / 'check_layout.py', folder)
    return folder


# What the REPL writes to stderr when a pasted statement fails, after its
# prompts: a traceback, or (without one) a compile error of the paste.
PROMPTS = re.compile(r'^(?:(?:>>>|\.\.\.) ?)+', re.MULTILINE)
FAILURE = re.compile(r'^(Traceback \(most recent call last\):|'
                     r'(IndentationError|SyntaxError|TabError): .*)$', re.MULTILINE)


def run_blocks(text: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """The ``python`` blocks of a page, in order, pasted into one fresh REPL.

    Each block ends with the blank line that a reader's Enter adds. The
    REPL echoes the value of an expression statement as it does for a reader
    (a bare ``os.environ.setdefault(...)`` shows its value), so stdout is
    what the reader sees.
    """
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_VARIABLES}
    paste = ''.join(f'{block}\n' for block in python_blocks(text))
    return subprocess.run([sys.executable, '-q', '-i'], input=paste, env=env,
                          cwd=reader_folder(folder),
                          capture_output=True, text=True, timeout=600)


def paste_failures(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The failure lines of a REPL session's stderr (empty when all went well)."""
    return [match[0] for match in FAILURE.finditer(PROMPTS.sub('', result.stderr))]


def assert_pasted_cleanly(result: subprocess.CompletedProcess[str]) -> None:
    failures = paste_failures(result)
    assert result.returncode == 0 and not failures, (failures, result.stderr[-4000:])


@pytest.mark.parametrize('page', PAGES_WITH_CODE, ids=lambda p: p.name)
def test_python_blocks_paste_into_the_repl_and_run(page: Path, tmp_path: Path) -> None:
    """One REPL per page: a jax start-up, then its code (the user guide's 12
    blocks took 37-59 s at load 10)."""
    text = page.read_text()
    result = run_blocks(text, tmp_path)
    assert_pasted_cleanly(result)
    # The README's Quick start shows what it prints; a page that shows
    # nothing prints nothing, echoes included.
    assert_matches(''.join(PRINTS.findall(text)), result.stdout, f'{page.name} in a REPL')


@pytest.mark.parametrize('page', PAGES_WITH_CODE, ids=lambda p: p.name)
def test_python_blocks_run_as_a_file(page: Path, tmp_path: Path) -> None:
    """The page's blocks as one script (``python page.py``): what a reader
    who saves them gets, the same output as pasted."""
    text = page.read_text()
    script = tmp_path / 'page.py'
    script.write_text('\n'.join(python_blocks(text)))
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_VARIABLES}
    result = subprocess.run([sys.executable, str(script)], env=env,
                            cwd=reader_folder(tmp_path), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert_matches(''.join(PRINTS.findall(text)), result.stdout, f'{page.name} as a file')


@pytest.mark.parametrize('code, error, runs_as_file', [
    ('def f():\n  x = 1\n\n  return x\n', 'IndentationError: unexpected indent', True),
    ('if True:\n  x = 1\nprint(x)\n', 'SyntaxError: invalid syntax', True),
    ('x = 1\nraise ValueError(x)\n', 'Traceback (most recent call last):', False),
], ids=['blank-line-in-block', 'no-blank-line-after-block', 'exception'])
def test_what_fails_to_paste_fails_the_page(code: str, error: str, runs_as_file: bool,
                                             tmp_path: Path) -> None:
    """Pasting catches what running the page as a file does not."""
    assert error in paste_failures(run_blocks(f'```python\n{code}```\n', tmp_path))
    script = tmp_path / 'page.py'
    script.write_text(code)
    as_file = subprocess.run([sys.executable, str(script)], capture_output=True)
    assert (as_file.returncode == 0) == runs_as_file


def test_the_device_flags_of_the_test_run_do_not_reach_the_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flags of the test run (``make test`` and ``make test-1dev`` export
    them) do not leak in."""
    monkeypatch.setenv('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
    monkeypatch.setenv('JAX_PLATFORMS', 'cpu')
    monkeypatch.setenv('JAX_NUM_CPU_DEVICES', '1')
    page = ("```python\nimport os\n"
            "assert 'XLA_FLAGS' not in os.environ, os.environ['XLA_FLAGS']\n"
            "assert 'JAX_PLATFORMS' not in os.environ, os.environ['JAX_PLATFORMS']\n"
            "assert 'JAX_NUM_CPU_DEVICES' not in os.environ\n"
            "```\n")
    assert_pasted_cleanly(run_blocks(page, tmp_path))


def test_the_repl_echoes_expression_values(tmp_path: Path) -> None:
    """A bare expression's value reaches stdout, as it does for a reader;
    an assignment's does not."""
    page = "```python\nimport os\n_ = os.environ.setdefault('A', 'x')\n1 + 1\n```\n"
    result = run_blocks(page, tmp_path)
    assert_pasted_cleanly(result)
    assert result.stdout == '2\n'


def test_the_user_guide_has_code() -> None:
    assert any(p.name == 'sharding-stacked-layers.md' for p in PAGES_WITH_CODE)


def test_each_guide_block_after_the_first_says_which_blocks_it_continues() -> None:
    """Pasted alone, a later block of the guide would miss the names of the
    blocks before it: its first line says which ones it continues."""
    blocks = python_blocks((REPO_ROOT / 'docs' / 'sharding-stacked-layers.md').read_text())
    assert not blocks[0].startswith('# continues'), blocks[0]
    missing = [block.splitlines()[0] for block in blocks[1:]
               if not block.startswith('# continues: ')]
    assert not missing, missing
