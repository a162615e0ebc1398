"""The pages' claims about vanilla flax 0.12.12, run on vanilla and on ours.

- The README's "Is my model affected?" snippet, after the Quick start's
  model: on ours it prints the page's rows (no ``MISMATCH``), on vanilla the
  #5112 rows the page shows.
- The guide's stacked-gradient recipes (accumulate in the carry, zip values
  with ``nnx.as_pure``, ``optimizer.update``) run on vanilla as written, on
  vanilla with its documented workaround and on ours, with the same printed
  result and the same values; the zip of a stacked mean with the parameters
  raises the pytree structure error on ours and on vanilla with the
  workaround, and runs on vanilla as written.

Vanilla is the registry's wheel, first on ``PYTHONPATH`` (``vanilla_flax``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from flaxpq.project import REPO_ROOT
from tests.docs.elide import assert_matches

README = (REPO_ROOT / 'README.md').read_text()
GUIDE = (REPO_ROOT / 'docs' / 'sharding-stacked-layers.md').read_text()
FENCE = re.compile(r'^```python\n(.*?)^```$', re.MULTILINE | re.DOTALL)
DEVICE_VARIABLES = ('XLA_FLAGS', 'JAX_PLATFORMS', 'JAX_NUM_CPU_DEVICES')
WORKAROUND = 'transform_metadata={nnx.PARTITION_NAME: None}'


def block_after(text: str, heading: str, fence: str) -> str:
    match = re.search(heading + r'.*?^```' + fence + r'\n(.*?)^```$', text,
                      re.MULTILINE | re.DOTALL)
    assert match, f'no ```{fence} block after {heading!r}'
    return match[1]


def section_blocks(text: str, heading: str) -> list[str]:
    """The ```python blocks of the section under ``heading``."""
    start = text.index(heading)
    end = text.find('\n## ', start + len(heading))
    return FENCE.findall(text[start:end if end != -1 else None])


def run(code: str, folder: Path, vanilla: Path | None) -> str:
    """``code`` as a script (as the pages do: no device flags from outside)."""
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_VARIABLES}
    if vanilla is not None:
        env['PYTHONPATH'] = str(vanilla)
    script = folder / 'program.py'
    script.write_text(code)
    result = subprocess.run([sys.executable, str(script)], env=env, cwd=folder,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    return result.stdout


# README: "Is my model affected?" ----------------------------------------------

def affected_program() -> str:
    """The Quick start up to its nnx.Optimizer line (vanilla raises there),
    then the snippet."""
    quick_start = block_after(README, r'^## Quick start$', 'python')
    model_part = quick_start[:quick_start.index('  optimizer = nnx.Optimizer')]
    return model_part + '\n' + block_after(README, r'^## Is my model affected\?$', 'python')


def test_the_affected_snippet_shows_no_mismatch_on_ours(tmp_path: Path) -> None:
    copy = block_after(README, r'^It prints, with this package:$', 'text')
    output = run(affected_program(), tmp_path, None)
    assert 'MISMATCH' not in output
    assert_matches(copy, output, 'the snippet on ours')


def test_the_affected_snippet_shows_the_5112_rows_on_vanilla(
    vanilla_flax: Path, tmp_path: Path
) -> None:
    copy = block_after(README, r'^On vanilla 0\.12\.12 it shows the #5112 rows:$', 'text')
    assert "declared ('fsdp', 'tensor') actual (None, 'fsdp', 'tensor') MISMATCH" in copy
    assert_matches(copy, run(affected_program(), tmp_path, vanilla_flax),
                   'the snippet on vanilla')


# The guide: stacked gradients --------------------------------------------------

CHECKSUM = ("\nprint('values:', [round(float(abs(v.get_value()).sum()), 4)"
            " for _, v in nnx.to_flat_state(nnx.state(model))])\n")


def gradients_program(workaround: bool) -> str:
    """The guide's first block, then its stacked-gradient blocks; with
    ``workaround``, vanilla's workaround on each of their ``nnx.scan`` calls."""
    setup = FENCE.findall(GUIDE)[0]
    blocks = section_blocks(GUIDE, '## Stacked gradients')
    assert len(blocks) == 2, 'the section has the stacked means and the recipes'
    code = '\n'.join(blocks)
    if workaround:
        code = code.replace('out_axes=0)', f'out_axes=0, {WORKAROUND})')
        code = code.replace('out_axes=nnx.Carry)', f'out_axes=nnx.Carry, {WORKAROUND})')
        assert code.count(WORKAROUND) == 2, code
    return setup + '\n' + code + CHECKSUM


def guide_prints(block_index: int) -> str:
    """The guide's "It prints" copy after the section's ``block_index``-th block."""
    start = GUIDE.index('## Stacked gradients')
    copies = re.findall(r'^It prints[^\n]*:\n\n```text\n(.*?)^```$',
                        GUIDE[start:], re.MULTILINE | re.DOTALL)
    return copies[block_index]


def test_the_stacked_gradient_recipes_run_on_both_flaxes(
    vanilla_flax: Path, tmp_path: Path
) -> None:
    """Three runs of the guide's section (ours, vanilla, vanilla + workaround),
    each a jax start-up and a few small compilations."""
    ours = run(gradients_program(False), tmp_path, None)
    plain = run(gradients_program(False), tmp_path, vanilla_flax)
    workaround = run(gradients_program(True), tmp_path, vanilla_flax)
    means, recipes = guide_prints(0), guide_prints(1)
    assert ours == means + recipes + ours.splitlines()[-1] + '\n'
    # Vanilla as written: its stacked mean keeps the per-layer spec; the zip runs.
    assert plain.splitlines()[0] == "param: ('fsdp', 'tensor')  mean: ('fsdp', 'tensor')"
    assert 'pytree structure error' not in plain
    # Vanilla with the workaround: as ours.
    assert workaround == ours
    # The recipes print the same and leave the same values on all three.
    assert plain.splitlines()[-2:] == ours.splitlines()[-2:]
