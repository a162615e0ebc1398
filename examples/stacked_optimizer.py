"""Stacked layers, an Adam optimizer, one train step: what ``make demo`` runs.

The program is the one of google/flax#5112: blocks of two ``nnx.Linear``
layers annotated for a 2x4 ``('fsdp', 'tensor')`` mesh (8 simulated CPU
devices), stacked with ``nnx.split_rngs`` + ``nnx.vmap`` (layer axis first),
applied with ``nnx.scan``, trained with ``nnx.Optimizer(model, optax.adam)``.

It prints one JSON line per ``--variant`` with what happened:

- ``error_3_layers``: the exception ``nnx.Optimizer`` raises on a 3-layer
  stack, or ``None`` (3 is not divisible by the ``tensor`` axis);
- on a 4-layer stack: ``kernel_metadata``, the ``out_sharding`` metadata of
  the stacked ``up.kernel`` (what ``nnx.get_partition_spec`` and
  ``nnx.Optimizer`` read); ``kernel_spec`` and ``mu_spec``, the array
  shardings of ``up.kernel`` and of Adam's first moment of it; ``mismatched`` of
  ``leaves``, the optimizer-state arrays sharded unlike their parameter;
  ``state_bytes``, the largest per-device share of the optimizer state; and
  ``collectives``/``collective_bytes``, the collective instructions of the
  compiled train step and the bytes of their per-device results.

``--variant plain`` is the program as written for our flax;
``--variant workaround`` adds vanilla's documented workaround,
``transform_metadata={nnx.PARTITION_NAME: None}``, to ``nnx.vmap`` and
``nnx.scan``. ``examples/compare.py`` runs it under vanilla flax 0.12.12 and
under ours and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections import Counter
from typing import Any

os.environ.setdefault('JAX_PLATFORMS', 'cpu')

import jax  # noqa: E402

jax.config.update('jax_num_cpu_devices', 8)

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

WIDTH = 256
COLLECTIVE = re.compile(
    r'=\s*(\S+)\s+(all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)'
    r'(-start)?\(')
ARRAY = re.compile(r'([a-z]+)(\d+)\[([\d,]*)\]')


class Block(nnx.Module):
    """Column-parallel up projection, row-parallel down projection."""

    def __init__(self, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        zeros = nnx.initializers.zeros_init()
        self.up = nnx.Linear(
            WIDTH, WIDTH, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ('fsdp', 'tensor')),
            bias_init=nnx.with_partitioning(zeros, ('tensor',)))
        self.down = nnx.Linear(
            WIDTH, WIDTH, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ('tensor', 'fsdp')),
            bias_init=nnx.with_partitioning(zeros, (None,)))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.down(jax.nn.gelu(self.up(x)))


def transform_kwargs(variant: str) -> dict[str, Any]:
    if variant == 'workaround':
        return {'transform_metadata': {nnx.PARTITION_NAME: None}}
    return {}


def create(layers: int, variant: str) -> Block:
    @nnx.split_rngs(splits=layers)
    @nnx.vmap(in_axes=0, out_axes=0, **transform_kwargs(variant))
    def make_blocks(rngs: nnx.Rngs) -> Block:
        return Block(rngs)

    return make_blocks(nnx.Rngs(0))


def loss_fn(model: Block, x: jax.Array, variant: str) -> jax.Array:
    @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry, **transform_kwargs(variant))
    def apply_block(block: Block, x: jax.Array) -> jax.Array:
        return block(x)

    return jnp.mean(apply_block(model, x) ** 2)


def error_of_optimizer(layers: int, variant: str) -> str | None:
    """The exception's type name if ``nnx.Optimizer`` raises, else None."""
    try:
        nnx.Optimizer(create(layers, variant), optax.adam(1e-3), wrt=nnx.Param)
    except Exception as error:  # noqa: BLE001 - reported, that is the point
        return type(error).__name__
    return None


def arrays(node: Any) -> dict[tuple[Any, ...], jax.Array]:
    return {path: v.get_value() for path, v in nnx.to_flat_state(nnx.state(node))}


def state_sharding(model: Block, optimizer: nnx.Optimizer) -> dict[str, Any]:
    """Each state array against the parameter it mirrors (same path suffix)."""
    params = arrays(model)
    state = arrays(optimizer.opt_state)
    mismatched = 0
    per_device: Counter[int] = Counter()
    for path, array in state.items():
        for shard in array.addressable_shards:
            per_device[shard.device.id] += shard.data.nbytes
        param = next((p for key, p in params.items() if path[-len(key):] == key), None)
        if param is not None and param.shape == array.shape and not (
                array.sharding.is_equivalent_to(param.sharding, array.ndim)):
            mismatched += 1
    mu = next(a for path, a in state.items() if path[-3:] == ('mu', 'up', 'kernel'))
    return {'kernel_metadata': str(model.up.kernel.out_sharding),
            'kernel_spec': str(params[('up', 'kernel')].sharding.spec),
            'mu_spec': str(mu.sharding.spec), 'mismatched': mismatched,
            'leaves': len(state), 'state_bytes': max(per_device.values())}


def collectives(model: Block, optimizer: nnx.Optimizer, variant: str) -> dict[str, int]:
    """Collectives of one compiled train step that keeps the state's shardings."""
    graphdef, state = nnx.split((model, optimizer))
    keep = jax.tree.map(lambda array: array.sharding, state)

    def train_step(state: nnx.State, x: jax.Array) -> tuple[jax.Array, nnx.State]:
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(loss_fn)(model, x, variant)
        optimizer.update(model, grads)
        return loss, nnx.state((model, optimizer))

    step = jax.jit(train_step, out_shardings=(None, keep))
    hlo = step.lower(state, jnp.ones((16, WIDTH))).compile().as_text()
    count = total = 0
    for result_type, _, started in COLLECTIVE.findall(hlo):
        found = ARRAY.findall(result_type)
        for _, bits, dims in (found[-1:] if started else found):
            size = 1
            for dim in filter(None, dims.split(',')):
                size *= int(dim)
            total += size * int(bits) // 8
        count += 1
    return {'collectives': count, 'collective_bytes': total}


def run(variant: str) -> dict[str, Any]:
    mesh = jax.make_mesh((2, 4), ('fsdp', 'tensor'),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)
    with jax.set_mesh(mesh):
        result: dict[str, Any] = {'variant': variant,
                                  'flax': __import__('flax').__version__,
                                  'jax': jax.__version__,
                                  'error_3_layers': error_of_optimizer(3, variant)}
        model = create(4, variant)
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
        result.update(state_sharding(model, optimizer))
        result.update(collectives(model, optimizer, variant))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--variant', action='append', choices=('plain', 'workaround'),
                        help='repeatable; default: plain')
    for variant in parser.parse_args().variant or ['plain']:
        print(json.dumps(run(variant)), flush=True)


if __name__ == '__main__':
    main()
