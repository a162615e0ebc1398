"""Wall time of the NNX operations the patch series touches.

Prints one JSON line per case with the median and minimum (seconds) over
``--repeats`` timed runs, after ``--warmup`` untimed ones, of the wall time
(``timings``) and of the process's CPU time (``cpu_timings``, less sensitive
to other jobs on a shared machine) of:

- ``create``: eager model creation, ``nnx.split_rngs`` + ``nnx.vmap`` of
  ``layers`` blocks, until the arrays are ready;
- ``scan_trace``: ``jax.jit(forward).lower(...)`` of a fresh forward function
  (``nnx.merge`` + ``nnx.scan`` over the blocks), i.e. tracing and lowering;
- ``scan_compile``: ``.compile()`` of that lowering;
- ``scan_total``: ``scan_trace + scan_compile`` of the same run;
- ``optimizer``: ``nnx.Optimizer(blocks, optax.adam(1e-3), wrt=nnx.Param)``
  until its state is ready.

Every run of ``scan_*`` defines a new function, so nothing comes from JAX's
tracing or compilation caches. All runs happen under the 2x4 mesh.

Usage: ``python overhead.py --cases plain:8,plain:32 --width D --repeats N``
(one JSON line per ``variant:layers`` case).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any, Callable

import bench_model
from bench_model import jax, jnp, nnx

import optax

BATCH = 8


class Clock:
    """Wall time (``perf_counter``) and CPU time of this process (all threads)."""

    def __init__(self) -> None:
        gc.collect()
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def lap(self) -> tuple[float, float]:
        """``(wall, cpu)`` seconds since the previous lap (or creation)."""
        wall, cpu = time.perf_counter(), time.process_time()
        elapsed = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return elapsed


def summary(samples: list[float]) -> dict[str, Any]:
    """Median, minimum and all samples (seconds)."""
    return {'median': statistics.median(samples), 'min': min(samples), 'samples': samples}


def measure(layers: int, width: int, variant: str, repeats: int, warmup: int
            ) -> dict[str, Any]:
    """Timings of one case (``warmup`` untimed runs, then ``repeats`` timed)."""
    names = ('create', 'scan_trace', 'scan_compile', 'scan_total', 'optimizer')
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    with jax.set_mesh(bench_model.make_mesh()):
        blocks = bench_model.create_blocks(layers, width, variant)
        graphdef, state = nnx.split(blocks)
        x = jnp.ones((BATCH, width))

        def make_forward() -> Callable[[nnx.State, jax.Array], jax.Array]:
            def forward(state: nnx.State, x: jax.Array) -> jax.Array:
                return bench_model.apply_blocks(nnx.merge(graphdef, state), x, variant)
            return forward

        for run in range(warmup + repeats):
            laps: dict[str, tuple[float, float]] = {}
            clock = Clock()
            bench_model.block_until_ready(bench_model.create_blocks(layers, width, variant))
            laps['create'] = clock.lap()
            clock = Clock()
            lowered = jax.jit(make_forward()).lower(state, x)
            laps['scan_trace'] = clock.lap()
            lowered.compile()
            laps['scan_compile'] = clock.lap()
            (trace_wall, trace_cpu), (compile_wall, compile_cpu) = (
                laps['scan_trace'], laps['scan_compile'])
            laps['scan_total'] = (trace_wall + compile_wall, trace_cpu + compile_cpu)
            clock = Clock()
            bench_model.block_until_ready(
                nnx.Optimizer(blocks, optax.adam(1e-3), wrt=nnx.Param))
            laps['optimizer'] = clock.lap()
            if run >= warmup:
                for name, (wall_seconds, cpu_seconds) in laps.items():
                    wall[name].append(wall_seconds)
                    cpu[name].append(cpu_seconds)
    return {'variables': bench_model.count_variables(blocks), 'repeats': repeats,
            'warmup': warmup,
            'timings': {name: summary(values) for name, values in wall.items()},
            'cpu_timings': {name: summary(values) for name, values in cpu.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--cases', required=True,
                        help='comma-separated variant:layers, e.g. plain:8,plain:32')
    parser.add_argument('--width', type=int, required=True)
    parser.add_argument('--repeats', type=int, default=7)
    parser.add_argument('--warmup', type=int, default=1)
    args = parser.parse_args()
    bench_model.run_cases(
        'overhead', args.cases,
        lambda variant, layers: measure(layers, args.width, variant, args.repeats, args.warmup),
        width=args.width)


if __name__ == '__main__':
    main()
