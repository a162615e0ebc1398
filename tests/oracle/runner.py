"""Run oracle programs under whichever flax is importable; report as JSON.

``python -m tests.oracle.runner`` is a worker: it reads one ``Program`` JSON
per line on stdin and writes one report JSON per line on stdout, so JAX
starts once per flax and hypothesis can shrink against live workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import sys
import traceback
from typing import Any, Callable, Iterator
from unittest import mock

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import flax.struct  # noqa: E402

from flax import nnx  # noqa: E402
from tests.oracle.programs import (  # noqa: E402
    DEFAULT, EXTRA_KEY, EXTRA_VALUE, FIELDS, GRADS, HIDDEN, JUNK, MODES, RULES, Apply, Leaf,
    Program, Spec, Stack, array_fields, leaf_fields, program_from_json)
from tests.oracle.probes.util import spec as jsonable_spec  # noqa: E402
from tests.oracle.reports import AbstractLeaf, ApplyReport, OptimizerLeaf, Report, \
    VariableReport  # noqa: E402
AXIS_TYPES = {'auto': jax.sharding.AxisType.Auto, 'explicit': jax.sharding.AxisType.Explicit}


# Describing what flax made -------------------------------------------------

def sharding_of(value: Any) -> Any:
    sharding = getattr(value, 'sharding', None)
    if isinstance(sharding, jax.sharding.NamedSharding):
        spec = [list(e) if isinstance(e, tuple) else e for e in sharding.spec]
        spec += [None] * (len(value.shape) - len(spec))
        return {'spec': spec, 'mesh': [list(sharding.mesh.axis_names),
                                       list(sharding.mesh.axis_sizes)]}
    if sharding is None:
        return None
    return 'single-device' if len(sharding.device_set) == 1 else repr(sharding)


def digest(value: Any) -> str:
    array = np.asarray(jax.device_get(value))
    return f'{array.dtype}{list(array.shape)}:' + hashlib.sha256(array.tobytes()).hexdigest()[:16]


def path_str(path: tuple[Any, ...]) -> str:
    return '/'.join(map(str, path))


def spec_json(x: Any) -> Any:
    """A metadata spec as ``Spec.to_json`` gives it: a NamedSharding as its
    spec (form 'named'), a jax.P with its unreduced and reduced axes."""
    if isinstance(x, jax.sharding.NamedSharding):
        return {**jsonable_spec(tuple(x.spec)), 'form': 'named'}
    if isinstance(x, jax.P) and (x.unreduced or x.reduced):
        out = jsonable_spec(jax.P(*x.partitions))
        out.update({k: sorted(getattr(x, k)) for k in ('unreduced', 'reduced')
                    if getattr(x, k)})
        return out
    return jsonable_spec(x)


def metadata_snapshot(node: Any) -> tuple[str, list[tuple[str, str, str]]]:
    """The pytree structure, and every Variable's type and metadata exactly
    (each value with its type), to tell whether a pass changed nothing."""
    state = nnx.state(node)
    return str(jax.tree.structure(state)), [
        (path_str(p), type(v).__name__,
         repr({k: (type(m).__name__, m) for k, m in v.get_metadata().items()}))
        for p, v in nnx.to_flat_state(state)]


def describe(tree: Any, values: bool = True) -> dict[str, VariableReport]:
    """Every Variable (of a graph node or a State): value digest (``values``),
    dtype/shape, array sharding, metadata fields."""
    out = {}
    state = tree if isinstance(tree, nnx.State) else nnx.state(tree)
    for path, var in nnx.to_flat_state(state):
        value = var.get_value()
        metadata = var.get_metadata()
        out[path_str(path)] = VariableReport(
            type=type(var).__name__, dtype=str(value.dtype), shape=list(value.shape),
            metadata={f: spec_json(metadata.get(f)) for f in FIELDS},
            metadata_keys=sorted(metadata), sharding=sharding_of(value),
            digest=digest(value) if values else None)
    return out


# The generic program --------------------------------------------------------

@functools.cache
def named_mesh() -> jax.sharding.Mesh:
    """The mesh of a NamedSharding spec (form 'named'): one device, axes a, b."""
    return jax.make_mesh((1, 1), ('a', 'b'))


def spec_object(spec: Spec | None) -> Any:
    if spec is None:
        return None
    entries = [tuple(e) if isinstance(e, tuple) else e for e in spec.entries]
    if spec.form == 'named':
        return jax.NamedSharding(named_mesh(), jax.P(*entries))
    if spec.form == 'pspec':
        return jax.P(*entries, unreduced=set(spec.unreduced), reduced=set(spec.reduced))
    return {'tuple': tuple, 'list': list}[spec.form](entries)


class Layer(nnx.Module):
    """One Param per Leaf, values depending on ``seed`` (the layer index);
    given an ``array`` stack, each Param made stacked and declared so
    (``programs.array_fields``)."""

    def __init__(self, leaves: tuple[Leaf, ...], seed: jax.Array, array: Stack | None = None):
        self.names = tuple(leaf.name for leaf in leaves)
        for i, leaf in enumerate(leaves):
            shape = leaf.shape
            fields = leaf_fields(leaf)
            if array is not None:
                shape = shape[:array.axis] + (array.size,) + shape[array.axis:]
                fields = array_fields(fields, array, leaf.name)
            size = int(np.prod(shape))
            value = jnp.arange(size, dtype=jnp.float32).reshape(shape) / size + seed + i
            metadata: dict[str, Any] = {}
            if fields['out_sharding'] is not None:
                metadata[leaf.key] = spec_object(fields['out_sharding'])
            if fields['optimizer_sharding'] is not None:
                metadata['optimizer_sharding'] = spec_object(fields['optimizer_sharding'])
            if leaf.extra_spec is not None:
                metadata[EXTRA_KEY] = spec_object(leaf.extra_spec)
            if leaf.local_rules:
                metadata['sharding_rules'] = RULES
            setattr(self, leaf.name, nnx.Param(value, ref=leaf.ref, **metadata))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + sum(jnp.mean(getattr(self, n)[...]) for n in self.names)


def other_metadata(key: str | None) -> dict[str, Any]:
    """A transform_metadata mapping without nnx.PARTITION_NAME (programs.OTHER_KEYS),
    or one that is no mapping (programs.JUNK)."""
    if key is None:
        return {}
    if key in JUNK:  # no mapping of a name
        return {'transform_metadata': {
            'None': None, 'list': ['x'], 'str': 'abc', 'name str': nnx.PARTITION_NAME,
            'name list': [nnx.PARTITION_NAME]}[key]}
    return {'transform_metadata': {'extra': {EXTRA_KEY: EXTRA_VALUE},
                                   'optimizer_sharding': {'optimizer_sharding': 'a'},
                                   'tags': {'tags': 'z'}}[key]}


def build(program: Program, level: int = 0, seed: Any = 0.0) -> Layer:
    if level == len(program.stacks):
        return Layer(program.leaves, seed)
    stack = program.stacks[level]
    if stack.kind == 'array':  # innermost: the layer made stacked
        return Layer(program.leaves, seed, stack)
    graph, updates = MODES[stack.mode]
    kwargs: dict[str, Any] = {'graph': graph, 'graph_updates': updates}
    if stack.partition != DEFAULT:
        tm = {nnx.PARTITION_NAME: stack.partition}
        if stack.extra:
            tm[EXTRA_KEY] = EXTRA_VALUE
        kwargs['transform_metadata'] = {**tm, **dict(stack.keys)}
    else:
        kwargs.update(other_metadata(stack.other))
    xs = jnp.arange(stack.size, dtype=jnp.float32) * 10.0 ** (len(program.stacks) - level)

    def layer(x: jax.Array) -> Layer:
        return build(program, level + 1, seed + x)

    def step(c: jax.Array, x: jax.Array) -> tuple[jax.Array, Layer]:
        return c, layer(x)

    fn = step if stack.kind == 'scan' else layer
    if stack.placement is not None:
        fn = decorated(stack, layer, step)
    if stack.kind == 'vmap':
        return nnx.vmap(fn, in_axes=0, out_axes=stack.axis, **kwargs)(xs)
    if stack.kind == 'pmap':
        return nnx.pmap(fn, in_axes=0, out_axes=0, **kwargs)(xs)
    return nnx.scan(fn, in_axes=(nnx.Carry, 0),
                    out_axes=(nnx.Carry, 0), **kwargs)(jnp.zeros(()), xs)[1]


def decorated(stack: Stack, layer: Callable[[jax.Array], Layer],
              step: Callable[[jax.Array, jax.Array], Any]) -> Callable[..., Any]:
    """The stack's function with an ``nnx.transform_metadata`` function
    (``partition=stack.decorator``) where ``stack.placement`` puts it: given
    to the transform directly, behind ``nnx.remat`` or ``functools.partial``,
    or hidden behind a lambda or called inside the body."""
    graph = MODES[stack.mode][0]
    scan = stack.kind == 'scan'
    if stack.placement in HIDDEN:
        named = nnx.transform_metadata(layer, in_axes=0, out_axes=0,
                                       partition=stack.decorator, graph=graph)
        if stack.placement == 'lambda':
            return (lambda c, x: (c, named(x))) if scan else (lambda x: named(x))

        def body(*args: jax.Array) -> Any:  # 'inside': called in the body
            out = named(args[-1])
            return (args[0], out) if scan else out

        return body
    if scan:
        named = nnx.transform_metadata(step, in_axes=(None, 0), out_axes=(None, 0),
                                       partition=stack.decorator, graph=graph)
    else:
        named = nnx.transform_metadata(layer, in_axes=0, out_axes=0,
                                       partition=stack.decorator, graph=graph)
    return {'direct': named, 'remat': nnx.remat(named, graph=graph),
            'partial': functools.partial(named)}[stack.placement]


@dataclasses.dataclass
class Body:
    """A forward pass's body as an unhashable callable object, or its bound method."""
    fn: Callable[..., Any]

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def method(self, *args: Any) -> Any:
        return self.fn(*args)


@dataclasses.dataclass(frozen=True)
class FrozenBody:
    """A frozen dataclass with a list field: its ``__hash__`` raises."""
    fn: Callable[..., Any]
    tags: list[str] = dataclasses.field(default_factory=lambda: ['body'])

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


@flax.struct.dataclass
class StructBody:
    """A flax.struct.dataclass with an array field: its ``__hash__`` raises."""
    scale: jax.Array
    fn: Callable[..., Any] = flax.struct.field(pytree_node=False)

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


class KeyErrorBody:
    """A callable object whose ``__getattr__`` raises ``KeyError`` for
    ``__func__`` (looking through it must not raise)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.__dict__['fn'] = fn

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __getattr__(self, name: str) -> Any:
        raise (KeyError if name == '__func__' else AttributeError)(name)


class ArrayBody:
    """A callable object whose ``__func__`` is an array (no truth value)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn, self.__func__ = fn, jnp.ones(2)

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


def as_callable(fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
    """``fn`` as one of ``programs.CALLABLES``."""
    if kind == 'struct':
        return StructBody(np.ones(()), fn)
    return {'function': fn, 'object': Body(fn), 'partial': functools.partial(fn),
            'method': Body(fn).method, 'frozen': FrozenBody(fn),
            'keyerror': KeyErrorBody(fn), 'array': ArrayBody(fn),
            'mock': mock.Mock(wraps=fn), 'tree_partial': jax.tree_util.Partial(fn)}[kind]


def decorated_body(apply: Apply, core: Callable[..., Any], graph: bool) -> Callable[..., Any]:
    """The pass's body ``core(m, shared, x)`` with an ``nnx.transform_metadata``
    function (``partition=apply.decorator``, mapping ``m`` at 0) where
    ``apply.placement`` puts it: given to the transform directly, behind
    ``nnx.remat``, ``functools.partial``, ``nnx.grad`` or
    ``nnx.value_and_grad`` of a loss over ``m`` (the body then returns the
    gradient), behind a lambda or called inside the body."""
    if apply.placement is None:
        return core
    if apply.placement in GRADS:
        def loss(m: Layer, shared: Layer, x: jax.Array) -> jax.Array:
            return jnp.sum(core(m, shared, x))

        named = nnx.transform_metadata(loss, in_axes=(0, None, None), out_axes=0,
                                       partition=apply.decorator, graph=graph)
        return {'grad': nnx.grad, 'value_and_grad': nnx.value_and_grad}[apply.placement](
            named, graph=graph, graph_updates=MODES[apply.mode][1])
    named = nnx.transform_metadata(core, in_axes=(0, None, None), out_axes=0,
                                   partition=apply.decorator, graph=graph)
    if apply.placement == 'lambda':
        return lambda m, shared, x: named(m, shared, x)
    if apply.placement == 'inside':
        def body(m: Layer, shared: Layer, x: jax.Array) -> Any:
            return named(m, shared, x)
        return body
    return {'direct': named, 'remat': nnx.remat(named, graph=graph),
            'partial': functools.partial(named)}[apply.placement]


MAKES = ('clone', 'grad', 'optimizer', 'return', 'create')  # Apply.wrap: bodies that make


def run_apply(program: Program, apply: Apply, model: Layer,
              mesh: jax.sharding.Mesh | None) -> ApplyReport:
    graph, updates = MODES[apply.mode]
    kwargs: dict[str, Any] = {'graph': graph, 'graph_updates': updates}
    if apply.partition != DEFAULT:
        kwargs['transform_metadata'] = {nnx.PARTITION_NAME: apply.partition,
                                        **dict(apply.keys)}
    else:
        kwargs.update(other_metadata(apply.other))
    axis = program.stacks[0].axis
    axes: Any = nnx.StateAxes({nnx.Param: axis}) if apply.state_axes else axis
    inside: list[Any] = []
    traces: list[None] = []
    shared = Layer(program.leaves, jnp.zeros(()))  # unmapped, declared like a layer

    def forward(m: Layer, x: jax.Array) -> jax.Array:
        inside.append({path_str(p): spec_json(v.get_metadata().get('out_sharding'))
                       for p, v in nnx.to_flat_state(nnx.state(m))})
        return m(x)

    @nnx.jit
    def jitted(m: Layer, x: jax.Array) -> jax.Array:
        traces.append(None)
        return m(x)

    def made_in_body(m: Layer, x: jax.Array) -> Any:
        """Variables the body makes: a copy, a gradient, an optimizer's state,
        the mapped layer's state returned, a layer created."""
        if apply.wrap == 'clone':
            return nnx.state(nnx.clone(m))
        if apply.wrap == 'grad':
            return nnx.grad(lambda m: jnp.sum(m(x)))(m)
        if apply.wrap == 'return':
            return nnx.state(m)
        if apply.wrap == 'create':
            return nnx.state(Layer(program.leaves, x))
        optimizer = nnx.Optimizer(m, optax.adam(1e-2), wrt=nnx.Param)
        return nnx.state(optimizer, nnx.OptState)

    grads = apply.placement in GRADS  # the body returns a gradient
    makes = apply.wrap in MAKES or grads

    def core(m: Layer, shared: Layer, x: jax.Array) -> Any:
        if apply.wrap == 'remat':
            return nnx.remat(forward)(m, x)
        if apply.wrap == 'cond':
            return nnx.cond(x > -1e9, forward, lambda m, x: -forward(m, x), m, x)
        if apply.wrap == 'tree_map':  # pytree ops between mapped and unmapped
            jax.tree.map(lambda a, b: None, nnx.state(m), nnx.state(shared))
        if apply.wrap == 'update':  # the body replaces the layer's metadata
            nnx.update(m, nnx.state(m))
        if apply.wrap == 'jit':  # one jitted function inside and outside
            forward(m, x)
            return jitted(m, x)
        if apply.wrap in MAKES:
            return forward(m, x), made_in_body(m, x)
        return forward(m, x)

    # the body as the transform gets it (nnx.grad's gradient alone: the
    # output is then zeros), value_and_grad's (loss, gradient) as the others
    body = decorated_body(apply, core, graph)
    alone = apply.placement == 'grad'

    def call(m: Layer, x: jax.Array) -> Any:
        # what the body makes leaves at out_axis: the axis of the other sign
        made_axis = axis if apply.out_axis is None else apply.out_axis
        out_axes: Any = made_axis if alone else (0, made_axis) if makes else 0
        if apply.kind in ('vmap', 'pmap'):
            transform = nnx.vmap if apply.kind == 'vmap' else nnx.pmap
            fn = body
            if apply.nested:  # an inner default vmap over the second stack's axis
                inner_axes = program.stacks[1].axis
                fn = nnx.vmap(body, in_axes=(inner_axes, None, None),
                              out_axes=inner_axes if alone else (0, inner_axes) if makes
                              else 0, graph=graph, graph_updates=updates)
            out = transform(as_callable(fn, apply.callable), in_axes=(axes, None, None),
                            out_axes=out_axes, **kwargs)(m, shared, x)
            return (jnp.zeros(()), out) if alone else out

        def step(c: jax.Array, m: Layer, s: Layer) -> Any:
            out = body(m, s, c)
            return out if makes else (out, c)

        out = nnx.scan(as_callable(step, apply.callable), in_axes=(nnx.Carry, axes, None),
                       out_axes=(nnx.Carry, 0), **kwargs)(x, m, shared)
        return out if makes else out[0]

    x = jnp.ones(())
    if apply.wrap == 'jit':
        jitted(shared, x)
    if apply.shard_map:
        graphdef, state = nnx.split(model)
        P = jax.sharding.PartitionSpec
        out = jax.shard_map(lambda s, x: call(nnx.merge(graphdef, s), x), mesh=mesh,
                            in_specs=(P(), P()), out_specs=P())(state, x)
    else:
        out = call(model, x)
    report = ApplyReport(inside=inside[:1], traces=len(traces))
    if makes:
        out, made = out
        report.made = describe(made)
    report.output = digest(out)
    return report


# Consumers -------------------------------------------------------------------

def pspec_json(spec: Any) -> Any:
    if isinstance(spec, jax.sharding.PartitionSpec):
        return [list(e) if isinstance(e, tuple) else e for e in spec]
    return repr(spec)


def optimizer_tx(name: str) -> optax.GradientTransformation:
    return {'adam': lambda: optax.adam(1e-2), 'sgd': lambda: optax.sgd(1e-2, momentum=0.9),
            'adafactor': lambda: optax.adafactor(1e-2, min_dim_size_to_factor=8)}[name]()


def describe_optimizer(optimizer: nnx.Optimizer, params: dict[str, VariableReport]
                       ) -> dict[str, OptimizerLeaf]:
    """Every state leaf; ``mirrors``: the parameter it mirrors (same path tail, shape)."""
    out = {}
    for path, var in nnx.to_flat_state(nnx.state(optimizer, nnx.OptState)):
        value = var.get_value()
        name = path_str(path)
        mirrors = next((p for p, v in params.items()
                        if name.endswith('/' + p) and v.shape == list(value.shape)), None)
        out[name] = OptimizerLeaf(shape=list(value.shape), digest=digest(value),
                                  sharding=sharding_of(value), mirrors=mirrors)
    return out


@nnx.jit
def train_step(model: nnx.Module, optimizer: nnx.Optimizer) -> jax.Array:
    def loss_fn(model: nnx.Module) -> jax.Array:
        params = nnx.state(model, nnx.Param)
        return sum(jnp.mean(jnp.square(v[...] - 0.5)) for v in jax.tree.leaves(
            params, is_leaf=lambda v: isinstance(v, nnx.Variable)))

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def run_consumers(program: Program, model: nnx.Module, init: Callable[[], nnx.Module],
                  mesh: jax.sharding.Mesh | None, report: Report, stage: list[str]) -> None:
    state = nnx.state(model)
    for consumer in program.consumers:
        stage[0] = consumer
        if consumer == 'partition_spec':
            report.partition_spec = {path_str(p): pspec_json(v.get_value()) for p, v in
                                     nnx.to_flat_state(nnx.get_partition_spec(state))}
        elif consumer == 'named_sharding':
            report.named_sharding = {
                path_str(p): pspec_json(v.get_value().spec)
                for p, v in nnx.to_flat_state(nnx.get_named_sharding(state, mesh))}
        elif consumer == 'abstract':
            _, abstract = nnx.get_abstract_model(init, mesh)
            report.abstract = {
                path_str(p): AbstractLeaf(shape=list(v.get_value().shape),
                                          spec=pspec_json(v.get_value().sharding.spec))
                for p, v in nnx.to_flat_state(abstract)}
        elif consumer == 'eval_shape':
            report.eval_shape = describe(nnx.eval_shape(init), values=False)
    if program.optimizer is not None:
        stage[0] = 'optimizer'
        optimizer = nnx.Optimizer(model, optimizer_tx(program.optimizer), wrt=nnx.Param)
        report.optimizer = describe_optimizer(optimizer, report.variables)
        if 'train_step' in program.consumers:
            stage[0] = 'train_step'
            report.losses = [float(train_step(model, optimizer)).hex() for _ in range(2)]
            report.after_train = describe(model)
            report.optimizer_after_train = describe_optimizer(optimizer, report.variables)


# Hand-written programs -------------------------------------------------------

def mha(program: Program) -> nnx.Module:
    """MultiHeadAttention with a short kernel spec (None, 'b'), unstacked."""
    return nnx.MultiHeadAttention(num_heads=4, in_features=16, qkv_features=16,
                                  decode=False, rngs=nnx.Rngs(0),
                                  kernel_metadata={'out_sharding': (None, 'b')})


def lax_scan_sharding_names(program: Program) -> nnx.Module:
    """A raw jax.lax.scan stack, metadata written by hand (MaxText's nnx_scan.py)."""
    leaves = program.leaves

    def one(carry: Any, seed: jax.Array) -> tuple[Any, Any]:
        return carry, nnx.split(Layer(leaves, seed))[1]

    graphdef = nnx.split(Layer(leaves, 0.0))[0]
    _, stacked = jax.lax.scan(one, None, jnp.arange(4, dtype=jnp.float32))
    model = nnx.merge(graphdef, stacked)
    for _, var in nnx.to_flat_state(nnx.state(model)):
        old = var.get_metadata().get('out_sharding') or ()
        var.set_metadata('sharding_names', (None, *old))
    return model


CUSTOM: dict[str, Callable[[Program], nnx.Module]] = {
    'mha': mha, 'lax_scan_sharding_names': lax_scan_sharding_names}


# Running ---------------------------------------------------------------------

def first_line(e: BaseException) -> str:
    """An exception's first message line, object addresses and file paths removed."""
    lines = str(e).strip().splitlines()
    line = lines[0] if lines else ''
    line = re.sub(r' at 0x[0-9a-f]+', '', line)
    return re.sub(r'(/[^\s:\'"]+)+\.py', '<file>.py', line)


@contextlib.contextmanager
def program_context(program: Program) -> Iterator[jax.sharding.Mesh | None]:
    with contextlib.ExitStack() as stack:
        mesh = None
        if program.mesh == 'none':  # metadata only: eager sharding needs a mesh
            stack.enter_context(nnx.use_eager_sharding(False))
        else:
            mesh = jax.make_mesh((2, 4), ('a', 'b'), axis_types=(AXIS_TYPES[program.mesh],) * 2)
            stack.enter_context(jax.set_mesh(mesh))
        if program.context_rules:
            stack.enter_context(nnx.logical_axis_rules(RULES))
        yield mesh


def run_scenario(program: Program) -> dict[str, Any]:
    from tests.support import scenarios
    return scenarios.run(program.custom.split(':', 1)[1], **dict(program.arguments))


def run_program(program: Program) -> Report:
    import flax
    if program.custom and program.custom.startswith('scenario:'):
        return Report(flax.__version__, scenario=run_scenario(program))
    if program.custom and program.custom.startswith('probe:'):
        from tests.oracle import probes
        return Report(flax.__version__, probe=probes.run(program.custom.split(':', 1)[1]))
    report = Report(flax.__version__)
    stage = ['create']
    model: Any = None
    before: dict[str, VariableReport] | None = None
    try:
        with program_context(program) as mesh:
            if program.custom:
                init = lambda: CUSTOM[program.custom](program)  # noqa: E731
            else:
                init = lambda: build(program)  # noqa: E731
            model = init()
            report.variables = describe(model)
            if program.apply is not None:
                stage[0] = 'apply'
                before = report.variables
                snapshot = metadata_snapshot(model)
                report.apply = run_apply(program, program.apply, model, mesh)
                report.apply.kept = metadata_snapshot(model) == snapshot
                report.after_apply = describe(model)
                before = None
            run_consumers(program, model, init, mesh, report, stage)
    except Exception as e:  # noqa: BLE001 -- the outcome is the report
        report.message = first_line(e)
        report.outcome = f'{type(e).__name__}: {report.message}'
        report.error_type = type(e).__name__
        report.failed_stage = stage[0]
        report.traceback = traceback.format_exc(limit=-4)[-2000:]
        if before is not None and model is not None:
            report.unmutated = describe(model) == before
    return report


def main() -> None:
    import flax
    out = sys.stdout
    sys.stdout = sys.stderr  # flax or jax printing must not break the protocol
    out.write(json.dumps({'flax_version': flax.__version__, 'flax_file': flax.__file__,
                          'devices': jax.device_count()}) + '\n')
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        report = run_program(program_from_json(line))
        out.write(json.dumps(report.to_json()) + '\n')
        out.flush()


if __name__ == '__main__':
    main()
