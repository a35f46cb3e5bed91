"""What a failing validation check raises, eagerly and compiled, original and graphmend.

transformers 5's ``torch_compilable_check(cond, msg, error_type)`` raises
``error_type(msg)`` eagerly; traced by TorchDynamo it becomes ``torch._check_tensor_all``
and a failing input raises TorchDynamo's RuntimeError instead (issue 19). graphmend's bar
is the eager exception. Each suite model named here is built (seeded, eval mode) and
called with inputs that fail its multimodal placeholder check (one image or audio token
fewer than the features it merges), in a fresh interpreter per arm:

    python bench/failing_checks.py florence2,qwen2-audio      # from the checkout

Prints one JSON line per model and run: eager, compiled (``eager`` backend) and
``fullgraph=True``, each with the exception's type and message (or "returned").
"""

from __future__ import annotations

import argparse
import sys

from arm_children import run_per_arm

# Which token id marks the merged features in each model's prompt (the suite's builds).
PLACEHOLDER_TOKEN = {"florence2": 7, "qwen2-audio": 7}

_CHILD = r"""
import json
token = int(sys.argv[3])
kwargs = example_kwargs
ids = kwargs["input_ids"].clone()
first = (ids == token).nonzero()[0]
ids[first[0], first[1]] = 3  # one placeholder fewer than the features
kwargs["input_ids"] = ids

def outcome(call):
    try:
        with torch.no_grad():
            call(**kwargs)
    except Exception as error:
        return f"{type(error).__module__}.{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    return "returned"

runs = {}
if arm == "original":
    runs["eager"] = outcome(model)
torch._dynamo.reset()
runs["compiled"] = outcome(torch.compile(model, backend="eager", dynamic=False))
torch._dynamo.reset()
runs["fullgraph"] = outcome(torch.compile(model, backend="eager", dynamic=False, fullgraph=True))
print(json.dumps({"arm": arm, "model": name, **runs}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", help=f"comma-separated, of: {', '.join(PLACEHOLDER_TOKEN)}")
    options = parser.parse_args(argv)
    names = options.models.split(",")
    unknown = [name for name in names if name not in PLACEHOLDER_TOKEN]
    if unknown:
        parser.error(f"no failing input is known for {', '.join(unknown)}")
    failed = sum(run_per_arm(_CHILD, name, str(PLACEHOLDER_TOKEN[name])) for name in names)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
