"""``python -m graphmend.bench``: the same as ``graphmend bench``."""

import sys

from graphmend.bench.cli import bench_command

sys.exit(bench_command(sys.argv[1:]))
