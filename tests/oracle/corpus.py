"""The oracle's fixed programs: user reports of #5112 and the e2e regression guards."""

from __future__ import annotations

from tests.oracle.programs import CALLABLES, DEFAULT, HIDDEN, HOSTILE, JUNK, VISIBLE, Apply, \
    Leaf, Program, Spec, Stack, program_from_json
from tests.support.checks import VANILLA_BUG_CASES

ALL_CONSUMERS = ('partition_spec', 'named_sharding', 'abstract', 'eval_shape', 'train_step')
W = (16, 32)


def leaf(form: str, *entries: object, **kwargs: object) -> Leaf:
    return Leaf('w', W, Spec(form, tuple(entries)), **kwargs)  # type: ignore[arg-type]


def vmap(partition: str | None = DEFAULT, size: int = 2) -> Stack:
    return Stack('vmap', size, 0, partition)


ROWS = [
    Program('P(a,b) vmap PARTITION_NAME=None', (leaf('pspec', 'a', 'b'),),
            (vmap(None),), consumers=ALL_CONSUMERS, optimizer='adam'),
    Program('unstacked short spec (a,)', (leaf('tuple', 'a'),),
            consumers=ALL_CONSUMERS, optimizer='adam'),
    Program('MultiHeadAttention kernel (None, b)', custom='mha',
            consumers=ALL_CONSUMERS[:4]),
    Program('scan PARTITION_NAME=a inside shard_map', (leaf('tuple', None, 'b'),),
            (vmap('a'),), apply=Apply('scan', 'a', shard_map=True)),
    Program('explicit mesh: vmap a, then scan a', (leaf('tuple', None, 'b'),),
            (vmap('a'),), mesh='explicit', apply=Apply('scan', 'a'),
            consumers=ALL_CONSUMERS, optimizer='adam'),
    Program('vmap layers over an unnamed stack', (leaf('tuple', 'a', 'b'),),
            (vmap(),), apply=Apply('vmap', 'layers')),
    Program('scan layers over an unnamed stack', (leaf('tuple', 'a', 'b'),),
            (vmap(),), apply=Apply('scan', 'layers')),
    Program('short spec (a,) created in vmap', (leaf('tuple', 'a'),), (vmap(),),
            consumers=ALL_CONSUMERS, optimizer='adam'),
    Program('jax.lax.scan stack, sharding_names by hand, Optimizer',
            (leaf('tuple', 'a', 'b'),), custom='lax_scan_sharding_names',
            consumers=('partition_spec',), optimizer='adam'),
]

# Bodies that map over a layer's and an
# unmapped copy's state, update the layer, or call a function jitted outside.
ROWS += [
    Program(f'body {wrap}: {stack} stack, {kind} {mode} {apply}',
            (leaf('tuple', None, 'b'),), (vmap(stack),),
            apply=Apply(kind, apply, mode, wrap))
    for wrap in ('tree_map', 'update', 'jit')
    for stack, apply in ((DEFAULT, DEFAULT), ('a', DEFAULT), ('a', 'a'), (None, DEFAULT))
    for kind in ('vmap', 'scan')
    for mode in ('graph', 'tree')
]

# nnx.pmap (8 simulated CPU devices; pmap cannot run inside jax.set_mesh, so
# no mesh): create, forward, and bodies that make Variables, graph and tree
# mode, default and named.
PMAP = [
    Program(f'pmap {mode} {name}: create, {kind} {wrap}',
            (leaf('tuple', None, 'b'), Leaf('v', (8,), None)),
            (Stack('pmap', 4, 0, stack, mode),),
            mesh='none', apply=Apply(kind, apply, mode, wrap),
            consumers=('partition_spec', 'eval_shape'), optimizer='adam')
    for mode, name, stack, apply in (('graph', 'default', DEFAULT, DEFAULT),
                                     ('graph', 'named', 'p', 'p'),
                                     ('tree', 'default', DEFAULT, DEFAULT),
                                     ('tree', 'named', 'p', 'p'))
    for kind, wrap in (('pmap', 'none'), ('pmap', 'grad'), ('pmap', 'clone'),
                       ('pmap', 'optimizer'), ('vmap', 'none'))
    if mode == 'graph' or wrap in ('none', 'grad')
]
ROWS += PMAP

# Bodies that make Variables (I2): a copy, a gradient under nnx.vmap, an
# optimizer built inside the transform (on an Explicit mesh: the optimizer
# shards its state eagerly there).
ROWS += [
    Program(f'made in body: {wrap} under {kind} {mode}, {stack} stack',
            (leaf('tuple', None, 'b'),), (vmap(stack),),
            mesh='explicit' if wrap == 'optimizer' else 'auto',
            apply=Apply(kind, stack if stack == 'a' else DEFAULT, mode, wrap))
    for wrap in ('clone', 'grad', 'optimizer')
    for kind in ('vmap', 'scan')
    for mode, stack in (('graph', DEFAULT), ('graph', 'a'), ('tree', DEFAULT))
]
# Found by the oracle: nnx.Optimizer built inside nnx.vmap on an
# Explicit mesh, for a Param with no sharding metadata at all (ours raised
# `is_fully_addressable is not implemented for AbstractMesh`); a copy or
# optimizer state made in a tree-mode body over a named stack (ours gave it
# None at the axis, vanilla and I2 the stack's name).
ROWS += [
    Program('made in body: optimizer under vmap, Param without metadata, explicit mesh',
            (Leaf('w', (8,), None),), (vmap(),), mesh='explicit',
            apply=Apply('vmap', DEFAULT, 'graph', 'optimizer')),
] + [
    Program(f'made in body: {wrap} under default tree-mode vmap over a named stack',
            (leaf('list', None, 'b'),), (vmap('a'),), mesh='none',
            apply=Apply('vmap', DEFAULT, 'tree', wrap))
    for wrap in ('clone', 'optimizer')
]

# Found by the oracle (series 10, which honoured transform_metadata in tree
# mode): a tree-mode stack made with a name and an extra transform_metadata
# key meets an unmapped copy in a pytree op inside a default body. Series 11
# ignores the keyword in tree mode, as vanilla does.
ROWS += [
    Program(f'body tree_map: {mode} stack with an extra key, default tree-mode vmap',
            (Leaf('w', (8, 8), Spec('pspec', ()), extra_spec=Spec('tuple', ('x0',))),),
            (Stack('scan', 2, 0, 'a', mode, extra=True),),
            apply=Apply('vmap', DEFAULT, 'tree', 'tree_map'))
    for mode in ('graph', 'graph-no-updates')
]

# Found by the oracle (series 10): a stack made from a spec shorter than its
# layers and an optimizer built in a default body, where the declared
# optimizer_sharding places the state. Since series 11 the stack reads back
# positionally: the body sees the per-layer specs, as for full specs.
ROWS += [
    Program(f'made in body: optimizer over a stack of short specs, {mode} scan',
            (Leaf('w', (16, 16, 8), Spec('pspec', (('a', 'b'),)),
                  optimizer_spec=Spec('pspec', (('a', 'b'),))),),
            (Stack('scan', 4, 0, DEFAULT, 'graph'),), mesh='explicit',
            apply=Apply('scan', DEFAULT, mode, 'optimizer'))
    for mode in ('graph', 'tree')
]

# Found by the oracle (series 10): the same with no declared
# optimizer_sharding, on an Auto mesh (the body's parameter is a tracer with
# no sharding to copy), where the out_sharding places the state; and a stack
# made through an nnx.transform_metadata body, whose named path stacks the
# declared optimizer_sharding too (series 11).
ROWS += [
    Program(f'made in body: optimizer over a stack of short out_sharding specs, {mode} vmap',
            (Leaf('w', (8, 16, 16), Spec('tuple', ('a',))),),
            (Stack('scan', 2, 0, DEFAULT, 'graph'),), mesh='auto',
            apply=Apply('vmap', DEFAULT, mode, 'optimizer'))
    for mode in ('graph', 'tree')
] + [  # with a full spec beside (series 10 left both stacked, and the
    # optimizer failed with JAX's rank error where vanilla runs)
    Program('made in body: optimizer over a stack of short and full specs',
            (Leaf('w0', (8, 16, 16), Spec('tuple', ('a', None, None))),
             Leaf('w1', (8, 16, 16), Spec('tuple', ('a',)))),
            (Stack('scan', 2, 0, DEFAULT, 'graph'),), mesh='auto',
            apply=Apply('vmap', DEFAULT, 'graph', 'optimizer')),
] + [  # full specs, and the optimizer built outside the transform
    Program('made in body: optimizer over a stack of full specs, tree vmap',
            (Leaf('w', (8, 16, 16), Spec('tuple', ('a', None, None))),),
            (Stack('scan', 2, 0, DEFAULT, 'graph'),), mesh='auto',
            apply=Apply('vmap', DEFAULT, 'tree', 'optimizer')),
    Program('optimizer built outside a stack of short out_sharding specs',
            (Leaf('w', (8, 16, 16), Spec('tuple', ('a',))),),
            (Stack('scan', 2, 0, DEFAULT, 'graph'),), mesh='auto',
            consumers=('train_step',), optimizer='adam'),
] + [
    Program(f'made in body: optimizer over a decorator stack, {mode} vmap',
            (Leaf('w', (8, 8), Spec('pspec', (('a', 'b'), None)),
                  optimizer_spec=Spec('pspec', (('a', 'b'), None))),),
            (Stack('scan', 2, 0, DEFAULT, 'graph'),
             Stack('vmap', 2, 0, DEFAULT, 'graph', decorator='dec', placement='direct')),
            mesh='none',
            apply=Apply('vmap', DEFAULT, mode, 'optimizer'))
    for mode in ('graph', 'tree')
]

# Found by the oracle: adafactor over a stack whose spec is shorter than its
# layers, on an Explicit mesh: the spec fits the factored moments, of lower
# rank, whose dimensions are not the parameter's (vanilla fails at
# nnx.Optimizer on a (1,) placeholder).
ROWS += [
    Program(f'optimizer: adafactor over a spec shorter than its layers, {stack} stack',
            (Leaf('w0', (16, 8), Spec('tuple', ('a',)), key='sharding_names',
                  optimizer_spec=Spec('tuple', ('a',))),),
            (Stack(stack, 2, 0, DEFAULT, 'graph'),), mesh='explicit',
            consumers=('partition_spec', 'eval_shape', 'train_step'), optimizer='adafactor')
    for stack in ('vmap', 'scan')
]

# Found by the oracle: where vanilla's pass fails (a name it did not stack
# without graph updates), a function jitted outside traces once per call on
# ours, as on vanilla where its pass runs; and a decorator stack with a
# declared optimizer_sharding (one entry short on vanilla, stacked by the
# named path on ours).
ROWS += [
    Program('jitted function in a body where vanilla\'s named pass fails',
            (Leaf('w', (8,), Spec('tuple', ('a',)), key='sharding_names'),),
            (Stack('pmap', 1, 0, 'l0', 'graph-no-updates'),), mesh='none',
            apply=Apply('vmap', 'l0', 'graph', 'jit')),
    Program('optimizer: adafactor over a decorator stack\'s short optimizer_sharding',
            (Leaf('w', (16,), Spec('pspec', ('b',)),
                  optimizer_spec=Spec('pspec', ('b',))),),
            (Stack('vmap', 2, 0, DEFAULT, 'graph', decorator='a', placement='direct'),),
            mesh='explicit',
            consumers=('partition_spec', 'eval_shape'), optimizer='adafactor'),
]

# Found by the oracle: over a stack of short and full specs (series 10 left
# their entries: a function jitted outside traced again in the body), and
# short and full logical specs; and a named stack whose name is a mesh axis
# stacks a declared optimizer_sharding, which then places the state by that
# name while the transform moved no data: the train step moves the
# parameter to the state's devices.
ROWS += [
    Program('jitted function in a body over a stack of short and full specs',
            (Leaf('w0', (8, 16), Spec('tuple', (('a', 'b'),))),
             Leaf('w1', (8,), Spec('tuple', (('a', 'b'),)))),
            (Stack('vmap', 1, 0, DEFAULT, 'graph'),), mesh='explicit',
            apply=Apply('scan', DEFAULT, 'graph', 'jit')),
    Program('made in body: optimizer over short and full logical specs, tree vmap',
            (Leaf('w0', (8, 8, 16), Spec('list', ('a', 'b', None))),
             Leaf('w1', (8, 8, 16), Spec('pspec', ('b',)), key='sharding_names')),
            (Stack('scan', 1, 0, DEFAULT, 'graph'), Stack('vmap', 1, 0, DEFAULT, 'graph')),
            mesh='auto', context_rules=True,
            apply=Apply('vmap', DEFAULT, 'tree', 'optimizer')),
    Program('train step: a mesh-axis name stacked into a declared optimizer_sharding',
            (Leaf('w0', (16,), Spec('pspec', (None,)), optimizer_spec=Spec('pspec', (None,))),),
            (Stack('vmap', 4, 0, 'b', 'graph'), Stack('vmap', 1, 0, DEFAULT, 'graph')),
            mesh='auto', context_rules=True, consumers=('train_step',), optimizer='adam'),
]

# Found by the oracle (series 11): a tree-mode stack made at a negative axis
# from specs shorter than its layers, mapped again at that axis by a
# tree-mode transform: each entry is read where the named path pops it
# (from the end of the stacked value), not from the end of the spec.
ROWS += [
    Program('tree mode: short specs stacked and mapped at a negative axis',
            (Leaf('w0', (8, 16, 16), Spec('tuple', ('a', 'b', None)),
                  optimizer_spec=Spec('tuple', ('a', 'b', None)),
                  extra_spec=Spec('tuple', ('x0',))),
             Leaf('w1', (16, 16, 16), Spec('list', ('a', 'b')), key='sharding_names',
                  extra_spec=Spec('tuple', ('x0',)))),
            (Stack('vmap', 2, -3, None, 'tree', extra=True),), mesh='none',
            apply=Apply('vmap', 'layers', 'tree', 'remat'),
            consumers=('partition_spec', 'eval_shape', 'train_step'), optimizer='sgd'),
]

# Each spec form vanilla accepts, through the transforms of series 12 (the
# random programs draw these too). A read-only pass over each form changes
# nothing; jax.P with unreduced or reduced axes and a
# NamedSharding go mesh-less (eager sharding fails on both flaxes on a mesh).
FORMS_12 = {
    'one entry': Spec('tuple', ('a',)), '(None,)': Spec('tuple', (None,)),
    'list': Spec('list', ('a', None)),
    'unreduced': Spec('pspec', ('a', None), unreduced=('b',)),
    'reduced': Spec('pspec', (None, 'a'), reduced=('b',)),
    'NamedSharding': Spec('named', ('a',)),
}
ROWS += [
    Program(f'read-only pass: {name} spec, {kind} {mode}', (Leaf('w', W, spec),), (vmap(),),
            mesh='none', apply=Apply(kind, DEFAULT, mode), consumers=('eval_shape',),
            optimizer='adam')
    for name, spec in FORMS_12.items()
    for kind, mode in (('vmap', 'graph'), ('vmap', 'tree'), ('scan', 'graph'))
] + [  # vanilla's named path iterates the spec: it raises on these (WORKAROUND_GAPS)
    Program(f'named stack and pass: {name} spec', (Leaf('w', W, FORMS_12[name]),),
            (vmap('l'),), mesh='none', apply=Apply('vmap', 'l'), consumers=('eval_shape',))
    for name in ('unreduced', 'NamedSharding')
] + [  # get_partition_spec raises on both (the random programs read no such spec)
    Program(f'get_partition_spec of {name} specs', (Leaf('w', W, FORMS_12[name]),),
            (vmap(),), mesh='none', consumers=('partition_spec',))
    for name in ('unreduced', 'NamedSharding')
] + [
    Program('get_partition_spec of ref=True Variables', (leaf('tuple', 'a', None, ref=True),),
            (vmap(),), consumers=('partition_spec',)),
]

# ref=True Variables: created by a vmap (the one stack JAX builds of them),
# passed read-only and copied.
ROWS += [
    Program(f'ref=True: {stack} stack, {apply} {mode} pass', (leaf('tuple', 'a', None, ref=True),),
            (vmap(stack),), mesh='none', apply=Apply('vmap', apply, mode, 'clone'),
            consumers=('eval_shape',), optimizer='adam')
    for stack, apply in ((DEFAULT, DEFAULT), ('l', 'l'), ('l', DEFAULT))
    for mode in ('graph', 'tree')
]

# The forward pass's body as any callable.
ROWS += [
    Program(f'body as {body}: default {kind} pass over a named stack',
            (leaf('tuple', None, 'b'),), (vmap('a'),),
            apply=Apply(kind, DEFAULT, 'graph', 'none', callable=body))
    for body in CALLABLES[1:]
    for kind in ('vmap', 'scan')
]

# Series 14: callables whose attributes are hostile to a look through
# wrappers (__getattr__ raising KeyError, an array __func__, Mock(wraps=f),
# jax.tree_util.Partial) as bodies in the tree modes too, of a copy and of a
# gradient (the random programs draw them as well).
ROWS += [
    Program(f'body as {body}: default {kind} {wrap} pass, {mode}',
            (leaf('tuple', None, 'b'),), (vmap(),),
            apply=Apply(kind, DEFAULT, mode, wrap, callable=body))
    for body in HOSTILE
    for kind in ('vmap', 'scan')
    for mode in ('graph-no-updates', 'tree')
    for wrap in ('clone', 'grad')
]

# nnx.transform_metadata where the transform sees it (the result is
# vanilla's) and where it cannot (ours stacks its None on top of the
# decorator's entry: (None, 'a', 'b') where vanilla gives ('a', 'b'), and a
# pass given the decorator's name raises), docs/compatibility.md. Over a
# full per-layer spec the hidden decorator's stack is one entry longer than
# the array, so eval_shape raises JAX's rank error on ours.
ROWS += [
    Program(f'decorator {placement}, partition {name}: create, {apply} pass',
            (leaf('tuple', 'b'),),
            (Stack('vmap', 2, 0, DEFAULT, 'graph', decorator=name, placement=placement),),
            apply=Apply('vmap', apply), consumers=('partition_spec', 'named_sharding'))
    for placement in VISIBLE + HIDDEN
    for name, apply in (('a', DEFAULT), ('a', 'a'), (None, DEFAULT))
] + [
    Program(f'decorator {placement} over a full spec: eval_shape', (leaf('tuple', None, 'b'),),
            (Stack('vmap', 2, 0, DEFAULT, 'graph', decorator='a', placement=placement),),
            consumers=('eval_shape', 'abstract'))
    for placement in ('direct', 'inside')
]

# Found by the oracle's random programs (series 12 generator):
# - a decorator hidden in the body over full specs: ours' stack is one entry
#   longer than the array and eval_shape raises JAX's rank error, also for a
#   declared optimizer_sharding, at nnx.Optimizer;
# - a tree-mode pass given a name leaves the stacked optimizer_sharding an
#   optimizer built in the body sees (longer than the slice: JAX's rank
#   error), where vanilla fails on its per-layer spec;
# - a tree-mode stack given a name (ignored, as on vanilla) leaves the spec
#   without its entry: optimizer state built in a default body follows that
#   metadata on an Auto mesh, as on vanilla, and nnx.Optimizer may fail on
#   it as vanilla's pass does.
ROWS += [
    Program('hidden decorator over full specs: eval_shape',
            (Leaf('w0', (16,), Spec('tuple', (None,)), optimizer_spec=Spec('tuple', (None,))),
             Leaf('w1', (16,), Spec('tuple', ('b',)), optimizer_spec=Spec('tuple', ('b',)))),
            (Stack('vmap', 4, 0, DEFAULT, 'graph-no-updates', placement='inside'),),
            apply=Apply('vmap', DEFAULT, 'graph-no-updates', 'cond'),
            consumers=('eval_shape', 'named_sharding')),
    Program('hidden decorators over a declared optimizer_sharding: nnx.Optimizer',
            (Leaf('w0', (8,), Spec('tuple', (None,)), optimizer_spec=Spec('tuple', (None,))),),
            (Stack('vmap', 1, 0, DEFAULT, 'graph', placement='lambda'),
             Stack('vmap', 1, 0, DEFAULT, 'graph', placement='remat')), optimizer='adam'),
    Program('tree-mode pass given a name: optimizer in the body over a stacked spec',
            (Leaf('w0', (8,), Spec('pspec', (('a', 'b'),)),
                  optimizer_spec=Spec('pspec', (('a', 'b'),))),),
            (Stack('vmap', 2, 0, DEFAULT, 'graph-no-updates', placement='partial'),
             Stack('vmap', 1, 0, DEFAULT, 'graph', placement='direct')), mesh='explicit',
            apply=Apply('vmap', None, 'graph-no-updates', 'optimizer', callable='method'),
            consumers=('eval_shape', 'abstract', 'train_step'), optimizer='adam'),
    Program('tree-mode pass given a name: optimizer in the body, Auto mesh',
            (leaf('tuple', None, None),),
            (Stack('vmap', 1, 0, None, 'graph'), vmap()),
            apply=Apply('vmap', 'layers', 'graph-no-updates', 'optimizer')),
] + [
    Program(f'tree-mode stack given a name: optimizer in a default body, {where}',
            (Leaf('w0', (8, 8), Spec('tuple', spec), optimizer_spec=optimizer),),
            (Stack('vmap', 1, 0, None, 'graph-no-updates'), vmap(size=1)),
            apply=Apply('vmap', apply, 'graph-no-updates', 'optimizer'),
            optimizer='adam' if optimizer else None)
    for where, spec, optimizer, apply in (
        ('its metadata places the state', (None, 'a'), None, DEFAULT),
        ('nnx.Optimizer fails as vanilla\'s pass', ('a', None),
         Spec('tuple', ('a', None)), 'layers'))
]

# Where the workaround (PARTITION_NAME None on every transform) cannot give the
# fixed row's program on vanilla: the row, and why.
WORKAROUND_GAPS: dict[str, str] = {
    f'optimizer: adafactor over a spec shorter than its layers, {stack} stack':
        "vanilla's nnx.Optimizer gives every adafactor state leaf the parameter's"
        ' spec, also its (1,) placeholders, whatever the stack says'
    for stack in ('vmap', 'scan')
} | {
    "optimizer: adafactor over a decorator stack's short optimizer_sharding":
        "vanilla's nnx.Optimizer gives every adafactor state leaf the parameter's"
        ' spec, also its (1,) placeholders, whatever the stack says',
} | {
    f'named stack and pass: {name} spec':
        "vanilla's named path iterates out_sharding: it raises on this spec, with"
        ' the workaround too'
    for name in ('unreduced', 'NamedSharding')
}

SCENARIOS = [
    Program(f'scenario {name} {arguments}', custom=f'scenario:{name}',
            arguments=tuple(sorted(arguments.items())))
    for name, arguments, _ in VANILLA_BUG_CASES
] + [
    Program('scenario logical_names_in_jit adafactor', custom='scenario:logical_names_in_jit',
            arguments=(('optimizer', 'adafactor'),)),
    Program('scenario train_steps_keep_shardings', custom='scenario:train_steps_keep_shardings'),
]

# Series 13. Remove-then-add is the identity for what a body derives from a
# mapped Variable: over an expert stack declared on its stacked array (a
# (4, 8, 16) kernel declared ('b',), and the other one-entry forms), a copy,
# a gradient, the returned state, a scan's output and a layer the body
# creates with the per-layer spec come out as the stack is declared.
DECLARED = {
    "('b',)": ('tuple', 'b'), '(None,)': ('tuple', None), '[None]': ('list', None),
    "['a']": ('list', 'a'), "jax.P('b')": ('pspec', 'b'),
}
ROWS += [
    Program(f'declared stack {name}: {wrap} under {kind} {mode}',
            (Leaf('w', (8, 16), Spec(form, ())),), (Stack('array', 4, 0, entry),),
            apply=Apply(kind, DEFAULT, mode, wrap), consumers=('partition_spec',))
    for name, (form, entry) in DECLARED.items()
    for wrap in ('clone', 'grad', 'return', 'create')
    for kind, mode in (('vmap', 'graph'), ('scan', 'graph'), ('vmap', 'tree'))
    if (name == "('b',)" or (kind == 'vmap' and wrap in ('clone', 'grad', 'create')))
    and not (wrap == 'return' and mode != 'graph')  # Duplicate Param on both
] + [  # the declared name given to the pass, and a full declared spec beside
    Program(f'declared stack: {wrap} under a vmap given the declared name',
            (Leaf('w0', (8, 16), Spec('tuple', ())), Leaf('w1', (8, 16), Spec('tuple', (None, 'a')))),
            (Stack('array', 4, 0, 'b'),), apply=Apply('vmap', 'b', 'graph', wrap))
    for wrap in ('clone', 'grad', 'return', 'create')
] + [  # at axis 1, with an optimizer_sharding declared
    Program(f'declared stack at axis 1: {wrap} under vmap',
            (Leaf('w', (8, 16), Spec('tuple', ('a',)), optimizer_spec=Spec('tuple', ('a',))),),
            (Stack('array', 4, 1, 'b'),), apply=Apply('vmap', DEFAULT, 'graph', wrap),
            consumers=('partition_spec', 'eval_shape'), optimizer='adam')
    for wrap in ('clone', 'grad', 'create', 'optimizer')
]

# A transform_metadata mapping without nnx.PARTITION_NAME is vanilla's: its
# other keys are ignored and the default runs (series 12 raised "Expected to
# remove 'z'"), on the stack and on the pass.
ROWS += [
    Program(f'mapping without a name: {{{key}}} on the {where}',
            (Leaf('w', (8, 16), Spec('tuple', ('a', None)), optimizer_spec=Spec('tuple', ('a', None)),
                  extra_spec=Spec('tuple', ('x0',))),),
            (Stack('vmap', 2, 0, DEFAULT, other=key if where == 'stack' else None),),
            apply=Apply('vmap', DEFAULT, 'graph', 'clone', other=key if where == 'pass' else None),
            consumers=('partition_spec',), optimizer='adam')
    for key in ('extra', 'optimizer_sharding', 'tags')
    for where in ('stack', 'pass')
]

# Any callable: nothing about f is hashed (a frozen dataclass with a list
# field, a flax.struct.dataclass with an array field: their __hash__ raises).
ROWS += [
    Program(f'body as {body} (its __hash__ raises): default {kind} {wrap} pass',
            (leaf('tuple', None, 'b'),), (vmap('a'),),
            apply=Apply(kind, DEFAULT, 'graph', wrap, callable=body))
    for body in ('frozen', 'struct')
    for kind in ('vmap', 'scan')
    for wrap in ('none', 'clone')
]

# The decorator owns its axis behind nnx.grad and nnx.value_and_grad too,
# and an NNX vmap stops the walk: in nnx.vmap(nnx.vmap(decorated)) over a
# stack (None, 'h', 'a', 'b') the outer default vmap takes its own None and
# the inner one leaves 'h' to the decorator (series 12 raised "Expected to
# remove 'h'"). Behind a lambda or called in the body the transform cannot
# see it: ours' pass removes the stack's entry first and the decorator then
# finds another (docs/compatibility.md, a documented consequence).
ROWS += [
    Program(f'pass decorator {placement}: {wrap} over a decorator stack',
            (leaf('tuple', 'a', 'b'),),
            (Stack('vmap', 2, 0, DEFAULT, decorator='h', placement='direct'),), mesh='none',
            apply=Apply('vmap', DEFAULT, 'graph', wrap, decorator='h', placement=placement),
            consumers=('partition_spec',))
    for placement in ('direct', 'grad', 'value_and_grad', 'lambda', 'inside')
    for wrap in (('none',) if placement in ('grad', 'value_and_grad') else ('none', 'clone'))
] + [
    Program(f'nested default vmap over a decorated vmap ({placement}): {wrap}',
            (leaf('tuple', 'a', 'b'),),
            (vmap(), Stack('vmap', 2, 0, DEFAULT, decorator='h', placement='direct')),
            mesh='none',
            apply=Apply('vmap', DEFAULT, 'graph', wrap, decorator='h', placement=placement,
                        nested=True),
            consumers=('partition_spec',))
    for placement in ('direct', 'partial', 'remat', 'grad', 'lambda')
    for wrap in (('none',) if placement == 'grad' else ('none', 'clone', 'create'))
] + [
    Program('nested default vmap over a declared stack: create', (leaf('tuple', 'a'),),
            (vmap(), Stack('array', 4, 0, 'b')),
            apply=Apply('vmap', DEFAULT, 'graph', 'create', nested=True))
]

# A kernel declared ('b',)
# on its stacked array beside a bias declared () (replicated): the default
# vmap gives both (), having taken ('b',) and (); copies are matched to the
# mapped Variables of their shape, so the kernel's copy gets ('b',) back as
# on vanilla. Where the replicated Param has the kernel's shape, the takers
# of () disagree and a copy's () takes the normal add: it stays () where
# vanilla keeps ('b',) (the rule's fallback).
ROWS += [
    Program(f'declared kernel beside a replicated {what}: {wrap} under vmap',
            (Leaf('kernel', (8, 16), Spec('tuple', ())), Leaf('bias', shape, Spec('tuple', ()))),
            (Stack('array', 4, 0, 'b', replicated=('bias',)),),
            apply=Apply('vmap', DEFAULT, 'graph', wrap), consumers=('partition_spec',))
    for what, shape in (('bias', (16,)), ('Param of its shape', (8, 16)))
    for wrap in ('clone', 'grad')
]

# Found by the oracle (series 13 generator; not series 13's): a tree-mode
# pass given a name leaves the stacked spec (as on vanilla), and an optimizer
# built in its body lays it on the slice, where it does not divide a
# dimension (JAX's error); vanilla's stack, left per-layer, fits the slice.
ROWS += [
    Program('tree-mode pass given a name: optimizer in the body over a stack at axis -2',
            (Leaf('w0', (16, 16), Spec('tuple', (('a', 'b'),)),
                  optimizer_spec=Spec('tuple', (('a', 'b'),))),),
            (Stack('vmap', 4, 0, DEFAULT, 'tree'), Stack('vmap', 4, -2, DEFAULT, 'graph')),
            mesh='explicit', apply=Apply('scan', None, 'tree', 'optimizer')),
]

# Found by the oracle (series 13 generator, before nnxaxis.14): a tree-mode
# stack given a name (ignored, as on vanilla) under an outer default vmap
# left optimizer_sharding one entry short of the array, and nnx.Optimizer
# failed on an Explicit mesh; tree mode now stacks as a default transform.
ROWS += [
    Program('tree-mode stack given a name under a default vmap: nnx.Optimizer',
            (Leaf('w0', (8,), Spec('tuple', (None,)),
                  optimizer_spec=Spec('tuple', ('a',))),),
            (Stack('vmap', 2, 0, DEFAULT, 'graph'), Stack('vmap', 4, 0, None, 'tree')),
            mesh='explicit', optimizer='adam', consumers=('train_step',)),
]

# Found by the oracle (nnxaxis.14's first run): a copy of a ref Param stacked
# ('b',) came out () where vanilla keeps ('b',): graph mode hands a new ref's
# value out in a wrapper, whose shape the give-back did not read.
ROWS += [
    Program('a clone of a ref stack declared by name, legacy key',
            (Leaf('w0', (8, 8, 16), Spec('tuple', ()), key='sharding_names', ref=True),),
            (Stack('array', 4, 0, 'b'),), mesh='explicit',
            apply=Apply('vmap', wrap='clone', callable='frozen', other='extra')),
]

# Found by the oracle (nnxaxis.14): an optimizer built in a default body over
# a stack declared ('a',) on an Explicit mesh: vanilla's body sees the
# stacked spec on the slice, and JAX raises DuplicateSpecError for P('a',
# 'a'); ours' body sees the per-slice spec and runs.
ROWS += [
    Program('optimizer in a default body over a declared stack, logical rules',
            (Leaf('w0', (8,), Spec('tuple', ()), key='sharding_names',
                  extra_spec=Spec('tuple', ('x0',))),),
            (Stack('array', 4, 0, 'a'),), mesh='explicit', context_rules=True,
            apply=Apply('vmap', wrap='optimizer', other='extra')),
]
WORKAROUND_GAPS['optimizer in a default body over a declared stack, logical rules'] = (
    "vanilla's named path, given the stack's name 'a', removes it from the"
    " one-entry ('a',) and does not add it back to the empty spec (0.12.12: ())")

# Found by the oracle (nnxaxis.15's long run; nnxaxis.14 alike): an Adam
# optimizer built in a tree-mode body over a stack whose arrays are not laid
# out as declared, on an Auto mesh: the traced parameter has no sharding, so
# the state follows the metadata the body sees (I4), not the array.
ROWS += [program_from_json(
    '{"name": "optimizer in a tree-mode body over a stack not laid out as declared, Auto '
    'mesh", "leaves": [{"name": "w0", "shape": [16], "spec": {"form": "tuple", "entries":'
    ' [null], "unreduced": [], "reduced": []}, "key": "out_sharding", "optimizer_spec": '
    '{"form": "tuple", "entries": [null], "unreduced": [], "reduced": []}, "extra_spec": '
    '{"form": "list", "entries": ["x0", null], "unreduced": [], "reduced": []}, '
    '"local_rules": false, "ref": false}, {"name": "w1", "shape": [16, 8, 16], "spec": '
    '{"form": "list", "entries": [null], "unreduced": [], "reduced": []}, "key": '
    '"sharding_names", "optimizer_spec": {"form": "list", "entries": [null], "unreduced":'
    ' [], "reduced": []}, "extra_spec": {"form": "tuple", "entries": ["x0"], "unreduced":'
    ' [], "reduced": []}, "local_rules": false, "ref": false}], "stacks": [{"kind": '
    '"scan", "size": 4, "axis": 0, "partition": null, "mode": "graph-no-updates", '
    '"extra": false, "decorator": null, "placement": null, "other": null, "replicated": '
    '[]}, {"kind": "scan", "size": 4, "axis": 0, "partition": "b", "mode": "graph", '
    '"extra": true, "decorator": null, "placement": null, "other": null, "replicated": '
    '[]}], "mesh": "auto", "context_rules": false, "apply": {"kind": "vmap", "partition":'
    ' "layers", "mode": "tree", "wrap": "optimizer", "state_axes": false, "shard_map": '
    'false, "callable": "mock", "other": null, "decorator": null, "placement": null, '
    '"nested": false}, "consumers": ["eval_shape", "named_sharding"], "optimizer": null, '
    '"custom": null, "arguments": []}')]

# A simple scan (tree mode, or graph mode without updates) inside
# jax.shard_map, its unmapped layer a broadcast made outside it. Vanilla
# writes every broadcast back after lax.scan, changed or not, across the
# trace level (TraceContextError); ours writes back only what the body
# changed, here nothing, and runs; also with a pytree op between the mapped
# and the unmapped layer in the body, as in the long run's program.
ROWS += [
    Program(f'{mode} scan with a broadcast inside shard_map{wrap_name}',
            (leaf('tuple', None, 'b'),), (Stack('vmap', 2, 0, DEFAULT, 'tree'),),
            apply=Apply('scan', DEFAULT, mode, wrap, shard_map=True))
    for mode, wrap, wrap_name in (('tree', 'none', ''), ('graph-no-updates', 'none', ''),
                                  ('tree', 'tree_map', ', a pytree op in the body'))]

# nnxaxis.16: transform_metadata that is no mapping of a name (JUNK) is read
# where vanilla reads it, on a stack and on a pass, in every mode: tree mode
# reads none of it; graph mode finds the name in 'partition_name' and
# ['partition_name'] (vanilla's ValueError at a node, on both) and raises on
# None (TypeError, on both); the rest runs as the default transform.
ROWS += [
    Program(f'junk transform_metadata {junk}: {mode} {where}',
            (leaf('tuple', None, 'b'),),
            (Stack('vmap', 2, 0, DEFAULT, mode if where == 'stack' else 'graph',
                   other=junk if where == 'stack' else None),),
            mesh='none',
            apply=Apply('vmap', DEFAULT, mode, 'clone', other=junk) if where == 'pass'
            else Apply('vmap', DEFAULT, 'graph', 'clone'))
    for junk in JUNK
    for mode in ('graph', 'graph-no-updates', 'tree')
    for where in ('stack', 'pass')]

# nnxaxis.16: mixed-sign axes (one axis, compared normalized): a pass mapping
# at in_axes=1 whose copies leave at out_axes=-2 (rank-2 stacks), and at
# in_axes=-1 leaving at 1; named, default, tree; and ref=True copies of a
# stack at axis 0 leaving at out_axes=-2 (the ref's output wrapper counts
# from the stacked value's end).
ROWS += [
    Program(f'mixed-sign axes: {mode} stack at {axis}, {apply} pass out_axes {out}',
            (Leaf('w', (16,), Spec('tuple', (None,))),),
            (Stack('vmap', 2, axis, stack, mode),), mesh='none',
            apply=Apply('vmap', apply, mode, 'clone', out_axis=out))
    for mode, stack, apply in (('graph', 'l', 'l'), ('graph', DEFAULT, DEFAULT),
                               ('tree', DEFAULT, DEFAULT), ('graph', None, None))
    for axis, out in ((1, -1), (-1, 1), (0, -2), (-2, 0))]
ROWS += [
    Program(f'ref=True copies at a negative out axis: {mode} {stack} stack, {wrap}',
            (Leaf('w', (16,), Spec(form, entries), ref=True),),
            (Stack('vmap', 2, 0, stack, mode),), mesh='none',
            apply=Apply('vmap', stack, mode, wrap, out_axis=-2))
    for mode, stack in (('graph', 'l'), ('graph', DEFAULT), ('tree', DEFAULT))
    for form, entries in (('tuple', (None,)), ('list', ('a',)))
    for wrap in ('clone', 'return' if mode == 'graph' else 'create')]
WORKAROUND_GAPS['mixed-sign axes: graph stack at -1, l pass out_axes 1'] = (
    "vanilla's named path counts -1 from the end of the spec, not of the stacked"
    " value: it put 'l' first on the stack ('l', None) and looks for it last")

# A read-only pass leaves every spec form as it was, a jax.P whose unreduced
# or reduced axes hold the name the stack's out_sharding has at the axis
# included: a Param (8, 8, 8) declared out_sharding ('b',) and
# optimizer_sharding jax.P('a', None, unreduced={'b'}) (as written for the
# stacked array) under a default graph-mode vmap or scan that only reads it,
# or copies it (the give-back adds to a spec only what the call removed).
OVERLAP = {'unreduced': Spec('pspec', ('a', None), unreduced=('b',)),
           'reduced': Spec('pspec', ('a', None), reduced=('b',))}
ROWS += [
    Program(f'read-only pass over an optimizer_sharding P {name} the name: {kind} {wrap}',
            (Leaf('w', (8, 8), Spec('tuple', ()), optimizer_spec=spec),),
            (Stack('array', 8, 0, 'b', own_optimizer=('w',)),), mesh='none',
            apply=Apply(kind, DEFAULT, 'graph', wrap), consumers=('eval_shape',))
    for name, spec in OVERLAP.items()
    for kind in ('vmap', 'scan')
    for wrap in ('none', 'clone')
]

# A named mapping that names optimizer_sharding decides that field as on
# vanilla, for every spec form: only a tuple is updated (its removal raises
# where the entry at the axis is not the value: both flaxes raise), a list or
# jax.P is left alone; on a pass over a stack declared ('l', None) whose
# optimizer_sharding lacks the name, and on a stack that creates.
NAMELESS_OPTIMIZER = {'list': Spec('list', ('x', 'a')), 'jax.P': Spec('pspec', ('x', 'a')),
                      'tuple': Spec('tuple', ('x', 'a'))}
ROWS += [
    Program(f"mapping naming optimizer_sharding over a {name} without the name: {wrap} pass",
            (Leaf('w', (8,), Spec('tuple', (None,)), optimizer_spec=spec),),
            (Stack('array', 2, 0, 'l', own_optimizer=('w',)),), mesh='none',
            apply=Apply('vmap', 'l', 'graph', wrap, keys=(('optimizer_sharding', 'l'),)),
            consumers=('eval_shape',))
    for name, spec in NAMELESS_OPTIMIZER.items()
    for wrap in ('none', 'clone')
] + [
    Program(f"mapping naming optimizer_sharding over a {name}: {mode} vmap creates",
            (Leaf('w', (8,), Spec('tuple', (None,)), optimizer_spec=spec),),
            (Stack('vmap', 2, 0, 'l', mode, keys=(('optimizer_sharding', 'l'),)),), mesh='none',
            consumers=('eval_shape',))
    for name, spec in NAMELESS_OPTIMIZER.items()
    for mode in ('graph', 'tree')
]

# A mapping's other keys are read as vanilla reads them: through the
# Variable's attribute, after the name, in the mapping's order, where that is
# a non-empty tuple (graph mode; tree mode reads none of them): an
# out_sharding key inserts its value after the name ((None, 'l', None, 'b')
# for None on a created (None, 'b')), the deprecated sharding_names reads and
# writes out_sharding, shape reads the value's shape (an add writes a
# metadata key 'shape'; a pass's removal finds a dimension and raises).
KEYED = {"{out_sharding: None}": (('out_sharding', None),),
         "{out_sharding: 'z'}": (('out_sharding', 'z'),),
         "{sharding_names: 'z'}": (('sharding_names', 'z'),),
         '{shape: 3}': (('shape', 3),),
         "{shape: 3, out_sharding: 'z', optimizer_sharding: 'l'}":
             (('shape', 3), ('out_sharding', 'z'), ('optimizer_sharding', 'l'))}
ROWS += [
    Program(f'mapping with other keys {name}: {mode} vmap creates, {apply} pass',
            (Leaf('w', (8, 16), Spec('tuple', (None, 'b')),
                  optimizer_spec=Spec('tuple', (None, 'b'))),),
            (Stack('vmap', 2, 0, 'l', mode, keys=keys),), mesh='none',
            apply=Apply('vmap', DEFAULT if apply == 'default' else 'l', mode, 'clone',
                        keys=keys if apply == 'keyed' else ()),
            consumers=('eval_shape',))
    for name, keys in KEYED.items()
    for mode in ('graph', 'tree')
    for apply in ('default', 'keyed')
]
ROWS += [  # a keyed pass that runs: it removes the name, then the out_sharding key
    Program(f"mapping with other keys: a {mode} {wrap} pass given {{'z', out_sharding: 'l'}}"
            " over a stack given {'l', out_sharding: 'z'}",
            (Leaf('w', (8, 16), Spec('tuple', (None, 'b'))),),
            (Stack('vmap', 2, 0, 'l', keys=(('out_sharding', 'z'),)),), mesh='none',
            apply=Apply('vmap', 'z', mode, wrap, keys=(('out_sharding', 'l'),)),
            consumers=('eval_shape',))
    for mode in ('graph', 'tree')
    for wrap in ('none', 'clone')
]

# Found by the oracle (nnxaxis.17's long run): a graph-mode pass given the
# name as a string (no mapping) raises vanilla's ValueError at the mapped
# node, where vanilla did not get to the pass (it fails at create).
ROWS += [program_from_json(
    '{"name": "junk name transform_metadata on a graph pass over a stack vanilla cannot c'
    'reate", "leaves": [{"name": "w0", "shape": [8], "spec": {"form": "tuple", "entries":'
    ' [null], "unreduced": [], "reduced": []}, "key": "out_sharding", "optimizer_spec": n'
    'ull, "extra_spec": {"form": "tuple", "entries": ["x0"], "unreduced": [], "reduced": '
    '[]}, "local_rules": true, "ref": true}, {"name": "w1", "shape": [8], "spec": {"form"'
    ': "named", "entries": [], "unreduced": [], "reduced": []}, "key": "out_sharding", "o'
    'ptimizer_spec": null, "extra_spec": {"form": "tuple", "entries": ["x0"], "unreduced"'
    ': [], "reduced": []}, "local_rules": true, "ref": true}, {"name": "w2", "shape": [16'
    '], "spec": {"form": "pspec", "entries": ["b"], "unreduced": [], "reduced": ["a"]}, "'
    'key": "out_sharding", "optimizer_spec": null, "extra_spec": {"form": "tuple", "entri'
    'es": ["x0"], "unreduced": [], "reduced": []}, "local_rules": true, "ref": false}], "'
    'stacks": [{"kind": "vmap", "size": 2, "axis": 0, "partition": "default", "mode": "gr'
    'aph-no-updates", "extra": false, "decorator": "dec", "placement": "partial", "other"'
    ': null, "replicated": [], "own_optimizer": [], "keys": []}, {"kind": "vmap", "size":'
    ' 2, "axis": 0, "partition": "default", "mode": "graph-no-updates", "extra": false, "'
    'decorator": "dec", "placement": "inside", "other": null, "replicated": [], "own_opti'
    'mizer": [], "keys": []}], "mesh": "none", "context_rules": false, "apply": {"kind": '
    '"vmap", "partition": "default", "mode": "graph", "wrap": "none", "state_axes": false'
    ', "shard_map": false, "callable": "partial", "other": "name str", "decorator": null,'
    ' "placement": null, "nested": false, "out_axis": null, "keys": []}, "consumers": [],'
    ' "optimizer": "sgd", "custom": null, "arguments": []}'
)]

# Found by the oracle (nnxaxis.18's long run): a graph-mode pass given
# transform_metadata=None raises vanilla's TypeError (the name looked for in
# None), where vanilla did not get to the pass (it fails at create).
ROWS += [program_from_json(
    '{"name": "transform_metadata None on a graph pass over a stack vanilla cannot create"'
    ', "leaves": [{"name": "w0", "shape": [8], "spec": {"form": "list", "entries": [null],'
    ' "unreduced": [], "reduced": []}, "key": "out_sharding", "optimizer_spec": null, "ext'
    'ra_spec": null, "local_rules": true, "ref": false}, {"name": "w1", "shape": [8, 8, 16'
    '], "spec": {"form": "named", "entries": ["b", "a"], "unreduced": [], "reduced": []}, '
    '"key": "out_sharding", "optimizer_spec": null, "extra_spec": null, "local_rules": tru'
    'e, "ref": false}, {"name": "w2", "shape": [8], "spec": {"form": "pspec", "entries": ['
    '["a", "b"]], "unreduced": [], "reduced": []}, "key": "out_sharding", "optimizer_spec"'
    ': {"form": "pspec", "entries": [["a", "b"]], "unreduced": [], "reduced": []}, "extra_'
    'spec": null, "local_rules": true, "ref": false}], "stacks": [{"kind": "scan", "size":'
    ' 4, "axis": 0, "partition": "default", "mode": "graph", "extra": false, "decorator": '
    'null, "placement": "partial", "other": null, "replicated": [], "own_optimizer": [], "'
    'keys": []}, {"kind": "scan", "size": 4, "axis": 0, "partition": "default", "mode": "g'
    'raph", "extra": false, "decorator": null, "placement": "inside", "other": null, "repl'
    'icated": [], "own_optimizer": [], "keys": []}], "mesh": "none", "context_rules": fals'
    'e, "apply": {"kind": "scan", "partition": "default", "mode": "graph", "wrap": "none",'
    ' "state_axes": true, "shard_map": false, "callable": "partial", "other": "None", "dec'
    'orator": null, "placement": null, "nested": false, "out_axis": null, "keys": []}, "co'
    'nsumers": ["eval_shape"], "optimizer": null, "custom": null, "arguments": []}'
)]

# Found by the oracle (nnxaxis.18's long run): optimizer state made in a
# default graph-mode body over a jnp.stack stack follows the declared
# optimizer_sharding the body sees, an entry removed (compatibility.md, a
# stack made by jax.vmap or jnp.stack), not the parameter's array.
ROWS += [program_from_json(
    '{"name": "optimizer in a default vmap body over a jnp.stack stack with optimizer_shar'
    'ding", "leaves": [{"name": "w0", "shape": [8, 16], "spec": {"form": "pspec", "entries'
    '": [null], "unreduced": [], "reduced": []}, "key": "sharding_names", "optimizer_spec"'
    ': {"form": "pspec", "entries": [null], "unreduced": [], "reduced": []}, "extra_spec":'
    ' null, "local_rules": false, "ref": false}, {"name": "w1", "shape": [8, 16, 16], "spe'
    'c": {"form": "tuple", "entries": ["b"], "unreduced": [], "reduced": []}, "key": "shar'
    'ding_names", "optimizer_spec": {"form": "tuple", "entries": ["b"], "unreduced": [], "'
    'reduced": []}, "extra_spec": null, "local_rules": false, "ref": false}], "stacks": [{'
    '"kind": "vmap", "size": 4, "axis": 0, "partition": "default", "mode": "tree", "extra"'
    ': false, "decorator": null, "placement": "lambda", "other": null, "replicated": [], "'
    'own_optimizer": [], "keys": []}, {"kind": "array", "size": 4, "axis": 0, "partition":'
    ' null, "mode": "graph", "extra": false, "decorator": null, "placement": null, "other"'
    ': null, "replicated": [], "own_optimizer": [], "keys": []}], "mesh": "explicit", "con'
    'text_rules": false, "apply": {"kind": "vmap", "partition": "default", "mode": "graph"'
    ', "wrap": "optimizer", "state_axes": false, "shard_map": false, "callable": "object",'
    ' "other": null, "decorator": null, "placement": null, "nested": false, "out_axis": nu'
    'll, "keys": []}, "consumers": [], "optimizer": null, "custom": null, "arguments": []}'
)]

# Found by the oracle (nnxaxis.18's long run): optimizer state made in a
# default graph-mode body over a stack built through a decorator the
# transform cannot see follows the optimizer_sharding the body sees
# (compatibility.md, a decorated function the transform cannot see), not
# the parameter's array.
ROWS += [program_from_json(
    '{"name": "optimizer in a default scan body over a stack a hidden decorator named", "l'
    'eaves": [{"name": "w0", "shape": [8, 16], "spec": {"form": "pspec", "entries": [null]'
    ', "unreduced": [], "reduced": []}, "key": "sharding_names", "optimizer_spec": {"form"'
    ': "pspec", "entries": [null], "unreduced": [], "reduced": []}, "extra_spec": null, "l'
    'ocal_rules": false, "ref": false}, {"name": "w1", "shape": [8, 16, 16], "spec": {"for'
    'm": "tuple", "entries": ["b"], "unreduced": [], "reduced": []}, "key": "sharding_name'
    's", "optimizer_spec": {"form": "tuple", "entries": ["b"], "unreduced": [], "reduced":'
    ' []}, "extra_spec": null, "local_rules": false, "ref": false}], "stacks": [{"kind": "'
    'vmap", "size": 4, "axis": 0, "partition": null, "mode": "tree", "extra": false, "deco'
    'rator": null, "placement": null, "other": null, "replicated": [], "own_optimizer": []'
    ', "keys": []}, {"kind": "vmap", "size": 4, "axis": 0, "partition": "default", "mode":'
    ' "graph", "extra": false, "decorator": "a", "placement": "inside", "other": null, "re'
    'plicated": [], "own_optimizer": [], "keys": []}], "mesh": "explicit", "context_rules"'
    ': false, "apply": {"kind": "scan", "partition": "default", "mode": "graph", "wrap": "'
    'optimizer", "state_axes": true, "shard_map": false, "callable": "partial", "other": "'
    'list", "decorator": null, "placement": null, "nested": false, "out_axis": null, "keys'
    '": []}, "consumers": ["partition_spec"], "optimizer": "sgd", "custom": null, "argumen'
    'ts": []}'
)]
