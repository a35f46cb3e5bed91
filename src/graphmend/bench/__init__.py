"""Benchmark harness and model suite (``graphmend bench``; needs the ``bench`` extra).

``suite`` holds the models, ``worker`` measures one arm of one model in a fresh
process, ``runner`` runs the arms and compares their outputs, ``report`` turns the
results into Markdown, a terminal table and a plot, and ``cli`` is the command.
"""
