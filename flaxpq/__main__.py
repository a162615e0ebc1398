import sys

from flaxpq import python_too_old

# Plain Python 3 up to here: an old interpreter gets our one-line refusal.
message = python_too_old(
    'python -m flaxpq',
    'Run it with a Python 3.12+ interpreter, e.g. .venv-test/bin/python once '
    '`make test` has made .venv-test (from the repository root).')
if message:
    print(message, file=sys.stderr)
    sys.exit(2)

from flaxpq.cli import main  # noqa: E402

sys.exit(main())
