import sys

from flaxpq.cli import main

sys.exit(main())
