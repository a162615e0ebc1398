"""User scenarios from google/flax#5112, runnable under any flax.

Each scenario builds a sharded model the way users do, and returns a plain,
JSON-able report of what flax made of it: the stacked arrays' actual
shardings, their ``out_sharding`` metadata, ``nnx.get_partition_spec``, and the
optimizer state's shardings. An exception is reported, not raised, so the
side-by-side test can run the same scenario under vanilla flax.

``python -m tests.support.scenarios NAME [ARGS_JSON]`` prints one report as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, Callable

# 8 simulated CPU devices unless the caller set up devices already.
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')

import jax  # noqa: E402

import optax  # noqa: E402
from flax import nnx  # noqa: E402

Report = dict[str, Any]
AXIS_TYPES = {
    'auto': jax.sharding.AxisType.Auto,
    'explicit': jax.sharding.AxisType.Explicit,
}


class NoMesh(Exception):
    """The devices present cannot form the mesh a scenario needs."""


def make_mesh(names: tuple[str, ...], axis_type: str) -> jax.sharding.Mesh:
    """A mesh over all devices present: 2 along each axis but the last.

    8 simulated CPU devices give (2, 4) for two axes and (2, 2, 2) for three;
    real accelerators give whatever their count allows.
    """
    count = jax.device_count()
    leading = 2 ** (len(names) - 1)
    if count < 2 * leading or count % leading:
        raise NoMesh(f'{count} devices cannot form a {len(names)}-axis mesh '
                     f'with 2 devices on each of the first {len(names) - 1} axes')
    shape = (2,) * (len(names) - 1) + (count // leading,)
    return exact_mesh(shape, names, axis_type)


def two_axis_shape() -> tuple[int, int]:
    """A 2-axis mesh shape over all devices present: ``(2, n // 2)`` for an
    even count ``n`` ((2, 4) on 8 devices), else ``(1, n)``."""
    count = jax.device_count()
    leading = 2 if count % 2 == 0 else 1
    return leading, count // leading


def exact_mesh(shape: tuple[int, ...], names: tuple[str, ...],
               axis_type: str = 'auto') -> jax.sharding.Mesh:
    """A mesh of exactly ``shape`` with every axis of ``axis_type``."""
    return jax.make_mesh(shape, names, axis_types=(AXIS_TYPES[axis_type],) * len(names))


class Block(nnx.Module):
    """Two Linear layers annotated FSDP x tensor parallel."""

    def __init__(self, width: int, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.up = nnx.Linear(
            width, 2 * width, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ('fsdp', 'tensor')),
            bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(), ('tensor',)),
        )
        self.down = nnx.Linear(
            2 * width, width, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ('tensor', 'fsdp')),
            use_bias=False,
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.down(jax.nn.relu(self.up(x)))


def stacked_blocks(layers: int, width: int, transform_metadata: dict | None = None) -> Block:
    """``layers`` Blocks stacked by ``nnx.vmap`` (layer axis 0)."""
    kwargs = {} if transform_metadata is None else {'transform_metadata': transform_metadata}

    @nnx.split_rngs(splits=layers)
    @nnx.vmap(in_axes=0, out_axes=0, **kwargs)
    def create(rngs: nnx.Rngs) -> Block:
        return Block(width, rngs)

    return create(nnx.Rngs(0))


def describe(model: nnx.Module, optimizer: nnx.Optimizer | None = None) -> Report:
    """What flax made of ``model`` (and its optimizer), per Variable path."""
    params: dict[str, Any] = {}
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        value = var.get_value()
        params['/'.join(map(str, path))] = {
            'shape': list(value.shape),
            'spec': _spec(value),
            'out_sharding': _jsonable(var.get_metadata().get('out_sharding')),
        }
    report: Report = {'params': params}
    try:
        specs = nnx.get_partition_spec(nnx.state(model, nnx.Param))
        report['get_partition_spec'] = {
            '/'.join(map(str, path)): _spec_of_pspec(var.get_value())
            for path, var in nnx.to_flat_state(specs)
        }
    except Exception as e:  # noqa: BLE001 -- reported, compared by the tests
        report['get_partition_spec_error'] = f'{type(e).__name__}: {e}'
    if optimizer is not None:
        report['opt_state'] = {
            '/'.join(map(str, path)): {
                'shape': list(var.get_value().shape),
                'spec': _spec(var.get_value()),
            }
            for path, var in nnx.to_flat_state(nnx.state(optimizer, nnx.OptState))
            if getattr(var.get_value(), 'ndim', 0) > 0
        }
    return report


def _spec(value: Any) -> list[Any] | None:
    sharding = getattr(value, 'sharding', None)
    if not isinstance(sharding, jax.sharding.NamedSharding):
        return None
    spec = list(sharding.spec)
    return _jsonable(spec + [None] * (value.ndim - len(spec)))


def _spec_of_pspec(spec: Any) -> Any:
    return _jsonable(list(spec)) if isinstance(spec, jax.sharding.PartitionSpec) else None


def _jsonable(x: Any) -> Any:
    if isinstance(x, (tuple, list)):
        return [_jsonable(v) for v in x]
    return x


# Scenarios ------------------------------------------------------------------


def vmap_stack_with_optimizer(layers: int = 3, axis_type: str = 'auto',
                              under_jit: bool = False, width: int = 16) -> Report:
    """The thread's first report: vmap-created stack, then nnx.Optimizer."""
    mesh = make_mesh(('fsdp', 'tensor'), axis_type)
    with jax.set_mesh(mesh):
        def build() -> tuple[Block, nnx.Optimizer]:
            model = stacked_blocks(layers, width)
            return model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

        model, optimizer = nnx.jit(build)() if under_jit else build()
        return describe(model, optimizer)


def named_layers_under_jit(layers: int = 2, axis_type: str = 'auto', width: int = 16) -> Report:
    """PARTITION_NAME 'layers' stack, sharded by the gspmd guide's recipe.

    The transform only declares the layout in the metadata; the sharded init
    (constrain the state to ``nnx.get_partition_spec`` under jit) applies it:
    kernel P('layers', 'fsdp', 'tensor').
    """
    mesh = make_mesh(('layers', 'fsdp', 'tensor'), axis_type)
    constrain = (jax.sharding.reshard if axis_type == 'explicit'
                 else jax.lax.with_sharding_constraint)
    with jax.set_mesh(mesh):
        @nnx.jit
        def build() -> Block:
            model = stacked_blocks(layers, width, {nnx.PARTITION_NAME: 'layers'})
            state = nnx.state(model)
            nnx.update(model, constrain(state, nnx.get_partition_spec(state)))
            return model

        return describe(build())


class LogicalBlock(nnx.Module):
    """A Linear annotated with logical axis names, mapped by sharding_rules."""

    def __init__(self, width: int, rngs: nnx.Rngs):
        self.linear = nnx.Linear(
            width, 2 * width, rngs=rngs,
            kernel_init=nnx.with_partitioning(
                nnx.initializers.lecun_normal(), ('embed', 'mlp'),
                sharding_rules=(('embed', 'fsdp'), ('mlp', 'tensor'))),
            use_bias=False,
        )


def logical_names_in_jit(layers: int = 4, axis_type: str = 'auto',
                         optimizer: str = 'adamw', width: int = 16) -> Report:
    """Model and optimizer created inside nnx.jit, logical names + rules."""
    mesh = make_mesh(('fsdp', 'tensor'), axis_type)
    transforms = {
        'adamw': lambda: optax.adamw(1e-3),
        'adafactor': lambda: optax.adafactor(1e-3, min_dim_size_to_factor=8),
    }
    with jax.set_mesh(mesh):
        @nnx.jit
        def build() -> tuple[LogicalBlock, nnx.Optimizer]:
            @nnx.split_rngs(splits=layers)
            @nnx.vmap(in_axes=0, out_axes=0)
            def create(rngs: nnx.Rngs) -> LogicalBlock:
                return LogicalBlock(width, rngs)

            model = create(nnx.Rngs(0))
            return model, nnx.Optimizer(model, transforms[optimizer](), wrt=nnx.Param)

        model, opt = build()
        return describe(model, opt)


@nnx.jit
def train_step(model: Block, optimizer: nnx.Optimizer, x: jax.Array) -> jax.Array:
    """One optimizer step of a scan-over-layers forward; returns the loss."""
    def loss_fn(model: Block) -> jax.Array:
        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
        def forward(block: Block, h: jax.Array) -> jax.Array:
            return block(h)

        return (forward(model, x) ** 2).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def train_steps_keep_shardings(layers: int = 4, axis_type: str = 'auto',
                               steps: int = 3, width: int = 16) -> Report:
    """Scan-over-layers train step: shardings after `steps` equal the initial."""
    mesh = make_mesh(('fsdp', 'tensor'), axis_type)
    with jax.set_mesh(mesh):
        model = stacked_blocks(layers, width)
        optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
        before = describe(model, optimizer)

        x = jax.random.normal(jax.random.key(0), (8, width))
        losses = [float(train_step(model, optimizer, x)) for _ in range(steps)]
        return {**describe(model, optimizer), 'before': before, 'losses': losses}


SCENARIOS: dict[str, Callable[..., Report]] = {
    'vmap_stack_with_optimizer': vmap_stack_with_optimizer,
    'named_layers_under_jit': named_layers_under_jit,
    'logical_names_in_jit': logical_names_in_jit,
    'train_steps_keep_shardings': train_steps_keep_shardings,
}


def run(name: str, **kwargs: Any) -> Report:
    """Run a scenario; an exception becomes ``{'error': ...}``."""
    import flax

    try:
        report = SCENARIOS[name](**kwargs)
    except NoMesh as e:
        report = {'no_mesh': str(e)}
    except Exception as e:  # noqa: BLE001 -- reported for side-by-side tests
        report = {'error': f'{type(e).__name__}: {e}',
                  'traceback': traceback.format_exc(limit=-3)}
    return {'flax_version': flax.__version__, **report}


if __name__ == '__main__':
    arguments = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    print(json.dumps(run(sys.argv[1], **arguments)))
