"""Sharding errors that nnx's own code meets: JAX's exception, and our note.

Ours adds a PEP 678 note naming the Variable (asserted inside the patch,
tests/nnx/spmd_test.py); the exception's type and message stay JAX's, so
these reports must equal vanilla's.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from tests.oracle.probes import Report, probe
from tests.oracle.probes import util


def _error(call: Callable[[], Any]) -> Report:
    try:
        call()
    except Exception as e:  # noqa: BLE001 -- the outcome is the report
        return {'type': type(e).__name__, 'message': str(e)}
    return {'type': None}


def _stacked_model() -> Any:
    """Three layers named 'layers', which is not an axis of the mesh."""
    from flax import nnx

    @nnx.vmap(transform_metadata={nnx.PARTITION_NAME: 'layers'})
    def create(key: jax.Array) -> nnx.Linear:
        return nnx.Linear(8, 8, rngs=nnx.Rngs(key), kernel_init=nnx.with_partitioning(
            nnx.initializers.lecun_normal(), ('a', 'b')))

    class Model(nnx.Module):
        def __init__(self) -> None:
            self.layers = create(jax.random.split(jax.random.key(0), 3))

    return Model()


@probe()
def get_named_sharding_of_unmeshed_name() -> Report:
    from flax import nnx

    mesh = util.mesh()
    with jax.set_mesh(mesh):
        model = _stacked_model()
    return _error(lambda: nnx.get_named_sharding(nnx.state(model), mesh))


@probe()
def get_abstract_model_of_unmeshed_name() -> Report:
    from flax import nnx

    return _error(lambda: nnx.get_abstract_model(_stacked_model, util.mesh()))


@probe()
def eager_sharding_of_unmeshed_name() -> Report:
    from flax import nnx

    with jax.set_mesh(util.mesh()):
        return _error(lambda: nnx.Param(jnp.ones((4, 8)), out_sharding=('layers', 'b')))


@probe()
def eager_sharding_indivisible() -> Report:
    from flax import nnx

    with jax.set_mesh(util.mesh()):
        report = _error(lambda: nnx.Param(jnp.ones((3, 8)), out_sharding=('a', 'b')))
    # JAX names the source line of the constraint: a file of the flax in use.
    report['message'] = report.get('message', '').split(' This error occurs at')[0]
    return report


@probe()
def eval_shape_spec_longer_than_rank() -> Report:
    from flax import nnx

    with jax.set_mesh(util.mesh()):
        return _error(lambda: nnx.eval_shape(lambda: nnx.Param(
            jnp.ones((4, 8)), out_sharding=('a', 'b', None), eager_sharding=False)))


# The note's advice fits the error; type and message stay.
def _noted_error(call: Callable[[], Any]) -> Report:
    try:
        call()
    except Exception as e:  # noqa: BLE001 -- the outcome is the report
        return {'type': type(e).__name__, 'message': str(e),
                'notes': '\n'.join(getattr(e, '__notes__', ()))}
    return {'type': None}


def _typo_problems(r: Report) -> list[str]:
    notes = r.get('notes', '')
    problems = [f'no {w!r} in the note' for w in (
        "'layer' is not an axis of the mesh, whose axes are ('layers', 'b')",
        "Param at 'layers/kernel' of shape (3, 8, 8)") if w not in notes]
    if 'transform_metadata=' in notes:
        problems.append('the note tells to do what the user did')
    return problems


@probe(fixed=_typo_problems, same=('type', 'message'))
def typo_in_partition_name_note_names_the_axis() -> Report:
    from flax import nnx

    mesh = util.mesh(shape=(2, 4), names=('layers', 'b'))

    @nnx.vmap(transform_metadata={nnx.PARTITION_NAME: 'layer'})
    def create(key: jax.Array) -> nnx.Linear:
        return nnx.Linear(8, 8, rngs=nnx.Rngs(key), kernel_init=nnx.with_partitioning(
            nnx.initializers.lecun_normal(), (None, 'b')))

    class Model(nnx.Module):
        def __init__(self) -> None:
            self.layers = create(jax.random.split(jax.random.key(0), 3))

    with jax.set_mesh(mesh):
        model = Model()
    return _noted_error(lambda: nnx.get_named_sharding(nnx.state(model), mesh))


# Flax's message says what is missing (a mesh context or metadata) and
# where to read more; the one note names the Variable and adds no advice.
def _no_mesh_problems(r: Report) -> list[str]:
    notes = r.get('notes', '')
    problems = [f'no {w!r} in the note' for w in ('Param', '(4, 8)', 'out_sharding')
                if w not in notes]
    return problems + (['the note talks of dividing axes'] if 'divide' in notes else [])


@probe(fixed=_no_mesh_problems, same=('type', 'message'))
def annotated_variable_without_a_mesh_note_names_it() -> Report:
    from flax import nnx

    return _noted_error(lambda: nnx.Param(jnp.ones((4, 8)), out_sharding=('a', 'b')))
