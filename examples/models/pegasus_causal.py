"""pegasus-causal: a tiny model of the real transformers class, seeded random weights.

    python examples/models/pegasus_causal.py                                  # graph breaks
    graphmend run --package transformers examples/models/pegasus_causal.py    # one graph
"""

from _common import run_model

run_model("pegasus-causal")
