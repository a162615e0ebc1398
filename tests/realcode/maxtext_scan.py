"""MaxText's scan-over-layers helpers on a sharded stack, under any flax.

``maxtext.layers.nnx_scan`` (from the registry's maxtext wheel, installed
with ``--no-deps``: the module imports only flax and jax) stacks NNX layers
with ``jax.lax.scan`` and writes the layer axis into the sharding metadata
itself (``metadata_axis_name`` at ``param_scan_axis``). This program builds
such a stack of FSDP x tensor-parallel MLP blocks the way MaxText does (mesh
set, logical axis rules in context), applies it with and without remat,
builds ``nnx.Optimizer(optax.adam)`` and trains a few steps. It returns a
JSON-able report (``tests.support.scenarios.describe`` plus losses and the
optimizer state's sharding checked with ``is_equivalent_to``), so the test
can run it under vanilla flax in a subprocess.

``python -m tests.realcode.maxtext_scan [ARGS_JSON]`` prints one report.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, Callable

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from flax.core.spmd import logical_axis_rules  # noqa: E402
from maxtext.layers import nnx_scan  # noqa: E402

from tests.support.scenarios import describe, exact_mesh  # noqa: E402

Report = dict[str, Any]
MESH_SHAPE = (2, 4)  # Auto axes: MaxText's default shard_mode
MESH_AXES = ('fsdp', 'tensor')
# MaxText-style logical names; MaxText maps 'layers' to its 'stage' axis,
# which this (2, 4) mesh does not have, so the layer axis is replicated.
RULES = (('embed', 'fsdp'), ('mlp', 'tensor'), ('norm', 'tensor'), ('layers', None))
WIDTH = 16
BATCH = 8


class MlpBlock(nnx.Module):
    """Pre-norm residual MLP: kernels FSDP x tensor parallel, norm scale tensor."""

    def __init__(self, width: int, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.norm = nnx.RMSNorm(
            width, rngs=rngs,
            scale_init=nnx.with_partitioning(nnx.initializers.ones_init(), ('norm',)))
        self.wi = nnx.Linear(
            width, 2 * width, use_bias=False, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ('embed', 'mlp')))
        self.wo = nnx.Linear(
            2 * width, width, use_bias=False, rngs=rngs,
            kernel_init=nnx.with_partitioning(init, ('mlp', 'embed')))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.wo(jax.nn.gelu(self.wi(self.norm(x))))


def build_stack(layers: int, param_scan_axis: int) -> nnx.Module:
    """MaxText's ``create_scanned_layers`` over ``layers`` MlpBlocks."""
    return nnx_scan.create_scanned_layers(
        lambda rngs: MlpBlock(WIDTH, rngs), length=layers,
        param_scan_axis=param_scan_axis, metadata_axis_name='layers', rngs=nnx.Rngs(0))


def apply_stack(stack: nnx.Module, x: jax.Array, layers: int, param_scan_axis: int,
                remat: bool) -> jax.Array:
    """MaxText's ``apply_scanned_layers``: one block per scan step."""
    return nnx_scan.apply_scanned_layers(
        stack, x, length=layers, param_scan_axis=param_scan_axis,
        apply_fn=lambda block, h: block(h), remat=remat)


def make_train_step(layers: int, param_scan_axis: int, remat: bool) -> Callable[..., jax.Array]:
    @nnx.jit
    def train_step(stack: nnx.Module, optimizer: nnx.Optimizer, x: jax.Array,
                   y: jax.Array) -> jax.Array:
        def loss_fn(stack: nnx.Module) -> jax.Array:
            return ((apply_stack(stack, x, layers, param_scan_axis, remat) - y) ** 2).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(stack)
        optimizer.update(stack, grads)
        return loss

    return train_step


def moment_mismatches(stack: nnx.Module, optimizer: nnx.Optimizer) -> list[str]:
    """Adam's mu and nu leaves whose sharding is not equivalent to their parameter's."""
    adam_state = optimizer.opt_state[0]
    moments = {name: dict(nnx.to_flat_state(getattr(adam_state, name))) for name in ('mu', 'nu')}
    found = []
    for path, param in nnx.to_flat_state(nnx.state(stack, nnx.Param)):
        value = param.get_value()
        for moment, leaves in moments.items():
            leaf = leaves[path].get_value()
            if not leaf.sharding.is_equivalent_to(value.sharding, value.ndim):
                found.append(f'{moment}/{"/".join(map(str, path))}: {leaf.sharding.spec}'
                             f' vs parameter {value.sharding.spec}')
    return found


def train(layers: int = 4, param_scan_axis: int = 0, remat: bool = False,
          steps: int = 4, layers_rule: bool = True, under_jit: bool = False) -> Report:
    """Build (eagerly or under ``nnx.jit``), apply with and without remat,
    make the optimizer and train ``steps`` steps; ``layers_rule=False`` drops
    the logical rule for the layer axis."""
    mesh = exact_mesh(MESH_SHAPE, MESH_AXES)
    rules = RULES if layers_rule else tuple(r for r in RULES if r[0] != 'layers')
    with jax.set_mesh(mesh), logical_axis_rules(rules):
        build = nnx.jit(build_stack, static_argnums=(0, 1)) if under_jit else build_stack
        stack = build(layers, param_scan_axis)
        x = jax.random.normal(jax.random.key(1), (BATCH, WIDTH))
        y = jnp.roll(x, 1, axis=-1)
        outputs = {
            flag: nnx.jit(apply_stack, static_argnums=(2, 3, 4))(
                stack, x, layers, param_scan_axis, flag)
            for flag in (False, True)
        }
        report: Report = {'remat_output_max_diff': float(
            jnp.max(jnp.abs(outputs[True] - outputs[False])))}
        optimizer = nnx.Optimizer(stack, optax.adam(1e-2), wrt=nnx.Param)
        report['before'] = describe(stack, optimizer)
        report['moment_mismatches_before'] = moment_mismatches(stack, optimizer)
        train_step = make_train_step(layers, param_scan_axis, remat)
        report['losses'] = [float(train_step(stack, optimizer, x, y)) for _ in range(steps)]
        report['moment_mismatches'] = moment_mismatches(stack, optimizer)
        return {**report, **describe(stack, optimizer)}


def run(**kwargs: Any) -> Report:
    """``train(**kwargs)``; an exception becomes ``{'error': ...}``."""
    import flax

    try:
        report = train(**kwargs)
    except Exception as e:  # noqa: BLE001 -- reported, the test compares flaxes
        report = {'error': f'{type(e).__name__}: {e}',
                  'traceback': traceback.format_exc(limit=-4)}
    return {'flax_version': flax.__version__, **report}


if __name__ == '__main__':
    arguments = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    print(json.dumps(run(**arguments)))
