"""``python -m broker`` runs the broker, as ``groupwire broker`` does."""

import sys

from broker.cli import main

sys.exit(main(["broker", *sys.argv[1:]]))
