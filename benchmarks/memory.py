"""Optimizer-state memory per device for a stacked model (adam, 2x4 mesh).

Prints one JSON line with, for the optimizer state (adam's ``mu``, ``nu`` and
``count``):

- ``total_bytes``: bytes of the whole (unsharded) state;
- ``ideal_bytes``: bytes per device if every state leaf were sharded like the
  parameter it mirrors (its path ends with the parameter's path); leaves that
  mirror no parameter (``count``) count in full;
- ``per_device_bytes``: max over devices of the bytes of the state arrays'
  addressable shards held by that device (eager ``nnx.Optimizer``);
- ``compiled_output_bytes``: ``output_size_in_bytes`` from the memory analysis
  of ``jax.jit`` of model creation + ``nnx.Optimizer`` returning the state
  (per device: the compiled module is the SPMD-partitioned one);
- ``mismatched_leaves``: state leaves whose sharding differs from their
  parameter's.

Usage: ``python memory.py --cases plain:8,workaround:8 --width D`` (one JSON
line per ``variant:layers`` case).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import bench_model
from bench_model import jax, nnx

import numpy as np
import optax


def flat_arrays(node: Any) -> dict[tuple[Any, ...], jax.Array]:
    """``{path: array}`` of every Variable in ``node``."""
    return {path: variable.get_value()
            for path, variable in nnx.to_flat_state(nnx.state(node))}


def mirrored_param(path: tuple[Any, ...], params: dict[tuple[Any, ...], jax.Array]
                   ) -> jax.Array | None:
    """The parameter whose path is a suffix of the state leaf's ``path``."""
    for param_path, param in params.items():
        if path[-len(param_path):] == param_path:
            return param
    return None


def shard_bytes(shape: tuple[int, ...], dtype: Any, sharding: jax.sharding.Sharding
                ) -> int:
    """Bytes of one shard of an array of ``shape`` placed with ``sharding``."""
    return int(np.prod(sharding.shard_shape(shape), dtype=np.int64)) * np.dtype(dtype).itemsize


def measure(layers: int, width: int, variant: str) -> dict[str, Any]:
    mesh = bench_model.make_mesh()
    with jax.set_mesh(mesh):
        blocks = bench_model.create_blocks(layers, width, variant)
        optimizer = nnx.Optimizer(blocks, optax.adam(1e-3), wrt=nnx.Param)
        bench_model.block_until_ready(optimizer)

        params = flat_arrays(blocks)
        state = flat_arrays(optimizer.opt_state)
        per_device: dict[int, int] = defaultdict(int)
        total = ideal = mismatched = 0
        for path, array in state.items():
            total += array.nbytes
            for shard in array.addressable_shards:
                per_device[shard.device.id] += shard.data.nbytes
            param = mirrored_param(path, params)
            if param is None or param.shape != array.shape:
                ideal += array.nbytes
                continue
            ideal += shard_bytes(array.shape, array.dtype, param.sharding)
            if not array.sharding.is_equivalent_to(param.sharding, array.ndim):
                mismatched += 1
        example = next(path for path in state if path[-2:] == ('up', 'kernel'))

        def init() -> nnx.State:
            model = bench_model.create_blocks(layers, width, variant)
            return nnx.state(nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param).opt_state)

        analysis = jax.jit(init).lower().compile().memory_analysis()
        compiled_bytes = None if analysis is None else int(analysis.output_size_in_bytes)

    return {
        'devices': len(mesh.devices.flat),
        'total_bytes': int(total), 'ideal_bytes': int(ideal),
        'per_device_bytes': max(per_device.values()),
        'per_device_min_bytes': min(per_device.values()),
        'compiled_output_bytes': compiled_bytes,
        'state_leaves': len(state), 'mismatched_leaves': mismatched,
        'param_spec': str(params[example[-2:]].sharding.spec),
        'state_spec': str(state[example].sharding.spec),
    }


def main() -> None:
    bench_model.cli('memory', __doc__.splitlines()[0], measure)


if __name__ == '__main__':
    main()
