"""Claims of the user pages (README, docs/compatibility.md) about vanilla's
behaviour, as probes both flaxes run.

``tests/oracle/test_readme.py`` runs each probe here under vanilla 0.12.12
and ours and asserts each side's report exactly, so a page's cell that says
what vanilla does is produced by a run of vanilla. The ``fixed`` checks say
what ours must do (and vanilla does not).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from tests.oracle.probes import Report, probe
from tests.oracle.probes.util import mesh, sharding, spec


def _error(call: Callable[[], Any]) -> Any:
    try:
        call()
    except Exception as e:  # noqa: BLE001 -- the outcome is the report
        return [type(e).__name__, str(e).strip().splitlines()[0]]
    return None


def _spmd_stack(axis_type: str) -> Report:
    from flax import nnx

    with jax.set_mesh(mesh(axis_type)):
        @nnx.split_rngs(splits=2)
        @nnx.vmap(in_axes=0, out_axes=0, spmd_axis_name='a')
        def create(rngs: nnx.Rngs) -> nnx.Linear:
            init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, 'b'))
            return nnx.Linear(4, 8, use_bias=False, kernel_init=init, rngs=rngs)

        kernel = create(nnx.Rngs(0)).kernel
    return {'out_sharding': spec(kernel.out_sharding), 'sharding': sharding(kernel.get_value())}


def _spmd_problems(r: Report) -> list[str]:
    # The metadata names the axis; the arrays are JAX's (docs/design.md, I5: sharded
    # along 'a' on Auto meshes only, where JAX batches sharding constraints).
    return [f'{kind}: {k}' for kind, k in r.items()
            if k['out_sharding']['entries'][0] != 'a' or (k['sharding'][0] == 'a') != (kind == 'auto')]


# README "transforms move no data"; docs/compatibility.md, "Metadata never
# moves data": `nnx.vmap(spmd_axis_name='a')`.
@probe(fixed=_spmd_problems)
def spmd_axis_name_metadata_and_sharding() -> Report:
    return {kind: _spmd_stack(kind) for kind in ('auto', 'explicit')}


def _to_nnx_problems(r: Report) -> list[str]:
    if r['to_nnx'] is None:
        return ['bridge.ToNNX over the named stack ran']
    if r['to_nnx'] != r['variable']:
        return [f"ToNNX raised {r['to_nnx']}, creating the Variable {r['variable']}"]
    return []


# docs/compatibility.md, Linen over `bridge.ToLinen`: `bridge.ToNNX` over a
# stack named with a logical name that is not a mesh axis raises JAX's error,
# as creating that Variable does.
@probe(fixed=_to_nnx_problems)
def to_nnx_of_stack_named_without_mesh_axis() -> Report:
    from flax import nnx
    from flax.nnx import bridge
    from tests.oracle.probes.bridge import LAYERS, _model, _x

    with jax.set_mesh(mesh()):
        to_nnx = _error(lambda: bridge.lazy_init(
            bridge.ToNNX(_model('layers'), rngs=nnx.Rngs(0)), _x()))
        variable = _error(lambda: nnx.Param(jnp.ones((LAYERS, 8, 8)),
                                            out_sharding=('layers', 'a', 'b')))
    return {'to_nnx': to_nnx, 'variable': variable}
