"""A plain-torch model for the benchmark's training tests: dropout (so train mode draws
random numbers), one print and one data-dependent if, as tiny_model.py."""

import torch

NAME = "tiny-train-model"


class TinyTrainModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.dropout = torch.nn.Dropout(0.5)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = self.dropout(self.linear(x))
        print("tiny train model forward")
        if y.sum() > 0:
            z = y * 2
        else:
            z = y - 1
        return {"logits": self.head(z), "hidden": y}


def build():
    return TinyTrainModel(), {"x": torch.randn(2, 4)}
