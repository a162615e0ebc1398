"""Hypothesis strategies: random oracle programs, as data."""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from tests.oracle.programs import APPLY_VISIBLE, CALLABLES, DEFAULT, GRADS, HIDDEN, HOSTILE, JUNK, \
    KEYS, MODES, OTHER_KEYS, RULES, SHAPE_VALUE, VISIBLE, Apply, Leaf, Program, Spec, Stack, \
    ambiguous_give_back

MESH_SIZES = {'a': 2, 'b': 4}
LOGICAL = dict(RULES)
FORMS = ('tuple', 'list', 'pspec')
# How long a spec is: none (no metadata), empty, full, short (from one entry
# to full), one entry, (None,); and, mesh-less, a NamedSharding
KINDS = ('none', 'empty', 'full', 'short', 'one', '(None,)', 'full', 'short')
# The spec forms of series 12's read-only property (the last three
# mesh-less: see spec_only_on_no_mesh)
NEW_FORMS = ('one', '(None,)', 'list', 'unreduced', 'reduced', 'named')
WRAPS = ('clone', 'grad', 'optimizer')  # bodies that make Variables
# Series 13: bodies that return the mapped layer's state or create a layer
NEW_WRAPS = ('return', 'create')
# A declared stack's optimizer_sharding as written (Stack.own_optimizer):
# a jax.P whose unreduced or reduced axes hold the stack's name (the entry
# its out_sharding has at the axis), or a spec without the name
OWN_FORMS = ('unreduced', 'reduced', 'list', 'pspec', 'tuple')


@dataclasses.dataclass(frozen=True)
class Cover:
    """What a coverage focus sets; the rest of its program is drawn."""
    forms: tuple[str, ...] = ()  # each leaf's spec form (NEW_FORMS), mesh-less
    placements: tuple[str, ...] = ()  # each stack's decorator placement, outermost first
    named: bool = True  # the outermost decorator's partition a name, else None
    callable: str | None = None  # the forward pass's body (CALLABLES)
    ref: bool = False  # the first leaf ref=True (see REFS)
    # series 13
    array: bool = False  # the innermost stack an 'array' stack (declared stacked)
    wrap: str | None = None  # the forward pass's body (Apply.wrap)
    other: str | None = None  # a mapping without PARTITION_NAME on the stacks and the pass
    apply_placement: str | None = None  # the pass's decorator (APPLY_VISIBLE, HIDDEN)
    nested: bool = False  # the pass's body an inner default vmap
    # a declared stack's optimizer_sharding as written (OWN_FORMS), mesh-less
    own_optimizer: str | None = None
    keys: tuple[str, ...] = ()  # a named mapping's other keys (KEYS), mesh-less
    stack_named: bool = False  # the outermost stack given a name
    named_pass: bool = False  # the pass given the outermost stack's name


# Hypothesis explores few distinct programs in CI's 50 examples, so the new
# paths of series 12 are reached by few foci that each set several of them,
# most paths by two foci.
COVER = {
    'cover 1': Cover(forms=('one', 'unreduced', 'list'), placements=('lambda', 'remat'),
                     named=False, callable='object'),
    'cover 2': Cover(forms=('(None,)', 'named', 'reduced'), placements=('partial', 'inside'),
                     callable='partial'),
    'cover 3': Cover(forms=('list', 'reduced', 'one'), placements=('inside', 'direct'),
                     callable='method', ref=True),
    'cover 4': Cover(forms=('named', 'unreduced', '(None,)'), placements=('remat', 'lambda'),
                     named=False, callable='partial'),
}
# Series 13: remove-then-add is the identity for what a body derives from a
# mapped Variable (declared stacks: a copy, a gradient, the returned state, a
# created layer); mappings without a name; callables whose __hash__ raises;
# the decorator behind nnx.grad / value_and_grad and under a nested vmap.
COVER |= {
    'cover 5': Cover(array=True, wrap='clone', callable='frozen', other='extra',
                     own_optimizer='unreduced'),
    'cover 6': Cover(array=True, wrap='create', callable='struct', other='tags',
                     own_optimizer='reduced'),
    'cover 7': Cover(array=True, apply_placement='value_and_grad', other='optimizer_sharding'),
    'cover 8': Cover(nested=True, apply_placement='direct', wrap='return', stack_named=True,
                     keys=('out_sharding', 'sharding_names', 'optimizer_sharding')),
}
# A declared stack's optimizer_sharding as written: a jax.P keeping the
# stack's name unreduced or reduced under a default pass (covers 5, 6), a
# list under a pass given the name whose mapping names optimizer_sharding
# (each over the one stack, which the pass maps); a named mapping's other keys on a stack
# (cover 8: out_sharding, sharding_names, optimizer_sharding)
COVER |= {
    'cover 9': Cover(array=True, own_optimizer='list', named_pass=True, wrap='clone',
                     keys=('optimizer_sharding',)),
}
# JAX runs ref=True Variables only so far: stacked by nnx.vmap at out_axes
# 0, not behind nnx.remat, mapped by a vmap whose body has no nnx.cond, no
# gradient of them taken, no adafactor state made and no spec read by
# get_partition_spec and the consumers built on it (a scan, a pmap or a
# remat cannot return a Ref, another out_axes cannot move one, vmap of cond
# rejects its state effect, grad rejects one, adafactor sums one,
# get_partition_spec makes a Ref of a jax.P: both flaxes raise JAX's error,
# and where vanilla's named path raises first there is nothing to compare;
# a fixed row of corpus.py compares the consumers' error). Programs with refs keep to that, so
# compatibility.md's consequence (a ref=True Variable created at a negative
# axis gets its entry at index 0) is never reached here.
REFS = 'vmap at axis 0, no remat placement, no cond, no grad, no adafactor, no spec read'
# A focus makes sure the few examples CI runs reach each patched path: the
# derandomized run gives each entry its share of the examples
# (test_oracle.py); fresh programs draw the focus.
FOCUS = tuple(f for pair in zip(('free', 'pmap', *WRAPS, 'free', 'free', 'cover 9'), COVER)
              for f in pair)


def spec_only_on_no_mesh(spec: Spec | None) -> bool:
    """A NamedSharding, or a jax.P with unreduced or reduced axes: eager
    sharding on a mesh fails on both flaxes (Variable creation asserts the
    NamedSharding's mesh, iterates the jax.P), so they are drawn mesh-less;
    and ``get_partition_spec`` raises on them on both (JAX's ``*pspec``
    error, a TypeError), so no program draws a consumer that reads the spec
    (a fixed row of corpus.py compares those errors)."""
    return spec is not None and (spec.form == 'named' or bool(spec.unreduced or spec.reduced))


@st.composite
def programs(draw: st.DrawFn, focus: str | None = None) -> Program:
    """A random program; of ``focus`` (an entry of ``FOCUS``), or a drawn one."""
    focus = focus or draw(st.sampled_from(FOCUS))
    cover = COVER.get(focus, Cover())
    mesh = 'none' if focus == 'pmap' or cover.forms or cover.own_optimizer or cover.keys \
        else draw(st.sampled_from(['none', 'auto', 'explicit']))
    # Variable-local rules do not resolve under jax.sharding.reshard (Explicit)
    logical = draw(st.sampled_from(['no', 'context'] + (['local'] if mesh != 'explicit' else [])))
    free = {'a', 'b'}  # mesh axes not used yet: each at most once per spec
    placements = cover.placements
    # ref=True leaves, where the program is one JAX runs with refs (REFS)
    refs = cover.ref or (focus != 'grad' and 'remat' not in placements
                         and cover.apply_placement not in GRADS + ('remat',) and draw(
                             st.sampled_from([False, False, False, True])))

    def mapping_keys(partition: object, axis: int) -> tuple[tuple[str, object], ...]:
        """A named mapping's other keys, in a drawn order (KEYS): the name
        or another value for optimizer_sharding; mesh-less (a spec longer than
        its array, a metadata key 'shape'), out_sharding and sharding_names
        None or 'z', and at a non-negative axis shape."""
        if not (cover.keys or draw(st.integers(0, 3)) == 0):
            return ()
        options = [k for k in KEYS if k == 'optimizer_sharding' or (
            mesh == 'none' and (k != 'shape' or axis >= 0))]
        chosen = [k for k in cover.keys if k in options] or draw(
            st.lists(st.sampled_from(options), min_size=1, max_size=3, unique=True))
        values = {'optimizer_sharding': [partition] * 3 + ['o'] * (
                      mesh == 'none' and not cover.keys),
                  'out_sharding': [None, 'z'], 'sharding_names': [None, 'z'],
                  'shape': [SHAPE_VALUE]}
        return tuple((k, draw(st.sampled_from(values[k])))
                     for k in draw(st.permutations(chosen)))

    def entry(logical_names: bool = True) -> object:
        options: list[object] = [None]
        options += sorted(free)
        if logical != 'no' and logical_names:
            options += [name for name, axis in LOGICAL.items() if axis in free]
        if free == {'a', 'b'}:
            options.append(('a', 'b'))
        e = draw(st.sampled_from(options))
        for axis in (e if isinstance(e, tuple) else (LOGICAL.get(e, e),) if e else ()):
            free.discard(axis)
        return e

    leaves = []
    for i in range(len(cover.forms) or draw(st.integers(1, 2))):
        free.update({'a', 'b'})
        shape = tuple(draw(st.lists(st.sampled_from([8, 16]), min_size=1, max_size=3)))
        new = cover.forms[i] if cover.forms else None
        kind = new if new in ('one', '(None,)', 'named') else draw(st.sampled_from(
            KINDS[2:] if new else KINDS + (('named',) if mesh == 'none' else ())))
        length = {'none': 0, 'empty': 0, 'full': len(shape), 'one': 1, '(None,)': 1,
                  'short': draw(st.integers(1, len(shape))),
                  'named': draw(st.integers(0, len(shape)))}[kind]
        form = 'named' if kind == 'named' else 'list' if new == 'list' \
            else 'pspec' if new in ('unreduced', 'reduced') else draw(st.sampled_from(FORMS))
        # a NamedSharding's spec names axes of its mesh, not logical names
        entries = (None,) if kind == '(None,)' else tuple(
            entry(logical_names=form != 'named') for _ in range(length))
        spec = None if kind == 'none' else Spec(form, entries)
        if spec and form == 'pspec' and mesh == 'none' and free \
                and (new in ('unreduced', 'reduced') or draw(st.booleans())):
            # jax.P(..., unreduced={axis}) needs an axis no entry of it uses
            axis = draw(st.sampled_from(sorted(free)))
            free.discard(axis)
            which = new if new in ('unreduced', 'reduced') else draw(
                st.sampled_from(['unreduced', 'reduced']))
            spec = Spec(form, entries, **{which: (axis,)})
        optimizer_spec = draw(st.sampled_from([None, spec])) \
            if spec and spec.entries and form != 'named' else None
        leaves.append(Leaf(f'w{i}', shape, spec,
                           key=draw(st.sampled_from(['out_sharding', 'sharding_names'])),
                           optimizer_spec=optimizer_spec,
                           extra_spec=draw(st.sampled_from([None, Spec('tuple', ('x0',)),
                                                            Spec('list', ('x0', None))])),
                           local_rules=logical == 'local',
                           ref=refs and (i == 0 or draw(st.booleans()))))
    # mesh axes a spec names, or keeps unreduced or reduced: no stack's name
    used = {LOGICAL.get(e, e) for l in leaves if l.spec for e in l.spec.entries
            if isinstance(e, str)} | {a for l in leaves if l.spec for e in l.spec.entries
                                      if isinstance(e, tuple) for a in e}
    used |= {a for l in leaves if l.spec for a in l.spec.unreduced + l.spec.reduced}
    stacks = []
    # every program builds a stack
    depth = max(len(placements), draw(st.integers(1, 2)), 2 if cover.nested else 1)
    if cover.own_optimizer:
        depth = 1  # the pass maps the declared stack
    min_rank = min(len(l.shape) for l in leaves)
    for level in range(depth):
        size = draw(st.sampled_from([1, 2, 4]))
        if level == depth - 1 and level >= len(placements) \
                and not (focus == 'pmap' and level == 0) \
                and (cover.array or draw(st.integers(0, 5)) == 0):
            # series 13: the innermost stack declared, as a user declares an
            # expert stack: arrays made stacked, each spec with its entry
            axis = 0 if refs or focus == 'optimizer' or cover.apply_placement \
                else draw(st.sampled_from([0, 0, 1]))
            entries: list[object] = [None] + [
                a for a in sorted(MESH_SIZES) if a not in used
                and (mesh == 'none' or size % MESH_SIZES[a] == 0)]
            if cover.own_optimizer and len(entries) > 1:
                entries.remove(None)  # a name the optimizer_sharding keeps unreduced
            partition = draw(st.sampled_from(entries))
            used.add(partition)
            # a leaf declared replicated along the stack (a bias beside a kernel)
            # (on a mesh, only a leaf whose spec shards no dimension: else
            # the per-layer spec, laid on the stacked array, may not divide it)
            replicated = tuple(l.name for l in leaves[1:] if (
                mesh == 'none' or l.spec is None or not l.spec.entries) and draw(st.booleans()))
            if replicated and draw(st.booleans()):
                # as a user writes it: the kernel declared (entry,) on its
                # stack, the bias () (both () per layer, of the kernel's form)
                empty = Spec(leaves[0].spec.form if leaves[0].spec else 'tuple', ())
                # (of one shape: copies are matched by value and shape)
                leaves = [dataclasses.replace(l, spec=empty, optimizer_spec=None,
                                              shape=leaves[0].shape)
                          if i == 0 or l.name in replicated else l
                          for i, l in enumerate(leaves)]
            own: tuple[str, ...] = ()
            if mesh == 'none' and (cover.own_optimizer or draw(st.integers(0, 3)) == 0):
                # one leaf's optimizer_sharding as written for the stacked
                # array, without the stack's entry: a jax.P keeping the
                # stack's name unreduced or reduced, or a spec of a form
                # (entries: the per-layer spec's, which do not name it)
                i = draw(st.sampled_from([i for i, l in enumerate(leaves)
                                          if l.name not in replicated]))
                if cover.own_optimizer and (leaves[i].spec is None
                                            or leaves[i].spec.form == 'named'):
                    # its out_sharding declared, so the stack's entry names the axis
                    leaves[i] = dataclasses.replace(leaves[i], spec=Spec('tuple', ()))
                form = cover.own_optimizer or draw(st.sampled_from(OWN_FORMS))
                entries = leaves[i].spec.entries if leaves[i].spec \
                    and leaves[i].spec.form != 'named' else ()
                if form in ('list', 'pspec', 'tuple'):
                    entries = entries or (None,)  # a spec updated: not empty
                overlap = {form: (partition,)} if form in ('unreduced', 'reduced') \
                    and partition is not None else {}
                optimizer = Spec('pspec' if form in ('unreduced', 'reduced') else form,
                                 entries, **overlap)
                leaves[i] = dataclasses.replace(leaves[i], optimizer_spec=optimizer)
                own = (leaves[i].name,)
            stacks.append(Stack('array', size, axis, partition, replicated=replicated,
                                own_optimizer=own))
            continue
        names: list[object] = [DEFAULT, DEFAULT, None]
        if mesh == 'none':
            names.append(f'l{level}')
        else:
            names += [a for a in sorted(MESH_SIZES) if a not in used and size % MESH_SIZES[a] == 0]
        partition = draw(st.sampled_from(names))
        if cover.stack_named and level == 0 and len(names) > 3:
            partition = names[3]  # a name the specs do not use
        if isinstance(partition, str) and partition != DEFAULT:
            used.add(partition)
        # nnx.pmap needs devices, not a mesh context (jax.set_mesh rejects it):
        # the outermost stack of a mesh-less program, mapped at axis 0
        kinds = ['vmap', 'scan'] + (['pmap'] if mesh == 'none' and level == 0 else [])
        kind = 'pmap' if focus == 'pmap' and level == 0 else draw(st.sampled_from(kinds))
        if refs:
            kind = 'vmap'
        decorate = level < len(placements)
        if decorate:
            partition = DEFAULT
        mode = draw(st.sampled_from(sorted(MODES)))
        if cover.stack_named and level == 0:
            mode = 'graph'  # where a mapping's other keys are read
        rank_after = min_rank + depth - level
        axis = draw(st.integers(-rank_after, rank_after - 1)) if kind == 'vmap' else 0
        if (focus == 'optimizer' and level == 0) or refs:
            axis = 0  # the optimizer's scalar count comes out at the mapped axis
        decorator, placement = None, None
        if partition == DEFAULT and (decorate or draw(st.integers(0, 5)) == 0):
            # nnx.transform_metadata on the body, as it sits in user code; it
            # stacks at axis 0 of its output: the stack does too
            axis = 0
            placement = placements[level] if decorate else draw(st.sampled_from(
                [p for p in VISIBLE + HIDDEN if not (refs and p == 'remat')]))
            decorators: list[str | None] = [None] + [
                a for a in sorted(MESH_SIZES) if a not in used and size % MESH_SIZES[a] == 0]
            if mesh == 'none':
                decorators.append('dec')  # on a mesh, no mesh axis: fails both flaxes
            decorator = None if decorate and level == 0 and not cover.named \
                else draw(st.sampled_from(decorators))
            if decorator is not None:
                used.add(decorator)
        extra = partition != DEFAULT and draw(st.booleans())
        other = None
        if partition == DEFAULT and placement is None and (
                cover.other or draw(st.integers(0, 5)) == 0):
            # nnxaxis.16: or transform_metadata that is no mapping of a name
            other = cover.other or draw(st.sampled_from(OTHER_KEYS + JUNK))
        keys = mapping_keys(partition, axis) if partition != DEFAULT else ()
        stacks.append(Stack(kind, size, axis, partition, mode, extra, decorator, placement,
                            other, keys=keys))
    apply = None
    if focus in WRAPS or cover.callable or cover.wrap or cover.apply_placement \
            or cover.nested or draw(st.integers(0, 3)) > 0:
        outer = stacks[0]  # a forward pass, most of the time
        kinds = ['vmap', 'scan'] if outer.axis == 0 else ['vmap']
        if outer.kind == 'pmap':
            kinds = ['pmap', 'vmap']
        kind = 'vmap' if refs else draw(st.sampled_from(kinds))
        # a simple scan (tree mode, or graph mode without updates) inside
        # jax.shard_map, its unmapped layer a broadcast made outside: only
        # what the body changed is written back (vanilla raises there)
        simple_scan = mesh == 'auto' and 'scan' in kinds and not refs \
            and focus != 'grad' and draw(st.booleans())
        if simple_scan:
            kind = 'scan'
        if focus == 'grad':
            kind = 'vmap'  # nnx.grad under nnx.vmap
        # series 13: the body an inner default vmap over the second stack's axis
        nested = depth >= 2 and (cover.nested or (
            not refs and focus not in WRAPS and draw(st.integers(0, 5)) == 0))
        if nested or cover.apply_placement:
            kind = 'vmap'
        partitions: list[object] = [DEFAULT, 'layers']
        if outer.partition not in (DEFAULT, None):
            partitions.append(outer.partition)
        if outer.placement is not None:
            partitions.append(outer.decorator)
        declared = depth == 1 and outer.kind == 'array'  # no empty stacked spec
        if not declared and any(l.spec is not None and not l.spec.entries for l in leaves):
            partitions = [DEFAULT]
        mode = draw(st.sampled_from(sorted(MODES)))
        if simple_scan and kind == 'scan':
            mode = draw(st.sampled_from(['graph-no-updates', 'tree']))
        wraps = ['none', 'remat', 'cond', 'return', *(
            w for w in WRAPS if (w != 'optimizer' or (outer.axis == 0 and not nested))
            and not (refs and w == 'grad'))]
        if refs:
            wraps.remove('cond')
        if depth == 1 or nested:  # the body's slice is a layer
            wraps.append('create')
        if depth == 1:
            wraps += ['tree_map', 'update', 'jit']
        wrap = focus if focus in WRAPS else cover.wrap or draw(st.sampled_from(wraps))
        if wrap == 'return':
            mode = 'graph'  # else returning the mapped state raises on both (Duplicate)
        body = cover.callable or draw(st.sampled_from(CALLABLES))
        partition = draw(st.sampled_from(partitions))
        if cover.named_pass and (outer.partition in partitions or outer.kind == 'array'):
            partition = outer.partition  # the stack's name, as it was stacked
        if cover.own_optimizer:  # graph mode: default, or the name for the mapping's keys
            mode = 'graph'
            partition = partition if cover.named_pass else DEFAULT
        # series 13: nnx.transform_metadata on the body (a vmap's), over the
        # stack it maps at axis 0 (the second one for a nested body), its
        # partition that stack's entry or None
        target = stacks[1] if nested else outer
        placement = None
        if kind == 'vmap' and target.axis == 0 and (cover.apply_placement or (
                focus not in WRAPS and not cover.callable and not cover.wrap
                and draw(st.integers(0, 3)) == 0)):
            placement = cover.apply_placement or draw(st.sampled_from(
                [p for p in GRADS + VISIBLE + HIDDEN
                 if not (refs and (p == 'remat' or p in GRADS))]))
        decorator = None
        if placement is not None:
            entry = target.decorator if target.placement is not None else \
                None if target.partition == DEFAULT else target.partition
            decorator = draw(st.sampled_from([entry, None]))
            partition, body = DEFAULT, 'function'
            wrap = 'none' if placement in GRADS else wrap if wrap in (
                'none', 'clone', 'create') else 'clone'
        other = None
        if partition == DEFAULT and (cover.other or draw(st.integers(0, 4)) == 0):
            other = cover.other or draw(st.sampled_from(OTHER_KEYS + JUNK))
        # nnxaxis.16: what the body makes leaves at the stack's axis written
        # with the other sign (one axis: every leaf of one stacked rank; not
        # an optimizer's, whose scalar count has no such axis); with refs,
        # ref=True copies at a negative out axis (-rank, axis 0), where JAX
        # runs them: copies and created layers of graph mode with updates
        # (elsewhere JAX moves the Ref, 'Ref' has no 'transpose', on both;
        # a returned state at out_axes other than its in_axes raises NNX's
        # 'Inconsistent aliasing' on both: corpus.py's rows)
        out_axis = None
        ranks = {len(l.shape) + depth for l in leaves}
        if kind == 'vmap' and not nested and len(ranks) == 1 \
                and wrap not in ('optimizer', 'return') \
                and not (refs and (mode != 'graph' or wrap not in ('clone', 'create'))) \
                and focus not in COVER and draw(st.integers(0, 3)) == 0:
            rank = ranks.pop()
            out_axis = outer.axis - rank if outer.axis >= 0 else outer.axis + rank
        keys = () if partition == DEFAULT or nested else mapping_keys(partition, outer.axis)
        if not cover.keys and 'shape' in dict(keys) and draw(st.booleans()):
            keys = tuple(k for k in keys if k[0] != 'shape')  # it raises: fewer of those
        apply = Apply(kind, partition, mode, wrap,
                      state_axes=mode == 'graph' and draw(st.booleans()),
                      # replicated in_specs: arrays sharded on Explicit meshes are rejected
                      shard_map=mesh == 'auto' and (simple_scan or draw(st.booleans())),
                      callable=body,
                      other=other, decorator=decorator, placement=placement, nested=nested,
                      out_axis=out_axis, keys=keys)
    consumers = ['eval_shape']
    if not refs and not any(spec_only_on_no_mesh(l.spec) for l in leaves):
        consumers.append('partition_spec')
        if mesh != 'none':
            consumers += ['named_sharding', 'abstract']
    chosen = tuple(c for c in consumers if draw(st.booleans()))
    optimizer = draw(st.sampled_from([None, 'adam', 'sgd'] + ['adafactor'] * (not refs)))
    if optimizer and not refs and draw(st.booleans()):
        chosen += ('train_step',)
    return Program('hypothesis', tuple(leaves), tuple(stacks), mesh, logical == 'context',
                   apply, chosen, optimizer)


def spec_families(spec: Spec | None) -> list[str]:
    """A spec's form and length, and the jax.P axes it keeps."""
    if spec is None:
        return ['spec:none']
    found = [f'form:{spec.form}']
    if not spec.entries:
        found.append('spec:empty')
    elif spec.entries == (None,):
        found.append('spec:(None,)')
    elif len(spec.entries) == 1:
        found.append('spec:one entry')
    found += ['spec:unreduced'] * bool(spec.unreduced) + ['spec:reduced'] * bool(spec.reduced)
    return found


def mapping_families(program: Program) -> list[str]:
    """A named mapping's other keys (each, in graph mode or tree mode, on a
    stack or a pass; optimizer_sharding by the forms it names), and a
    declared stack's optimizer_sharding as written, where a pass maps the
    stack (a jax.P keeping the stack's name unreduced or reduced among them)."""
    found = []
    calls = [('stack', s.mode, s.keys) for s in program.stacks]
    if program.apply is not None:
        calls.append(('pass', program.apply.mode, program.apply.keys))
    forms = {l.optimizer_spec.form for l in program.leaves if l.optimizer_spec}
    for where, mode, keys in calls:
        graph = 'graph' if MODES[mode] == (True, True) else 'tree'
        for key, _ in keys:
            found += ['mapping keys', f'mapping key:{key}', f'mapping key:{key}:{graph}',
                      f'mapping key:{key} on a {where}']
            if key == 'optimizer_sharding':
                found += [f'mapping names optimizer_sharding over:{f}' for f in forms]
    # the declared stack the pass maps: the outermost, or a nested body's
    mapped = program.stacks[1 if program.apply.nested else 0] if program.apply else None
    for s in program.stacks:
        for leaf in program.leaves:
            if leaf.name in s.own_optimizer and leaf.optimizer_spec is not None \
                    and s is mapped:
                spec = leaf.optimizer_spec
                found.append(f'own optimizer_sharding:{spec.form}')
                found += [f'optimizer_sharding {k} over the name'
                          for k in ('unreduced', 'reduced') if s.partition in getattr(spec, k)]
    return found


def families(program: Program) -> list[str]:
    """The code paths a program reaches, for the drawn set's counts."""
    found = ['stack'] if program.stacks else []
    found += [f'stack:{s.kind}' for s in program.stacks]
    found += [f'mode:{s.mode}' for s in program.stacks]
    for leaf in program.leaves:
        found += spec_families(leaf.spec) + ['ref'] * leaf.ref
    found += mapping_families(program)
    for s in program.stacks:
        if s.placement is not None:
            found += ['decorator', f'placement:{s.placement}']
            found += ['decorator:None'] if s.decorator is None else []
        if s.other is not None:
            found += ['other keys', f'other keys:{s.other}']
            found += [f'junk transform_metadata:{s.mode}'] * (s.other in JUNK)
    if any(s.partition not in (DEFAULT, None) for s in program.stacks):
        found.append('named stack')
    if program.apply is not None:
        a = program.apply
        found += ['forward', f'forward:{a.kind}', f'callable:{a.callable}']
        found += {'clone': ['copy (nnx.clone)'], 'optimizer': ['optimizer in transform'],
                  'grad': ['grad under vmap' if a.kind == 'vmap' else f'grad under {a.kind}']
                  }.get(a.wrap, [f'body:{a.wrap}'])
        if a.other is not None:
            found += ['other keys', f'other keys:{a.other}']
            found += [f'junk transform_metadata:{a.mode}'] * (a.other in JUNK)
        if a.out_axis is not None:
            found.append('mixed-sign axes')
            if any(leaf.ref for leaf in program.leaves) and a.out_axis < 0:
                found.append('ref copy at a negative out axis')
        if a.placement is not None:
            found += ['pass decorator', f'pass placement:{a.placement}']
        if a.nested:
            found.append('nested pass')
        if program.stacks and program.stacks[0].kind == 'array':
            found.append(f'array stack pass:{a.wrap}')
        if ambiguous_give_back(program):
            found.append('ambiguous give-back')
        if a.shard_map:
            found.append('shard_map')
            if a.kind == 'scan' and a.mode != 'graph':  # a simple scan, a broadcast
                found.append('shard_map simple scan')
    if 'pmap' in {s.kind for s in program.stacks} | {getattr(program.apply, 'kind', None)}:
        found.append('pmap')
    found.append(f'mesh:{program.mesh}')
    if program.optimizer:
        found.append('optimizer')
    if 'train_step' in program.consumers:
        found.append('train_step')
    return found


# What the CI examples must reach (tests/oracle/test_oracle.py asserts it).
REQUIRED = ('stack', 'decorator', 'forward', 'copy (nnx.clone)', 'grad under vmap',
            'optimizer in transform', 'pmap',
            'spec:one entry', 'spec:(None,)', 'form:list', 'spec:unreduced', 'spec:reduced',
            'form:named', 'ref',
            *(f'placement:{p}' for p in VISIBLE + HIDDEN), 'decorator:None',
            *(f'callable:{c}' for c in CALLABLES if c not in HOSTILE),
            # series 13 (the rest: corpus.py's rows, and the long run)
            'stack:array', 'array stack pass:clone', 'array stack pass:create', 'body:return',
            'nested pass', 'other keys', 'pass decorator', 'callable:frozen', 'callable:struct',
            # a read-only pass over a jax.P keeping the name unreduced or
            # reduced; a named mapping's other keys (the rest: corpus.py's rows)
            'optimizer_sharding unreduced over the name', 'optimizer_sharding reduced over the name',
            *(f'mapping key:{k}' for k in KEYS), 'mapping key:optimizer_sharding on a pass',
            'mapping names optimizer_sharding over:list', 'mapping names optimizer_sharding over:pspec')
