"""Program constructs for the grammar: what a program around ``f`` may be made of.

``grammar`` draws the body of one function; these constructs give it a program to live
in, as real model code has (issue 46): ``nn.Module`` subclasses with methods and instance
state, forward hooks and pre-hooks, a ``forward`` replaced on an instance, a
mixture-of-experts block (router top-k, a loop over the experts some token chose, with
or without any chosen, experts whose forward has a side effect), parameters that
require grad with a backward after the call (the harness backpropagates and compares
their ``.grad``; a tensor saved for backward before an in-place write), print options
and the default dtype set before output, a function rebuilt from another's code object
with other globals, ``torch.compile`` of a compiled function, and helpers two calls deep
whose guard raises.

Two more constructs are modules that keep tensors Where decides while tracing, drawn
from a stream of their own after the others (``MODULE_TENSOR_KINDS``), so that a seed's
other constructs are what they were before them: ``fixed-values``, a causal padding
computed from numbers kept as one-element int tensors (non-persistent buffers, plain
attributes), with a branch on them and a padding that holds them, and adversarial
variants (a persistent or float buffer, a value of the input mixed in, the buffer
written in place, through a view, by ``+=`` in ``forward`` or by ``f`` after the call,
two instances sharing the code with other values); ``written-back``, a tensor attribute
written back as its own ``to(...)`` in ``forward`` (Where's written-back pass), with a
conversion that changes the dtype, a ``Parameter``, a class with its own
``__setattr__``/``__getattr__``, a pre-hook that reads or writes the attribute, the
attribute read before and after, and an alias of it.

Each construct adds module-level definitions once (``definitions``) and statements to
``f`` that bind only fresh names or rebind one name to a value of its shape. Each has
code graphmend rewrites (a data-dependent branch, output, a guard, a routing loop), so
that the comparison tests a rewrite, not only TorchDynamo. Every draw comes from a
random stream of its own, so a seed's other statements are what they were before.
"""

from __future__ import annotations

import random

KINDS = (
    "module-method", "hooks", "replaced-forward", "moe", "print-options", "default-dtype",
    "rebuilt-code", "compiled-twice", "nested-guard",
)
# Drawn apart from ``KINDS``, each by a draw of its own from a stream of its own.
MODULE_TENSOR_KINDS = ("fixed-values", "written-back")
# Drawn apart again, from a third stream, where asked (``generate(later_kinds=True)``):
# a loop that breaks, so that TorchDynamo gives up its frame and compiles each helper it
# calls as a frame of its own (EnCodec's layers), and one module met at two static
# sizes (EnCodec's convolutions, each padded for its own length).
LATER_KINDS = ("given-up-loop", "two-sizes")
ALL_KINDS = KINDS + MODULE_TENSOR_KINDS + LATER_KINDS

SCALER = '''\
class Scaler(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, width))
        self.calls = 0

    def describe(self, t):
{describe}

    def forward(self, t):
        self.calls += 1
        HISTORY.append(("scaler calls", self.calls))
        self.describe(t)
        if {condition}:
            z = t * self.weight
        else:
            z = t - self.weight
        return z


SCALER = Scaler({width})
'''

HOOKED = '''\
class Doubler(torch.nn.Module):
    def forward(self, t):
        if t.mean() < 0:
            return t * 2.0
        return t + 1.0


def record_output(module, inputs, output):
{hook_body}


def shift_input(module, inputs):
    return (inputs[0] + 0.5,)


HOOKED = Doubler()
HOOKED.register_forward_hook(record_output)
'''

REPLACED = '''\
PLAIN = torch.nn.Linear({width}, {width})


def noisy_forward(t):
    HISTORY.append("noisy forward")
    print("noisy", t.sum())
    return torch.nn.functional.linear(t, PLAIN.weight, PLAIN.bias) * 0.5


PLAIN.forward = noisy_forward
'''

EXPERT = '''\
class Expert(torch.nn.Module):
    def __init__(self, width, index):
        super().__init__()
        self.proj = torch.nn.Linear(width, width)
        self.index = index
        self.runs = 0

    def count(self, t):
{count_body}

    def forward(self, t):
{forward_body}
        return torch.tanh(self.proj(t))
'''

MOE = '''\
class SparseBlock(torch.nn.Module):
    def __init__(self, width, count):
        super().__init__()
        self.num_experts = count
        self.gate = torch.nn.Linear(width, count, bias=False)
        self.experts = torch.nn.ModuleList([{expert} for i in range(count)])
        self.mix = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, hidden_states, final_hidden_states=None):
        hidden_dim = hidden_states.shape[-1]
        routing_weights = F.softmax(self.gate(hidden_states), dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, {top_k}, dim=-1)
        if final_hidden_states is None:
            final_hidden_states = torch.zeros_like(hidden_states)
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
{hit}
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx]{squeeze})
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        return final_hidden_states


MOE = SparseBlock({width}, {count})
'''

MOE_REPLACED_EXPERT = '''\


def replaced_expert_forward(t):
    HISTORY.append("replaced expert ran")
    return torch.nn.functional.linear(t, MOE.experts[1].weight, MOE.experts[1].bias) * 0.5


MOE.experts[1].forward = replaced_expert_forward
'''

REBUILT = '''\
import types


def rebuilt_source(t, u):
    if (t > 4.0).any():
        raise ValueError("rebuilt rejects its input")
    print("rebuilt", t.sum())
    if t.sum() > u.sum():
        return t * 2.0
    return u - 1.0


REBUILT = types.FunctionType(rebuilt_source.__code__, {globals_}, "rebuilt")
'''

TWICE = '''\
def twice_source(t, u):
    print("twice", t.sum())
    if t.sum() > 0:
        return t * u
    return t - u


try:
    TWICE = torch.compile(torch.compile(twice_source, backend="eager"), backend="eager")
except Exception as error:
    HISTORY.append(("compile failed", type(error).__name__))
    TWICE = twice_source
'''

NESTED = '''\
def innermost_check(t):
    {guard}
    return t


def middle_check(t):
    t = innermost_check(t)
    return t * 1.5


def outer_check(t):
    return middle_check(t) + 0.5
'''


# A causal padding as audio codecs compute it: stride, kernel size and total padding are
# one-element int tensors (``{buffers}``), the input's length a static size. The branch
# on ``length <= max_pad`` and the paddings that hold the tensors break the original's
# graph; Where's fixed-values pass decides them while tracing.
PADDER = '''\
class Padder(torch.nn.Module):
    def __init__(self, kernel, stride, mode):
        super().__init__()
{buffers}
        self.mode = mode

    def extra_padding(self, t):
        length = t.shape[-1]
        n_frames = (length - self.kernel_size + self.padding_total) / self.stride + 1
        n_frames = torch.ceil(n_frames).to(torch.int64) - 1
        ideal_length = n_frames * self.stride + self.kernel_size - self.padding_total
        return ideal_length - length

    def forward(self, t):
{write}        rows = t.reshape(-1, t.shape[-1])
        length = rows.shape[-1]
        extra = self.extra_padding(rows)
        max_pad = max(self.padding_total, extra)
        extra_pad = 0
        if {test}:
            extra_pad = max_pad - length + 1
            rows = F.pad(rows, (0, extra_pad))
        padded = F.pad(rows, (self.padding_total, extra), self.mode)
{after}        return padded[..., :length].reshape(t.shape) * 0.5 + t


PADDER = Padder({kernel}, {stride}, "{mode}")
'''

# A tensor attribute kept on the input's device and dtype by writing it back as its own
# conversion in ``forward`` (CTRL's positional encoding): Where's written-back pass leaves
# the write out while tracing where ``to`` returns the tensor itself.
ENCODER = '''\
class Encoder(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
{attribute}
{alias}{access}
    def forward(self, t):
{before}        self.pos = self.pos.to({arguments})
{after}        return (t + {read}).to(t.dtype)


ENCODER = Encoder({width})
'''


# A helper called in a loop whose body breaks: the loop's frame is given up, and the
# helper is compiled as a frame of its own on each call, its output with it.
LOOP_HELPER = '''\
def loop_helper(t, step):
{output}
    return t * 0.5 + step
'''

# Fixed values kept as tensors, for a module met at two static sizes: each call's test
# and paddings are decided for its own length.
SIZED_PADDER = '''\
class SizedPadder(torch.nn.Module):
    def __init__(self, kernel, stride):
        super().__init__()
        self.register_buffer("stride", torch.tensor(stride), persistent=False)
        self.register_buffer("kernel_size", torch.tensor(kernel), persistent=False)
        self.register_buffer("padding_total", torch.tensor(kernel - stride), persistent=False)

    def forward(self, t):
        length = t.shape[-1]
        n_frames = (length - self.kernel_size + self.padding_total) / self.stride + 1
        n_frames = torch.ceil(n_frames).to(torch.int64) - 1
        extra = n_frames * self.stride + self.kernel_size - self.padding_total - length
        if length <= self.padding_total:
            t = F.pad(t, (0, 1))
        padded = F.pad(t, (self.padding_total, extra))
        return padded[..., :length] * 0.5


SIZED_PADDER = SizedPadder({kernel}, {stride})
'''


def _lines(lines: list[str]) -> str:
    """Lines for a hole in a template, each ended: nothing where there are none."""
    return "".join(line + "\n" for line in lines)


class ProgramConstructs:
    """The program constructs of one seed; ``statement`` gives f's lines, ``definitions``
    the module's."""

    def __init__(self, seed: int, shape: tuple, feature, module_tensors: bool = True, later_kinds: bool = False) -> None:
        self.rng = random.Random(f"program-constructs-{seed}")
        # ``MODULE_TENSOR_KINDS``: whether and how, from a stream of their own.
        self.module_tensor_rng = random.Random(f"program-constructs-module-tensors-{seed}")
        self.module_tensors = module_tensors
        # ``LATER_KINDS``: the same, from a third stream.
        self.later_rng = random.Random(f"program-constructs-later-{seed}")
        self.later_kinds = later_kinds
        self.width = shape[-1]
        self.feature = feature
        self.defined: dict[str, str] = {}
        # Module parameters that require grad: the harness backpropagates after each call
        # and compares their gradients (``PARAMETERS``).
        self.parameters: list[str] = []
        self.counter = 0

    # drawing -------------------------------------------------------------------------

    def chosen_kinds(self) -> list[str]:
        """Which constructs a program has: of ``KINDS``, none for two programs in five, else
        one to three; then each of ``MODULE_TENSOR_KINDS`` in one program in five."""
        chosen = []
        if self.rng.random() >= 0.4:
            chosen = self.rng.sample(KINDS, self.rng.choice((1, 1, 2, 3)))
        if self.module_tensors:
            chosen += [kind for kind in MODULE_TENSOR_KINDS if self.module_tensor_rng.random() < 0.2]
        if self.later_kinds:
            chosen += [kind for kind in LATER_KINDS if self.later_rng.random() < 0.2]
        return chosen

    def rng_for(self, kind: str) -> random.Random:
        """The stream a construct draws from: the newer kinds leave ``rng`` as it was."""
        if kind in LATER_KINDS:
            return self.later_rng
        return self.module_tensor_rng if kind in MODULE_TENSOR_KINDS else self.rng

    def statement(self, kind: str, names: list[str], rebindable: list[str]) -> list[str]:
        self.counter += 1
        rng = self.rng_for(kind)
        name = rng.choice(names)
        target = rng.choice(rebindable)
        self.feature("program-" + kind)
        return getattr(self, "_" + kind.replace("-", "_"))(name, target, names)

    def definitions(self) -> str:
        text = "\n\n".join(self.defined.values())
        if self.parameters:
            text += f"\n\nPARAMETERS = [{', '.join(self.parameters)}]\n"
        return text

    # constructs ----------------------------------------------------------------------

    def _module_method(self, name, target, names):
        if "scaler" not in self.defined:
            describe = self.rng.choice((
                '        print("scaler call", self.calls, t.sum())',
                '        logger.warning("scaler call %s %s", self.calls, t.sum())',
                '        if (t > 4.0).any():\n            raise ProgramError("scaler rejects its input")',
            ))
            self.feature("program-module-method-" + ("print" if "print" in describe else "log" if "logger" in describe else "guard"))
            condition = self.rng.choice(("t.sum() > 0", "(t > 0.5).any()", "t.mean() < 0"))
            self.defined["scaler"] = SCALER.format(describe=describe, condition=condition, width=self.width)
            self.parameters.append("SCALER.weight")
        return [f"{target} = SCALER({name})"]

    def _hooks(self, name, target, names):
        if "hooked" not in self.defined:
            hook_body = self.rng.choice((
                '    HISTORY.append(("hook saw", output.sum()))',
                '    print("hook saw", output.sum())',
                '    if (output > 3.0).any():\n        raise ProgramError("hook rejects the output")',
                "    return output * 0.5",
            ))
            text = HOOKED.format(hook_body=hook_body)
            if self.rng.random() < 0.5:
                text += "HOOKED.register_forward_pre_hook(shift_input)\n"
                self.feature("program-hooks-pre-hook")
            self.defined["hooked"] = text
        return [f"{target} = HOOKED({name})"]

    def _replaced_forward(self, name, target, names):
        if "replaced" not in self.defined:
            self.defined["replaced"] = REPLACED.format(width=self.width)
            self.parameters += ["PLAIN.weight", "PLAIN.bias"]
        return [f"{target} = PLAIN({name}.reshape(-1, {self.width})).reshape({name}.shape)"]

    def _moe(self, name, target, names):
        if "moe" not in self.defined:
            rng = self.rng
            expert = rng.choice(("linear", "counter", "print", "replaced", "plain-linear"))
            self.feature("program-moe-expert-" + expert)
            count_body = '        pass'
            forward_body = "        self.count(t)"
            if expert == "counter":
                count_body = '        self.runs += 1\n        HISTORY.append(("expert ran", self.index, self.runs))'
            elif expert == "print":
                count_body = '        print("expert", self.index, "rows", t.shape[0])'
            made = "Expert(width, i)"
            if expert == "plain-linear" or expert == "replaced":
                made = "torch.nn.Linear(width, width)"
            loop = rng.choice(("tolist", "tensor"))
            self.feature("program-moe-loop-" + loop)
            # One or two tokens, top-1 or top-2 of three or four experts: some expert
            # is never chosen.
            if loop == "tolist":
                hit = (
                    "        expert_hitted = (expert_mask.sum(dim=(-1, -2)) > 0).nonzero(as_tuple=True)[0].tolist()\n"
                    "        for expert_idx in expert_hitted:"
                )
                squeeze = ""
            else:
                hit = (
                    "        expert_hitted = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()\n"
                    "        for expert_idx in expert_hitted:"
                )
                squeeze = ".squeeze(0)"
            count = rng.choice((3, 4))
            text = ""
            if made.startswith("Expert"):
                text = EXPERT.format(count_body=count_body, forward_body=forward_body) + "\n\n"
            text += MOE.format(
                expert=made, top_k=rng.choice((1, 2)), hit=hit, squeeze=squeeze, count=count, width=self.width,
            )
            if expert == "replaced":
                text += MOE_REPLACED_EXPERT
            if rng.random() < 0.5:
                # Capture declines a loop whose gradients autograd records.
                text += "MOE.requires_grad_(False)\n"
                self.feature("program-moe-frozen")
            else:
                self.parameters += ["MOE.mix", "MOE.gate.weight"]
            self.moe_saved = rng.random() < 0.4
            if self.moe_saved:
                text += "MOE_SCALE = torch.nn.Parameter(torch.tensor(0.5))\n"
                self.parameters.append("MOE_SCALE")
            self.defined["moe"] = text
        flat = f"{name}.reshape(-1, {self.width})"
        if self.moe_saved:
            # The destination is saved for backward before the loop writes it in place.
            self.feature("program-moe-saved-tensor")
            out, keep = f"moe_out{self.counter}", f"moe_keep{self.counter}"
            return [
                f"{out} = torch.zeros_like({flat})",
                f"{keep} = {out} * MOE_SCALE",
                "with torch.no_grad():",
                f"    MOE({flat}, {out})",
                f"{target} = {target} + ({out} + {keep}).reshape({target}.shape)",
            ]
        if self.rng.random() < 0.5:
            self.feature("program-moe-no-grad")
            return ["with torch.no_grad():", f"    {target} = {target} + MOE({flat}).reshape({target}.shape)"]
        return [f"{target} = {target} + MOE({flat}).reshape({target}.shape)"]

    def _print_options(self, name, target, names):
        option = self.rng.choice(("precision=2", "precision=6", "sci_mode=True", "threshold=2, edgeitems=1"))
        lines = [f"torch.set_printoptions({option})", f'print("printed with options", {name} * 1.2345)']
        if self.rng.random() < 0.5:
            lines.append('torch.set_printoptions(profile="default")')
        return lines

    def _default_dtype(self, name, target, names):
        fresh = f"wide{self.counter}"
        names.append(fresh)
        return [
            "torch.set_default_dtype(torch.float64)",
            f"{fresh} = torch.ones({name}.shape) * 0.1 + {name}.detach().double()",
            f'print("default dtype", {fresh}.dtype, {fresh})',
            "torch.set_default_dtype(torch.float32)",
            f"{fresh} = {fresh}.float()",
        ]

    def _rebuilt_code(self, name, target, names):
        if "rebuilt" not in self.defined:
            globals_ = self.rng.choice((
                'dict(globals(), SCALE=2.0)',
                '{"torch": torch, "__builtins__": __builtins__}',
            ))
            self.feature("program-rebuilt-code-" + ("copied-globals" if "dict(" in globals_ else "own-globals"))
            self.defined["rebuilt"] = REBUILT.format(globals_=globals_)
        other = self.rng.choice(names)
        return [f"{target} = REBUILT({name}, {other})"]

    def _compiled_twice(self, name, target, names):
        self.defined.setdefault("twice", TWICE)
        other = self.rng.choice(names)
        return [f"{target} = TWICE({name}, {other})"]

    def _nested_guard(self, name, target, names):
        if "nested" not in self.defined:
            bound = self.rng.choice(("-5.0", "-1.0", "0.0"))
            guard = self.rng.choice((
                f'if not ({{t}} > {bound}).all():\n        raise ProgramError("below the bound")',
                f'if ({{t}} <= {bound}).any():\n        raise ValueError("below the bound")',
            )).format(t="t")
            self.defined["nested"] = NESTED.format(guard=guard)
        if self.rng.random() < 0.5:
            self.feature("program-nested-guard-caught")
            return [
                "try:",
                f"    {target} = outer_check({name})",
                "except (ProgramError, ValueError) as error:",
                '    print("caught", type(error).__name__, error)',
            ]
        return [f"{target} = outer_check({name})"]

    def _fixed_values(self, name, target, names):
        rng = self.module_tensor_rng
        if "padder" not in self.defined:
            # How the numbers are kept: Where decides non-persistent int buffers and plain
            # tensor attributes; a persistent buffer (saved with the model, so it may
            # change) keeps its break.
            holder = rng.choice(("buffer", "registered", "attribute", "persistent"))
            self.feature("program-fixed-values-" + holder)

            def kept(attribute, value, persistent=False):
                if holder == "registered":
                    return f'        self.register_buffer("{attribute}", torch.tensor({value}), persistent={persistent})'
                if holder == "attribute" and not persistent:
                    return f"        self.{attribute} = torch.tensor({value})"
                flag = "" if persistent else ", persistent=False"
                return f"        self.{attribute} = torch.nn.Buffer(torch.tensor({value}){flag})"

            buffers = [
                kept("stride", "stride", persistent=holder == "persistent"),
                kept("kernel_size", "kernel"),
                kept("padding_total", "kernel - stride"),
            ]
            # The test: the fixed values and the length alone, or with a float buffer or a
            # value of the input in it (declined while tracing: W216).
            test = rng.choice(("fixed", "fixed", "float", "input"))
            self.feature("program-fixed-values-test-" + test)
            write, after = [], []
            condition = "length <= max_pad"
            if test == "float":
                buffers.append(kept("ratio", "1.0"))
                condition = "length * self.ratio <= max_pad"
            elif test == "input":
                write.append("        spare = (t > 5.0).sum()")
                condition = "length - spare <= max_pad"
            # Writes to a fixed tensor: in place before the reads, by ``+=`` on a counter
            # a later test reads, after the reads (directly or through a view, for the
            # next call), or by ``f`` after the call.
            written = rng.choice(("none", "none", "in-place", "augmented", "after", "view", "between-calls"))
            self.feature("program-fixed-values-write-" + written)
            if written == "in-place":
                write.append("        self.padding_total.add_(0)")
            elif written == "augmented":
                buffers.append(kept("step", "0"))
                write.append("        self.step += 1")
                after.append("        if self.step % 2 == 0:\n            padded = padded * 2.0")
            elif written == "after":
                after.append("        self.padding_total.copy_((self.padding_total + 1) % 3)")
            elif written == "view":
                after.append("        self.padding_total.view(1)[0] = (self.padding_total + 1) % 3")
            self.padder_written = written
            (kernel, stride), (other_kernel, other_stride) = rng.sample(((4, 2), (3, 1), (4, 1), (5, 2), (2, 2)), 2)
            mode = rng.choice(("reflect", "constant"))
            text = PADDER.format(
                buffers="\n".join(buffers), write=_lines(write), test=condition, after=_lines(after),
                kernel=kernel, stride=stride, mode=mode,
            )
            # Two modules sharing the code with other values.
            self.padder_two = rng.random() < 0.4
            if self.padder_two:
                self.feature("program-fixed-values-two-modules")
                text += f'PADDER_OTHER = Padder({other_kernel}, {other_stride}, "{mode}")\n'
            self.defined["padder"] = text
        call = f"PADDER({name})"
        if self.padder_two:
            call = f"PADDER_OTHER({call})"
        lines = [f"{target} = {call}"]
        if self.padder_written == "between-calls":
            lines.append(f"PADDER.padding_total.fill_({rng.choice((0, 1, 2))})")
        return lines

    def _written_back(self, name, target, names):
        rng = self.module_tensor_rng
        if "encoder" not in self.defined:
            holder = rng.choice(("buffer", "registered", "persistent", "attribute", "parameter"))
            self.feature("program-written-back-" + holder)
            # Kept in float64, a conversion to the input's dtype makes a new tensor on the
            # first call only (W219 there, decided after).
            wide = holder != "parameter" and rng.random() < 0.3
            values = "torch.linspace(-1.0, 1.0, width" + (", dtype=torch.float64)" if wide else ")")
            if wide:
                self.feature("program-written-back-float64")
            attribute = {
                "buffer": f"        self.pos = torch.nn.Buffer({values}, persistent=False)",
                "registered": f'        self.register_buffer("pos", {values}, persistent=False)',
                "persistent": f'        self.register_buffer("pos", {values})',
                "attribute": f"        self.pos = {values}",
                "parameter": f"        self.pos = torch.nn.Parameter({values})",
            }[holder]
            if holder == "parameter":
                self.parameters.append("ENCODER.pos")
            # The conversion: to the input's device or dtype (nothing changes), or to a
            # dtype that changes it (not for a Parameter, which only a Parameter replaces).
            choices = ["t.device", "device=t.device, dtype=t.dtype", "t.dtype", "device"]
            if holder != "parameter":
                choices.append("dtype")
            arguments = rng.choice(choices)
            self.feature("program-written-back-to-" + {
                "t.device": "input-device", "device=t.device, dtype=t.dtype": "keywords", "t.dtype": "input-dtype",
                "device": "local-device", "dtype": "other-dtype",
            }[arguments])
            before, after = [], []
            if arguments == "device":
                before.append("        device = t.device")
            elif arguments == "dtype":
                before.append("        dtype = torch.float64")
            observed = rng.choice(("none", "identity", "read-after"))
            self.feature("program-written-back-observed-" + observed)
            if observed == "identity":
                before.append("        kept = self.pos")
                after.append('        HISTORY.append(("pos kept", kept is self.pos, self.pos.dtype))')
            elif observed == "read-after":
                after.append('        HISTORY.append(("pos", self.pos.dtype, self.pos.sum()))')
            # Attribute access that runs the program's code, or a pre-hook on the module.
            access = rng.choice(("none", "none", "setattr", "getattr", "pre-hook-read", "pre-hook-write"))
            if holder == "parameter" and access == "pre-hook-write":
                access = "pre-hook-read"
            self.feature("program-written-back-access-" + access)
            methods, hooks = "", ""
            if access == "setattr":
                methods = (
                    "\n    def __setattr__(self, name, value):\n"
                    '        if name == "pos":\n'
                    '            HISTORY.append(("set pos", value.dtype))\n'
                    "        super().__setattr__(name, value)\n"
                )
            elif access == "getattr":
                # A reader of its own that has no side effect: TorchDynamo runs a module's
                # ``__getattr__`` for real while it traces the write, so a reader that
                # appends to a list fails the original compiled on its own guard
                # ("Guard failed on the same frame it was created") on every call.
                methods = (
                    "\n    def __getattr__(self, name):\n"
                    '        if name == "position":\n'
                    '            name = "pos"\n'
                    "        return super().__getattr__(name)\n"
                )
            elif access == "pre-hook-read":
                hooks = (
                    "\n\ndef see_pos(module, inputs):\n"
                    '    HISTORY.append(("pos seen", module.pos.dtype))\n\n\n'
                    "ENCODER.register_forward_pre_hook(see_pos)\n"
                )
            elif access == "pre-hook-write":
                hooks = (
                    "\n\ndef renew_pos(module, inputs):\n"
                    "    module.pos = module.pos * 1.0\n\n\n"
                    "ENCODER.register_forward_pre_hook(renew_pos)\n"
                )
            # An alias of the tensor, which the write back leaves as it was where it converts.
            alias = rng.random() < 0.3
            read = "self.position.mean() * 0.5" if access == "getattr" else "self.pos.mean() * 0.5"
            if alias:
                self.feature("program-written-back-alias")
                read = "(self.pos.mean() + self.alias.mean()) * 0.5"
                after.append('        HISTORY.append(("alias", self.alias is self.pos))')
            self.defined["encoder"] = ENCODER.format(
                attribute=attribute, alias="        self.alias = self.pos\n" if alias else "", access=methods,
                before=_lines(before), after=_lines(after), arguments=arguments, read=read, width=self.width,
            ) + hooks
        return [f"{target} = ENCODER({name})"]

    def _given_up_loop(self, name, target, names):
        rng = self.later_rng
        if "loop-helper" not in self.defined:
            output = rng.choice((
                '    print("loop step", step, t.sum())',
                '    logger.warning("loop step %s %s", step, t.sum())',
                '    HISTORY.append(("loop step", step))',
            ))
            self.feature("program-given-up-loop-" + ("print" if "print" in output else "log" if "logger" in output else "state"))
            self.defined["loop-helper"] = LOOP_HELPER.format(output=output)
        # What breaks in the loop's body: a Python number read from a tensor (no rule
        # removes it, so the frame is given up), or a branch on data (Where may remove it).
        breaker = rng.choice(("item", "branch"))
        self.feature("program-given-up-loop-" + breaker)
        test = f"{target}.sum().item() > 100.0" if breaker == "item" else f"({target} > 100.0).any()"
        return [
            f"{target} = {name}",
            f"for step in range({rng.choice((2, 3))}):",
            f"    {target} = loop_helper({target}, step)",
            f"    if {test}:",
            f"        {target} = {target} - 1.0",
        ]

    def _two_sizes(self, name, target, names):
        rng = self.later_rng
        if self.width < 3:
            return [f"{target} = {name} * 1.0"]
        if "sized-padder" not in self.defined:
            kernel, stride = rng.choice(((4, 2), (3, 1), (4, 1), (5, 2)))
            self.defined["sized-padder"] = SIZED_PADDER.format(kernel=kernel, stride=stride)
        # The same module on the input and on a shorter slice of it, put back to the
        # input's shape.
        cut = rng.choice((1, 2)) if self.width > 3 else 1
        self.feature(f"program-two-sizes-cut-{cut}")
        return [
            f"{target} = SIZED_PADDER({name}) + F.pad(SIZED_PADDER({name}[..., {cut}:]), ({cut}, 0))",
        ]
