"""bart: a tiny model of the real transformers class, seeded random weights.

    python examples/models/bart.py                                  # graph breaks
    graphmend run --package transformers examples/models/bart.py    # one graph
"""

from _common import run_model

run_model("bart")
