"""The pages' claims about vanilla flax 0.12.12, run on vanilla and on ours.

- The README's "Is my model affected?" snippet (``check_layout.py``, copied
  beside the program as the README says), after the Quick start's
  model and optimizer: on ours it prints the page's line (no row);
  the Quick start and the snippet as one file with ``splits=4`` on vanilla
  (where the Quick start's 3 layers stop at ``nnx.Optimizer``), as the page
  tells a reader to run them, print what the page shows vanilla prints: the
  kernel's stale metadata and Adam's missharded moments, counted apart; a
  layout the arrays cannot have (3 layers on ``'fsdp'``) raises
  ``IndivisibleError`` at ``nnx.Optimizer`` on vanilla, and on ours trains
  with the layer axis unsharded while ``check_layout`` flags it.
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
import shutil
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
    """``code`` as a script (as the pages do: no device flags from outside),
    beside a copy of ``check_layout.py``."""
    shutil.copy(REPO_ROOT / 'check_layout.py', folder)
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

def quick_start() -> str:
    return block_after(README, r'^## Quick start$', 'python')


def check_layout_block() -> str:
    return block_after(README, r'^## Is my model affected\?$', 'python')


def built(program: str) -> str:
    """The Quick start (or a variant) up to its first print: model and optimizer built."""
    return program[:program.index("  print('kernel out_sharding")]


def four_layers() -> str:
    """The Quick start with 4 layers, which vanilla builds (README: ``splits=4``)."""
    assert quick_start().count('splits=3') == 1
    return quick_start().replace('splits=3', 'splits=4')


VERDICTS = ('STALE METADATA', 'MISSHARDED')


def test_check_layout_shows_no_mismatch_on_ours(tmp_path: Path) -> None:
    copy = block_after(README, r'^It prints, with this package:$', 'text')
    assert copy == 'arrays checked: 5, stale metadata: 0, missharded: 0\n'
    output = run(quick_start() + '\n' + check_layout_block(), tmp_path, None)
    assert output.endswith(copy), output
    assert not any(verdict in output for verdict in VERDICTS), output
    # With 4 layers, as vanilla is shown below: the same.
    assert run(built(four_layers()) + check_layout_block(), tmp_path, None) == copy


def test_what_the_readme_says_to_run_on_vanilla_shows_5112(
    vanilla_flax: Path, tmp_path: Path
) -> None:
    """The Quick start on vanilla stops at nnx.Optimizer (test_readme.py); run
    with ``splits=4`` and check_layout as one file, as the README says, it
    prints the stale metadata, Adam's mu laid out unlike the kernel, and
    check_layout's rows: the kernel's array is laid out right and only its
    metadata is stale, Adam's mu and nu are missharded, counted apart."""
    said = ' '.join(README.split())
    assert ('run the same blocks as one file in a venv with vanilla (`pip install '
            'flax==0.12.12 optax`), with `splits=4` in place of `splits=3`') in said
    copy = block_after(README, r'^To see #5112 on vanilla', 'text')
    assert "Adam mu array:       P('fsdp', 'tensor')" in copy
    output = run(four_layers() + '\n' + check_layout_block(), tmp_path, vanilla_flax)
    assert_matches(copy, output, 'the README\'s vanilla run')
    rows = {line.split(':')[0]: line for line in output.splitlines() if ' actual ' in line}
    assert rows['kernel'].endswith(') STALE METADATA'), rows
    assert rows['opt_state.0.mu.kernel'].endswith(') MISSHARDED'), rows
    assert rows['opt_state.0.nu.kernel'].endswith(') MISSHARDED'), rows
    assert len(rows) == 3 and output.splitlines()[-1] == (
        'arrays checked: 5, stale metadata: 1, missharded: 2'), output


def test_the_readme_and_the_guide_import_check_layout_from_its_file() -> None:
    """One check_layout: the README's and the guide's blocks import it from
    ``check_layout.py``; neither page defines one."""
    imported = 'from check_layout import check_layout'
    assert check_layout_block().startswith(imported + '\n'), check_layout_block()
    guide = [b for b in FENCE.findall(GUIDE) if 'check_layout(' in b]
    assert len(guide) == 1 and imported in guide[0], guide
    assert 'def check_layout' not in README + GUIDE


def bad_layout() -> str:
    """A layout the arrays cannot have: the Quick start's layers declared (None,
    'tensor'), stacked on 'fsdp' (size 2), then one optimizer step."""
    code = built(quick_start())
    for old, new in (("('fsdp', 'tensor')))", "(None, 'tensor')))"),
                     ('@nnx.vmap(in_axes=0, out_axes=0)', '@nnx.vmap(in_axes=0, out_axes=0, '
                      "transform_metadata={nnx.PARTITION_NAME: 'fsdp'})")):
        assert code.count(old) == 1, old
        code = code.replace(old, new)
    return code + (
        "  optimizer.update(model, jax.tree.map(lambda p: p * 0 + 1, "
        "nnx.state(model, nnx.Param)))\n"
        "  print('trained:', model.kernel.get_value().sharding.spec, optimizer.opt_state[0]"
        ".mu.kernel.get_value().sharding.spec)\n\n")


def test_the_bad_layout_builds_on_ours_and_check_layout_flags_it(
    vanilla_flax: Path, tmp_path: Path
) -> None:
    """A layout the arrays cannot have (README: a ``MISSHARDED`` on ours):
    vanilla raises IndivisibleError at nnx.Optimizer; ours builds and trains
    with the layer axis unsharded, and check_layout flags the kernel."""
    assert 'a layout the arrays cannot have' in ' '.join(README.split())
    output = run(bad_layout() + check_layout_block(), tmp_path, None)
    assert output.splitlines() == [
        "trained: P(None, None, 'tensor') P(None, None, 'tensor')",
        "kernel: declared ('fsdp', None, 'tensor') actual (None, None, 'tensor') MISSHARDED",
        'arrays checked: 5, stale metadata: 0, missharded: 1']
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_VARIABLES}
    script = tmp_path / 'bad.py'
    script.write_text(bad_layout())
    vanilla = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             env={**env, 'PYTHONPATH': str(vanilla_flax)}, timeout=600)
    assert vanilla.returncode == 1 and 'IndivisibleError' in vanilla.stderr, vanilla.stderr
    assert 'optimizer = nnx.Optimizer(model' in vanilla.stderr.split('IndivisibleError')[0]


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
