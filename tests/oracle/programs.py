"""Oracle programs as data, and the independent model of what they must give.

A ``Program`` is JSON-able: the pytest side generates it, both workers
(vanilla flax and ours) run it (``tests.oracle.runner``). No flax import here.

The model is one function, ``stacking_rule``: what one ``nnx.vmap`` /
``nnx.scan`` / ``nnx.pmap`` call does to sharding metadata on either flax,
given its mode, its ``PARTITION_NAME`` (or none), its axis and the metadata of
the Variables it maps. It returns a ``Call``, whose ``inside`` is a mapped
Variable as the body sees it and whose ``outside`` is a Variable on the way
out (a mapped input, or one the body made or returned); both raise
``CallError`` where the call raises (vanilla's ``Expected to remove`` or pop
error, or vanilla's named path iterating a spec it cannot take).
Every expectation goes through it: ``expected_metadata`` (the build: each
stack's call, innermost first, maps no Variable and stacks what its body
made), ``inside_metadata`` (what the forward pass's body sees),
``made_metadata`` (copies, gradients, optimizer state made in that body) and
``apply_axis_entry`` (whether the pass's removal succeeds), ``build_error``
and ``pass_error`` (what a call raises by the rule).

The rule (series 12), two sentences per mode:
- vanilla applies only a given ``PARTITION_NAME``, only in graph mode with
  graph updates, to ``out_sharding`` and tuple-valued keys named in
  ``transform_metadata``, at the raw (possibly negative) index, padding with
  None for a positive one, and always returns a tuple; it iterates
  ``out_sharding``, so a ``NamedSharding`` or a ``jax.P`` with ``unreduced``
  or ``reduced`` axes raises there; an ``nnx.transform_metadata`` function
  in the body, wherever it sits, applies its own partition at axis 0;
- ours, in graph mode with graph updates, given no name, infers one per
  call: the entry the non-empty ``out_sharding`` specs of its mapped
  Variables share at the axis (``optimizer_sharding`` and other keys have
  no say), read as the named path pops it (a negative axis from the end of
  the stacked value; None past the spec's end), else the
  ``spmd_axis_name`` (None); where they disagree the call leaves all
  metadata alone. Then it takes the named path;
- ours, in tree mode (graph=False or graph_updates=False), infers a name
  only where no mapped Variable names the axis: None where some mapped
  Variable has a spec (every entry there None), and where none has one
  (the call creates the stack) a given ``PARTITION_NAME``, else the
  ``spmd_axis_name``. It reads ``transform_metadata`` there only (a mapping
  with the name); where a mapped Variable has a spec it reads it not at all,
  as vanilla;
- ours' named path (a given or inferred name, or a decorator's) stacks
  ``optimizer_sharding`` with the name too, counts a negative axis from the
  end of the stacked value, reads a spec shorter than the axis as None
  there, keeps tuple / list / PartitionSpec (its ``unreduced`` and
  ``reduced`` axes too), and accepts all three for keys named in
  ``transform_metadata``; only non-empty specs vote and are updated (a
  ``NamedSharding`` names nothing and is left alone); a body that is an
  ``nnx.transform_metadata`` function, given directly or behind
  ``nnx.remat`` or ``functools.partial``, is left to its decorator, while
  one behind a lambda or called inside the body is not seen: the call
  stacks its own entry on top of the decorator's (docs/compatibility.md,
  "A decorated function the transform cannot see").
An ``out_sharding`` of None or ``()`` is never inserted into.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, NoReturn

DEFAULT = 'default'  # a Stack/Apply partition: no transform_metadata at all
MODES = {'graph': (True, True), 'graph-no-updates': (True, False), 'tree': (False, False)}
EXTRA_KEY = 'extra_sharding'  # a sharding-like key named in transform_metadata
EXTRA_VALUE = 'x'
# Where a Stack's nnx.transform_metadata function sits: given to the
# transform (directly, behind nnx.remat, behind functools.partial: the
# transform sees it), or hidden (behind a lambda, called inside the body).
VISIBLE = ('direct', 'remat', 'partial')
HIDDEN = ('lambda', 'inside')
# Where an Apply's decorator sits: as a Stack's, and (series 13) behind
# nnx.grad or nnx.value_and_grad of a loss over the mapped module, which the
# transform sees too; the body then returns the gradient.
GRADS = ('grad', 'value_and_grad')
APPLY_VISIBLE = VISIBLE + GRADS
# An Apply's body: a function, an unhashable callable object, a partial, a
# bound method, (series 13) callables whose __hash__ raises: a frozen
# dataclass with a list field, a flax.struct.dataclass with an array field,
# and (series 14) callables whose attributes are hostile to a look through
# wrappers: __getattr__ raising KeyError for __func__, an array __func__,
# unittest.mock.Mock(wraps=f), jax.tree_util.Partial
# (CI reaches these through corpus.py's rows; the long run draws them too)
HOSTILE = ('keyerror', 'array', 'mock', 'tree_partial')
CALLABLES = ('function', 'object', 'partial', 'method', 'frozen', 'struct', *HOSTILE)
# A transform_metadata mapping without nnx.PARTITION_NAME (series 13: as
# vanilla, its keys are ignored and the default runs): the key it has
OTHER_KEYS = ('extra', 'optimizer_sharding', 'tags')
# transform_metadata that is no mapping of a name (nnxaxis.16: read where
# vanilla reads it): None, a list, a string, and the name itself as a string
# or in a list; a Stack's / Apply's ``other`` may be one of these too. Tree
# mode reads none of them; graph mode's ``PARTITION_NAME in`` finds the name
# in the last two (both flaxes then raise vanilla's ValueError at a node)
# and raises on None (TypeError); the first three otherwise run as DEFAULT.
JUNK = ('None', 'list', 'str', 'name str', 'name list')
# Other keys of a mapping with nnx.PARTITION_NAME (Stack.keys, Apply.keys, in
# the mapping's order, after the name): graph mode reads each through the
# Variable's attribute after the name, where that is a non-empty tuple, as
# vanilla's spmd.add_axis / remove_axis do: 'optimizer_sharding' (vanilla's
# rule then decides that field on ours too: a list or jax.P is left alone),
# 'out_sharding' (read again, after the name), the deprecated alias
# 'sharding_names' (reads and writes out_sharding), 'shape' (the value's
# shape: a removal finds a dimension, an add writes a metadata key 'shape').
# Tree mode reads none of them, on both flaxes.
KEYS = ('optimizer_sharding', 'out_sharding', 'sharding_names', 'shape')
ATTRIBUTE = {'sharding_names': 'out_sharding'}  # the field a key's attribute reads
SHAPE_VALUE = 3  # a 'shape' key's value: no stack size and no dimension
RULES = (('embed', 'a'), ('mlp', 'b'))  # logical name -> mesh axis
Entry = None | str | tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Spec:
    """A sharding-like metadata value; as JSON ``{'form', 'entries'}`` everywhere
    (programs, the runner's reports, the model's expectations), with
    ``unreduced`` / ``reduced`` where a ``jax.P`` has them."""
    form: str  # 'tuple' | 'list' | 'pspec' | 'named' (a report may name another type)
    entries: tuple[Entry, ...]  # 'named': its NamedSharding's spec
    unreduced: tuple[str, ...] = ()  # 'pspec' only
    reduced: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {'form': self.form, 'entries': [
            list(e) if isinstance(e, tuple) else e for e in self.entries]}
        if self.unreduced:
            out['unreduced'] = sorted(self.unreduced)
        if self.reduced:
            out['reduced'] = sorted(self.reduced)
        return out

    @staticmethod
    def from_json(spec: dict[str, Any] | None) -> Spec | None:
        if spec is None:
            return None
        return Spec(spec['form'], tuple(tuple(e) if isinstance(e, list) else e
                                        for e in spec['entries']),
                    tuple(spec.get('unreduced', ())), tuple(spec.get('reduced', ())))


@dataclasses.dataclass(frozen=True)
class Leaf:
    name: str
    shape: tuple[int, ...]
    spec: Spec | None  # out_sharding (None: no such metadata)
    key: str = 'out_sharding'  # or the legacy 'sharding_names'
    optimizer_spec: Spec | None = None
    extra_spec: Spec | None = None  # under EXTRA_KEY
    local_rules: bool = False  # sharding_rules=RULES on the Variable
    ref: bool = False  # nnx.Param(..., ref=True)


@dataclasses.dataclass(frozen=True)
class Stack:
    # 'vmap' | 'scan' | 'pmap', or 'array' (innermost only): no transform,
    # the layer's arrays are made stacked (``size`` at ``axis``, 0 or 1) and
    # each spec declared with ``partition`` (None or a name) at that index,
    # as a user declares an expert stack, e.g. ('b',) on a (4, 8, 16) kernel
    kind: str
    size: int
    axis: int  # vmap out_axes (may be negative, against the stacked rank); scan: 0
    partition: str | None  # DEFAULT, None or a name
    mode: str = 'graph'
    extra: bool = False  # also name EXTRA_KEY in transform_metadata
    # nnx.transform_metadata(partition=decorator) on the body, placed as
    # VISIBLE or HIDDEN says (None: no decorator)
    decorator: str | None = None
    placement: str | None = None
    other: str | None = None  # partition DEFAULT: transform_metadata with this key (OTHER_KEYS), or JUNK
    # 'array': the leaves declared replicated along the stack (their specs as
    # the per-layer ones, as a bias () beside a kernel declared ('b',))
    replicated: tuple[str, ...] = ()
    # 'array': the leaves whose optimizer_sharding is declared as written for
    # the stacked array, without the stack's entry (e.g. jax.P('a', None,
    # unreduced={'b'}) beside an out_sharding declared ('b',))
    own_optimizer: tuple[str, ...] = ()
    # a named mapping's other keys, in order: ((key, value), ...) (KEYS)
    keys: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.decorator is not None and self.placement is None:
            raise ValueError('a decorator needs its placement (VISIBLE, HIDDEN)')


@dataclasses.dataclass(frozen=True)
class Apply:
    """A forward pass over the outermost stacked axis of the built model."""
    kind: str  # 'vmap' | 'scan'
    partition: str | None = DEFAULT
    mode: str = 'graph'
    # 'none' | 'remat' | 'cond', or (one stack) a body that maps over the layer's
    # and an unmapped copy's state ('tree_map'), updates the layer from its own
    # state ('update'), or calls a function jitted outside first ('jit');
    # bodies that make Variables: 'clone', 'grad', 'optimizer', and (series
    # 13) 'return' (the body returns the mapped layer's state: graph mode
    # with updates only, else both raise "Duplicate Param") and 'create'
    # (the body creates a layer, its Params declared as the leaves are)
    wrap: str = 'none'
    state_axes: bool = False
    shard_map: bool = False  # run it inside jax.shard_map (replicated inputs)
    callable: str = 'function'  # the body as one of CALLABLES
    other: str | None = None  # partition DEFAULT: transform_metadata with this key (OTHER_KEYS), or JUNK
    # nnx.transform_metadata(partition=decorator) on the body (a vmap's),
    # placed as APPLY_VISIBLE or HIDDEN say; GRADS: the body is the gradient
    # of the decorated loss
    decorator: str | None = None
    placement: str | None = None
    # the body is an inner default nnx.vmap of it, over the second stack's
    # axis (series 13: the outer transform's look through wrappers stops at it)
    nested: bool = False
    # nnxaxis.16: the vmap's out_axes for what the body makes, the stack's
    # axis written with the other sign (None: as in_axes); one axis, as
    # axes are compared normalized (every leaf of the same stacked rank)
    out_axis: int | None = None
    # a named mapping's other keys, in order: ((key, value), ...) (KEYS)
    keys: tuple[tuple[str, Any], ...] = ()


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
        if self.apply is not None and self.apply.nested:
            return 'a nested pass: its inner vmap is written without transform_metadata'
        # a decorator the transform sees names its axis alone; one it cannot
        # see is stacked on by the transform, as with the workaround
        stacks = tuple(dataclasses.replace(s, partition=None) if s.partition == DEFAULT
                       and s.placement not in VISIBLE else s for s in self.stacks)
        apply = self.apply
        if apply is not None and apply.partition == DEFAULT \
                and apply.placement not in APPLY_VISIBLE:
            outer = stacks[0].partition if stacks else None
            name = stacks[0].decorator if stacks and stacks[0].placement in VISIBLE \
                else outer
            apply = dataclasses.replace(apply, partition=None if name == DEFAULT else name)
        return dataclasses.replace(self, name=f'{self.name} (vanilla workaround)',
                                   stacks=stacks, apply=apply)


def program_from_json(text: str) -> Program:
    d = json.loads(text)
    spec = Spec.from_json
    leaves = tuple(Leaf(l['name'], tuple(l['shape']), spec(l['spec']), l['key'],
                        spec(l['optimizer_spec']), spec(l['extra_spec']), l['local_rules'],
                        l.get('ref', False))
                   for l in d['leaves'])
    return Program(
        name=d['name'], leaves=leaves,
        stacks=tuple(Stack(**{**s, 'replicated': tuple(s.get('replicated', ())),
                              'own_optimizer': tuple(s.get('own_optimizer', ())),
                              'keys': _pairs(s.get('keys', ()))})
                     for s in d['stacks']),
        mesh=d['mesh'], context_rules=d['context_rules'],
        apply=None if d['apply'] is None else Apply(
            **{**d['apply'], 'keys': _pairs(d['apply'].get('keys', ()))}),
        consumers=tuple(d['consumers']), optimizer=d['optimizer'], custom=d['custom'],
        arguments=tuple(tuple(a) for a in d['arguments']))


def _pairs(keys: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((k, v) for k, v in keys)


# The model ------------------------------------------------------------------

class _Missing:
    def __repr__(self) -> str:
        return 'MISSING'


MISSING: Any = _Missing()  # no entry at the axis; a call that leaves metadata alone
FORMS = ('tuple', 'list', 'pspec')
FIELDS = ('out_sharding', 'optimizer_sharding', EXTRA_KEY)
Fields = dict[str, 'Spec | None']  # one Variable's sharding-like fields


class CallError(Exception):
    """The call raises: its removal finds another entry at the stacked axis
    (vanilla's error, on either flax), or vanilla's named path iterates a
    spec it cannot take."""


# Vanilla's named path iterates out_sharding (``list(spec)``), which raises
# on a NamedSharding and on a jax.P with unreduced or reduced axes.
NAMED_ERROR = "NamedSharding' object is not iterable"  # a TypeError
PSPEC_ERROR = 'ValueError: Using *pspec is dangerous'


def _truthy(spec: Spec | None) -> bool:
    return spec is not None and bool(spec.entries)


def _tuple(spec: Spec | None) -> bool:
    """A field a mapping's other key updates: a non-empty tuple, on both."""
    return _truthy(spec) and spec.form == 'tuple'


def _updated(spec: Spec | None) -> bool:
    """A spec ours' named path updates and its inference reads: non-empty,
    not a NamedSharding (which names nothing)."""
    return _truthy(spec) and spec.form != 'named'


def _insert(spec: Spec, index: int, value: Entry, form: str) -> Spec:
    """``spec`` as ``form`` with ``value`` inserted at ``index``, padded with None
    up to a positive index (a negative one: list.insert's, no padding)."""
    entries = list(spec.entries)
    while len(entries) < index:
        entries.append(None)
    entries.insert(index, value)
    return dataclasses.replace(spec, form=form, entries=tuple(entries))


@dataclasses.dataclass(frozen=True)
class Call:
    """What one call of a stacking transform does to sharding metadata.

    ``name`` is the ``PARTITION_NAME`` the call applies (``MISSING``: it
    leaves all metadata alone); ``optimizer`` the entry it stacks into
    ``optimizer_sharding`` (``MISSING``: not touched); ``axis`` the raw
    in/out axis; ``inner`` the call of an ``nnx.transform_metadata``
    function in its body (it runs inside: removes after, stacks before);
    ``records`` (ours, series 13) what its removal gave each mapped Variable
    and took from it, per field: ``(field, given, taken, shape)`` (shape:
    the Variable's leaf's, which identifies its shape at any axis);
    ``keys`` the mapping's other keys after ``EXTRA_KEY`` (``KEYS``), each
    read through the Variable's attribute after the name, in order, where
    that is a non-empty tuple (both flaxes, graph mode).
    """
    flax: str
    axis: int
    name: Any = MISSING
    optimizer: Any = MISSING
    extra: bool = False  # EXTRA_KEY named in transform_metadata
    keys: tuple[tuple[str, Any], ...] = ()
    inner: Call | None = None
    records: tuple[tuple[str, Spec, Spec, Any], ...] = ()
    out_axis: int | None = None  # out_axes of what the body makes (None: ``axis``)

    def _index(self, rank: int, out: bool = False) -> int:
        """The axis vanilla pops and inserts at (raw); ours counts a negative
        one from the end of the stacked value (``rank``: the per-slice
        value's). ``out``: what the body makes leaves at ``out_axis``."""
        axis = self.out_axis if out and self.out_axis is not None else self.axis
        if self.flax == 'vanilla' or axis >= 0:
            return axis
        return axis + rank + 1

    def _touches(self, spec: Spec | None, removing: bool) -> bool:
        """Whether the named path updates out_sharding ``spec``: ours only a
        non-empty one; vanilla any on the way in, any truthy on the way out."""
        if self.flax == 'ours':
            return _updated(spec)
        return spec is not None and (removing or spec.form == 'named' or bool(spec.entries))

    def _check(self, spec: Spec) -> None:
        if self.flax == 'vanilla' and spec.form == 'named':
            raise CallError(NAMED_ERROR)
        if self.flax == 'vanilla' and (spec.unreduced or spec.reduced):
            raise CallError(PSPEC_ERROR)

    def _remove(self, spec: Spec, value: Entry, rank: int) -> Spec:
        self._check(spec)
        entries = list(spec.entries)
        index = self._index(rank)
        if -len(entries) <= index < len(entries):
            removed = entries.pop(index)
        elif self.flax == 'vanilla':  # list.pop's messages
            raise CallError('IndexError: pop from empty list' if not entries
                            else 'IndexError: pop index out of range')
        else:
            removed = None  # ours: a spec shorter than the axis reads None
        if removed != value:
            raise CallError(f'Expected to remove {value!r} at index {index} from '
                            f'{spec.entries!r}, but found {removed!r}.')
        form = 'tuple' if self.flax == 'vanilla' else spec.form
        return dataclasses.replace(spec, form=form, entries=tuple(entries))

    def _insert(self, spec: Spec, value: Entry, rank: int, out: bool = False) -> Spec:
        self._check(spec)
        form = 'tuple' if self.flax == 'vanilla' else spec.form
        return _insert(spec, self._index(rank, out), value, form)

    def _other_keys(self) -> tuple[tuple[str, Any], ...]:
        """The mapping's keys besides the name, in its order."""
        return ((EXTRA_KEY, EXTRA_VALUE),) * self.extra + self.keys

    def _remove_shape(self, value: Any, rank: int) -> NoReturn:
        """A 'shape' key: the removal pops the slice's dimension at the axis
        (the body's value), never ``SHAPE_VALUE``: it raises."""
        index = self._index(rank)
        if not -rank <= index < rank:
            raise CallError('IndexError: pop index out of range')
        raise CallError(f'Expected to remove {value!r} at index {index} from (')

    def own_inside(self, fields: Fields, rank: int) -> Fields:
        """A mapped Variable's fields after this call's own removal (not its
        decorator's; raises ``CallError``)."""
        out = dict(fields)
        if self.name is not MISSING:
            # vanilla pops from () too; ours updates only non-empty specs
            spec = fields['out_sharding']
            if self._touches(spec, removing=True):
                out['out_sharding'] = self._remove(spec, self.name, rank)
            spec = fields['optimizer_sharding']  # ours: only where it has the name
            if self.optimizer is not MISSING and _updated(spec) \
                    and _entry_at(spec, self._index(rank), rank) == self.optimizer:
                out['optimizer_sharding'] = self._remove(spec, self.optimizer, rank)
            for key, value in self._other_keys():  # after the name, in order
                if key == 'shape':
                    self._remove_shape(value, rank)
                field = ATTRIBUTE.get(key, key)
                if _tuple(out[field]):
                    out[field] = self._remove(out[field], value, rank)
        return out

    def inside(self, fields: Fields, rank: int) -> Fields:
        """A mapped Variable's fields as the body sees them (raises
        ``CallError``); ``rank`` is its per-slice value's."""
        out = self.own_inside(fields, rank)
        return out if self.inner is None else self.inner.inside(out, rank)

    def recorded(self) -> tuple[str, ...]:
        """The fields whose values ours' removal records (series 13)."""
        if self.flax != 'ours' or self.name is MISSING:
            return ()
        return ('out_sharding', 'optimizer_sharding') + ((EXTRA_KEY,) if self.extra else ())

    def recording(self, mapped: Any) -> Call:
        """This call with ``records`` of its mapped Variables ``(fields,
        stacked rank)``: ours' removal records, per field, the value it gave
        each and the one it took (none where the removal raises)."""
        records = []
        try:
            for fields, rank, *shape in mapped:
                given = self.own_inside(fields, rank - 1)
                records += [(k, given[k], fields[k], shape[0] if shape else None)
                            for k in self.recorded() if fields[k] is not None]
        except CallError:
            return self
        return dataclasses.replace(self, records=tuple(records))

    def _given_back(self, field: str, spec: Spec | None, shape: Any) -> Spec | None:
        """Series 13: a value some mapped Variables of this shape were given
        (same type, equal) gives back what was taken from them, where that
        was one value."""
        if spec is None:
            return None
        taken = {t for k, g, t, s in self.records if k == field and g == spec and s == shape}
        return taken.pop() if len(taken) == 1 else None

    def outside(self, fields: Fields, rank: int,
                own: tuple[Fields, Fields] | None = None, shape: Any = None) -> Fields:
        """A Variable's fields on the way out (a mapped input, or what the body
        made or returned; raises ``CallError``); ``rank`` is its per-slice
        value's. On ours (series 13) a mapped input (``own``: what the removal
        gave it and took from it) whose field the body left as it was given
        gets back what was taken from it; any other field equal to a value
        the removal gave mapped Variables of its ``shape`` gets back what it
        took from them (where that was one value); any other field takes the
        named path's add."""
        if self.inner is not None:
            fields = self.inner.outside(fields, rank, shape=shape)
        out = dict(fields)
        if self.name is MISSING:
            return out
        back = {k: own[1][k] if own is not None and fields[k] == own[0][k]
                else self._given_back(k, fields[k], shape) for k in self.recorded()}
        made = own is None  # what the body made leaves at out_axis
        if back.get('out_sharding') is not None:
            out['out_sharding'] = back['out_sharding']
        elif self._touches(fields['out_sharding'], removing=False):  # None and () stay
            out['out_sharding'] = self._insert(fields['out_sharding'], self.name, rank, made)
        if back.get('optimizer_sharding') is not None:
            out['optimizer_sharding'] = back['optimizer_sharding']
        elif self.optimizer is not MISSING and _updated(fields['optimizer_sharding']):
            out['optimizer_sharding'] = self._insert(fields['optimizer_sharding'],
                                                     self.optimizer, rank, made)
        if back.get(EXTRA_KEY) is not None:
            out[EXTRA_KEY] = back[EXTRA_KEY]
        for key, value in self._other_keys():  # after the name, in order
            field = ATTRIBUTE.get(key, key)
            # 'shape' writes a metadata key 'shape' (no field here)
            if key != 'shape' and back.get(field) is None and _tuple(out[field]):
                out[field] = self._insert(out[field], value, rank, made)
        return out


def _entry_at(spec: Spec, axis: int, rank: int) -> Any:
    """A mapped spec's entry at the axis, read as the named path pops it: a
    negative axis counts from the end of the stacked value (``rank``), and
    a spec shorter than the axis reads None there."""
    index = axis + rank if axis < 0 else axis
    return spec.entries[index] if index < len(spec.entries) else None


def stacking_rule(flax: str, mode: str, partition: Any, axis: int,
                  mapped: Any = (), *, extra: bool = False, decorator: str | None = None,
                  placement: str | None = None, spmd_axis_name: Any = None,
                  keys: tuple[tuple[str, Any], ...] = ()) -> Call:
    """THE rule: what one nnx.vmap / nnx.scan / nnx.pmap call does to metadata.

    ``partition`` is the given ``PARTITION_NAME`` (``DEFAULT``: none given),
    ``mapped`` the mapped Variables as ``(fields, stacked rank)`` pairs,
    ``decorator`` the partition of an ``nnx.transform_metadata`` function in
    the body, ``placement`` where it sits (``APPLY_VISIBLE`` or ``HIDDEN``;
    None: no decorator; an inner NNX vmap/scan/pmap hides it from this call).
    A mapping of other keys without a ``PARTITION_NAME`` is ``DEFAULT``.

    Vanilla applies a given name in graph mode with graph updates, nothing
    else. Ours, given no name there, takes the entry the mapped Variables'
    non-empty ``out_sharding`` specs share at the axis (``spmd_axis_name``
    when none has one) and applies it as a given one; in tree mode it
    infers only where no mapped Variable names the axis, and reads a given
    name only where no mapped Variable has a spec (the call creates the
    stack: the given name, else ``spmd_axis_name``; else None); and not
    where it sees a decorator, which owns the axis it names. A decorator runs its
    own named path at axis 0 in the body, on both flaxes. Ours' named path
    (series 13) records what its removal gave and took, and gives it back
    on the way out to every Variable whose field equals a value it gave.
    """
    ours = flax == 'ours'
    outer = _own_rule(flax, mode, partition, axis, mapped, extra, placement, spmd_axis_name,
                      keys)
    if placement is None:
        return outer
    inner = Call(flax, 0, decorator, decorator if ours else MISSING)
    if ours:  # series 13: the decorator's own removal and give-back too
        try:
            inner = inner.recording([(outer.own_inside(f, rank - 1), rank - 1, *rest)
                                     for f, rank, *rest in mapped])
        except CallError:
            pass  # the pass fails at the transform's removal
    return dataclasses.replace(outer, inner=inner)


def _own_rule(flax: str, mode: str, partition: Any, axis: int, mapped: Any, extra: bool,
              placement: str | None, spmd_axis_name: Any,
              keys: tuple[tuple[str, Any], ...] = ()) -> Call:
    """The transform's own call (its decorator's aside): see ``stacking_rule``.
    A mapping's other keys (``keys``) are read in graph mode only; one that
    names ``optimizer_sharding`` decides that field on ours as on vanilla."""
    ours = flax == 'ours'
    leave = Call(flax, axis)  # the call leaves all metadata alone
    graph = MODES[mode] == (True, True)
    if graph and partition != DEFAULT:
        own = ours and 'optimizer_sharding' not in dict(keys)
        return Call(flax, axis, partition, partition if own else MISSING,
                    extra=extra, keys=keys).recording(mapped)
    if not ours:  # vanilla's tree mode ignores a given name
        return leave
    if placement in APPLY_VISIBLE:
        return leave  # the decorator owns the axis it names
    # only out_sharding votes (optimizer_sharding and other keys have no say)
    entries = [_entry_at(f['out_sharding'], axis, rank) for f, rank, *_ in mapped
               if _updated(f['out_sharding'])]
    if not graph and any(e is not None for e in entries):
        return leave  # an axis a Variable names: the decorator's (FLIP 5310)
    # tree mode reads a given name only where the call creates the stack
    # (no mapped Variable has a spec); elsewhere it infers, as graph mode
    given = not graph and not entries and partition != DEFAULT
    name = partition if given else entries[0] if entries else spmd_axis_name
    if entries.count(name) < len(entries):
        return leave  # the specs disagree
    return Call(flax, axis, name, name).recording(mapped)


def leaf_fields(leaf: Leaf) -> Fields:
    return {'out_sharding': leaf.spec, 'optimizer_sharding': leaf.optimizer_spec,
            EXTRA_KEY: leaf.extra_spec}


def array_fields(fields: Fields, stack: Stack, name: str) -> Fields:
    """Leaf ``name``'s fields as declared on its stacked array (``Stack``
    kind 'array'): the stack's entry at its index of out_sharding and
    optimizer_sharding, empty specs included, each keeping its form (none
    for a leaf declared replicated, no optimizer_sharding for one of
    ``own_optimizer``)."""
    out = dict(fields)
    if name in stack.replicated:
        return out
    for k in ('out_sharding', 'optimizer_sharding'):
        if k == 'optimizer_sharding' and name in stack.own_optimizer:
            continue
        if fields[k] is not None:
            out[k] = _insert(fields[k], stack.axis, stack.partition, fields[k].form)
    return out


def fields_json(fields: Fields) -> dict[str, Any]:
    return {f: None if s is None else s.to_json() for f, s in fields.items()}


def stacked_rank(program: Program, leaf: Leaf) -> int:
    return len(leaf.shape) + len(program.stacks)


@dataclasses.dataclass
class Build:
    """What the build gives by the rule: each leaf's fields, the error of the
    first call that raises (that call then leaves the leaf's fields as they
    were), and the leaves a call left without the entry of its axis."""
    metadata: dict[str, dict[str, Any]]
    error: str | None
    stale: set[str]


def _build(program: Program, flax: str) -> Build:
    """The build: each stack's call, innermost first, maps no Variable (its
    inputs are arrays), and stacks what its body made."""
    fields = {leaf.name: leaf_fields(leaf) for leaf in program.leaves}
    rank = {leaf.name: len(leaf.shape) for leaf in program.leaves}
    error, stale = None, set()
    for stack in reversed(program.stacks):  # innermost stacks first
        if stack.kind == 'array':  # declared stacked: no transform
            for leaf in program.leaves:
                fields[leaf.name] = array_fields(fields[leaf.name], stack, leaf.name)
                rank[leaf.name] += 1
            continue
        call = stacking_rule(flax, stack.mode, stack.partition, stack.axis,
                             extra=stack.extra, decorator=stack.decorator,
                             placement=stack.placement, keys=stack.keys)
        for leaf in program.leaves:
            if call.name is MISSING and call.inner is None \
                    and _updated(fields[leaf.name]['out_sharding']):
                stale.add(leaf.name)
            try:
                fields[leaf.name] = call.outside(fields[leaf.name], rank[leaf.name])
            except CallError as e:
                error = error or str(e)
            rank[leaf.name] += 1
    return Build({name: fields_json(f) for name, f in fields.items()}, error, stale)


def expected_metadata(program: Program, flax: str) -> dict[str, dict[str, Any]]:
    """Per Variable path, each sharding-like field as ``Spec.to_json()`` or None."""
    return _build(program, flax).metadata


def stale_leaves(program: Program, flax: str) -> set[str]:
    """The leaves whose out_sharding a stacking call of the build left without
    the entry of its axis, so it no longer lines up with the array (vanilla's
    default transforms)."""
    return _build(program, flax).stale


def build_error(program: Program, flax: str) -> str | None:
    """What the build raises by the rule (vanilla's named path on a spec it
    cannot take), as a part of the exception's first line; None: it runs."""
    return _build(program, flax).error


@dataclasses.dataclass(frozen=True)
class Pass:
    """The forward pass's calls over the stacks ``meta`` describes (every leaf
    mapped), outermost first: the pass's transform and, for a nested body
    (``Apply.nested``), the inner default vmap over the second stack's axis;
    each with the per-slice rank it leaves, less than the stacked rank."""
    calls: tuple[Call, ...]
    grad: bool  # the body returns the gradient of a decorated loss (GRADS)

    def inside(self, fields: Fields, rank: int) -> Fields:
        for depth, call in enumerate(self.calls, 1):
            fields = call.inside(fields, rank - depth)
        return fields

    def outside(self, fields: Fields, rank: int, made: bool = True, shape: Any = None) -> Fields:
        """What the innermost body made (fields at the innermost slice's rank)
        stacked on the way out; a gradient of a decorated loss leaves the
        decorator's call (it is taken from the state the decorator got)."""
        for depth in range(len(self.calls), 0, -1):
            call = self.calls[depth - 1]
            if self.grad and made and depth == len(self.calls):
                call = dataclasses.replace(call, inner=None)
            fields = call.outside(fields, rank - depth, shape=shape)
        return fields

    def after(self, fields: Fields, rank: int, ref: bool = False) -> Fields:
        """A mapped Variable's fields after the pass, the body leaving it as it
        sees it: each call's decorator adds back what it removed (to a copy:
        the Variable takes the copy's metadata only where the add changed it,
        and a ``ref=True`` one never), then the call adds its entry (ours:
        gives back what it took).
        """
        chain = []
        for depth, call in enumerate(self.calls, 1):
            taken = fields
            given = call.own_inside(taken, rank - depth)
            fields = given if call.inner is None else call.inner.inside(given, rank - depth)
            chain.append((call, taken, given, fields, rank - depth))
        for call, taken, given, seen, r in reversed(chain):
            if call.inner is not None:
                added = call.inner.outside(fields, r, own=(seen, given))
                fields = given if ref or added == seen else added
            fields = dataclasses.replace(call, inner=None).outside(fields, r, own=(given, taken))
        return fields

    def made_inside(self, fields: Fields, rank: int) -> Fields:
        """A mapped Variable's fields as the body's copy, gradient or returned
        state has them: as it sees the Variable, or for a gradient of a
        decorated loss, before the decorator's removal."""
        if not self.grad:
            return self.inside(fields, rank)
        calls = self.calls[:-1] + (dataclasses.replace(self.calls[-1], inner=None),)
        return Pass(calls, False).inside(fields, rank)


def apply_pass(program: Program, flax: str, meta: dict[str, dict[str, Any]]) -> Pass:
    """The forward pass's calls over the stacks ``meta`` describes (every leaf mapped)."""
    apply = program.apply
    assert apply is not None and program.stacks
    mapped = [({f: Spec.from_json(meta[leaf.name][f]) for f in FIELDS},
               stacked_rank(program, leaf), leaf.shape) for leaf in program.leaves]
    if not apply.nested:
        call = stacking_rule(flax, apply.mode, apply.partition, program.stacks[0].axis,
                             mapped, decorator=apply.decorator, placement=apply.placement,
                             keys=apply.keys)
        return Pass((dataclasses.replace(call, out_axis=apply.out_axis),),
                    apply.placement in GRADS)
    # the outer transform's look through wrappers stops at the inner vmap
    outer = stacking_rule(flax, apply.mode, apply.partition, program.stacks[0].axis, mapped,
                          keys=apply.keys)
    try:
        mapped = [(outer.inside(fields, rank - 1), rank - 1, shape)
                  for fields, rank, shape in mapped]
    except CallError:
        return Pass((outer,), False)  # the pass fails at the outer call
    inner = stacking_rule(flax, apply.mode, DEFAULT, program.stacks[1].axis, mapped,
                          decorator=apply.decorator, placement=apply.placement)
    return Pass((outer, inner), apply.placement in GRADS)


def _mapped_fields(program: Program, meta: dict[str, dict[str, Any]], leaf: Leaf) -> Fields:
    return {f: Spec.from_json(meta[leaf.name][f]) for f in FIELDS}


def inside_metadata(program: Program, flax: str, meta: dict[str, dict[str, Any]]
                    ) -> dict[str, dict[str, Any]] | None:
    """Per leaf, its fields as the forward pass's body sees them (None: the call fails)."""
    calls = apply_pass(program, flax, meta)
    try:
        return {leaf.name: fields_json(calls.inside(_mapped_fields(program, meta, leaf),
                                                    stacked_rank(program, leaf)))
                for leaf in program.leaves}
    except CallError:
        return None


def ambiguous_give_back(program: Program) -> bool:
    """Whether ours' forward pass gave one value to mapped Variables it took
    different values from (a Variable of that value leaving the body then
    takes the named path's add, not what was taken)."""
    if program.apply is None or not program.stacks or program.custom is not None:
        return False
    calls = apply_pass(program, 'ours', expected_metadata(program, 'ours'))
    return any(len({t for k, g, t, s in call.records if (k, g, s) == key}) > 1
               for call in calls.calls for key in {(k, g, s) for k, g, _, s in call.records})


def after_pass_metadata(program: Program, flax: str, meta: dict[str, dict[str, Any]]
                        ) -> dict[str, dict[str, Any]]:
    """Per leaf, its fields after the forward pass (``meta`` where there is
    none, or where it fails: then the outcome checks judge it; or where it
    runs inside ``jax.shard_map``, over a merged copy of the model)."""
    if program.apply is None or not program.stacks or program.apply.shard_map:
        return meta
    calls = apply_pass(program, flax, meta)
    try:
        return {leaf.name: fields_json(calls.after(_mapped_fields(program, meta, leaf),
                                                   stacked_rank(program, leaf), leaf.ref))
                for leaf in program.leaves}
    except CallError:
        return meta


# What vanilla's simple scan raises writing an unchanged broadcast back
# across jax.shard_map's trace level (``writes_back_broadcasts``)
WRITE_BACK_ERROR = 'from a different trace level'


def writes_back_broadcasts(program: Program, flax: str) -> bool:
    """Whether the forward pass fails writing its unmapped layer back: on
    vanilla, a scan in tree mode or graph mode without updates (the simple
    scan) writes every broadcast Variable back after ``lax.scan``, changed
    or not, and inside ``jax.shard_map`` the unmapped layer, made outside
    it, is of another trace level (``TraceContextError``; a ``ref=True``
    Variable is not checked). Ours writes back only the broadcasts the body
    changed, and no body here changes the unmapped layer."""
    a = program.apply
    return flax == 'vanilla' and a is not None and a.kind == 'scan' and a.shard_map \
        and MODES[a.mode] != (True, True) and any(not l.ref for l in program.leaves)


def pass_error(program: Program, flax: str, meta: dict[str, dict[str, Any]]) -> str | None:
    """What the forward pass's call raises by the rule (on the first mapped
    leaf it fails, else vanilla's write-back of its broadcasts), as a part
    of the exception's first line; None: it runs."""
    if program.apply is None or not program.stacks:
        return None
    calls = apply_pass(program, flax, meta)
    for leaf in program.leaves:
        try:
            calls.inside(_mapped_fields(program, meta, leaf), stacked_rank(program, leaf))
        except CallError as e:
            return str(e)
    return WRITE_BACK_ERROR if writes_back_broadcasts(program, flax) else None


def made_metadata(program: Program, flax: str, meta: dict[str, dict[str, Any]],
                  param: str) -> dict[str, Any] | None:
    """A Variable the forward pass's body made from mapped ``param`` (a copy, a
    gradient, optimizer state, the returned state), or as it is declared (a
    layer the body creates): its per-slice fields, stacked on the way out.
    Optimizer state takes the parameter's declared ``optimizer_sharding``, as
    the body sees it, for its ``out_sharding`` (``nnx.Optimizer``, both flaxes)."""
    calls = apply_pass(program, flax, meta)
    leaf = next(l for l in program.leaves if l.name == param)
    rank = stacked_rank(program, leaf)
    try:
        calls.inside(_mapped_fields(program, meta, leaf), rank)  # the pass runs
        if program.apply.wrap == 'create':
            inside = leaf_fields(leaf)
        else:
            inside = calls.made_inside(_mapped_fields(program, meta, leaf), rank)
        if program.apply.wrap == 'optimizer':
            inside = {**inside, 'out_sharding': inside[placing_field(leaf)],
                      'optimizer_sharding': None}
        return fields_json(calls.outside(inside, rank, shape=leaf.shape))
    except CallError:
        return None


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
    if program.apply is not None and program.apply.mode == 'graph' and (
            program.apply.other == 'None' or inside is not None
            and program.apply.other in ('name str', 'name list')):
        # 0.12.12 looks for the name in what it is given: None raises at the
        # call (TypeError), a string or list naming it at the mapped node
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


def stacked_spec_inside(program: Program, flax: str, meta: dict[str, dict[str, Any]]) -> bool:
    """Whether an optimizer built in the body places a leaf's state by the
    stacked spec (the pass's call left the stack's entries: a tree-mode call
    given a name, as on vanilla), not the per-layer one: laid on the slice,
    it may not divide a dimension (JAX's error), where vanilla's stack,
    left per-layer, fits the slice."""
    if program.apply is None or program.apply.wrap != 'optimizer' or not program.stacks:
        return False
    inside = inside_metadata(program, flax, meta)
    return inside is not None and any(
        inside[leaf.name][placing_field(leaf)] == meta[leaf.name][placing_field(leaf)]
        for leaf in _unlike_layers(program, inside))


def longer_than_the_array(program: Program, meta: dict[str, dict[str, Any]]) -> bool:
    """Whether a stacked ``out_sharding`` or ``optimizer_sharding`` is longer
    than its array's rank: on ours, a decorator the transform cannot see
    over a full per-layer spec (docs/compatibility.md, "A decorated function
    the transform cannot see"). A consumer that shards an array by it
    (``nnx.eval_shape``, the abstract model, optimizer state) raises JAX's
    rank error."""
    return any(spec is not None and spec['form'] != 'named'
               and len(spec['entries']) > stacked_rank(program, leaf)
               for leaf in program.leaves
               for spec in (meta[leaf.name]['out_sharding'],
                            meta[leaf.name]['optimizer_sharding']))
