"""layoutlmv3: a tiny model of the real transformers class, seeded random weights.

    python examples/models/layoutlmv3.py                                  # graph breaks
    graphmend run --package transformers examples/models/layoutlmv3.py    # one graph
"""

from _common import run_model

run_model("layoutlmv3")
