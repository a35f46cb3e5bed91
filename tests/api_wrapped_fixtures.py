"""Fixtures for graphmend.mend on decorated functions (mend reads source from disk)."""

import functools

import torch

calls = []


def traced(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        # Counted when run eagerly only: a compiled call appending to a module list is
        # guarded on the list's length and compiles again on every call, and graphmend
        # keeps the breaks of what such a caller inlines (G316).
        if not torch.compiler.is_compiling():
            calls.append(function.__name__)
        return function(*args, **kwargs)

    return wrapper


@traced
def gate(x, y):
    if x.sum() > 0:
        z = x * y
    else:
        z = x - y
    return torch.relu(z)


def _global_gate(x, y):
    return gate(x, y)


def hides_what_it_wraps(x, y):
    return _global_gate(x, y)


# Claims to wrap ``gate`` but calls it through a global: no closure cell to redirect.
hides_what_it_wraps.__wrapped__ = gate.__wrapped__


class TracedGate(torch.nn.Module):
    @traced
    def forward(self, x, y):
        if x.mean() > 0:
            return x + y
        return x - y
