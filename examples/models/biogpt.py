"""biogpt: a tiny model of the real transformers class, seeded random weights.

    python examples/models/biogpt.py                                  # graph breaks
    graphmend run --package transformers examples/models/biogpt.py    # one graph
"""

from _common import run_model

run_model("biogpt")
