"""The census harness behind ``graphmend census`` (run from a checkout; not installed).

``models``: which models, and building one tiny with inputs; ``child``: one arm in a fresh
process; ``runner``: tasks, the resumable JSONL rows, local and Ray execution;
``summary``: totals, per model and per cause; ``cli``: the command line.
"""
