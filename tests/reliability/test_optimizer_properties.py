"""Invariant I4 over random optax transforms (hypothesis).

For random optax transforms (adam, adamw, sgd with momentum, lion, adafactor,
clip_by_global_norm + adamw, inject_hyperparams(adam), and multi_transform /
MultiSteps around them) and sharded models of four layouts (one layer; a
stack made by ``nnx.vmap``; a stack made by ``jax.vmap``, whose metadata is
that of one layer; a layout declared but not applied, eager sharding off),
building an ``nnx.Optimizer``:

- raises nothing;
- gives every state leaf that mirrors a parameter (its path ends with the
  parameter's path and it has the parameter's shape) exactly the parameter's
  actual ``.sharding`` and the parameter's ``out_sharding`` metadata as
  declared (not the array's current layout);
- gives every other state leaf a valid sharding on the model's mesh, and no
  ``out_sharding`` metadata where its path ends with a parameter's path
  (a factored moment);
- changes no parameter: values, shardings and metadata are as before.

Random transform *nests* for I1-I3 live in tests/e2e/test_properties.py.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from hypothesis import HealthCheck, event, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from flax import nnx  # noqa: E402

from tests.support.scenarios import exact_mesh  # noqa: E402
from tests.support import scenarios  # noqa: E402

LAYERS, WIDTH = 4, 16
Path_ = tuple[Any, ...]


# Transforms: a small, printable description turned into an optax transform.

@dataclasses.dataclass(frozen=True)
class Tx:
    """An optax transform description; ``repr`` is the reproducer."""

    kind: str
    parts: tuple['Tx', ...] = ()

    def kinds(self) -> set[str]:
        return {self.kind}.union(*(part.kinds() for part in self.parts))

    def build(self) -> optax.GradientTransformation:
        return BUILDERS[self.kind](*(part.build() for part in self.parts))


def _kernel_or_other(params: Any) -> Any:
    """multi_transform labels: 'kernel' for kernels, 'other' for the rest."""
    return jax.tree.map_with_path(
        lambda path, _: 'kernel' if 'kernel' in jax.tree_util.keystr(path) else 'other',
        params)


BUILDERS: dict[str, Callable[..., optax.GradientTransformation]] = {
    'adam': lambda: optax.adam(1e-3),
    'adamw': lambda: optax.adamw(1e-3),
    'sgd_momentum': lambda: optax.sgd(1e-3, momentum=0.9),
    'lion': lambda: optax.lion(1e-4),
    'adafactor': lambda: optax.adafactor(1e-3, min_dim_size_to_factor=8),
    'clip_adamw': lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)),
    'inject_adam': lambda: optax.inject_hyperparams(optax.adam)(learning_rate=1e-3),
    'multi_transform': lambda kernel, other: optax.multi_transform(
        {'kernel': kernel, 'other': other}, _kernel_or_other),
    'multi_steps': lambda inner: optax.MultiSteps(inner, every_k_schedule=2).gradient_transformation(),
}
LEAVES = ['adam', 'adamw', 'sgd_momentum', 'lion', 'adafactor', 'clip_adamw', 'inject_adam']


def transforms() -> st.SearchStrategy[Tx]:
    """A leaf transform, wrapped zero, one or two times by multi_transform / MultiSteps."""
    leaf = st.sampled_from(LEAVES).map(Tx)

    def wrap(inner: st.SearchStrategy[Tx]) -> st.SearchStrategy[Tx]:
        return st.one_of(
            st.tuples(inner, inner).map(lambda p: Tx('multi_transform', p)),
            inner.map(lambda t: Tx('multi_steps', (t,))),
        )

    return st.one_of(leaf, wrap(leaf), wrap(wrap(leaf)))


# Models: built once per (stacked, axis type); Optimizer must not change them.

LAYOUTS = ['layer', 'nnx.vmap', 'jax.vmap', 'declared']


def jax_vmap_stack(layers: int, width: int) -> nnx.Module:
    """Blocks stacked by a plain ``jax.vmap``: metadata of one layer."""
    graphdef = nnx.graphdef(scenarios.Block(width, nnx.Rngs(0)))
    keys = jax.random.split(jax.random.key(0), layers)
    state = jax.vmap(lambda key: nnx.state(scenarios.Block(width, nnx.Rngs(key))))(keys)
    return nnx.merge(graphdef, state)


@functools.cache
def model_on_mesh(layout: str, axis_type: str) -> tuple[nnx.Module, jax.sharding.Mesh]:
    mesh = exact_mesh(scenarios.two_axis_shape(), ('fsdp', 'tensor'), axis_type)
    with jax.set_mesh(mesh):
        if layout == 'nnx.vmap':
            return scenarios.stacked_blocks(LAYERS, WIDTH), mesh
        if layout == 'jax.vmap':
            return jax_vmap_stack(LAYERS, WIDTH), mesh
        with nnx.use_eager_sharding(layout != 'declared'):
            return scenarios.Block(WIDTH, nnx.Rngs(0)), mesh


def snapshot(model: nnx.Module) -> dict[Path_, tuple[bytes, Any, Any, dict]]:
    """Per parameter: value bytes, shape, actual sharding, metadata."""
    return {
        path: (np.asarray(var.get_value()).tobytes(), var.get_value().shape,
               var.get_value().sharding, dict(var.get_metadata()))
        for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param))
    }


def _param_at(path: Path_, params: dict[Path_, nnx.Variable]) -> nnx.Variable | None:
    """The parameter whose path ends ``path`` (a state leaf's), if any."""
    for param_path, param in params.items():
        if path[-len(param_path):] == param_path:
            return param
    return None


def fits(spec: Any, leaf: jax.Array, param: jax.Array, mesh: jax.sharding.Mesh) -> bool:
    """Whether a parameter's declared spec fits a state leaf of another shape:
    never one of lower rank, else JAX's ``shard_shape`` check on the mesh."""
    if spec is None or leaf.ndim < param.ndim:
        return False
    try:
        jax.NamedSharding(mesh, jax.P(*spec)).shard_shape(leaf.shape)
    except ValueError:
        return False
    return True


def every_leaf_once(test: Callable[..., None]) -> Callable[..., None]:
    """Explicit examples: each leaf transform once, layouts and axis types in turn."""
    for index, kind in enumerate(LEAVES):
        axis_type = ('auto', 'explicit')[index % 2]
        layout = LAYOUTS[index % len(LAYOUTS)]
        test = example(tx=Tx(kind), layout=layout, axis_type=axis_type)(test)
    return test


@every_leaf_once
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(tx=transforms(), layout=st.sampled_from(LAYOUTS),
       axis_type=st.sampled_from(['auto', 'explicit']))
def test_optimizer_state_follows_parameter_arrays(tx: Tx, layout: str, axis_type: str) -> None:
    for kind in tx.kinds():
        event(f'uses {kind}')
    model, mesh = model_on_mesh(layout, axis_type)
    before = snapshot(model)
    with jax.set_mesh(mesh):
        optimizer = nnx.Optimizer(model, tx.build(), wrt=nnx.Param)

    params = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    mirrored = 0
    for path, var in nnx.to_flat_state(nnx.state(optimizer, nnx.OptState)):
        leaf = var.get_value()
        if not isinstance(leaf, jax.Array):
            continue
        param = _param_at(path, params)
        if param is not None and leaf.shape == param.shape and leaf.ndim > 0:
            mirrored += 1
            assert leaf.sharding == param.get_value().sharding, (
                path, leaf.sharding, param.get_value().sharding)
            assert var.get_metadata().get('out_sharding') == param.get_metadata().get(
                'out_sharding'), (path, var.get_metadata(), param.get_metadata())
        else:  # valid: on the mesh's devices, and it tiles the leaf's shape
            assert leaf.sharding.device_set <= set(mesh.devices.flat), path
            leaf.sharding.shard_shape(leaf.shape)
            if param is not None:  # e.g. a factored moment: optax's spec, if sharded
                spec = getattr(leaf.sharding, 'spec', ())
                expected = tuple(spec) if any(spec) else None
                declared = param.get_metadata().get('out_sharding')
                if fits(declared, leaf, param.get_value(), mesh):
                    expected = declared  # vanilla's, as where it fits (1x1 meshes)
                assert var.get_metadata().get('out_sharding') == expected, (
                    path, leaf.sharding, var.get_metadata())
    assert mirrored > 0, 'no optimizer state leaf mirrors a parameter'
    assert snapshot(model) == before, 'nnx.Optimizer changed the parameters'
