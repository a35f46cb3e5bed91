"""blenderbot: a tiny model of the real transformers class, seeded random weights.

    python examples/models/blenderbot.py                                  # graph breaks
    graphmend run --package transformers examples/models/blenderbot.py    # one graph
"""

from _common import run_model

run_model("blenderbot")
