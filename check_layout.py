"""check_layout: is a Flax NNX model laid out as its metadata says?

Copy this file next to your code (it needs only jax and flax, and runs on
vanilla flax as on flax + nnxaxis), then, after building the model and its
optimizer and before training:

    from check_layout import check_layout
    check_layout(model, optimizer)

It prints a row for each array whose layout and metadata disagree, with one
of two verdicts, then how many arrays it checked and how many of each:

- STALE METADATA: a Variable's array is laid out as its declared spec
  (``out_sharding``) would be with one more entry, for an axis the spec
  lacks: the metadata is one entry short (google/flax#5112 on vanilla flax
  0.12.12, for a stack made by ``nnx.vmap``/``nnx.scan``). The array is
  right; whatever reads the metadata is wrong.
- MISSHARDED: an array laid out unlike what it should be: a Variable unlike
  its declared spec, or an optimizer state leaf (such as Adam's ``mu``)
  unlike its parameter's array. It costs memory and collectives.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

Spec = tuple[Any, ...]
STALE = 'STALE METADATA'
MISSHARDED = 'MISSHARDED'


def spec(value: jax.Array, declared: Any = None) -> Spec:
    """One entry per axis of ``value``: its ``declared`` spec, or the spec
    its array is laid out with, padded with ``None``."""
    entries = tuple(value.sharding.spec if declared is None else declared)
    return entries + (None,) * (value.ndim - len(entries))


def one_entry_short(declared: Spec, actual: Spec) -> bool:
    """Is ``actual`` the ``declared`` spec with an entry added at some axis?
    ``declared`` is shorter than ``actual``; both as written, not padded."""
    if len(declared) >= len(actual):
        return False
    wanted = declared + (None,) * (len(actual) - 1 - len(declared))
    return any(actual[:axis] + actual[axis + 1:] == wanted for axis in range(len(actual)))


def verdict(expected: Spec, actual: Spec, declared: Spec | None = None) -> str | None:
    """``None`` where the array is laid out as ``expected``; else STALE where
    ``declared`` (a Variable's metadata) is one entry short of ``actual``,
    else MISSHARDED."""
    if expected == actual:
        return None
    if declared is not None and one_entry_short(declared, actual):
        return STALE
    return MISSHARDED


def check_layout(model: nnx.Module, optimizer: nnx.Optimizer | None = None) -> None:
    """Prints each array whose layout and metadata disagree, with its verdict
    (STALE METADATA or MISSHARDED), then how many arrays it checked and how
    many of each verdict."""
    rows: list[tuple[str, str, Spec, Spec, str | None]] = []
    params: dict[tuple[Any, ...], jax.Array] = {}
    for path, var in nnx.to_flat_state(nnx.state(model)):
        declared, value = var.get_metadata().get('out_sharding'), var.get_value()
        if isinstance(value, jax.Array):
            params[path] = value
            if declared is not None:
                actual = spec(value)
                rows.append((name(path), 'declared', tuple(declared), actual,
                             verdict(spec(value, declared), actual, tuple(declared))))
    for path, var in nnx.to_flat_state(nnx.state(optimizer or nnx.Dict())):
        value = var.get_value()
        mirrored = [p for p in params if path[-len(p):] == p and isinstance(
            value, jax.Array) and params[p].shape == value.shape]
        if mirrored:  # a state leaf mirroring a parameter (e.g. Adam's mu)
            param = max(mirrored, key=len)
            expected, actual = spec(params[param]), spec(value)
            rows.append((name(path), f'like {name(param)}', expected, actual,
                         verdict(expected, actual)))
    for path, what, expected, actual, found in rows:
        if found:
            print(f'{path}: {what} {expected} actual {actual} {found}')
    found = [row[-1] for row in rows]
    print(f'arrays checked: {len(rows)}, stale metadata: {found.count(STALE)}, '
          f'missharded: {found.count(MISSHARDED)}')


def name(path: tuple[Any, ...]) -> str:
    return '.'.join(map(str, path))
