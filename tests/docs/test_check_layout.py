"""check_layout's two verdicts, on specs (no model): STALE METADATA where a
Variable's array is laid out as its declared spec with one more entry at
some axis, MISSHARDED for any other difference. The README's runs on
vanilla and on ours are tests/docs/test_recipes.py's."""

from __future__ import annotations

import pytest

from check_layout import MISSHARDED, STALE, verdict

FULL = (None, 'fsdp', 'tensor')


@pytest.mark.parametrize('expected, actual, declared, found', [
    # vanilla's stacked kernel: the array is right, the metadata lacks the layer entry
    (('fsdp', 'tensor', None), FULL, ('fsdp', 'tensor'), STALE),
    # the same, stacked at the last axis, and a short per-layer spec
    ((None, 'fsdp', 'tensor'), ('fsdp', 'tensor', None), ('fsdp',), STALE),
    (('a', None, None), (None, 'a', None), ('a',), STALE),
    # Adam's mu on vanilla: an optimizer leaf unlike its parameter's array
    (FULL, ('fsdp', 'tensor', None), None, MISSHARDED),
    # a declared layout not applied (the sharded init not run yet)
    (('layers', 'fsdp', 'tensor'), FULL, ('layers', 'fsdp', 'tensor'), MISSHARDED),
    # a short spec whose array is laid out unlike it with any entry added
    (('fsdp', 'tensor', None), ('tensor', 'fsdp', None), ('fsdp', 'tensor'), MISSHARDED),
    # agreeing: a full spec, and a short one with its trailing axes replicated
    (FULL, FULL, FULL, None),
    (('a', None, None), ('a', None, None), ('a',), None),
])
def test_each_difference_gets_its_verdict(expected: tuple, actual: tuple,
                                          declared: tuple | None, found: str | None) -> None:
    assert verdict(expected, actual, declared) == found
