"""marian: a tiny model of the real transformers class, seeded random weights.

    python examples/models/marian.py                                  # graph breaks
    graphmend run --package transformers examples/models/marian.py    # one graph
"""

from _common import run_model

run_model("marian")
