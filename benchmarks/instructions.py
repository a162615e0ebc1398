"""Instructions the main (Python) thread executes for the overhead operations.

Wall time on a shared 2-core machine moves by 5-15 % between processes, more
than the 3 % the overhead targets ask to resolve. Instruction counts do not:
this program runs under valgrind's callgrind, uninstrumented until a
measured operation starts, and reads back the instructions the main thread
executed between two marks (callgrind client requests in
``callgrind_marks.c``, which the driver compiles against the system's
``valgrind/callgrind.h`` and passes as ``--marks``). The main thread
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
        --cases plain:64 --width D --repeats N --warmup N --out-dir DIR \\
        --marks callgrind_marks.so
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import bench_model
from bench_model import jax
from callgrind import Counter, load_marks
from overhead import Operations


def measure(case: bench_model.CaseSpec, width: int, repeats: int, warmup: int,
            counter: Counter) -> dict[str, Any]:
    """Instruction counts of one case (``warmup`` uncounted runs, then ``repeats``)."""
    counts: dict[str, list[int]] = {
        name: [] for name in ('create', 'scan_trace', 'scan_compile', 'optimizer')}
    with jax.set_mesh(bench_model.make_mesh()):
        operations = Operations(case.layers, width, case.variant, case.groups)
        for _ in range(warmup):
            operations.create()
            operations.lower().compile()
            operations.optimizer()
        for _ in range(repeats):
            counts['create'].append(counter.count('create', operations.create)[0])
            count, lowered = counter.count('scan_trace', operations.lower)
            counts['scan_trace'].append(count)
            counts['scan_compile'].append(counter.count('scan_compile', lowered.compile)[0])
            counts['optimizer'].append(counter.count('optimizer', operations.optimizer)[0])
    return {'variables': bench_model.count_variables(operations.model), 'repeats': repeats,
            'warmup': warmup, 'instructions': counts}


def main() -> None:
    parser = bench_model.case_parser(__doc__.splitlines()[0], repeats=3)
    parser.add_argument('--out-dir', type=Path, required=True,
                        help="the directory of valgrind's --callgrind-out-file")
    parser.add_argument('--marks', type=Path, required=True,
                        help='callgrind_marks.c compiled as a shared library')
    args = parser.parse_args()
    counter = Counter(args.out_dir, load_marks(args.marks))
    bench_model.run_cases(
        'instructions', args.cases,
        lambda case: measure(case, args.width, args.repeats, args.warmup, counter),
        width=args.width)


if __name__ == '__main__':
    main()
