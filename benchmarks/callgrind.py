"""Count the main thread's instructions between two marks, under callgrind.

``callgrind_marks.c`` (compiled by ``run.py``'s ``compile_marks``) wraps
callgrind's client requests: ``marks_start`` starts instrumenting and zeroes
the counts, ``marks_stop(label)`` dumps them and stops. ``Counter`` reads the
main thread's count back from each dump. Imports nothing but the standard
library, so it also runs without jax (``tests/e2e/test_benchmarks_smoke.py``).
"""

from __future__ import annotations

import ctypes
import gc
import os
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar('T')


def load_marks(library: Path) -> ctypes.CDLL:
    """Load the compiled ``callgrind_marks.c`` (``marks_start``, ``marks_stop``)."""
    marks = ctypes.CDLL(str(library))
    marks.marks_stop.argtypes = [ctypes.c_char_p]
    return marks


def main_thread_instructions(out_dir: Path, dump: int) -> int:
    """Instructions of the main thread (thread 1) in this process's dump ``dump``."""
    path = out_dir / f'callgrind.out.{os.getpid()}.{dump}-01'
    if not path.exists():
        raise RuntimeError(f'no callgrind dump {path}; run this program through run.py '
                           '(under valgrind)')
    for line in path.read_text().splitlines():
        if line.startswith(('summary:', 'totals:')):
            return int(line.split()[1])
    raise RuntimeError(f'{path} has no summary line')


class Counter:
    """Counts the main thread's instructions of a callable between marks."""

    def __init__(self, out_dir: Path, marks: ctypes.CDLL) -> None:
        self.out_dir, self.marks, self.dumps = out_dir, marks, 0

    def count(self, name: str, operation: Callable[[], T]) -> tuple[int, T]:
        """``(instructions, result)`` of ``operation()``; only the call is counted.

        A full garbage collection runs first, uncounted: otherwise whether a
        generation-2 collection (some 10 million instructions on the jax
        heap) falls inside the call depends on what ran before it.
        """
        label = name.encode()
        gc.collect()
        self.marks.marks_start()
        result = operation()
        self.marks.marks_stop(label)
        self.dumps += 1
        return main_thread_instructions(self.out_dir, self.dumps), result
