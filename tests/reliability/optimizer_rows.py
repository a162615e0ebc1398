"""Optimizer programs run under one flax; prints one JSON line of outcomes.

Run as ``python -m tests.reliability.optimizer_rows`` with vanilla flax or
ours first on the path; tests/reliability/test_optimizer_rows.py compares.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

EXPLICIT = (jax.sharding.AxisType.Explicit,) * 2
Outcome = dict[str, Any]


def is_variable(x: object) -> bool:
    return isinstance(x, nnx.Variable)


def kernels_only(params: Any) -> Any:
    return jax.tree.map_with_path(lambda path, _: 'kernel' in str(path), params, is_leaf=is_variable)


def error(e: BaseException) -> Outcome:
    return {'error': type(e).__name__, 'message': str(e).split('\n')[0],
            'notes': list(getattr(e, '__notes__', [])), 'context': e.__context__ is not None}


def outcome(run: Callable[[], Outcome]) -> Outcome:
    try:
        return run()
    except Exception as e:  # the outcome is what the test compares
        return error(e)


def spec(x: Any) -> list[Any] | None:
    sharding = getattr(x, 'sharding', None)
    return None if sharding is None else [str(e) for e in sharding.spec]


def mismatches(optimizer: Any, model: Any) -> list[str]:
    """State leaves with their parameter's shape but not its sharding."""
    params = {path: v for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    found = []
    for path, x in nnx.to_flat_state(nnx.state(optimizer.opt_state)):
        for param_path, param in params.items():
            value = x.get_value()
            if (path[-len(param_path):] == param_path and getattr(value, 'shape', None) == param.shape
                    and spec(value) != spec(param.get_value())):
                found.append('/'.join(map(str, path)))
    return found


def masked_state() -> dict[str, Outcome]:
    """A spmd_axis_name stack on an Explicit mesh: metadata ('a', None, 'b'),
    arrays (None, None, 'b'), under optimizers that put optax.MaskedNode."""
    jax.sharding.set_mesh(jax.make_mesh((2, 4), ('a', 'b'), axis_types=EXPLICIT))

    @nnx.vmap(in_axes=0, out_axes=0, spmd_axis_name='a')
    def make(key: jax.Array) -> nnx.Linear:
        return nnx.Linear(8, 16, rngs=nnx.Rngs(key), kernel_metadata={'out_sharding': (None, 'b')})

    model = make(jax.random.split(jax.random.key(0), 2))
    labels = lambda p: jax.tree.map(lambda k: 'k' if k else 'b', kernels_only(p))  # noqa: E731
    optimizers = {
        'masked': optax.masked(optax.adam(1e-3), kernels_only),
        'chain_masked': optax.chain(optax.clip(1.0), optax.masked(optax.adam(1e-3), kernels_only)),
        'multi_steps_masked': optax.MultiSteps(optax.masked(optax.adam(1e-3), kernels_only), 2),
        'multi_transform': optax.multi_transform(
            {'k': optax.adam(1e-3), 'b': optax.sgd(1e-3, momentum=0.9)}, labels),
    }
    return {name: outcome(lambda tx=tx: {'mismatches': mismatches(nnx.Optimizer(model, tx, wrt=nnx.Param), model)})
            for name, tx in optimizers.items()}


def python_scalar_param() -> Outcome:
    class Model(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.ones((3,)))
            self.t = nnx.Param(0.5)

    def run() -> Outcome:
        model = Model()
        optimizer = nnx.Optimizer(model, optax.adam(0.1), wrt=nnx.Param)
        optimizer.update(model, nnx.grad(lambda m: (m.w[...] * m.t[...]).sum())(model))
        return {'t': float(model.t[...]), 'w': [float(x) for x in model.w[...]]}

    return outcome(run)


def layer_name_not_a_mesh_axis() -> Outcome:
    jax.sharding.set_mesh(jax.make_mesh((2, 4), ('fsdp', 'tensor')))

    @nnx.vmap(in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: 'layers'})
    def make(key: jax.Array) -> nnx.Linear:
        return nnx.Linear(8, 16, rngs=nnx.Rngs(key), kernel_metadata={'out_sharding': ('fsdp', 'tensor')})

    model = make(jax.random.split(jax.random.key(0), 2))
    return outcome(lambda: {'built': type(nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)).__name__})


def malformed_sharding_rules() -> Outcome:
    jax.sharding.set_mesh(jax.make_mesh((2, 4), ('a', 'b')))
    return outcome(lambda: {'built': spec(nnx.Param(
        jnp.ones((4, 8)), out_sharding=('x', 'b'), sharding_rules={'x': 'a'})[...])})


def optimizer_sharding_that_does_not_fit() -> Outcome:
    jax.sharding.set_mesh(jax.make_mesh((2, 4), ('a', 'b')))

    @nnx.vmap(in_axes=0, out_axes=0)
    def make(key: jax.Array) -> nnx.Linear:
        return nnx.Linear(8, 16, rngs=nnx.Rngs(key), kernel_metadata={'out_sharding': ('a', 'b')})

    model = make(jax.random.split(jax.random.key(0), 2))
    model.kernel.set_metadata(optimizer_sharding=('b', 'a'))
    return outcome(lambda: {'built': type(nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)).__name__})


def live_jit_abstract() -> Outcome:
    """A 'layers'-named stack before the sharded init, on an Explicit mesh."""
    jax.sharding.set_mesh(jax.make_mesh((2, 4), ('layers', 'b'), axis_types=EXPLICIT))

    @nnx.vmap(in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: 'layers'})
    def make(key: jax.Array) -> nnx.Linear:
        return nnx.Linear(8, 16, rngs=nnx.Rngs(key), kernel_metadata={'out_sharding': (None, 'b')})

    model = make(jax.random.split(jax.random.key(0), 2))
    tx = optax.adam(1e-3)

    def build(m: nnx.Linear) -> nnx.Optimizer:
        return nnx.Optimizer(m, tx, wrt=nnx.Param)

    def run() -> Outcome:
        live = build(model)
        jitted = nnx.jit(build)(model)
        abstract = nnx.eval_shape(lambda: build(model))
        abstract_model = nnx.eval_shape(lambda: make(jax.random.split(jax.random.key(0), 2)))
        return {'param': spec(model.kernel.get_value()), 'live': spec(live.opt_state[0].mu['kernel'].get_value()),
                'jit': spec(jitted.opt_state[0].mu['kernel'].get_value()),
                'abstract': spec(abstract.opt_state[0].mu['kernel'].get_value()),
                'abstract_param': spec(abstract_model.kernel.get_value())}

    return outcome(run)


def lbfgs_memory() -> Outcome:
    """State of another shape that the parameter's sharding fits."""
    jax.sharding.set_mesh(jax.make_mesh((2, 4), ('a', 'b')))
    model = nnx.Linear(64, 64, rngs=nnx.Rngs(0), kernel_metadata={'out_sharding': ('a', 'b')})
    return outcome(lambda: {'memory': spec(nnx.Optimizer(
        model, optax.lbfgs(memory_size=4), wrt=nnx.Param).opt_state[0].diff_params_memory['kernel'][...])})


def lbfgs_memory_of_a_jax_vmap_stack() -> Outcome:
    """State of another shape on a stack whose metadata is a layer's."""
    def make(key: jax.Array) -> nnx.Linear:
        return nnx.Linear(16, 8, rngs=nnx.Rngs(key), kernel_metadata={'out_sharding': ('a', 'b')})

    def run() -> Outcome:
        with jax.set_mesh(jax.make_mesh((2, 4), ('a', 'b'), axis_types=EXPLICIT)):
            model = jax.vmap(make)(jax.random.split(jax.random.key(0), 4))
            optimizer = nnx.Optimizer(model, optax.lbfgs(memory_size=4), wrt=nnx.Param)
        return {'memory': spec(optimizer.opt_state[0].diff_params_memory['kernel'][...])}

    return outcome(run)


def adafactor_spec_shorter_than_the_parameter() -> Outcome:
    """Adafactor on a kernel whose spec names its first dimension only, then a
    jitted step (Explicit mesh): the factored moments are of lower rank."""
    def moments(state: Any) -> list[Any]:
        return [spec(state[0].v_row['kernel'][...]), spec(state[0].v_col['kernel'][...])]

    def run() -> Outcome:
        with jax.set_mesh(jax.make_mesh((2, 4), ('a', 'b'), axis_types=EXPLICIT)):
            init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ('a',))
            model = nnx.Linear(16, 8, kernel_init=init, rngs=nnx.Rngs(0))
            tx = optax.adafactor(1e-3, min_dim_size_to_factor=4)
            optax_state = tx.init(nnx.state(model, nnx.Param))
            optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
            made = moments(optimizer.opt_state)

            @nnx.jit
            def step(model: nnx.Linear, optimizer: nnx.Optimizer) -> None:
                optimizer.update(model, jax.tree.map(jnp.ones_like, nnx.state(model, nnx.Param)))

            step(model, optimizer)
        return {'kernel': spec(model.kernel[...]), 'made': made, 'optax': moments(optax_state)}

    return outcome(run)


def spec_resolved_later_names_an_axis_twice() -> Outcome:
    """A kernel made with eager_sharding=False and a spec naming 'a' twice,
    which vanilla accepts until it is sharded: Adam's and adafactor's state."""
    def run() -> Outcome:
        with jax.set_mesh(jax.make_mesh((2, 4), ('a', 'b'))):
            init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ('a', 'a'), eager_sharding=False)
            model = nnx.Linear(16, 8, kernel_init=init, rngs=nnx.Rngs(0))
            adam = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param).opt_state[0]
            adafactor = nnx.Optimizer(model, optax.adafactor(1e-3, min_dim_size_to_factor=4),
                                      wrt=nnx.Param).opt_state[0]
        return {'mu': spec(adam.mu['kernel'][...]), 'mu_metadata': adam.mu['kernel'].out_sharding,
                'v_row': spec(adafactor.v_row['kernel'][...])}

    return outcome(run)


class Scaled:
    """A pytree node whose optional scale is no child when it is None."""

    def __init__(self, value: Any, scale: float | None = None) -> None:
        self.value, self.scale = value, scale


jax.tree_util.register_pytree_node(
    Scaled, lambda node: ([node.value] + ([] if node.scale is None else [node.scale]), None),
    lambda _, children: Scaled(*children))


def named_sharding_of_a_train_state() -> Outcome:
    """nnx.get_named_sharding of a dict holding the model's state, a float and
    a node that flattens None away."""
    mesh = jax.make_mesh((2, 4), ('a', 'b'))
    with jax.set_mesh(mesh):
        model = nnx.Linear(16, 8, rngs=nnx.Rngs(0), kernel_metadata={'out_sharding': ('a', 'b')})

    def run() -> Outcome:
        named = nnx.get_named_sharding(
            {'model': nnx.state(model), 'lr': 0.1, 'ema': Scaled(jnp.ones(4), 0.9)}, mesh)
        return {'lr': named['lr'], 'kernel': str(named['model']['kernel'].get_value().spec),
                'ema': [str(named['ema'].value.spec), named['ema'].scale]}

    return outcome(run)


def state_of_numpy_arrays() -> Outcome:
    """A transform whose init makes NumPy arrays (np.zeros_like)."""
    tx = optax.GradientTransformation(lambda params: jax.tree.map(np.zeros_like, params),
                                      optax.sgd(0.1).update)

    def run() -> Outcome:
        with jax.set_mesh(jax.make_mesh((2, 4), ('a', 'b'))):
            model = nnx.Linear(16, 8, rngs=nnx.Rngs(0), kernel_metadata={'out_sharding': ('a', 'b')})
            state = nnx.Optimizer(model, tx, wrt=nnx.Param).opt_state
        return {'kernel': spec(state['kernel'][...]), 'bias': spec(state['bias'][...])}

    return outcome(run)


def lbfgs_memory_sharded_later() -> Outcome:
    """The lbfgs memory of a kernel made with eager_sharding=False, on a mesh
    whose axes divide it."""
    def run() -> Outcome:
        with jax.set_mesh(jax.make_mesh((2, 4), ('a', 'b'))):
            init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ('a', 'b'), eager_sharding=False)
            model = nnx.Linear(16, 8, kernel_init=init, rngs=nnx.Rngs(0))
            memory = nnx.Optimizer(model, optax.lbfgs(memory_size=4), wrt=nnx.Param
                                   ).opt_state[0].diff_params_memory['kernel']
        return {'memory': spec(memory[...]), 'metadata': memory.get_metadata().get('out_sharding')}

    return outcome(run)


def state_of_a_parameter_in_host_memory() -> Outcome:
    """Adam over a kernel moved to each memory kind (Explicit mesh): where its
    state lives."""
    def run() -> Outcome:
        mesh = jax.make_mesh((2, 4), ('a', 'b'), axis_types=EXPLICIT)
        kinds = {}
        with jax.set_mesh(mesh):
            for kind in ('device', 'pinned_host', 'unpinned_host'):
                model = nnx.Linear(16, 8, rngs=nnx.Rngs(0), kernel_metadata={'out_sharding': ('a', 'b')})
                model.kernel.set_value(jax.device_put(model.kernel.get_value(), jax.sharding.NamedSharding(
                    mesh, jax.P('a', 'b'), memory_kind=kind)))
                mu = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param).opt_state[0].mu['kernel'][...]
                kinds[kind] = [mu.sharding.memory_kind, spec(mu)]
        return kinds

    return outcome(run)


def optimizer_on_another_mesh() -> Outcome:
    """The model made on a (2, 4) mesh, its optimizer on a (4, 2) one."""
    def make() -> nnx.Linear:
        return nnx.Linear(4, 8, rngs=nnx.Rngs(0), kernel_metadata={'out_sharding': ('a', None)})

    def run() -> Outcome:
        with jax.set_mesh(jax.make_mesh((2, 4), ('a', 'b'))):
            model = make()
        with jax.set_mesh(jax.make_mesh((4, 2), ('a', 'b'))):
            optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
        mu = optimizer.opt_state[0].mu['kernel'][...]
        return {'mu': spec(mu), 'mesh': list(mu.sharding.mesh.shape.values())}

    return outcome(run)


def variable_holding_none() -> Outcome:
    """A placeholder Param(None) with a spec: its spec, its named sharding and
    the abstract model (which fails on a value without a shape)."""
    mesh = jax.make_mesh((2, 4), ('a', 'b'))

    class Model(nnx.Module):
        def __init__(self) -> None:
            self.cache = nnx.Param(None, out_sharding=('a', None), eager_sharding=False)
            self.kernel = nnx.Param(jnp.ones((2, 4)), out_sharding=('a', None))

    with jax.set_mesh(mesh):
        model = Model()
        specs = nnx.get_partition_spec(nnx.state(model))
        named = nnx.get_named_sharding(nnx.state(model), mesh)
        abstract = outcome(lambda: {'cache': str(nnx.eval_shape(Model).cache.get_value())})
    return {'spec': str(specs['cache'].get_value()),
            'named': str(named['cache'].get_value().spec), 'abstract': abstract}


def named_stack_after_a_jitted_step() -> Outcome:
    """A stack named 'a' before its sharded init, one jitted Adam step: the
    kernel's array sharding and values after it (Auto mesh)."""
    def make(key: jax.Array) -> nnx.Linear:
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, 'b'))
        return nnx.Linear(8, 8, kernel_init=init, rngs=nnx.Rngs(key))

    with jax.set_mesh(jax.make_mesh((2, 4), ('a', 'b'), axis_types=(jax.sharding.AxisType.Auto,) * 2)):
        model = nnx.vmap(make, transform_metadata={nnx.PARTITION_NAME: 'a'})(
            jax.random.split(jax.random.key(0), 4))
        optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

        @nnx.jit
        def step(model: nnx.Linear, optimizer: nnx.Optimizer, x: jax.Array) -> jax.Array:
            def loss(model: nnx.Linear) -> jax.Array:
                forward = nnx.scan(lambda layer, x: jnp.tanh(layer(x)), in_axes=(0, nnx.Carry),
                                   out_axes=nnx.Carry, transform_metadata={nnx.PARTITION_NAME: 'a'})
                return jnp.mean(forward(model, x) ** 2)

            value, grads = nnx.value_and_grad(loss)(model)
            optimizer.update(model, grads)
            return value

        before = spec(model.kernel[...])
        loss_value = float(step(model, optimizer, jnp.ones((2, 8))))
        kernel = model.kernel[...]
    return {'before': before, 'after': spec(kernel), 'loss': loss_value,
            'sum': float(jnp.sum(kernel))}


ROWS: dict[str, Callable[[], Any]] = {
    'named_stack_after_a_jitted_step': named_stack_after_a_jitted_step,
    'variable_holding_none': variable_holding_none,
    'lbfgs_memory': lbfgs_memory,
    'lbfgs_memory_of_a_jax_vmap_stack': lbfgs_memory_of_a_jax_vmap_stack,
    'adafactor_spec_shorter_than_the_parameter': adafactor_spec_shorter_than_the_parameter,
    'optimizer_on_another_mesh': optimizer_on_another_mesh,
    'spec_resolved_later_names_an_axis_twice': spec_resolved_later_names_an_axis_twice,
    'named_sharding_of_a_train_state': named_sharding_of_a_train_state,
    'state_of_numpy_arrays': state_of_numpy_arrays,
    'lbfgs_memory_sharded_later': lbfgs_memory_sharded_later,
    'state_of_a_parameter_in_host_memory': state_of_a_parameter_in_host_memory,
    'masked_state': masked_state,
    'python_scalar_param': python_scalar_param,
    'layer_name_not_a_mesh_axis': layer_name_not_a_mesh_axis,
    'malformed_sharding_rules': malformed_sharding_rules,
    'optimizer_sharding_that_does_not_fit': optimizer_sharding_that_does_not_fit,
    'live_jit_abstract': live_jit_abstract,
}

if __name__ == '__main__':
    import flax
    print(json.dumps({'flax': flax.__version__, **{name: row() for name, row in ROWS.items()}}))
