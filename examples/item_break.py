"""A graph break no rule can fix: a Python number read out of a tensor with ``.item()``.

    python examples/item_break.py                  # 1 graph break
    graphmend explain examples/item_break.py       # names the break, says why it stays
"""

import torch


@torch.compile(backend="eager")
def scale_by_peak(x):
    y = x * 2
    n = int(x.max().item())  # a Python int: Dynamo stops the graph here
    return y + n


if __name__ == "__main__":
    torch.manual_seed(0)
    print(scale_by_peak(torch.randn(4) * 10))
