"""Assertions on scenario reports: what a correct flax must make of them."""

from __future__ import annotations

from typing import Any

Report = dict[str, Any]

# Scenarios of tests/support/scenarios.py where vanilla shows the bug, so
# these checks find problems in its report: (scenario, arguments, vanilla's
# symptom). Run under each flax by tests/e2e/test_side_by_side.py, and side
# by side by the oracle (tests/oracle/corpus.py).
VANILLA_BUG_CASES: list[tuple[str, dict[str, Any], str]] = [
    ('vmap_stack_with_optimizer', {'layers': 3}, 'IndivisibleError'),
    ('vmap_stack_with_optimizer', {'layers': 4}, 'mis-sharded'),
    ('vmap_stack_with_optimizer', {'layers': 4, 'axis_type': 'explicit'}, 'mis-sharded'),
]


def _padded(spec: list[Any] | None, ndim: int) -> list[Any] | None:
    return None if spec is None else list(spec) + [None] * (ndim - len(spec))


def metadata_problems(report: Report) -> list[str]:
    """I1 + I5: metadata rank equals array rank and describes the array.

    The actual sharding is compared with ``nnx.get_partition_spec`` (which
    resolves logical names through the rules), or with the raw metadata.
    """
    if 'error' in report:
        return [f'scenario raised {report["error"]}']
    if 'get_partition_spec_error' in report:
        return [f'get_partition_spec raised {report["get_partition_spec_error"]}']
    problems = []
    for path, p in report['params'].items():
        ndim, meta = len(p['shape']), p['out_sharding']
        if meta is None:
            continue
        if len(meta) != ndim:
            problems.append(f'{path}: out_sharding {meta} for shape {p["shape"]}')
            continue
        resolved = _padded(report.get('get_partition_spec', {}).get(path, meta), ndim)
        if p['spec'] is not None and p['spec'] != resolved:
            problems.append(f'{path}: array sharded {p["spec"]}, metadata says {resolved}')
    return problems


def optimizer_problems(report: Report) -> list[str]:
    """I4: every state leaf mirroring a parameter has that parameter's sharding."""
    if 'error' in report:
        return [f'scenario raised {report["error"]}']
    problems = []
    mirrored = 0
    for state_path, leaf in report['opt_state'].items():
        for param_path, p in report['params'].items():
            if state_path.endswith('/' + param_path) and leaf['shape'] == p['shape']:
                mirrored += 1
                if leaf['spec'] != p['spec']:
                    problems.append(
                        f'{state_path}: sharded {leaf["spec"]}, parameter {p["spec"]}')
    if not mirrored:
        problems.append('no optimizer state leaf mirrors a parameter')
    return problems
