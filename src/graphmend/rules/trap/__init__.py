"""Trap: data-dependent validation guards become graph-native assertions.

Three passes, run in this order (``rewrite/pipeline.py``): ``guards`` (``if C: raise``
and ``assert``), ``items`` (a ``.item()`` value only a known check reads stays a
tensor) and ``checks`` (calls to a known validation helper). Every static legality
condition of the rule is listed in ``conditions``; what only tracing can decide is in
``graphmend.runtime.traps`` and ``graphmend.runtime.checks``.
"""
