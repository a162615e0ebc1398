"""Probes: small user programs, run under vanilla flax and ours side by side.

A probe is a function that does what a user does and returns a JSON-able
report of what flax made of it (metadata, array shardings, values, errors).
``tests.oracle.runner`` runs it in both workers; ``test_probes`` compares:

- ``@probe()``: the program runs on vanilla, so ours must give the same
    report (docs/design.md, I0); a probe that raises fails, unless it
    declares the exception it expects (``raises='ValueError'``, or the
    ``'Type: first message line'`` prefix), which then both flaxes must raise;
- ``@probe(fixed=check)``: vanilla is wrong here (the #5112 family), so
    ``check(report)`` lists the problems of a report: it must find some in
    vanilla's (else the probe proves nothing) and none in ours; the report
    keys named in ``same`` (values, array shardings) must still be equal.

Probes live in the modules of ``MODULES``, one per topic; no flax import here
at module level beyond what the probes themselves need.
"""

from __future__ import annotations

import dataclasses
import importlib
import traceback
from typing import Any, Callable

Report = dict[str, Any]
Check = Callable[[Report], list[str]]
MODULES = ('transforms', 'optimizer', 'bridge', 'errors', 'migration', 'readme')


@dataclasses.dataclass(frozen=True)
class Probe:
    name: str
    fn: Callable[[], Report]
    fixed: Check | None = None
    same: tuple[str, ...] = ()
    raises: str | None = None  # a plain probe's expected exception


def error_matches(error: str, raises: str) -> bool:
    """``error`` is ``'Type: first line'``; ``raises`` its type, or a prefix of it."""
    return error.split(':', 1)[0] == raises or error.startswith(raises)


PROBES: dict[str, Probe] = {}


def probe(fixed: Check | None = None, same: tuple[str, ...] = (), raises: str | None = None
          ) -> Callable[[Callable[[], Report]], Callable[[], Report]]:
    """Registers a probe under ``<module>.<function name>``."""

    def register(fn: Callable[[], Report]) -> Callable[[], Report]:
        name = f'{fn.__module__.rsplit(".", 1)[-1]}.{fn.__name__}'
        PROBES[name] = Probe(name, fn, fixed, same, raises)
        return fn

    return register


def load() -> dict[str, Probe]:
    """Imports every probe module that exists and returns the registry."""
    for module in MODULES:
        try:
            importlib.import_module(f'{__name__}.{module}')
        except ModuleNotFoundError as e:
            if e.name != f'{__name__}.{module}':
                raise
    return PROBES


def run(name: str) -> Report:
    """Runs one probe; an exception becomes ``{'error': 'Type: first line'}``."""
    try:
        return load()[name].fn()
    except Exception as e:  # noqa: BLE001 -- the outcome is the report
        lines = str(e).strip().splitlines()
        return {'error': f'{type(e).__name__}: {lines[0] if lines else ""}',
                        'traceback': traceback.format_exc(limit=-3)[-1500:]}


def compare(probe_: Probe, vanilla: Report, ours: Report) -> list[tuple[str, str]]:
    """Divergences as ``(tag, message)``: 'compat' breaks I0, 'intended' is #5112."""
    strip = lambda r: {k: v for k, v in r.items() if k != 'traceback'}  # noqa: E731
    if probe_.fixed is None:
        found = []
        if 'error' in vanilla and (probe_.raises is None
                                   or not error_matches(vanilla['error'], probe_.raises)):
            found.append(('compat', f'vanilla raised {vanilla["error"]}, the probe declares '
                                    f'raises={probe_.raises!r}:\n{vanilla.get("traceback")}'))
        if probe_.raises is not None and 'error' not in vanilla:
            found.append(('compat', f'vanilla did not raise {probe_.raises}: {strip(vanilla)}'))
        if strip(vanilla) != strip(ours):
            found.append(('compat', f'ours {strip(ours)}\nvanilla {strip(vanilla)}'))
        return found
    check = probe_.fixed
    problems = lambda r: [r['error']] if 'error' in r else check(r)  # noqa: E731
    found = [('intended', f'ours: {p}') for p in problems(ours)]
    found += [('compat', f'{key}: ours {ours.get(key)}, vanilla {vanilla.get(key)}')
              for key in probe_.same
              if 'error' not in vanilla and ours.get(key) != vanilla.get(key)]
    if not problems(vanilla):
        found.append(('vacuous', f'vanilla passes the check too: {strip(vanilla)}'))
    return found
