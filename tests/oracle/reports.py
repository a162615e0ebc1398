"""What a worker reports of one program: the runner writes these, compare.py reads them.

A report travels as JSON (one line per program, ``Report.to_json``); fields
a run did not reach (a stage after the one that failed, a consumer the
program does not ask for) are None and left out of the JSON. Specs are
``Spec.to_json``'s ``{'form', 'entries'}``. No flax import here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

SpecJSON = dict[str, Any] | None  # programs.Spec.to_json(), or None: no such metadata


@dataclasses.dataclass
class VariableReport:
    """One Variable: its type, value and sharding metadata."""
    type: str  # the Variable's class name
    dtype: str
    shape: list[int]
    metadata: dict[str, SpecJSON]  # each sharding-like field (programs.FIELDS)
    metadata_keys: list[str]  # every metadata key, so a key either flax adds shows
    sharding: Any  # the array's: {'spec', 'mesh'}, 'single-device', a repr, or None
    digest: str | None = None  # of the value; None under nnx.eval_shape


@dataclasses.dataclass
class OptimizerLeaf:
    """One optimizer state leaf; ``mirrors``: the parameter of its shape and path tail."""
    shape: list[int]
    digest: str
    sharding: Any
    mirrors: str | None


@dataclasses.dataclass
class AbstractLeaf:
    """One leaf of ``nnx.get_abstract_model``: shape and sharding spec."""
    shape: list[int]
    spec: Any


@dataclasses.dataclass
class ApplyReport:
    """The forward pass over the stack."""
    inside: list[dict[str, SpecJSON]]  # the first call of the body: out_sharding per path
    traces: int  # how often the body's jitted function traced
    output: str = ''  # digest of the pass's output
    made: dict[str, VariableReport] | None = None  # what the body made (Apply.wrap)
    # every Variable of the stack kept its type, metadata (each value and its
    # type) and pytree structure through the pass (I2c)
    kept: bool | None = None


def _variables(d: dict[str, Any] | None) -> dict[str, VariableReport] | None:
    return None if d is None else {p: VariableReport(**e) for p, e in d.items()}


@dataclasses.dataclass
class Report:
    """One program on one flax: each stage's findings, or the exception that ended it."""
    flax_version: str
    outcome: str = 'ok'  # or 'Type: first message line'
    variables: dict[str, VariableReport] | None = None  # after the build
    apply: ApplyReport | None = None
    after_apply: dict[str, VariableReport] | None = None
    partition_spec: dict[str, Any] | None = None  # consumers: specs per path
    named_sharding: dict[str, Any] | None = None
    abstract: dict[str, AbstractLeaf] | None = None
    eval_shape: dict[str, VariableReport] | None = None
    optimizer: dict[str, OptimizerLeaf] | None = None
    losses: list[str] | None = None  # float.hex of each train step's loss
    after_train: dict[str, VariableReport] | None = None
    optimizer_after_train: dict[str, OptimizerLeaf] | None = None
    # where the run failed
    message: str | None = None
    error_type: str | None = None
    failed_stage: str | None = None
    traceback: str | None = None
    unmutated: bool | None = None  # the model as before the failing forward pass
    # hand-written programs' own reports
    scenario: dict[str, Any] | None = None  # tests/support/scenarios.py
    probe: Any = None  # tests/oracle/probes

    @property
    def ok(self) -> bool:
        return self.outcome == 'ok'

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Report:
        d = dict(d)
        for key in ('variables', 'after_apply', 'after_train', 'eval_shape'):
            d[key] = _variables(d.get(key))
        for key in ('optimizer', 'optimizer_after_train'):
            if d.get(key) is not None:
                d[key] = {p: OptimizerLeaf(**e) for p, e in d[key].items()}
        if d.get('abstract') is not None:
            d['abstract'] = {p: AbstractLeaf(**e) for p, e in d['abstract'].items()}
        if d.get('apply') is not None:
            d['apply'] = ApplyReport(**{**d['apply'], 'made': _variables(d['apply'].get('made'))})
        return Report(**d)
