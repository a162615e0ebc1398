"""Run cases of all three programs in one process (one JAX start-up).

The smoke mode uses it to keep the number of interpreter start-ups at one per
interpreter; the full mode runs every case in its own process instead.
Prints one JSON line per case, in order, exactly like the programs.

Usage: ``python batch.py --cases memory:plain:4,overhead:workaround:2 --width D
--overhead-width D --repeats N --warmup N``.
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
                        help='comma-separated program:variant:layers')
    parser.add_argument('--width', type=int, required=True)
    parser.add_argument('--overhead-width', type=int, required=True)
    parser.add_argument('--repeats', type=int, default=1)
    parser.add_argument('--warmup', type=int, default=0)
    args = parser.parse_args()
    measures: dict[str, tuple[Callable[[str, int], dict[str, Any]], dict[str, Any]]] = {
        'memory': (lambda variant, layers: memory.measure(layers, args.width, variant),
                   {'width': args.width}),
        'collectives': (
            lambda variant, layers: collectives.measure(layers, args.width, variant),
            {'width': args.width}),
        'overhead': (lambda variant, layers: overhead.measure(
            layers, args.overhead_width, variant, args.repeats, args.warmup),
            {'width': args.overhead_width}),
    }
    for item in args.cases.split(','):
        program, case = item.split(':', 1)
        measure, options = measures[program]
        ((variant, layers),) = bench_model.parse_cases(case)
        bench_model.emit_case(program, variant, layers, measure, **options)


if __name__ == '__main__':
    main()
