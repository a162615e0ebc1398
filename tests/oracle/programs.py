"""Oracle programs as data, and the independent model of what they must give.

A ``Program`` is JSON-able: the pytest side generates it, both workers
(vanilla flax and ours) run it (``tests.oracle.runner``). No flax import here.

The model is one function, ``stacking_rule``: what one ``nnx.vmap`` /
``nnx.scan`` / ``nnx.pmap`` call does to sharding metadata on either flax,
given its mode, its ``PARTITION_NAME`` (or none), its axis and the metadata of
the Variables it maps. It returns a ``Call``, whose ``inside`` is a mapped
Variable as the body sees it (raising ``RemoveError`` where vanilla's
``Expected to remove`` or pop error would be raised) and whose ``outside`` is
a Variable on the way out (a mapped input, or one the body made or returned).
Every expectation goes through it: ``expected_metadata`` (the build: each
stack's call, innermost first, maps no Variable and stacks what its body
made), ``inside_metadata`` (what the forward pass's body sees),
``made_metadata`` (copies, gradients, optimizer state made in that body) and
``apply_axis_entry`` (whether the pass's removal succeeds).

The rule (series 11), two sentences per mode:
- vanilla applies only a given ``PARTITION_NAME``, only in graph mode with
  graph updates, to ``out_sharding`` and tuple-valued keys named in
  ``transform_metadata``, at the raw (possibly negative) index, padding with
  None for a positive one, and always returns a tuple; a body that is an
  ``nnx.transform_metadata`` function applies its own partition at axis 0;
- ours, in graph mode with graph updates, given no name, infers one per
  call: the entry the ``out_sharding`` and ``optimizer_sharding`` specs of
  its mapped Variables share at the axis, read as the named path pops it
  (a negative axis from the end of the stacked value; None past the spec's
  end), else the ``spmd_axis_name`` (None); where they
  disagree the call leaves all metadata alone. Then it takes the named path;
- ours, in tree mode (graph=False or graph_updates=False), ignores a given
  name as vanilla does and infers one only where no mapped Variable names
  the axis (every entry None, or none has a spec);
- ours' named path (a given or inferred name, or a decorator's) stacks
  ``optimizer_sharding`` with the name too, counts a negative axis from the
  end of the stacked value, reads a spec shorter than the axis as None
  there, keeps tuple / list / PartitionSpec, and accepts all three for keys
  named in ``transform_metadata``; a body that is an
  ``nnx.transform_metadata`` function is left to its decorator.
An ``out_sharding`` of None or ``()`` is never inserted into.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

DEFAULT = 'default'  # a Stack/Apply partition: no transform_metadata at all
MODES = {'graph': (True, True), 'graph-no-updates': (True, False), 'tree': (False, False)}
EXTRA_KEY = 'extra_sharding'  # a sharding-like key named in transform_metadata
EXTRA_VALUE = 'x'
RULES = (('embed', 'a'), ('mlp', 'b'))  # logical name -> mesh axis
Entry = None | str | tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Spec:
    """A sharding-like metadata value; as JSON ``{'form', 'entries'}`` everywhere
    (programs, the runner's reports, the model's expectations)."""
    form: str  # 'tuple' | 'list' | 'pspec' (a report may name another type)
    entries: tuple[Entry, ...]

    def to_json(self) -> dict[str, Any]:
        return {'form': self.form, 'entries': [list(e) if isinstance(e, tuple) else e
                                               for e in self.entries]}

    @staticmethod
    def from_json(spec: dict[str, Any] | None) -> Spec | None:
        if spec is None:
            return None
        return Spec(spec['form'], tuple(tuple(e) if isinstance(e, list) else e
                                        for e in spec['entries']))


@dataclasses.dataclass(frozen=True)
class Leaf:
    name: str
    shape: tuple[int, ...]
    spec: Spec | None  # out_sharding (None: no such metadata)
    key: str = 'out_sharding'  # or the legacy 'sharding_names'
    optimizer_spec: Spec | None = None
    extra_spec: Spec | None = None  # under EXTRA_KEY
    local_rules: bool = False  # sharding_rules=RULES on the Variable


@dataclasses.dataclass(frozen=True)
class Stack:
    kind: str  # 'vmap' | 'scan'
    size: int
    axis: int  # vmap out_axes (may be negative, against the stacked rank); scan: 0
    partition: str | None  # DEFAULT, None or a name
    mode: str = 'graph'
    extra: bool = False  # also name EXTRA_KEY in transform_metadata
    decorator: str | None = None  # nnx.transform_metadata(partition=...) on the body


@dataclasses.dataclass(frozen=True)
class Apply:
    """A forward pass over the outermost stacked axis of the built model."""
    kind: str  # 'vmap' | 'scan'
    partition: str | None = DEFAULT
    mode: str = 'graph'
    # 'none' | 'remat' | 'cond', or (one stack) a body that maps over the layer's
    # and an unmapped copy's state ('tree_map'), updates the layer from its own
    # state ('update'), or calls a function jitted outside first ('jit')
    wrap: str = 'none'
    state_axes: bool = False
    shard_map: bool = False  # run it inside jax.shard_map (replicated inputs)


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    leaves: tuple[Leaf, ...] = ()
    stacks: tuple[Stack, ...] = ()  # outermost first
    mesh: str = 'auto'  # 'none' | 'auto' | 'explicit'
    context_rules: bool = False  # nnx.logical_axis_rules(RULES) around everything
    apply: Apply | None = None
    consumers: tuple[str, ...] = ()  # partition_spec named_sharding abstract eval_shape train_step
    optimizer: str | None = None  # 'adam' | 'sgd' | 'adafactor'
    custom: str | None = None  # a hand-written program in tests.oracle.runner
    arguments: tuple[tuple[str, Any], ...] = ()  # for scenario programs

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    def with_workaround(self) -> Program | str:
        """The program as a vanilla user writes it: ``{nnx.PARTITION_NAME: None}``.

        Every transform given no ``transform_metadata`` gets the documented
        workaround (a forward pass over a named stack gets that stack's name,
        which vanilla requires to remove). Returns why not where the workaround
        cannot express the program: vanilla reads ``transform_metadata`` only in
        graph mode with graph updates, and a hand-written program has no
        transform keyword to set.
        """
        if self.custom is not None:
            return 'a hand-written program: no transform to give the workaround'
        modes = [s.mode for s in self.stacks] + ([self.apply.mode] if self.apply else [])
        if any(MODES[m] != (True, True) for m in modes):
            return ('vanilla ignores transform_metadata in tree mode and without graph '
                    'updates: the workaround cannot be written there')
        stacks = tuple(dataclasses.replace(s, partition=None) if s.partition == DEFAULT
                       and s.decorator is None else s for s in self.stacks)
        apply = self.apply
        if apply is not None and apply.partition == DEFAULT:
            outer = stacks[0].partition if stacks else None
            name = stacks[0].decorator if stacks and stacks[0].decorator else outer
            apply = dataclasses.replace(apply, partition=None if name == DEFAULT else name)
        return dataclasses.replace(self, name=f'{self.name} (vanilla workaround)',
                                   stacks=stacks, apply=apply)


def program_from_json(text: str) -> Program:
    d = json.loads(text)
    spec = Spec.from_json
    leaves = tuple(Leaf(l['name'], tuple(l['shape']), spec(l['spec']), l['key'],
                        spec(l['optimizer_spec']), spec(l['extra_spec']), l['local_rules'])
                   for l in d['leaves'])
    return Program(
        name=d['name'], leaves=leaves, stacks=tuple(Stack(**s) for s in d['stacks']),
        mesh=d['mesh'], context_rules=d['context_rules'],
        apply=None if d['apply'] is None else Apply(**d['apply']),
        consumers=tuple(d['consumers']), optimizer=d['optimizer'], custom=d['custom'],
        arguments=tuple(tuple(a) for a in d['arguments']))


# The model ------------------------------------------------------------------

class _Missing:
    def __repr__(self) -> str:
        return 'MISSING'


MISSING: Any = _Missing()  # no entry at the axis; a call that leaves metadata alone
FORMS = ('tuple', 'list', 'pspec')
FIELDS = ('out_sharding', 'optimizer_sharding', EXTRA_KEY)
Fields = dict[str, 'Spec | None']  # one Variable's sharding-like fields


class RemoveError(Exception):
    """The call's removal at the stacked axis fails (vanilla's error, on either flax)."""


def _truthy(spec: Spec | None) -> bool:
    return spec is not None and bool(spec.entries)


def _insert(spec: Spec, index: int, value: Entry, form: str) -> Spec:
    """``spec`` as ``form`` with ``value`` inserted at ``index``, padded with None
    up to a positive index (a negative one: list.insert's, no padding)."""
    entries = list(spec.entries)
    while len(entries) < index:
        entries.append(None)
    entries.insert(index, value)
    return Spec(form, tuple(entries))


@dataclasses.dataclass(frozen=True)
class Call:
    """What one call of a stacking transform does to sharding metadata.

    ``name`` is the ``PARTITION_NAME`` the call applies (``MISSING``: it
    leaves all metadata alone); ``optimizer`` the entry it stacks into
    ``optimizer_sharding`` (``MISSING``: not touched); ``axis`` the raw
    in/out axis.
    """
    flax: str
    axis: int
    name: Any = MISSING
    optimizer: Any = MISSING
    extra: bool = False  # EXTRA_KEY named in transform_metadata

    def _index(self, rank: int) -> int:
        """The axis vanilla pops and inserts at; ours counts a negative one
        from the end of the stacked value (``rank``: the per-slice value's)."""
        if self.flax == 'vanilla' or self.axis >= 0:
            return self.axis
        return self.axis + rank + 1

    def _remove(self, spec: Spec, value: Entry, rank: int) -> Spec:
        entries = list(spec.entries)
        index = self._index(rank)
        if -len(entries) <= index < len(entries):
            removed = entries.pop(index)
        elif self.flax == 'vanilla':
            raise RemoveError('IndexError: pop index out of range')
        else:
            removed = None  # ours: a spec shorter than the axis reads None
        if removed != value:
            raise RemoveError(f'Expected to remove {value!r} at index {index} from '
                              f'{spec.entries!r}, but found {removed!r}.')
        return Spec('tuple' if self.flax == 'vanilla' else spec.form, tuple(entries))

    def _insert(self, spec: Spec, value: Entry, rank: int) -> Spec:
        form = 'tuple' if self.flax == 'vanilla' else spec.form
        return _insert(spec, self._index(rank), value, form)

    def _extra(self, spec: Spec | None) -> bool:
        forms = ('tuple',) if self.flax == 'vanilla' else FORMS
        return self.extra and _truthy(spec) and spec.form in forms

    def inside(self, fields: Fields, rank: int) -> Fields:
        """A mapped Variable's fields as the body sees them (raises
        ``RemoveError``); ``rank`` is its per-slice value's."""
        out = dict(fields)
        if self.name is MISSING:
            return out
        # vanilla pops from () too; ours updates only non-empty specs
        spec = fields['out_sharding']
        if spec is not None and (self.flax == 'vanilla' or _truthy(spec)):
            out['out_sharding'] = self._remove(spec, self.name, rank)
        spec = fields['optimizer_sharding']  # ours: only where it has the name
        if self.optimizer is not MISSING and _truthy(spec) \
                and _entry_at(spec, self._index(rank), rank) == self.optimizer:
            out['optimizer_sharding'] = self._remove(spec, self.optimizer, rank)
        if self._extra(fields[EXTRA_KEY]):
            out[EXTRA_KEY] = self._remove(fields[EXTRA_KEY], EXTRA_VALUE, rank)
        return out

    def outside(self, fields: Fields, rank: int) -> Fields:
        """A Variable's fields on the way out (a mapped input, or what the body
        made or returned); ``rank`` is its per-slice value's."""
        out = dict(fields)
        if self.name is MISSING:
            return out
        if _truthy(fields['out_sharding']):  # None and () stay as they are
            out['out_sharding'] = self._insert(fields['out_sharding'], self.name, rank)
        if self.optimizer is not MISSING and _truthy(fields['optimizer_sharding']):
            out['optimizer_sharding'] = self._insert(fields['optimizer_sharding'],
                                                     self.optimizer, rank)
        if self._extra(fields[EXTRA_KEY]):
            out[EXTRA_KEY] = self._insert(fields[EXTRA_KEY], EXTRA_VALUE, rank)
        return out


def _entry_at(spec: Spec, axis: int, rank: int) -> Any:
    """A mapped spec's entry at the axis, read as the named path pops it: a
    negative axis counts from the end of the stacked value (``rank``), and
    a spec shorter than the axis reads None there."""
    index = axis + rank if axis < 0 else axis
    return spec.entries[index] if index < len(spec.entries) else None


def stacking_rule(flax: str, mode: str, partition: Any, axis: int,
                  mapped: Any = (), *, extra: bool = False, decorator: str | None = None,
                  spmd_axis_name: Any = None) -> Call:
    """THE rule: what one nnx.vmap / nnx.scan / nnx.pmap call does to metadata.

    ``partition`` is the given ``PARTITION_NAME`` (``DEFAULT``: none given),
    ``mapped`` the mapped Variables as ``(fields, stacked rank)`` pairs,
    ``decorator`` the partition of an ``nnx.transform_metadata`` body.

    Vanilla applies a given name in graph mode with graph updates, nothing
    else. Ours, given no name there (or in tree mode, which ignores a given
    name), takes the entry the mapped Variables' specs share at the axis
    (``spmd_axis_name`` when none has one) and applies it as a given one; in
    tree mode only where no mapped Variable names the axis.
    """
    ours = flax == 'ours'
    if decorator is not None:  # its own named path, at axis 0
        return Call(flax, 0, decorator, decorator if ours else MISSING)
    graph = MODES[mode] == (True, True)
    if graph and partition != DEFAULT:
        return Call(flax, axis, partition, partition if ours else MISSING, extra=extra)
    if not ours or partition != DEFAULT:  # tree mode leaves a given name to vanilla
        return Call(flax, axis)
    entries = [_entry_at(f[k], axis, rank) for f, rank in mapped
               for k in ('out_sharding', 'optimizer_sharding') if _truthy(f[k])]
    if not graph and any(e is not None for e in entries):
        return Call(flax, axis)  # an axis a Variable names: the decorator's
    name = entries[0] if entries else spmd_axis_name
    if entries.count(name) < len(entries):
        return Call(flax, axis)  # the specs disagree
    return Call(flax, axis, name, name)


def leaf_fields(leaf: Leaf) -> Fields:
    return {'out_sharding': leaf.spec, 'optimizer_sharding': leaf.optimizer_spec,
            EXTRA_KEY: leaf.extra_spec}


def fields_json(fields: Fields) -> dict[str, Any]:
    return {f: None if s is None else s.to_json() for f, s in fields.items()}


def stacked_rank(program: Program, leaf: Leaf) -> int:
    return len(leaf.shape) + len(program.stacks)


def expected_metadata(program: Program, flax: str) -> dict[str, dict[str, Any]]:
    """Per Variable path, each sharding-like field as ``Spec.to_json()`` or None.

    The build: each stack's call, innermost first, maps no Variable (its
    inputs are arrays), and stacks what its body made.
    """
    out: dict[str, dict[str, Any]] = {}
    for leaf in program.leaves:
        fields, rank = leaf_fields(leaf), len(leaf.shape)
        for stack in reversed(program.stacks):  # innermost stacks first
            call = stacking_rule(flax, stack.mode, stack.partition, stack.axis,
                                 extra=stack.extra, decorator=stack.decorator)
            fields = call.outside(fields, rank)
            rank += 1
        out[leaf.name] = fields_json(fields)
    return out


def apply_call(program: Program, flax: str, meta: dict[str, dict[str, Any]]) -> Call:
    """The forward pass's call over the stacks ``meta`` describes (every leaf mapped)."""
    apply = program.apply
    assert apply is not None and program.stacks
    mapped = [({f: Spec.from_json(meta[leaf.name][f]) for f in FIELDS},
               stacked_rank(program, leaf)) for leaf in program.leaves]
    return stacking_rule(flax, apply.mode, apply.partition, program.stacks[0].axis, mapped)


def inside_metadata(program: Program, flax: str, meta: dict[str, dict[str, Any]]
                    ) -> dict[str, dict[str, Any]] | None:
    """Per leaf, its fields as the forward pass's body sees them (None: the call fails)."""
    call = apply_call(program, flax, meta)
    try:
        return {leaf.name: fields_json(call.inside(
            {f: Spec.from_json(meta[leaf.name][f]) for f in FIELDS},
            stacked_rank(program, leaf) - 1))
            for leaf in program.leaves}
    except RemoveError:
        return None


def made_metadata(program: Program, flax: str, meta: dict[str, dict[str, Any]],
                  param: str) -> dict[str, Any] | None:
    """A Variable the forward pass's body made from mapped ``param`` (a copy, a
    gradient, optimizer state): its per-slice fields, stacked on the way out.
    Optimizer state takes the parameter's declared ``optimizer_sharding``, as
    the body sees it, for its ``out_sharding`` (``nnx.Optimizer``, both flaxes)."""
    call = apply_call(program, flax, meta)
    leaf = next(l for l in program.leaves if l.name == param)
    try:
        inside = call.inside({f: Spec.from_json(meta[param][f]) for f in FIELDS},
                             stacked_rank(program, leaf) - 1)
    except RemoveError:
        return None
    if program.apply is not None and program.apply.wrap == 'optimizer':
        inside = {**inside, 'out_sharding': inside[placing_field(leaf)],
                  'optimizer_sharding': None}
    return fields_json(call.outside(inside, stacked_rank(program, leaf) - 1))


def resolve(spec: dict[str, Any] | None, leaf: Leaf, program: Program) -> list[Any] | None:
    """What nnx.get_partition_spec gives for this metadata (as a list)."""
    if not spec or not spec['entries']:
        return []
    entries = spec['entries']
    if program.context_rules or leaf.local_rules:
        rules = dict(RULES)
        entries = [rules.get(e, e) if isinstance(e, str) else e for e in entries]
    return entries


def apply_axis_entry(program: Program, meta: dict[str, dict[str, Any]],
                     flax: str = 'ours') -> bool:
    """Whether the forward pass's call removes its entry from every mapped
    Variable without vanilla's ``Expected to remove`` (or pop) error."""
    if program.apply is None or not program.stacks:
        return True
    return inside_metadata(program, flax, meta) is not None


def pass_runs(program: Program, flax: str, meta: dict[str, dict[str, Any]]) -> bool:
    """Whether the forward pass runs by the rule: its removal succeeds and, for a
    body mapping over the layer's and an unmapped copy's state (``tree_map``),
    every leaf's metadata inside equals the copy's per-layer metadata."""
    inside = None if program.apply is None or not program.stacks \
        else inside_metadata(program, flax, meta)
    if not apply_axis_entry(program, meta, flax):
        return False
    if inside is None or program.apply.wrap != 'tree_map':
        return True
    return not _unlike_layers(program, inside)


def placing_field(leaf: Leaf) -> str:
    """The field whose spec places optimizer state of ``leaf``: a declared
    ``optimizer_sharding`` (``nnx.Optimizer`` moves it to ``out_sharding``)."""
    return 'optimizer_sharding' if leaf.optimizer_spec is not None else 'out_sharding'


def _unlike_layers(program: Program, inside: dict[str, dict[str, Any]]) -> list[Leaf]:
    return [leaf for leaf in program.leaves
            if inside[leaf.name] != fields_json(leaf_fields(leaf))]


def unlike_layers_inside(program: Program, flax: str, meta: dict[str, dict[str, Any]]
                         ) -> list[Leaf]:
    """The leaves whose metadata the forward pass's body sees other than the
    per-layer metadata they were created with (a call that leaves a stack's
    entry: a stack of short specs, or stacks that disagree)."""
    inside = None if program.apply is None or not program.stacks \
        else inside_metadata(program, flax, meta)
    return [] if inside is None else _unlike_layers(program, inside)


def longer_than_the_slice_inside(program: Program, flax: str,
                                 meta: dict[str, dict[str, Any]]) -> bool:
    """Whether a spec that places the state of an optimizer built in the body
    (``placing_field``) is longer there than the slice's rank: JAX may raise
    its rank error, as the spec resolves."""
    if program.apply is None or program.apply.wrap != 'optimizer' or not program.stacks:
        return False
    inside = inside_metadata(program, flax, meta)
    if inside is None:
        return False
    for leaf in _unlike_layers(program, inside):
        spec = inside[leaf.name][placing_field(leaf)]
        if spec and len(spec['entries']) > stacked_rank(program, leaf) - 1:
            return True
    return False
