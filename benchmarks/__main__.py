"""``python -m benchmarks``: the same as ``graphmend bench``."""

import sys

from benchmarks.cli import bench_command

sys.exit(bench_command(sys.argv[1:]))
