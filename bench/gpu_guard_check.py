"""A lowered guard that fails on the GPU must raise the user's exception and leave the
process usable (a device-side assertion would be fatal to it). Run by bench/gpu_h200.sh;
prints one line per case. ``python bench/gpu_guard_check.py cpu`` dry-runs it here."""

import sys

import torch

import graphmend

SOURCE = '''
import torch

def check_then_scale(x, n):
    if (x.sum() != n).any():
        raise ValueError("the sum is not n")
    return x * 2
'''


def main(device: str) -> int:
    result = graphmend.mend_module_source(SOURCE, scope="all")
    namespace: dict = {}
    exec(compile(result.tree, "<gpu_guard_check>", "exec"), namespace)  # noqa: S102
    function = namespace["check_then_scale"]
    failures = 0
    for mode in ("default", "reduce-overhead"):
        torch._dynamo.reset()
        compiled = torch.compile(function, mode=mode)
        x = torch.arange(4.0, device=device)
        # Cloned: under reduce-overhead a later run of the CUDA graph overwrites its
        # outputs, and reading them then raises (TorchInductor's rule, for any program).
        passed = compiled(x, 6.0).clone()
        try:
            compiled(x, 5.0)
            outcome = "no exception (wrong)"
            failures += 1
        except ValueError as error:
            outcome = f"ValueError({error})"
        except Exception as error:  # noqa: BLE001 - the line reports it
            outcome = f"{type(error).__name__} (wrong): {str(error).splitlines()[0][:120]}"
            failures += 1
        try:
            usable = bool(torch.equal((x + 1).cpu(), torch.arange(1.0, 5.0))) and bool(torch.equal(passed.cpu(), x.cpu() * 2))
        except Exception as error:  # noqa: BLE001 - a fatal device assertion shows here
            usable = f"no: {type(error).__name__}: {str(error).splitlines()[0][:160]}"
            failures += 1
        print(f"lowered guard on {device}, mode={mode}: failing call raised {outcome}; device usable after: {usable}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "cuda"))
