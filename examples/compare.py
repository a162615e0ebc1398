"""``make demo``: the same program on vanilla flax 0.12.12 and on ours, side by side.

Runs ``examples/stacked_optimizer.py`` under two interpreters at once:
vanilla's as written and with the documented workaround, ours as written;
then prints one table of what happened and a verdict line.

Usage: ``python examples/compare.py --vanilla PYTHON --ours PYTHON``
(``make demo`` passes the Pythons of ``.venv-demo-vanilla`` and ``.venv-demo``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

PROGRAM = Path(__file__).resolve().parent / 'stacked_optimizer.py'
WORKAROUND = 'transform_metadata={nnx.PARTITION_NAME: None}'
# What the verdict compares: everything but the version.
OUTCOMES = ('error_3_layers', 'kernel_metadata', 'kernel_spec', 'mu_spec', 'mismatched', 'state_bytes',
            'collectives', 'collective_bytes')


def run(python: str, *variants: str) -> list[dict[str, Any]]:
    """The program's JSON lines under ``python``, one per variant."""
    command = [python, str(PROGRAM), *(f'--variant={v}' for v in variants)]
    env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{')]
    if result.returncode != 0 or len(lines) != len(variants):
        raise SystemExit(f'{" ".join(command)} exited {result.returncode}:\n'
                         f'{result.stderr[-3000:]}')
    return lines


def spec(text: str) -> str:
    """``P(None, 'fsdp', 'tensor')`` -> ``P(None,fsdp,tensor)``, and a tuple
    ``(None, 'fsdp', 'tensor')`` -> ``(None,fsdp,tensor)`` (fits a column)."""
    return text.replace("'", '').replace(', ', ',')


def rows(run: dict[str, Any]) -> list[str]:
    """One run's column, top to bottom."""
    return [
        run['error_3_layers'] or 'works',
        spec(run['kernel_metadata']),
        spec(run['kernel_spec']),
        spec(run['mu_spec']),
        f'{run["mismatched"]} of {run["leaves"]}',
        f'{run["state_bytes"]:,}',
        f'{run["collectives"]} ({run["collective_bytes"]:,} B)',
    ]


LABELS = [
    '3 layers: nnx.Optimizer(...)',
    "4 layers: up.kernel's out_sharding",
    "  up.kernel's array sharding",
    "  Adam's mu of up.kernel",
    '  state arrays unlike their param',
    '  state bytes per device',
    '  collectives per train step',
]


def table(vanilla: dict[str, Any], workaround: dict[str, Any], ours: dict[str, Any]) -> str:
    columns = [['vanilla', 'as written', *rows(vanilla)],
               ['vanilla', '+ workaround (1)', *rows(workaround)],
               ['ours', 'as written', *rows(ours)]]
    labels = ['', '', *LABELS]
    width = max(len(cell) for column in columns for cell in column) + 3
    label_width = max(map(len, labels)) + 3
    lines = [labels[i].ljust(label_width) + ''.join(c[i].ljust(width) for c in columns)
             for i in range(len(labels))]
    return '\n'.join(line.rstrip() for line in lines)


def verdict(vanilla: dict[str, Any], workaround: dict[str, Any], ours: dict[str, Any]
            ) -> str:
    same = all(ours[key] == workaround[key] for key in OUTCOMES)
    broken = vanilla['error_3_layers'] is not None or vanilla['mismatched'] > 0
    if same and broken:
        return ('ours as written = vanilla with the workaround; vanilla as written '
                'fails or mis-shards.')
    return f'UNEXPECTED: ours as written {"=" if same else "!="} vanilla + workaround.'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--vanilla', required=True, help='a Python with flax 0.12.12')
    parser.add_argument('--ours', default=sys.executable, help='a Python with our flax')
    args = parser.parse_args(argv)
    with ThreadPoolExecutor(max_workers=2) as pool:
        vanilla_runs = pool.submit(run, args.vanilla, 'plain', 'workaround')
        ours_runs = pool.submit(run, args.ours, 'plain')
        (vanilla, workaround), (ours,) = vanilla_runs.result(), ours_runs.result()
    if vanilla['jax'] != ours['jax']:
        raise SystemExit(f'vanilla runs jax {vanilla["jax"]}, ours {ours["jax"]}: '
                         'compare with the same jax')
    print(f'examples/stacked_optimizer.py: 3 or 4 stacked blocks (nnx.vmap, nnx.scan), '
          f'nnx.Optimizer(adam),\n2x4 mesh (fsdp, tensor) of 8 CPU devices, jax {ours["jax"]}; '
          f'vanilla flax {vanilla["flax"]}, ours {ours["flax"]}.\n')
    print(table(vanilla, workaround, ours))
    print(f'\n(1) {WORKAROUND} on its nnx.vmap and nnx.scan')
    print(verdict(vanilla, workaround, ours))
    return 0 if verdict(vanilla, workaround, ours).startswith('ours') else 1


if __name__ == '__main__':
    sys.exit(main())
