"""``computed_once``: a fixture's result computed once per test run."""

from __future__ import annotations

import uuid

import pytest

from tests.support.shared import computed_once


def test_the_second_ask_reads_what_the_first_computed(
    tmp_path_factory: pytest.TempPathFactory
) -> None:
    name, calls = f'probe-{uuid.uuid4().hex}', []
    first = computed_once(name, lambda: calls.append('first') or {'rows': [1, 2]},
                          tmp_path_factory)
    second = computed_once(name, lambda: calls.append('second') or {}, tmp_path_factory)
    assert first == second == {'rows': [1, 2]} and calls == ['first']


def test_a_failed_computation_is_raised_and_computed_afresh_next_time(
    tmp_path_factory: pytest.TempPathFactory
) -> None:
    name = f'probe-{uuid.uuid4().hex}'

    def fails() -> None:
        raise RuntimeError('vanilla crashed')

    with pytest.raises(RuntimeError, match='vanilla crashed'):
        computed_once(name, fails, tmp_path_factory)
    assert computed_once(name, lambda: 3, tmp_path_factory) == 3
