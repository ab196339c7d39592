"""``python -m groupwire``: the same command line as the ``groupwire`` script."""

import sys

from groupwire.cli.main import main

sys.exit(main())
