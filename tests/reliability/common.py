"""Helpers shared by the reliability tests (model builders come from tests.e2e)."""

from __future__ import annotations

import jax

AXIS_TYPES = {
    'auto': jax.sharding.AxisType.Auto,
    'explicit': jax.sharding.AxisType.Explicit,
}


def make_mesh(shape: tuple[int, ...], names: tuple[str, ...],
              axis_type: str = 'auto') -> jax.sharding.Mesh:
    """A mesh of exactly ``shape`` with every axis of ``axis_type``."""
    return jax.make_mesh(shape, names, axis_types=(AXIS_TYPES[axis_type],) * len(names))
