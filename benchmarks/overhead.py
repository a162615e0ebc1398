"""Wall time of the NNX operations the patch series touches.

Prints one JSON line per case with the median and minimum (seconds) over
``--repeats`` timed runs, after ``--warmup`` untimed ones, of the wall time
(``timings``) and of the process's CPU time (``cpu_timings``, less sensitive
to other jobs on a shared machine) of:

- ``create``: eager model creation, ``nnx.split_rngs`` + ``nnx.vmap`` of
  ``layers`` blocks (one ``nnx.vmap`` per stack with ``groups`` stacks),
  until the arrays are ready;
- ``scan_trace``: ``jax.jit(forward).lower(...)`` of a fresh forward function
  (``nnx.merge`` + one ``nnx.scan`` per stack), i.e. tracing and lowering;
- ``scan_compile``: ``.compile()`` of that lowering;
- ``scan_total``: ``scan_trace + scan_compile`` of the same run;
- ``optimizer``: ``nnx.Optimizer(blocks, optax.adam(1e-3), wrt=nnx.Param)``
  until its state is ready.

Every run of ``scan_*`` defines a new function, so nothing comes from JAX's
tracing or compilation caches. All runs happen under the 2x4 mesh.

Usage: ``python overhead.py --cases plain:8,plain:128:32 --width D --repeats N``
(one JSON line per ``variant:layers[:groups]`` case).
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

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


class Operations:
    """The measured operations of one case; create and use it under the mesh."""

    def __init__(self, layers: int, width: int, variant: str, groups: int) -> None:
        self.layers, self.width, self.variant, self.groups = layers, width, variant, groups
        self.model = bench_model.create_model(layers, width, variant, groups)
        self.graphdef, self.state = nnx.split(self.model)
        self.x = jnp.ones((BATCH, width))

    def create(self) -> None:
        """Create the model eagerly, until its arrays are ready."""
        bench_model.block_until_ready(
            bench_model.create_model(self.layers, self.width, self.variant, self.groups))

    def lower(self) -> jax.stages.Lowered:
        """Trace and lower a new forward function (no cache hit)."""
        graphdef, variant = self.graphdef, self.variant

        def forward(state: nnx.State, x: jax.Array) -> jax.Array:
            return bench_model.apply_model(nnx.merge(graphdef, state), x, variant)

        return jax.jit(forward).lower(self.state, self.x)

    def optimizer(self) -> None:
        """Construct an adam ``nnx.Optimizer``, until its state is ready."""
        bench_model.block_until_ready(
            nnx.Optimizer(self.model, optax.adam(1e-3), wrt=nnx.Param))


def measure(case: bench_model.CaseSpec, width: int, repeats: int, warmup: int
            ) -> dict[str, Any]:
    """Timings of one case (``warmup`` untimed runs, then ``repeats`` timed)."""
    names = ('create', 'scan_trace', 'scan_compile', 'scan_total', 'optimizer')
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    with jax.set_mesh(bench_model.make_mesh()):
        operations = Operations(case.layers, width, case.variant, case.groups)
        for run in range(warmup + repeats):
            laps: dict[str, tuple[float, float]] = {}
            clock = Clock()
            operations.create()
            laps['create'] = clock.lap()
            clock = Clock()
            lowered = operations.lower()
            laps['scan_trace'] = clock.lap()
            lowered.compile()
            laps['scan_compile'] = clock.lap()
            (trace_wall, trace_cpu), (compile_wall, compile_cpu) = (
                laps['scan_trace'], laps['scan_compile'])
            laps['scan_total'] = (trace_wall + compile_wall, trace_cpu + compile_cpu)
            clock = Clock()
            operations.optimizer()
            laps['optimizer'] = clock.lap()
            if run >= warmup:
                for name, (wall_seconds, cpu_seconds) in laps.items():
                    wall[name].append(wall_seconds)
                    cpu[name].append(cpu_seconds)
    return {'variables': bench_model.count_variables(operations.model), 'repeats': repeats,
            'warmup': warmup,
            'timings': {name: summary(values) for name, values in wall.items()},
            'cpu_timings': {name: summary(values) for name, values in cpu.items()}}


def main() -> None:
    args = bench_model.case_parser(__doc__.splitlines()[0], repeats=7).parse_args()
    bench_model.run_cases(
        'overhead', args.cases,
        lambda case: measure(case, args.width, args.repeats, args.warmup),
        width=args.width)


if __name__ == '__main__':
    main()
