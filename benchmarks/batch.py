"""Run cases of all three programs in one process (one JAX start-up).

The smoke mode uses it to keep the number of interpreter start-ups at one per
interpreter; the full mode runs every case in its own process instead.
Prints one JSON line per case, in order, exactly like the programs.

Usage: ``python batch.py --cases memory:plain:4,overhead:workaround:8:2 --width D
--overhead-width D --repeats N --warmup N`` (``program:variant:layers[:groups]``).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

import bench_model
import collectives
import memory
import overhead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--cases', required=True,
                        help='comma-separated program:variant:layers[:groups]')
    parser.add_argument('--width', type=int, required=True)
    parser.add_argument('--overhead-width', type=int, required=True)
    parser.add_argument('--repeats', type=int, default=1)
    parser.add_argument('--warmup', type=int, default=0)
    args = parser.parse_args()
    measures: dict[str, tuple[Callable[[bench_model.CaseSpec], dict[str, Any]],
                              dict[str, Any]]] = {
        'memory': (bench_model.single_stack(memory.measure, args.width),
                   {'width': args.width}),
        'collectives': (bench_model.single_stack(collectives.measure, args.width),
                        {'width': args.width}),
        'overhead': (lambda case: overhead.measure(
            case, args.overhead_width, args.repeats, args.warmup),
            {'width': args.overhead_width}),
    }
    for item in args.cases.split(','):
        program, spec = item.split(':', 1)
        measure, options = measures[program]
        (case,) = bench_model.parse_cases(spec)
        bench_model.emit_case(program, case, measure, **options)


if __name__ == '__main__':
    main()
