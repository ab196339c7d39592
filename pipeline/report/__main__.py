"""``python -m groupwire.pipeline.report``, or ``spark-submit`` of this file."""

import sys

from groupwire.pipeline.report.job import main

if __name__ == "__main__":
    sys.exit(main())
