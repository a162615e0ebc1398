"""What probes report: specs, shardings and metadata in JSON-able form."""

from __future__ import annotations

from typing import Any, Callable

import jax

from flax import nnx


def spec(x: Any) -> Any:
    """A metadata spec as ``{'form', 'entries'}`` (the oracle's one JSON form of
    specs, ``programs.Spec.to_json``): its type kept, ``None`` as is."""
    if x is None:
        return None
    kind = {tuple: 'tuple', list: 'list', jax.P: 'pspec'}.get(type(x), type(x).__name__)
    try:
        entries = [list(e) if isinstance(e, (tuple, list)) else e for e in x]
    except TypeError:
        entries = repr(x)
    return {'form': kind, 'entries': entries}


def sharding(value: Any) -> Any:
    """An array's sharding as its full-rank spec, or a short description."""
    s = getattr(value, 'sharding', None)
    if isinstance(s, jax.sharding.NamedSharding):
        entries = [list(e) if isinstance(e, tuple) else e for e in s.spec]
        return entries + [None] * (value.ndim - len(entries))
    return None if s is None else type(s).__name__


def variables(node: Any, fields: tuple[str, ...] = ('out_sharding',)) -> dict[str, Any]:
    """Every Variable of ``node``: shape, array sharding and the named fields."""
    out = {}
    for path, var in nnx.to_flat_state(nnx.state(node)):
        value = var.get_value()
        entry = {'shape': list(getattr(value, 'shape', ())), 'sharding': sharding(value)}
        entry.update((f, spec(var.get_metadata().get(f))) for f in fields)
        out['/'.join(map(str, path))] = entry
    return out


def mesh(axis_type: str = 'auto', shape: tuple[int, ...] = (2, 4),
                  names: tuple[str, ...] = ('a', 'b')) -> jax.sharding.Mesh:
    kind = {'auto': jax.sharding.AxisType.Auto,
                    'explicit': jax.sharding.AxisType.Explicit}[axis_type]
    return jax.make_mesh(shape, names, axis_types=(kind,) * len(names))


def stack_with_jax_vmap(create: Callable[[jax.Array], Any], layers: int) -> Any:
    """``layers`` modules ``create(key)`` stacked by a plain ``jax.vmap``:
    each Variable keeps one layer's metadata on its stacked array."""
    keys = jax.random.split(jax.random.key(0), layers)
    return nnx.merge(nnx.graphdef(create(keys[0])),
                     jax.vmap(lambda k: nnx.state(create(k)))(keys))
