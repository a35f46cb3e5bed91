"""whisper: a tiny model of the real transformers class, seeded random weights.

    python examples/models/whisper.py                                  # graph breaks
    graphmend run --package transformers examples/models/whisper.py    # one graph
"""

from _common import run_model

run_model("whisper")
