"""Defer: print, logging and warnings calls are performed inside the graph, at the call.

One pass, ``outputs``; its static legality conditions are in ``conditions``. What only
tracing can decide is in ``graphmend.runtime.output_decisions`` and
``graphmend.runtime.output_call_arguments``.
"""
