"""phi3-longrope: a tiny model of the real transformers class, seeded random weights.

    python examples/models/phi3_longrope.py                                  # graph breaks
    graphmend run --package transformers examples/models/phi3_longrope.py    # one graph
"""

from _common import run_model

run_model("phi3-longrope")
