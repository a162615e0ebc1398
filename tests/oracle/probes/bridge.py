"""Bridged NNX Variables under Linen transforms (upstream google/flax#5589).

``nn.scan``/``nn.vmap`` over ``bridge.ToLinen`` stack the Variables;
vanilla's ``NNXMeta.add_axis`` is a no-op, so their metadata (and
``nn.get_partition_spec``) stays one entry short, and ``get_partition_spec``
builds an eagerly sharded Variable, which fails on abstract trees.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tests.oracle.probes import Report, probe
from tests.oracle.probes import util

LAYERS = 4


def _model(name: str | None, transform: str | None = 'scan') -> Any:
    from flax import linen as nn
    from flax import nnx
    from flax.nnx import bridge

    linear = functools.partial(
        bridge.ToLinen, nnx.Linear, args=(8, 8), kwargs=dict(
            kernel_init=nnx.with_partitioning(
                nnx.initializers.lecun_normal(), ('a', 'b'))))
    params = {} if name is None else {nn.PARTITION_NAME: name}

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            if transform is None:
                return linear()(x)
            x, _ = nn.scan(
                lambda module, carry: (linear()(carry), None),
                variable_axes={'params': 0}, split_rngs={'params': True},
                length=LAYERS, metadata_params=params)(self, x)
            return x

    return Stack()


def _x() -> jax.Array:
    return jnp.linspace(0, 1, 16).reshape(2, 8)


def _spec(p: Any) -> Any:
    return None if p is None else [list(e) if isinstance(e, tuple) else e for e in p]


def _stacked_spec_problems(report: Report, expected: list[Any]) -> list[str]:
    problems = []
    for key in ('partition_spec', 'sharding_spec'):
        if key in report and report[key] != expected:
            problems.append(f'{key} {report[key]} is not {expected}')
    if 'error' in report:
        problems.append(f"raised {report['error']}")
    if report.get('kernel_sharding', [None, 'a', 'b']) != [None, 'a', 'b']:
        problems.append(f"the kernel array moved: {report['kernel_sharding']}")
    return problems


def _named_problems(report: Report) -> list[str]:
    return _stacked_spec_problems(report, ['layers', 'a', 'b'])


def _unnamed_problems(report: Report) -> list[str]:
    return _stacked_spec_problems(report, [None, 'a', 'b'])


def _partition_spec_of_stack(name: str | None) -> Report:
    from flax import linen as nn

    model = _model(name)
    with jax.set_mesh(util.mesh()):
        variables = model.init(jax.random.key(0), _x())
        spec = nn.get_partition_spec(variables)['params']['ToLinen_0']['kernel']
    kernel = variables['params']['ToLinen_0']['kernel']
    return {'partition_spec': _spec(spec),
            'kernel_sharding': util.sharding(kernel.value)}


@probe(fixed=_named_problems)
def partition_spec_of_stack_named_without_mesh_axis() -> Report:
    """'layers' is a logical name, not an axis of the mesh."""
    return _partition_spec_of_stack('layers')


@probe(fixed=_unnamed_problems)
def partition_spec_of_unnamed_stack() -> Report:
    return _partition_spec_of_stack(None)


@probe(fixed=_unnamed_problems)
def sharded_init_of_abstract_stack() -> Report:
    """The Linen recipe for a sharded init, over bridged Variables."""
    from flax import linen as nn

    model = _model(None)
    mesh = util.mesh()
    with jax.set_mesh(mesh):
        abstract = jax.eval_shape(model.init, jax.random.key(0), _x())
        spec = nn.get_partition_spec(abstract)['params']['ToLinen_0']['kernel']
        shardings = nn.get_sharding(abstract, mesh)
        variables = jax.jit(model.init, out_shardings=shardings)(jax.random.key(0), _x())
    sharded = variables['params']['ToLinen_0']['kernel'].value
    return {'partition_spec': _spec(spec), 'sharding_spec': util.sharding(sharded),
            'kernel_sharding': util.sharding(sharded)}


@probe(fixed=lambda r: _stacked_spec_problems(r, ['a', 'b']))
def partition_spec_of_abstract_unstacked() -> Report:
    """The sharded init's specs without a transform: vanilla fails on abstract values already."""
    from flax import linen as nn

    model = _model(None, transform=None)
    with jax.set_mesh(util.mesh()):
        abstract = jax.eval_shape(model.init, jax.random.key(0), _x())
        spec = nn.get_partition_spec(abstract)['params']['ToLinen_0']['kernel']
    return {'partition_spec': _spec(spec)}


@probe(fixed=_unnamed_problems)
def to_nnx_of_unnamed_stack() -> Report:
    """bridge.ToNNX over the stack: converting the Variables shards them eagerly."""
    from flax import nnx
    from flax.nnx import bridge

    with jax.set_mesh(util.mesh()):
        model = bridge.lazy_init(bridge.ToNNX(_model(None), rngs=nnx.Rngs(0)), _x())
    kernel = model.ToLinen_0['kernel']
    return {'kernel_sharding': util.sharding(kernel.get_value())}


@probe()
def stack_values_and_shardings() -> Report:
    """What the arrays are, with and without a name: the same on both (I0, I5)."""
    report: Report = {}
    for name in (None, 'layers'):
        model = _model(name)
        with jax.set_mesh(util.mesh()):
            variables = model.init(jax.random.key(0), _x())
            y = model.apply(variables, _x())
        kernel = variables['params']['ToLinen_0']['kernel'].value
        report[str(name)] = {
            'y': np.asarray(y).round(5).tolist(),
            'kernel': [list(kernel.shape), util.sharding(kernel)],
        }
    return report
