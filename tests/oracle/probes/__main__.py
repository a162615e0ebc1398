"""``python -m tests.oracle.probes [NAME ...]``: print probe reports as JSON.

Runs under whichever flax is importable (put a tree first on PYTHONPATH to
try a materialized tree), one line per probe; all probes without names.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')

from tests.oracle import probes  # noqa: E402


def main(names: list[str]) -> None:
    registry = probes.load()
    for name in names or sorted(registry):
        report = probes.run(name)
        report.pop('traceback', None) if 'error' not in report else None
        print(json.dumps({name: report}))


if __name__ == '__main__':
    main(sys.argv[1:])
