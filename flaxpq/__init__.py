"""flaxpq: a patch queue over the pinned upstream Flax release.

Upstream Flax never lives in this repository. It enters at build time as the
pinned sdist (``upstream.toml``), verified by sha256; our changes live as
``git format-patch`` files listed in ``patches/series``.

Modules, in the order the data flows:

* :mod:`flaxpq.project` -- where things are (pin, patches, work and cache dirs).
* :mod:`flaxpq.sdist` -- fetch the pinned sdist with pip and verify its hash.
* :mod:`flaxpq.gitqueue` -- materialize (sdist + ``git am``) and export
    (``git format-patch``) the patch queue.
* :mod:`flaxpq.patchfile` -- one patch: subject, body, our trailers, diff.
* :mod:`flaxpq.checks` -- the invariants CI enforces on the queue.
* :mod:`flaxpq.hooks` -- upstream's pre-commit hooks, tools from PyPI.
* :mod:`flaxpq.upstream` -- the PR kit: one upstream branch per patch.
* :mod:`flaxpq.wheel` -- build the patched ``flax`` wheel, stamping the label.
* :mod:`flaxpq.backend` -- the PEP 517 in-tree build backend.
* :mod:`flaxpq.cli` -- ``python -m flaxpq ...``.
"""

class QueueError(Exception):
    """A failure the user can act on; the message says what to do."""
