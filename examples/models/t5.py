"""t5: a tiny model of the real transformers class, seeded random weights.

    python examples/models/t5.py                                  # graph breaks
    graphmend run --package transformers examples/models/t5.py    # one graph
"""

from _common import run_model

run_model("t5")
