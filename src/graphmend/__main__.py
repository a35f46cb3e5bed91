"""``python -m graphmend``: the same as the ``graphmend`` command."""

from graphmend.cli.main import main

raise SystemExit(main())
