"""``python -m pipeline.report`` (and ``spark-submit .../pipeline/report/__main__.py``)."""

import sys

from pipeline.report.job import main

if __name__ == "__main__":
    sys.exit(main())
