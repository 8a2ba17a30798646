"""The job file for spark-submit, the same entry point as ``connect-metrics``::

    spark-submit --master URL --jars /usr/share/java/postgresql.jar,/usr/share/java/sqlite-jdbc.jar \
        jobs/rebalance_metrics/main.py run --database URL --output DIR [--report FILE.html]

(spark-submit starts the JVM before this file runs, so the JDBC drivers are given with --jars.) spark-submit runs this file as a script, so the
repository root is put on the path first (the executors need no Python code: the job has no UDFs)."""

import sys
from pathlib import Path

if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    for p in (root, root / "proto"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    from jobs.rebalance_metrics.cli import main

    sys.exit(main())
