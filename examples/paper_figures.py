"""The GraphMend paper's Figures 2, 4 and 5 as one small program.

    python examples/paper_figures.py            # TorchDynamo breaks the graph 5 times
    graphmend run examples/paper_figures.py     # one graph per function, same output

The script counts graphs with a backend that records each graph TorchDynamo hands
it, and counts breaks from Dynamo's own graph-break records.
"""

import logging

import torch

from graphmend.counting import recording_graph_breaks

logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
logger = logging.getLogger("paper_figures")


def figure_2(x, y):
    x_1 = x * 2
    y_1 = y * 2
    if x.sum() > 0:  # data-dependent branch
        z = x_1 + y_1
    else:
        z = x_1 * y_1
    return torch.relu(z)


def figure_4(x):
    x = torch.relu(x)
    print("tensor:", x)  # a side effect in the middle of the graph
    logger.warning("figure 4 saw %d values", x.numel())
    return torch.sin(x)


def figure_5(attention_mask, expected):
    if not torch.equal(attention_mask, expected):  # a validation guard
        raise ValueError("unsupported attention mask")
    return attention_mask * 2


graphs = []


def counting_backend(graph_module, example_inputs):
    graphs.append(graph_module)
    return graph_module.forward


compiled_2 = torch.compile(figure_2, backend=counting_backend, dynamic=False)
compiled_4 = torch.compile(figure_4, backend=counting_backend, dynamic=False)
compiled_5 = torch.compile(figure_5, backend=counting_backend, dynamic=False)


def main() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(4), torch.randn(4)
    mask = torch.ones(2, 3)
    with recording_graph_breaks() as records:
        print("figure 2:", compiled_2(x, y))
        print("figure 4:", compiled_4(x))
        print("figure 5:", compiled_5(mask, mask.clone()))
        try:
            compiled_5(mask, torch.zeros(2, 3))
        except ValueError as error:
            print("figure 5 rejected a mask:", error)
    print(f"graphs: {len(graphs)}, graph breaks: {len(records.breaks)}")


if __name__ == "__main__":
    main()
