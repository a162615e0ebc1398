"""Instructions the main (Python) thread executes for the overhead operations.

Wall time on a shared 2-core machine moves by 5-15 % between processes, more
than the 3 % the overhead targets ask to resolve. Instruction counts do not:
this program runs under valgrind's callgrind, uninstrumented until a
measured operation starts, and reads back the instructions the main thread
executed between two marks (callgrind client requests, compiled from a
five-line C file with the system's ``valgrind/callgrind.h``). The main thread
runs all of flax's and jax's Python and dispatch code; the other threads
(XLA's runtime), whose counts vary from run to run, are left out.

For each ``variant:layers[:groups]`` case it prints one JSON line with, per
operation (``create``, ``scan_trace``, ``scan_compile``, ``optimizer``, as in
``overhead.py``), the main thread's instruction count of each of
``--repeats`` runs after ``--warmup`` uninstrumented ones.

Run it only through the driver (``run.py``), which starts it as::

    valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes \\
        --trace-children=yes --callgrind-out-file=DIR/callgrind.out.%p \\
        python instructions.py \\
        --cases plain:64 --width D --repeats N --warmup N --out-dir DIR
"""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

import bench_model
from bench_model import jax
from overhead import Operations

MARKS_C = '''
#include <valgrind/callgrind.h>
void marks_start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void marks_stop(const char *name) {
  CALLGRIND_DUMP_STATS_AT(name); CALLGRIND_STOP_INSTRUMENTATION;
}
'''


def load_marks(build_dir: Path) -> ctypes.CDLL:
    """Compile and load the callgrind marks (``marks_start``, ``marks_stop``)."""
    source, library = build_dir / 'marks.c', build_dir / 'marks.so'
    source.write_text(MARKS_C)
    subprocess.run(['gcc', '-O1', '-shared', '-fPIC', '-o', str(library), str(source)],
                   check=True)
    marks = ctypes.CDLL(str(library))
    marks.marks_stop.argtypes = [ctypes.c_char_p]
    return marks


def main_thread_instructions(out_dir: Path, dump: int) -> int:
    """Instructions of the main thread (thread 1) in callgrind dump number ``dump``.

    Only this process dumps by number (``callgrind.out[.PID].N-01``); a child
    (gcc) traced by valgrind writes its counts once, at exit, unnumbered.
    """
    paths = list(out_dir.glob(f'callgrind.out*.{dump}-01'))
    if len(paths) != 1:
        raise RuntimeError(f'expected one callgrind dump {dump} in {out_dir}, found {paths}; '
                           'run this program through run.py (under valgrind)')
    (path,) = paths
    for line in path.read_text().splitlines():
        if line.startswith(('summary:', 'totals:')):
            return int(line.split()[1])
    raise RuntimeError(f'{path} has no summary line')


class Counter:
    """Counts the main thread's instructions of a callable between marks."""

    def __init__(self, out_dir: Path, marks: ctypes.CDLL) -> None:
        self.out_dir, self.marks, self.dumps = out_dir, marks, 0

    def count(self, name: str, operation: Callable[[], Any]) -> int:
        self.marks.marks_start()
        operation()
        self.marks.marks_stop(name.encode())
        self.dumps += 1
        return main_thread_instructions(self.out_dir, self.dumps)


def measure(layers: int, width: int, variant: str, repeats: int, warmup: int,
            groups: int, counter: Counter) -> dict[str, Any]:
    """Instruction counts of one case (``warmup`` uncounted runs, then ``repeats``)."""
    counts: dict[str, list[int]] = {
        name: [] for name in ('create', 'scan_trace', 'scan_compile', 'optimizer')}
    with jax.set_mesh(bench_model.make_mesh()):
        operations = Operations(layers, width, variant, groups)
        for _ in range(warmup):
            operations.create()
            operations.lower().compile()
            operations.optimizer()
        for _ in range(repeats):
            counts['create'].append(counter.count('create', operations.create))
            lowered: list[jax.stages.Lowered] = []
            counts['scan_trace'].append(
                counter.count('scan_trace', lambda: lowered.append(operations.lower())))
            counts['scan_compile'].append(
                counter.count('scan_compile', lambda: lowered[0].compile()))
            counts['optimizer'].append(counter.count('optimizer', operations.optimizer))
    return {'variables': bench_model.count_variables(operations.model), 'repeats': repeats,
            'warmup': warmup, 'instructions': counts}


def main() -> None:
    parser = bench_model.case_parser(__doc__.splitlines()[0], repeats=3)
    parser.add_argument('--out-dir', type=Path, required=True,
                        help="the directory of valgrind's --callgrind-out-file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as build_dir:
        counter = Counter(args.out_dir, load_marks(Path(build_dir)))
        bench_model.run_cases(
            'instructions', args.cases,
            lambda case: measure(case.layers, args.width, case.variant, args.repeats,
                                 args.warmup, case.groups, counter),
            width=args.width)


if __name__ == '__main__':
    main()
