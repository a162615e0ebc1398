"""The report of a benchmark run: tables of the measured cases, the
targets each met or not, and their printout."""

from __future__ import annotations

import math
import statistics
from typing import Any

from cases import CALL_RUNS, INSTRUCTIONS, OVERHEAD_RUNS, RECORDING_CALLS, Case

TIMINGS = ('create', 'scan_trace', 'scan_compile', 'scan_total', 'optimizer')
TARGETS = {'create': 1.03, 'scan_trace': 1.03, 'scan_total': 1.03, 'optimizer': 1.00}
# Growth of a timing with the number of Variables, as the exponent k of
# t ~ V**k between the smallest and the largest grouped model: <= 1 is at most
# linear (fixed costs push it below 1). Ours must not grow faster than this.
LINEAR_EXPONENT = 1.10
# The instruction counts' targets (cases.INSTRUCTIONS): as the wall-time ones.
INSTRUCTION_TARGETS = {'create': 1.03, 'scan_trace': 1.03, 'optimizer': 1.00}
# The calls section's targets (issue 65), on the ratio of the medians of the
# process medians: ours / vanilla+workaround for every call (the recording
# ones: 1.02), ours / vanilla as written for the tree-mode scans without
# broadcasts (stretch 1.05), and that ratio with 64 broadcasts no higher
# than without them.
CALL_TARGET, RECORDING_TARGET, PLAIN_TARGET = 1.00, 1.02, 1.08
PLAIN_TARGET_CALLS = ('tree_scan:64x4', 'tree_scan:8x32')


def tables(measured: dict[Case, dict[str, Any]]) -> dict[str, Any]:
    """The results' tables of the cases measured so far: versions, memory,
    collectives, overhead, scaling with the number of Variables and, once
    two sizes of it are measured, its growth."""
    scaling = overhead_table(measured, grouped=True)
    result = {
        'versions': {case.interpreter: row['versions'] for case, row in measured.items()},
        'memory': memory_rows(measured),
        'collectives': [row for case, row in measured.items() if case.program == 'collectives'],
        'overhead': overhead_table(measured),
        'variable_scaling': scaling,
    }
    if len(scaling) >= 2:
        result['variable_growth'] = growth(scaling)
    return result


def memory_rows(results: dict[Case, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = [row for case, row in results.items() if case.program == 'memory']
    for row in rows:
        if row['ok']:
            row['per_device_ratio'] = row['per_device_bytes'] / row['ideal_bytes']
            if row['compiled_output_bytes'] is not None:
                row['compiled_ratio'] = row['compiled_output_bytes'] / row['ideal_bytes']
    return rows


def _pooled(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Timings of ``rows`` (one per round) pooled: all samples, their median and min."""
    pooled = {}
    for name in TIMINGS:
        samples = [value for row in rows for value in row[key][name]['samples']]
        pooled[name] = {'median': statistics.median(samples), 'min': min(samples),
                        'samples': samples}
    return pooled


def overhead_table(results: dict[Case, dict[str, Any]], grouped: bool = False
                   ) -> dict[str, Any]:
    """``{layers: {label: pooled result, 'ratios': {timing: ours / vanilla}}}``.

    One-stack cases, or with ``grouped`` the cases in several stacks.
    """
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for case, row in results.items():
        if case.program == 'overhead' and (case.groups > 1) == grouped:
            rounds.setdefault(str(case.layers), {}).setdefault(case.label, []).append(row)
    table: dict[str, Any] = {}
    for layers, by_label in rounds.items():
        entry: dict[str, Any] = {
            label: {'variables': rows[0]['variables'], 'groups': rows[0]['groups'],
                    'versions': rows[0]['versions'],
                    'processes': len(rows), 'timings': _pooled(rows, 'timings'),
                    'cpu_timings': _pooled(rows, 'cpu_timings')}
            for label, rows in by_label.items()}
        ours, vanilla = (entry[label] for label, _, _ in OVERHEAD_RUNS)
        for key, ratio_key, statistic in (('timings', 'ratios', 'median'),
                                          ('timings', 'ratios_of_min', 'min'),
                                          ('cpu_timings', 'cpu_ratios', 'median')):
            entry[ratio_key] = {name: ours[key][name][statistic] / vanilla[key][name][statistic]
                                for name in TIMINGS}
        table[layers] = entry
    return table


def growth(table: dict[str, Any]) -> dict[str, Any]:
    """How each timing grows with the number of Variables in ``table``.

    Per label and timing: ``exponent``, k of t ~ V**k (log-log slope of the
    medians) between the smallest and the largest model, and
    ``upper_exponent`` between the two largest (where fixed costs weigh
    least); ``per_variable``, the added seconds per added Variable between
    the smallest and the largest; and the ratio ours / vanilla of the latter.
    """
    sizes = sorted(table.values(), key=lambda entry: entry['ours']['variables'])

    def slope(label: str, name: str, small: dict[str, Any], large: dict[str, Any]
              ) -> tuple[float, float]:
        """(log-log slope, seconds per Variable) from ``small`` to ``large``."""
        v0, v1 = small[label]['variables'], large[label]['variables']
        t0, t1 = (small[label]['timings'][name]['median'],
                  large[label]['timings'][name]['median'])
        return math.log(t1 / t0) / math.log(v1 / v0), (t1 - t0) / (v1 - v0)

    result: dict[str, Any] = {}
    for label, _, _ in OVERHEAD_RUNS:
        result[label] = {'variables': [entry[label]['variables'] for entry in sizes]}
        for name in TIMINGS:
            exponent, per_variable = slope(label, name, sizes[0], sizes[-1])
            upper_exponent, _ = slope(label, name, sizes[-2], sizes[-1])
            result[label][name] = {'exponent': exponent, 'upper_exponent': upper_exponent,
                                   'per_variable': per_variable}
    ours, vanilla = (result[label] for label, _, _ in OVERHEAD_RUNS)
    result['per_variable_ratios'] = {
        name: ours[name]['per_variable'] / vanilla[name]['per_variable'] for name in TIMINGS}
    return result


def _collective_summary(row: dict[str, Any]) -> str:
    parts = [f'{kind} {entry["count"]}x/{entry["bytes"]}B'
             for kind, entry in row['collectives'].items() if entry['count']]
    return ', '.join(parts) or 'none'


def checks(results: dict[str, Any]) -> dict[str, bool]:
    """The targets of the issue, each True if met by these results (of the
    sections that ran)."""
    met: dict[str, bool] = {}
    if 'memory' in results:
        memory = {row['label']: row for row in results['memory'] if row['layers']
                  == results['config']['layers']}
        met['memory: ours at ideal (per device)'] = memory['ours']['per_device_ratio'] == 1.0
    if results.get('collectives'):
        collectives = {row['label']: row for row in results['collectives']}
        met['collectives: ours == vanilla+workaround'] = (
            collectives['ours']['collectives']
            == collectives['vanilla+workaround']['collectives'])
    headline = results.get('overhead', {}).get(str(results['config']['overhead_layers']))
    if headline is not None:
        met.update({f'overhead: {name} median ratio <= {target:.2f}':
                    headline['ratios'][name] <= target for name, target in TARGETS.items()})
    if 'variable_growth' in results:
        met.update({f'scaling: ours {name} grows at most linearly in Variables '
                    f'(exponent <= {LINEAR_EXPONENT:.2f})':
                    results['variable_growth']['ours'][name]['exponent'] <= LINEAR_EXPONENT
                    for name in TIMINGS})
    instructions = results.get('instructions', {'skipped': 'not run'})
    if 'skipped' not in instructions:
        met.update({f'instructions: {name} ratio <= {target:.2f} (L={case})':
                    instructions[case]['ratios'][name] <= target
                    for case in results['config']['instruction_cases'][:1]
                    for name, target in INSTRUCTION_TARGETS.items()})
    met.update(call_checks(results.get('calls', {'skipped': 'not run'})))
    return met


def call_checks(calls: dict[str, Any]) -> dict[str, bool]:
    """The calls section's targets, for the cases it counted."""
    if 'skipped' in calls:
        return {}
    cases = [case for case in calls if case != 'seconds']
    met = {}
    for case in cases:
        target = RECORDING_TARGET if case in RECORDING_CALLS else CALL_TARGET
        met[f'calls: {case} ours / vanilla+workaround <= {target:.2f}'] = (
            calls[case]['ratios']['vanilla+workaround']['median'] <= target)
    for case in PLAIN_TARGET_CALLS:
        if case in calls:
            met[f'calls: {case} ours / vanilla <= {PLAIN_TARGET:.2f}'] = (
                calls[case]['ratios']['vanilla']['median'] <= PLAIN_TARGET)
        if case in calls and f'{case}:b64' in calls:
            met[f'calls: {case} with 64 broadcasts ours / vanilla <= without'] = (
                calls[f'{case}:b64']['ratios']['vanilla']['median']
                <= calls[case]['ratios']['vanilla']['median'])
    return met


def _print_timings(table: dict[str, Any]) -> None:
    """One row per L of an ``overhead_table``: medians, ratio, (min ratio; CPU ratio)."""
    print(f'{"L":>5s} {"vars":>4s} ' + ' '.join(f'{name:>36s}' for name in TIMINGS))
    for layers, entry in table.items():
        ours, vanilla = entry['ours'], entry['vanilla+workaround']
        cells = [f'{ours["timings"][n]["median"]:.4f}/{vanilla["timings"][n]["median"]:.4f}'
                 f' {entry["ratios"][n]:4.2f} ({entry["ratios_of_min"][n]:4.2f};'
                 f' {entry["cpu_ratios"][n]:4.2f})'
                 for n in TIMINGS]
        print(f'{layers:>5s} {ours["variables"]:4d} ' + ' '.join(f'{c:>36s}' for c in cells))


def print_header(results: dict[str, Any]) -> None:
    print(f'\n== {results["mode"]} mode, {results["date"]}, '
          f'{results["machine"]["nproc"]} cores, {results["machine"]["cpu"]}')
    for key, versions in results.get('versions', {}).items():
        print(f'   {key}: ' + ', '.join(f'{n} {v}' for n, v in versions.items()))


def print_memory(results: dict[str, Any]) -> None:
    config = results['config']
    print(f'\n1. Optimizer-state bytes per device (adam, d={config["width"]}, '
          'mesh 2x4 fsdp x tensor)')
    print(f'{"run":26s} {"L":>4s} {"ideal":>10s} {"shards":>10s} {"ratio":>6s} '
          f'{"compiled":>10s} {"ratio":>6s} {"mis":>4s}  state spec (up.kernel)')
    for row in results['memory']:
        if not row['ok']:
            print(f'{row["label"]:26s} {row["layers"]:4d}  raised {row["error"][:90]}')
            continue
        compiled = row['compiled_output_bytes']
        print(f'{row["label"]:26s} {row["layers"]:4d} {row["ideal_bytes"]:10d} '
              f'{row["per_device_bytes"]:10d} {row["per_device_ratio"]:6.3f} '
              f'{compiled if compiled is not None else "n/a":>10} '
              f'{row.get("compiled_ratio", float("nan")):6.3f} '
              f'{row["mismatched_leaves"]:4d}  {row["state_spec"]}')


def print_collectives(results: dict[str, Any]) -> None:
    print(f'\n2. Collectives in the compiled train step (L={results["config"]["layers"]}, '
          f'static count in HLO)')
    print(f'{"run":26s} {"count":>6s} {"bytes":>10s}  detail (count x / result bytes)')
    for row in results['collectives']:
        if not row['ok']:
            print(f'{row["label"]:26s} raised {row["error"][:90]}')
            continue
        print(f'{row["label"]:26s} {row["total_count"]:6d} {row["total_bytes"]:10d}  '
              f'{_collective_summary(row)}')


def print_overhead(results: dict[str, Any]) -> None:
    config = results['config']
    runs = config['repeats'] * config['rounds']
    print(f'\n3-4. Overhead, median of {runs} runs: wall s ours/vanilla+workaround, '
          'ratio; (ratio of minima; ratio of median CPU times)')
    _print_timings(results['overhead'])


def print_scaling(results: dict[str, Any]) -> None:
    print(f'\n4. Scaling with the number of Variables: L layers in stacks of '
          f'{results["config"]["group_size"]} (one nnx.vmap and one nnx.scan per stack), '
          'same columns')
    _print_timings(results['variable_scaling'])
    grown = results.get('variable_growth')
    if grown is None:
        return
    counts = grown['ours']['variables']
    print(f'growth with Variables ({", ".join(map(str, counts))}), ours / vanilla+workaround: '
          f'exponent k of t ~ V**k from {counts[0]} to {counts[-1]} [from {counts[-2]}]; '
          f'ms per added Variable from {counts[0]} to {counts[-1]} = ratio')
    for name in TIMINGS:
        ours, vanilla = grown['ours'][name], grown['vanilla+workaround'][name]
        print(f'  {name:13s} k {ours["exponent"]:4.2f} [{ours["upper_exponent"]:4.2f}] / '
              f'{vanilla["exponent"]:4.2f} [{vanilla["upper_exponent"]:4.2f}]   '
              f'{1e3 * ours["per_variable"]:8.3f} / {1e3 * vanilla["per_variable"]:8.3f} '
              f'= {grown["per_variable_ratios"][name]:4.2f}')


def print_instructions(results: dict[str, Any]) -> None:
    config = results['config']
    instructions = results['instructions']
    print('\n5. Instructions of the main thread under callgrind (median of '
          f'{config["instruction_repeats"]}, millions): ours/vanilla+workaround, ratio')
    if 'skipped' in instructions:
        print(f'   skipped: {instructions["skipped"]}')
        return
    print(f'{"case":>6s} {"vars":>4s} ' + ' '.join(f'{name:>24s}' for name in INSTRUCTIONS))
    for case in config['instruction_cases']:
        entry = instructions[case]
        ours, vanilla = entry['ours'], entry['vanilla+workaround']
        cells = [f'{statistics.median(ours["instructions"][n]) / 1e6:.1f}/'
                 f'{statistics.median(vanilla["instructions"][n]) / 1e6:.1f} '
                 f'{entry["ratios"][n]:5.3f}' for n in INSTRUCTIONS]
        print(f'{case:>6s} {ours["variables"]:4d} ' + ' '.join(f'{c:>24s}' for c in cells))


def print_calls(results: dict[str, Any]) -> None:
    calls = results['calls']
    print('\n6. One traced call (jax.make_jaxpr), instructions of the main thread under '
          f'callgrind (millions; median of {results["config"]["instruction_repeats"]} a '
          'process, lowest-highest process): ours, vanilla, vanilla+workaround; '
          'ours / vanilla, ours / vanilla+workaround (median [range])')
    if 'skipped' in calls:
        print(f'   skipped: {calls["skipped"]}')
        return
    entries = [entry for case, entry in calls.items() if case != 'seconds']
    print('   flax: ' + ', '.join(f'{label} {entries[0][label]["versions"]["flax"]}'
                                   for label, _, _ in CALL_RUNS))
    for case, entry in calls.items():
        if case == 'seconds':
            continue
        cells = []
        for label, _, _ in CALL_RUNS:
            medians = entry[label]['medians']
            cells.append(f'{statistics.median(medians) / 1e6:7.2f} '
                         f'({min(medians) / 1e6:.2f}-{max(medians) / 1e6:.2f})')
        ratios = [f'{ratio["median"]:.4f} [{ratio["range"][0]:.4f}-{ratio["range"][1]:.4f}]'
                  for ratio in (entry['ratios'][label] for label, _, _ in CALL_RUNS[1:])]
        print(f'{case:22s} ' + ' '.join(f'{c:>24s}' for c in cells) + '  '
              + '  '.join(ratios))


# The printout of each section of a run (cases.sections, and the instruction
# counts), once its figures are in the results.
SECTION_PRINTERS = {
    'memory': (print_memory,),
    'collectives': (print_collectives,),
    'overhead': (print_overhead,),
    'variable_scaling': (print_scaling,),
    'programs': (print_memory, print_collectives, print_overhead, print_scaling),
    'instructions': (print_instructions,),
    'calls': (print_calls,),
}


def print_section(name: str, results: dict[str, Any]) -> None:
    for printer in SECTION_PRINTERS[name]:
        printer(results)


def print_report(results: dict[str, Any]) -> None:
    print_header(results)
    for name in results['sections_done']:
        print_section(name, results)
    print('\nTargets:' + (' (smoke mode: the timing targets mean nothing)'
                         if results['mode'] == 'smoke' else ''))
    for name, met in results['checks'].items():
        print(f'  {"met    " if met else "NOT MET"}  {name}')
    print(f'\nelapsed {results["elapsed_seconds"]:.1f} s')
