"""A plain-torch model for the benchmark's worker tests: one print, one data-dependent if."""

import torch

NAME = "tiny-model"


class TinyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        print("tiny model forward")
        if y.sum() > 0:
            z = y * 2
        else:
            z = y - 1
        return {"logits": z, "hidden": y}


def build():
    return TinyModel(), {"x": torch.randn(2, 4)}
