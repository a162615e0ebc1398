"""check_layout: is a Flax NNX model laid out as its metadata says?

Copy this file next to your code (it needs only jax and flax, and runs on
vanilla flax as on flax + nnxaxis), then, after building the model and its
optimizer and before training:

    from check_layout import check_layout
    check_layout(model, optimizer)

It prints a MISMATCH row for each array laid out unlike what it should be:
a Variable unlike its declared spec (its ``out_sharding`` metadata), an
optimizer state leaf (such as Adam's ``mu``) unlike its parameter's array;
then how many arrays it checked. On vanilla flax 0.12.12, a stack made by
``nnx.vmap``/``nnx.scan`` shows google/flax#5112 here.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

Spec = tuple[Any, ...]


def spec(value: jax.Array, declared: Any = None) -> Spec:
    """One entry per axis of ``value``: its ``declared`` spec, or the spec
    its array is laid out with, padded with ``None``."""
    entries = tuple(value.sharding.spec if declared is None else declared)
    return entries + (None,) * (value.ndim - len(entries))


def check_layout(model: nnx.Module, optimizer: nnx.Optimizer | None = None) -> None:
    """Prints each array laid out unlike what it should be (MISMATCH): a
    Variable unlike its declared spec, optimizer state unlike its
    parameter's array; then how many arrays it checked."""
    rows: list[tuple[tuple[Any, ...], str, Spec, Spec]] = []
    params: dict[tuple[Any, ...], jax.Array] = {}
    for path, var in nnx.to_flat_state(nnx.state(model)):
        declared, value = var.get_metadata().get('out_sharding'), var.get_value()
        if isinstance(value, jax.Array):
            params[path] = value
            if declared is not None:
                rows.append((path, 'declared', spec(value, declared), spec(value)))
    for path, var in nnx.to_flat_state(nnx.state(optimizer or nnx.Dict())):
        value = var.get_value()
        mirrored = [p for p in params if path[-len(p):] == p and isinstance(
            value, jax.Array) and params[p].shape == value.shape]
        if mirrored:  # a state leaf mirroring a parameter (e.g. Adam's mu)
            param = max(mirrored, key=len)
            rows.append((path, f"like {'.'.join(map(str, param))}",
                         spec(params[param]), spec(value)))
    for path, what, expected, actual in rows:
        if expected != actual:
            print(f"{'.'.join(map(str, path))}: {what} {expected} actual {actual} MISMATCH")
    print(f'arrays checked: {len(rows)}, MISMATCH: '
          f'{sum(expected != actual for _, _, expected, actual in rows)}')
