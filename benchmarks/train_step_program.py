"""One stacked-layer train step, measured under the interpreter being measured.

Run by ``train_step.py`` (one process per case, one at a time: one process
holds an accelerator). It uses whatever devices JAX sees (no simulated
devices are forced: on a CPU host the caller's ``XLA_FLAGS`` decide) and
prints one JSON line: the case, the versions, the mesh, the step's trace and
lowering time and XLA compile time (ahead of time), the time of the first
step after that, the median of the timed steps, the devices'
peak memory where ``device.memory_stats()`` gives one, and every loss.

The model is a stack of MLP blocks annotated for an ``('fsdp', 'tensor')``
mesh, created with ``nnx.split_rngs`` + ``nnx.vmap``, placed by the sharded
init of the gspmd guide (``nnx.get_partition_spec`` +
``with_sharding_constraint`` inside ``nnx.jit``), applied with ``nnx.scan``
and trained with Adam in an ``nnx.jit`` step. ``--variant workaround`` adds
``transform_metadata={nnx.PARTITION_NAME: None}`` to the ``nnx.vmap`` and the
``nnx.scan`` (vanilla flax 0.12.12's documented workaround); ``plain`` is the
code as written.

Usage::

    python train_step_program.py --variant plain|workaround --size full|small
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

VARIANTS = ('plain', 'workaround')
LEARNING_RATE = 1e-4


@dataclass(frozen=True)
class Size:
    """The model and run sizes of one mode."""

    layers: int
    width: int
    ffn: int
    tokens: int
    steps: int  # timed steps after the first


SIZES = {
    # About 3 GiB of parameters and Adam state in float32: fits one 16 GiB chip.
    'full': Size(layers=16, width=1024, ffn=4096, tokens=4096, steps=20),
    # For a CPU smoke run (CI): seconds.
    'small': Size(layers=4, width=64, ffn=256, tokens=64, steps=3),
}


def lifted_kwargs(variant: str) -> dict[str, Any]:
    """Extra keyword arguments for ``nnx.vmap`` / ``nnx.scan`` in ``variant``."""
    if variant == 'plain':
        return {}
    if variant == 'workaround':
        return {'transform_metadata': {nnx.PARTITION_NAME: None}}
    raise ValueError(f'unknown variant {variant!r}; expected one of {VARIANTS}')


def mesh_shape(count: int) -> tuple[int, int]:
    """``(fsdp, tensor)`` over ``count`` devices: 2 along 'tensor' when even."""
    tensor = 2 if count % 2 == 0 else 1
    return count // tensor, tensor


class Block(nnx.Module):
    """Column-parallel up projection, row-parallel down projection, residual."""

    def __init__(self, width: int, ffn: int, layers: int, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        # The residual branches of ``layers`` blocks add up: each starts
        # small, so the stack's output and the loss stay of order 1.
        down_init = nnx.initializers.variance_scaling(1 / layers, 'fan_in', 'truncated_normal')
        self.up = nnx.Linear(
            width, ffn, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ('fsdp', 'tensor')),
            bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(), ('tensor',)),
        )
        self.down = nnx.Linear(
            ffn, width, rngs=rngs, use_bias=False,
            kernel_init=nnx.with_partitioning(down_init, ('tensor', 'fsdp')),
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.down(jax.nn.gelu(self.up(x)))


def create_sharded(size: Size, variant: str) -> tuple[Block, nnx.Optimizer]:
    """The stacked blocks and their Adam optimizer, placed as annotated."""
    kwargs = lifted_kwargs(variant)

    @nnx.jit
    def create() -> tuple[Block, nnx.Optimizer]:
        @nnx.split_rngs(splits=size.layers)
        @nnx.vmap(in_axes=0, out_axes=0, **kwargs)
        def stack(rngs: nnx.Rngs) -> Block:
            return Block(size.width, size.ffn, size.layers, rngs)

        model = stack(nnx.Rngs(0))
        state = nnx.state(model)
        nnx.update(model, jax.lax.with_sharding_constraint(
            state, nnx.get_partition_spec(state)))
        return model, nnx.Optimizer(model, optax.adam(LEARNING_RATE), wrt=nnx.Param)

    return create()


def make_train_step(variant: str):
    """The jitted step: scan forward, mean squared error, Adam update."""
    kwargs = lifted_kwargs(variant)

    @nnx.jit
    def train_step(model: Block, optimizer: nnx.Optimizer, x: jax.Array,
                   y: jax.Array) -> jax.Array:
        def loss_fn(model: Block) -> jax.Array:
            @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry, **kwargs)
            def forward(block: Block, carry: jax.Array) -> jax.Array:
                return block(carry)

            return jnp.mean((forward(model, x) - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    return train_step


def peak_memory() -> int | None:
    """The largest ``peak_bytes_in_use`` over the devices, or None if none reports one."""
    peaks = []
    for device in jax.local_devices():
        stats = device.memory_stats()
        if stats and 'peak_bytes_in_use' in stats:
            peaks.append(int(stats['peak_bytes_in_use']))
    return max(peaks) if peaks else None


def versions() -> dict[str, str]:
    """Versions of what is being measured."""
    from importlib.metadata import version
    import flax
    return {'flax': flax.__version__, 'jax': jax.__version__,
            'jaxlib': version('jaxlib'), 'optax': version('optax'),
            'python': sys.version.split()[0]}


def measure(size: Size, variant: str) -> dict[str, Any]:
    """Create, place and train; the timings, peak memory and losses."""
    devices = jax.devices()
    shape = mesh_shape(len(devices))
    mesh = jax.make_mesh(shape, ('fsdp', 'tensor'),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)
    with jax.set_mesh(mesh):
        start = time.perf_counter()
        model, optimizer = create_sharded(size, variant)
        jax.block_until_ready(jax.tree.leaves(nnx.state((model, optimizer))))
        create_seconds = time.perf_counter() - start
        data = jax.sharding.NamedSharding(mesh, jax.P('fsdp', None))
        keys = jax.random.split(jax.random.key(1))
        x = jax.device_put(jax.random.normal(keys[0], (size.tokens, size.width)), data)
        y = jax.device_put(jax.random.normal(keys[1], (size.tokens, size.width)), data)
        train_step = make_train_step(variant)
        # Ahead of time, as jax.jit's .lower().compile(): tracing and lowering,
        # then XLA's compilation, timed apart. The first call below reuses
        # the compiled step where JAX's caches do (jax 0.12 does).
        start = time.perf_counter()
        lowered = train_step.lower(model, optimizer, x, y)
        lower_seconds = time.perf_counter() - start
        start = time.perf_counter()
        lowered.compile()
        compile_seconds = time.perf_counter() - start
        start = time.perf_counter()
        losses = [float(train_step(model, optimizer, x, y))]
        first_seconds = time.perf_counter() - start
        step_seconds = []
        for _ in range(size.steps):
            start = time.perf_counter()
            losses.append(float(train_step(model, optimizer, x, y)))
            step_seconds.append(time.perf_counter() - start)
        kernel = model.up.kernel
        return {
            'create_seconds': create_seconds,
            'lower_seconds': lower_seconds,
            'compile_seconds': compile_seconds,
            'first_step_seconds': first_seconds,
            'median_step_seconds': statistics.median(step_seconds),
            'peak_memory_bytes': peak_memory(),
            'losses': losses,
            # Where the stacked up-projection kernel lies, and what its
            # metadata says (vanilla as written: one entry short).
            'kernel_sharding': str(kernel[...].sharding.spec),
            'kernel_metadata': str(kernel.get_metadata().get('out_sharding')),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--variant', choices=VARIANTS, required=True)
    parser.add_argument('--size', choices=sorted(SIZES), default='full')
    args = parser.parse_args()
    size = SIZES[args.size]
    devices = jax.devices()
    result: dict[str, Any] = {
        'variant': args.variant, 'size': args.size, **asdict(size),
        'versions': versions(), 'platform': devices[0].platform,
        'device_kind': devices[0].device_kind, 'device_count': len(devices),
        'mesh_shape': list(mesh_shape(len(devices))),
    }
    try:
        result.update(ok=True, **measure(size, args.variant))
    except Exception as error:  # noqa: BLE001 - vanilla as written may raise; reported
        result.update(ok=False, error=f'{type(error).__name__}: {error}'[:800])
    print(json.dumps(result), flush=True)


if __name__ == '__main__':
    main()
