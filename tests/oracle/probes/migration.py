"""Per-example gradients (DP-SGD) and docs/migration-per-example-grads.md.

``nnx.vmap(nnx.grad(loss), in_axes=(None, 0, 0))`` stacks the gradients;
ours gives their metadata the stacked entry, so zipping them with the
parameters in one ``jax.tree.map`` fails where vanilla ran. The documented
idiom (zip values, ``nnx.as_pure``) must give vanilla's values and shardings.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tests.oracle.probes import Report, probe
from tests.oracle.probes import util


def _setup() -> tuple[Any, Any, jax.Array, jax.Array]:
    import optax
    from flax import nnx

    model = nnx.Linear(8, 4, rngs=nnx.Rngs(0), kernel_init=nnx.with_partitioning(
        nnx.initializers.lecun_normal(), (None, 'b')))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    xs = jnp.linspace(0, 1, 16 * 8).reshape(16, 8)
    return model, optimizer, xs, jnp.ones((16, 4))


def _loss(model: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.sum((model(x) - y) ** 2)


def _per_example(model: Any, xs: jax.Array, ys: jax.Array) -> Any:
    from flax import nnx

    return nnx.vmap(nnx.grad(_loss), in_axes=(None, 0, 0))(model, xs, ys)


def _clip_and_average(per_example: Any, clip_norm: float) -> Any:
    norms = jnp.sqrt(sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1)
                         for g in jax.tree.leaves(per_example)))
    scale = jnp.minimum(1.0, clip_norm / (norms + 1e-6))
    return jax.tree.map(
        lambda g: jnp.mean(g * scale.reshape((-1,) + (1,) * (g.ndim - 1)), 0),
        per_example)


def _values(tree: Any) -> dict[str, Any]:
    from flax import nnx

    values = tree if isinstance(tree, dict) else nnx.to_pure_dict(tree)
    return {k: [np.asarray(v).round(5).tolist(), util.sharding(v)]
            for k, v in sorted(values.items())}


@probe()
def per_example_grads_idiom() -> Report:
    """The documented DP-SGD step: one-tree maps, zips by value, the optimizer."""
    from flax import nnx

    with jax.set_mesh(util.mesh()):
        model, optimizer, xs, ys = _setup()

        @nnx.jit
        def step(model: Any, optimizer: Any, xs: jax.Array, ys: jax.Array) -> Any:
            grads = _clip_and_average(_per_example(model, xs, ys), 1.0)
            params = nnx.state(model, nnx.Param)
            by_hand = jax.tree.map(lambda p, g: p - 0.1 * g,
                                   nnx.as_pure(params), nnx.as_pure(grads))
            by_leaf = jax.tree.map(lambda p, g: p[...] - 0.1 * g[...], params, grads,
                                   is_leaf=lambda x: isinstance(x, nnx.Variable))
            by_dict = jax.tree.map(lambda p, g: p - 0.1 * g,
                                   params.to_pure_dict(), grads.to_pure_dict())
            optimizer.update(model, grads)
            return by_hand, by_leaf, by_dict

        by_hand, by_leaf, by_dict = step(model, optimizer, xs, ys)
        updated = nnx.as_pure(nnx.state(model, nnx.Param))
    return {'by_hand': _values(by_hand), 'by_leaf': _values(by_leaf),
            'by_dict': _values(by_dict), 'optimizer': _values(updated)}


def _metadata_problems(report: Report) -> list[str]:
    ndim, spec = report['kernel_ndim'], report['kernel_out_sharding']
    return [] if len(spec['entries']) == ndim else [
        f'per-example kernel gradient of rank {ndim} has out_sharding {spec}']


@probe(fixed=_metadata_problems)
def per_example_grads_metadata() -> Report:
    """The difference the migration note is about: the stacked entry."""
    with jax.set_mesh(util.mesh()):
        model, _, xs, ys = _setup()
        grads = _per_example(model, xs, ys)
        params = nnx_state_params(model)
        try:
            jax.tree.map(lambda p, g: p - 0.1 * g.mean(0), params, grads)
            naive = 'ran'
        except ValueError as e:
            naive = f'{type(e).__name__}: {str(e).splitlines()[0]}'
    kernel = grads['kernel']
    return {'kernel_ndim': kernel.get_value().ndim,
            'kernel_out_sharding': util.spec(kernel.get_metadata()['out_sharding']),
            'naive_zip': naive}


def nnx_state_params(model: Any) -> Any:
    from flax import nnx

    return nnx.state(model, nnx.Param)
