"""Benchmark harness and model suite (``graphmend bench``, ``python -m benchmarks``).

It lives in the repository, not in the installed package, and runs from a checkout
(``pip install -e '.[bench]'`` installs what it needs). ``suite`` holds the models,
``worker`` measures one arm of one model in a fresh process, ``runner`` runs the arms
and compares their outputs, ``report`` turns the results into Markdown, a terminal table
and a plot, ``paper`` holds the GraphMend paper's Table 2, and ``cli`` is the command.
"""
