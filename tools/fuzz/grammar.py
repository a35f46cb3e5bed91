"""A seeded grammar of programs that exercise everything graphmend promises to keep.

``program_generator`` draws programs from the constructs the rules were written for;
this grammar draws them from the ways a program can *observe* itself, which is what
a rewrite must not change (see issue 15):

* aliasing and identity: ``z = x`` in one arm and ``z = y`` in the other, ``is``
  checks, returning an input;
* in-place writes by method (``add_``), by keyword (``inplace=True``, ``out=``);
* ``global`` and ``nonlocal`` writes, closures;
* attribute and container state of arguments (``box.t = ...``, ``items.append``,
  ``table["k"] = ...``) and of module globals;
* autograd: inputs that require grad, ops whose derivative is infinite at 0
  (``sqrt``), so an untaken arm must not leak a NaN into a gradient;
* the random generator: draws inside arms;
* exceptions raised in helpers and callers, caught by ``try/except`` at each level,
  ``try/finally``, and expressions that raise (division by zero, shape mismatch);
* output through every channel: ``print``, ``sys.stdout.write``, ``sys.stderr``,
  logging (with a handler that records into a list the function reads back),
  warnings (with a filter turning them into errors), and the program's own stream: an
  object whose ``write`` is Python code appending to a global the function reads back,
  written to by ``print(file=)``, ``.write``, ``redirect_stdout``, a ``sys.stdout``
  swapped inside the function, and a logging handler;
* calls of a validation helper (``torch_compilable_check``) whose checks may fail,
  with messages holding tensor values, caught or not;
* positions of nonzero elements (``torch.where(m)``, ``.nonzero()``, ``argwhere``) used
  as indices and in ``index_add_``, rows selected by a boolean mask, printed, copied to Python in the function or in a
  helper, and a routing loop over the classes a one-hot mask chose, with an expert
  module list;
* nested helpers with guards or output, loops with ``break``/``continue``;
* where ``torch.compile`` is called: by the test, by the module itself, or by another
  module that imports the program.

Every program defines ``f(x, y, box, items, table)``. The generator only tracks
which names are bound on every path (so programs run); it makes no claim about what
graphmend can fix: the behaviour comparison must hold for every program.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from .program_constructs import ProgramConstructs

CONSTANTS = ("0.5", "2.0", "1.5", "0.25", "3.0")
UNARY = ("torch.relu", "torch.sigmoid", "torch.tanh", "torch.abs")
BINARY = ("+", "-", "*")
COMPILE_SITES = ("test", "module", "other-module")
STATE_NAMES = ("COUNT", "TOTAL", "HISTORY", "SEEN", "CACHE", "WRITTEN", "GAUGE", "OPS_SEEN")
BACKEND_LINE = 'BACKEND = "eager"'

HEADER = '''\
import logging
import sys
import warnings

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)
COUNT = 0
TOTAL = torch.zeros({shape})
HISTORY = []
SEEN = []
CACHE = {{}}


class ProgramError(Exception):
    pass


class Box:
    def __init__(self):
        self.t = None
        self.n = 0


class ListHandler(logging.Handler):
    def emit(self, record):
        SEEN.append(record.getMessage())
'''


OWN_STREAM_DEFINITIONS = '''\
import contextlib

WRITTEN = []


class OwnStream:
    def write(self, text):
        WRITTEN.append(text)
        return len(text)

    def flush(self):
        pass


OWN_STREAM = OwnStream()
stream_logger = logging.getLogger(__name__ + ".own")
stream_logger.addHandler(logging.StreamHandler(OWN_STREAM))
'''


# Where output goes once ``before_call`` changes the settings (warnings and one logger's
# records): a list nothing else writes, so that a graph compiled on an earlier call may
# run again (its guards read the list's length), and a logger of the program's own, not
# propagating (``before_call`` says so every call), whose one handler writes to a builtin
# stream until ``before_call`` points it at ``BETWEEN_STREAM``.
BETWEEN_CALLS_DEFINITIONS = '''\
import io

BETWEEN_WRITTEN = []


class BetweenStream:
    def write(self, text):
        BETWEEN_WRITTEN.append(text)
        return len(text)

    def flush(self):
        pass


BETWEEN_STREAM = BetweenStream()


def keep_warning(message, category, filename, lineno, file=None, line=None):
    BETWEEN_WRITTEN.append(str(message))


def keep_log_call(message, *args, **kwargs):
    BETWEEN_WRITTEN.append(message % args if args else message)


between_logger = logging.getLogger(__name__ + ".between")
between_logger.addHandler(logging.StreamHandler(io.StringIO()))
'''


POSITIONS_DEFINITIONS = '''\
class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = torch.nn.ModuleList([torch.nn.Tanh(), torch.nn.Identity()])


ROUTER = Router()


def positions_as_list(positions):
    return positions.tolist()
'''


LAYOUT_DEFINITIONS = '''\
NORM = torch.nn.BatchNorm1d(3).eval()
'''


# A helper TorchDynamo inlines that branches on the size a capture made: the trace breaks
# at the helper's call, not where the size is made.
HELPER_BRANCH_DEFINITIONS = '''\
def scattered_if_any(positions, flat, total):
    if len(positions) > 0:
        total = total.index_add(0, positions, flat[positions] * 2.0)
    return total
'''


MERGE_DEFINITIONS = '''\
ROW_NORM = torch.nn.BatchNorm1d(1).eval()
ROW_HOOKED = torch.nn.Linear(1, 1)
ROW_HOOKED.register_forward_hook(lambda module, inputs, output: HISTORY.append(output.shape[0]))
'''


# (``LookupGauge.__getattr__`` runs code only for ``extra...`` names, never for the
# ``hasattr(self, "cache")`` of a memoized initialization: TorchDynamo runs a
# ``__getattr__`` reached by ``hasattr`` for real while tracing, and one with effects
# fails its own guards, "Guard failed on the same frame it was created", seed 210005.)
# Owners whose attribute access runs the program's code (a property, a ``__setattr__``,
# a ``__getattr__``, a subclass's override of a method the base class calls); ``step``
# is generated per program ({step}) and so is whether ``cache`` exists ({cache}).
ATTRIBUTE_DEFINITIONS = '''\
class Gauge:
    def __init__(self):
        self.base = torch.tensor(0.5)
        self._level = torch.tensor(0.25)
{cache}
    @property
    def level(self):
        HISTORY.append("read level")
        return self._level

    def scale(self, t):
        return t * 2.0

    def step(self, t):
{step}


class LoudGauge(Gauge):
    def __setattr__(self, name, value):
        HISTORY.append("set " + name)
        object.__setattr__(self, name, value)

    def scale(self, t):
        HISTORY.append("loud scale")
        return t * 3.0


class LookupGauge(Gauge):
    def __getattr__(self, name):
        if not name.startswith("extra"):
            raise AttributeError(name)
        HISTORY.append("lookup " + name)
        return torch.tensor(0.75)


GAUGE = {owner}()
'''


# Arguments of a tensor subclass whose ``__torch_function__`` logs the operations made
# on it (``Program.inputs_are_tracked``): the operations a program makes are observable.
TRACKED_DEFINITIONS = '''\
TRACKED_OPS = (
    "add", "sub", "mul", "div", "where", "nonzero", "argwhere", "__getitem__", "__setitem__", "sqrt", "relu",
    "tanh", "sigmoid", "abs", "clone", "detach", "unbind", "__add__", "__sub__", "__mul__", "__radd__",
    "__rsub__", "__rmul__", "__truediv__",
)


class Tracked(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in TRACKED_OPS:
            OPS_SEEN.append(func.__name__)
        return super().__torch_function__(func, types, args, kwargs or {})


OPS_SEEN = []
'''


@dataclass
class Program:
    seed: int
    source: str
    features: Counter = field(default_factory=Counter)
    requires_grad: bool = False
    shape: tuple = (4,)
    log_level: int = 10
    compile_site: str = "test"
    # Helpers the harness calls once before ``f`` (compiled alone in compiled modes),
    # so that ``f`` may later enter a helper whose graph is already cached.
    warm_helpers: tuple = ()
    # compile_site "other-module": the other module calls ``f`` after a break inside a
    # ``try`` (``caller``), and the harness first calls ``f`` compiled alone once.
    caller_catches: bool = False
    # ``x`` and ``y`` are two rows of one tensor (views sharing its memory, apart in it):
    # the program's values are what they would be apart, but a graph whose inputs share
    # memory is one AOTAutograd compiles with a synthetic base.
    inputs_share_memory: bool = False
    # Each call of ``f`` is made from a thread of its own, started and joined (graphmend's
    # per-thread state: pending output, claims made while tracing, the compiled-call
    # boundary; TorchDynamo compiling off the main thread).
    calls_from_threads: bool = False
    # ``x`` and ``y`` are ``Tracked`` tensors (``TRACKED_DEFINITIONS``): every operation
    # on them or on what they produce is logged in ``OPS_SEEN``.
    inputs_are_tracked: bool = False
    # The arguments (of a 2-D shape) passed laid out transposed: same shape and values,
    # strides (1, rows). Elementwise results keep their operand's layout, so arms laid
    # out differently are told apart by ``stride()``, ``is_contiguous()`` and ``view``.
    transposed_inputs: tuple = ()
    # Compiled with ``dynamic=True`` (every size symbolic from the first trace), and
    # called once more, last, on arguments of other sizes (``observe.input_values``):
    # graphmend's trace-time checks then read sizes that are symbols, and the graphs
    # compiled for the first calls are reused or traced again for the last.
    compiled_dynamic: bool = False
    # Module parameters that require grad (``PARAMETERS``, ``program_constructs``): the
    # harness backpropagates after each call and compares their gradients.
    parameters_require_grad: bool = False

    def describe(self) -> str:
        return (
            f"seed {self.seed} (grad={self.requires_grad}, shape={self.shape}, "
            f"compiled from: {self.compile_site}"
            + (f", transposed: {', '.join(self.transposed_inputs)}" if self.transposed_inputs else "")
            + (", dynamic" if self.compiled_dynamic else "")
            + f")\n{self.source}"
        )


# What the other module's ``caller`` prints first for an error it caught.
CAUGHT_BY_THE_CALLER = "caught in caller"


def other_module_source(library: str, caller_catches: bool = False, dynamic: bool = False) -> str:
    """The module that compiles the program's ``f`` from elsewhere (``compile_site="other-module"``);
    with ``caller_catches``, also a compiled ``caller`` that calls ``f`` after a break
    inside a ``try`` (TorchDynamo runs it eagerly from there and enters ``f``'s frame,
    whose graph may be cached, under a handler that ``f``'s module cannot see)."""
    source = (
        "import torch\n\n"
        f"import {library} as library\n\n"
        f"{BACKEND_LINE}\n"
        f"compiled_f = torch.compile(library.f, backend=BACKEND, dynamic={dynamic})\n"
    )
    if caller_catches:
        source += (
            "\n\ndef caller(x, y, box, items, table):\n"
            "    try:\n"
            "        torch._dynamo.graph_break()\n"
            "        return library.f(x, y, box, items, table)\n"
            "    except Exception as error:\n"
            f'        print("{CAUGHT_BY_THE_CALLER}", type(error).__name__, error)\n'
            "        return x * 0.0\n\n\n"
            f"compiled_caller = torch.compile(caller, backend=BACKEND, dynamic={dynamic})\n"
        )
    return source


class _Generator:
    def __init__(self, seed: int, positions: bool = True, item_checks: bool = True, finally_reads: bool = True,
                 layouts: bool = True, merges: bool = True, blocks: bool = True, fusions: bool = True,
                 warm: bool = True, shared_inputs: bool = True, threads: bool = True, handlers: bool = True,
                 grad_modes: bool = True, attribute_code: bool = True, tracked_inputs: bool = False,
                 global_rebinds: bool = True, transposed_inputs: bool = True, dynamic_compiles: bool = True,
                 helper_branches: bool = True, failing_outputs: bool = True, between_calls: bool = True,
                 programs: bool = False, drawn_ranges: bool = False, module_tensors: bool = True,
                 later_kinds: bool = False):
        self.seed = seed
        self.programs_enabled = programs
        self.module_tensors_enabled = module_tensors
        self.later_kinds_enabled = later_kinds
        self.rng = random.Random(seed)
        self.features: Counter = Counter()
        self.helpers: list[str] = []
        self.globals_written: set[str] = set()
        self.counter = 0
        self.requires_grad = self.rng.random() < 0.3
        self.list_handler = False
        self.closure = False
        # The own-stream statements draw from their own stream of random numbers and are
        # added after ordinary statements, so a seed's other statements stay what they
        # were before this construct existed (the seeds earlier runs found still hold).
        self.stream_rng = random.Random(f"own-stream-{seed}")
        self.own_stream = False
        # Calls of a validation helper (transformers 5's ``torch_compilable_check``),
        # drawn the same way, from a stream of their own.
        self.check_rng = random.Random(f"check-call-{seed}")
        self.check_calls = False
        # Positions of nonzero elements and routing loops, from a stream of their own.
        self.positions_rng = random.Random(f"positions-{seed}")
        self.positions_enabled = positions
        self.positions = False
        self.positions_counter = 0
        self.mask_rng = random.Random(f"mask-index-{seed}")
        # Positions handed to a helper that branches on their count, own stream.
        self.helper_branch_rng = random.Random(f"positions-helper-branch-{seed}")
        self.hit_rows_rng = random.Random(f"positions-hit-rows-{seed}")
        self.helper_branches_enabled = helper_branches
        self.helper_branches = False
        # Output calls whose own arguments make them fail, from a stream of their own.
        self.failing_output_rng = random.Random(f"failing-output-{seed}")
        self.failing_outputs_enabled = failing_outputs
        # Output settings the program changes between two calls, from a stream of their own.
        self.between_rng = random.Random(f"between-calls-{seed}")
        # How the program's own stream is used between calls: a stream of its own, so that
        # the programs made before warnings were shown there stay as they were.
        self.warning_display_rng = random.Random(f"between-calls-warning-display-{seed}")
        self.log_display_rng = random.Random(f"between-calls-log-display-{seed}")
        self.between_calls_definitions = False
        self.between_calls_enabled = between_calls
        # ``.item()`` counts that a check compares, from a stream of their own.
        self.item_rng = random.Random(f"item-check-{seed}")
        self.item_checks_enabled = item_checks
        self.item_counter = 0
        self.item_check_parts = ("", "")
        # Reads in ``finally`` of a name the try body may rebind, from a stream of their own.
        self.finally_rng = random.Random(f"finally-read-{seed}")
        self.finally_reads_enabled = finally_reads
        # Tensors whose layout the trace must get right (positions of a 2-D mask, a batch
        # norm of a transposed tensor), from a stream of their own.
        self.layout_rng = random.Random(f"layout-{seed}")
        self.layouts_enabled = layouts
        self.layouts = False
        self.layout_counter = 0
        # A branch on whether positions are empty that writes rows back, own stream.
        self.merge_rng = random.Random(f"merge-{seed}")
        self.merges_enabled = merges
        self.merges = False
        self.merge_counter = 0
        # Code a compile-state test rules out, and a ``with`` whose context manager
        # swallows an exception from the middle of its body, from a stream of their own.
        self.blocks_rng = random.Random(f"compile-state-{seed}")
        self.blocks_enabled = blocks
        self.compile_state_import = False
        # Output without tensors between two layer norms inductor fuses into one kernel,
        # from a stream of their own; such a program is compiled with inductor too.
        self.fusion_rng = random.Random(f"fused-output-{seed}")
        self.fusions_enabled = fusions
        # Helpers compiled alone first, and called later from a caller TorchDynamo runs
        # eagerly inside a ``try``: a graph is reused under a caller its trace never saw.
        self.warm_rng = random.Random(f"warm-{seed}")
        self.warm_enabled = warm
        self.warm_after_break = False
        # Arguments that share memory (``Program.inputs_share_memory``), own stream.
        self.shared_rng = random.Random(f"shared-inputs-{seed}")
        self.shared_inputs_enabled = shared_inputs
        # Calls from threads of their own (``Program.calls_from_threads``), own stream.
        self.threads_rng = random.Random(f"threads-{seed}")
        self.threads_enabled = threads
        # Code run while an exception is in flight (``handler_statement``), own stream.
        self.handler_rng = random.Random(f"handler-{seed}")
        self.handlers_enabled = handlers
        # Statements under a grad mode of their own (``grad_mode_statement``), own stream.
        self.grad_mode_rng = random.Random(f"grad-mode-{seed}")
        self.grad_modes_enabled = grad_modes
        # Branches that read or write through attributes whose access runs the
        # program's code (``attribute_statement``), own stream.
        self.attribute_rng = random.Random(f"attribute-code-{seed}")
        self.attributes_enabled = attribute_code
        self.attribute_definitions = None
        # Arguments of a tensor subclass that logs its operations, own stream.
        self.tracked_rng = random.Random(f"tracked-inputs-{seed}")
        self.tracked_enabled = tracked_inputs
        # Module globals rebound (``global TOTAL; TOTAL = ...``), in an arm or not, to a
        # new object or to an argument (``global_rebind_statement``), own stream.
        self.rebind_rng = random.Random(f"global-rebind-{seed}")
        # Arguments laid out transposed (``Program.transposed_inputs``), own stream.
        self.transposed_rng = random.Random(f"transposed-inputs-{seed}")
        self.transposed_enabled = transposed_inputs
        # Compiled with ``dynamic=True`` and called on other sizes last
        # (``Program.compiled_dynamic``), own stream.
        self.dynamic_rng = random.Random(f"dynamic-compiles-{seed}")
        self.dynamic_enabled = dynamic_compiles
        self.global_rebinds_enabled = global_rebinds
        self.globals_rebound: set[str] = set()
        # A branch on a comparison of ``torch.rand`` with a constant, which the draw's
        # range may decide (LayerDrop; ``drawn_range_statement``), own stream.
        self.drawn_range_rng = random.Random(f"drawn-range-{seed}")
        self.drawn_ranges_enabled = drawn_ranges
        self.drawn_range_counter = 0

    # small helpers ---------------------------------------------------------------

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, options):
        return self.rng.choice(list(options))

    def fresh(self, prefix: str = "h") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def feature(self, name: str) -> None:
        self.features[name] += 1

    def expression(self, names: list[str], depth: int = 0) -> str:
        """An elementwise tensor expression of the names' shape, never a bare name."""
        roll = self.rng.random()
        if depth >= 2 or (depth and roll < 0.4):
            return self.pick(names)
        if roll < 0.5:
            right = self.pick(CONSTANTS) if self.chance(0.4) else self.expression(names, depth + 1)
            text = f"{self.expression(names, depth + 1)} {self.pick(BINARY)} {right}"
            return f"({text})" if depth else text
        if roll < 0.85:
            return f"{self.pick(UNARY)}({self.expression(names, depth + 1)})"
        return f"{self.pick(names)} * {self.pick(CONSTANTS)}"

    def condition(self, names: list[str], rng: random.Random | None = None) -> str:
        """A tensor condition; drawn from ``rng`` (an own stream) where given."""
        rng = rng or self.rng
        name = rng.choice(names)
        forms = [
            f"{name}.sum() > 0",
            f"({name} > 0).all()",
            f"{name}.max() > 0.5",
            f"{name}.mean() < 0",
            f"({name} > 1).any()",
            "x.sum() > y.sum()",
        ]
        if rng.random() < 0.08:
            self.feature("boolop-condition")
            return f"{rng.choice(forms)} {rng.choice(['and', 'or'])} {rng.choice(forms)}"
        return rng.choice(forms)

    # helpers (module-level functions called by f) ---------------------------------

    def helper(self) -> str:
        """A module-level helper ``helperN(t, u)`` returning a tensor; may guard, print, raise."""
        name = self.fresh("helper")
        lines = [f"def {name}(t, u):"]
        kind = self.pick(["guard", "print", "pure", "raise-arm", "inplace", "random", "global", "log"])
        self.feature(f"helper-{kind}")
        body = []
        if kind == "guard":
            body += [f"if {self.condition(['t', 'u'])}:", f'    raise ValueError("{name} rejects its input")']
        elif kind == "print":
            body += [self.pick([f'print("in {name}", t)', f'print("in {name}")', f'sys.stdout.write("{name}\\n")'])]
        elif kind == "raise-arm":
            body += [
                f"if {self.condition(['t', 'u'])}:",
                "    return t * (1.0 / len(u.shape[1:]))" if self.chance(0.5) else "    return t + torch.ones(5)",
            ]
            self.feature("raising-expression")
        elif kind == "inplace":
            body += [f"t.{self.pick(['add_(1.0)', 'mul_(0.5)', 'clamp_(-1.0, 1.0)'])}"]
            self.feature("inplace-method")
        elif kind == "random":
            body += ["u = u + torch.randn_like(u) * 0.1"]
            self.feature("random")
        elif kind == "global":
            body += ["global COUNT", "COUNT += 1"]
            self.feature("global-write")
        elif kind == "log":
            body += [f'logger.info("{name} %s", t.sum())']
            self.feature("log")
        if self.chance(0.4):
            body += [f"if {self.condition(['t', 'u'])}:", f"    return {self.expression(['t', 'u'])}"]
            self.feature("helper-branch")
        body += [f"return {self.expression(['t', 'u'])}"]
        lines += ["    " + line for line in body]
        self.helpers.append("\n".join(lines))
        return name

    def guarded_helper(self) -> str:
        """A helper that only validates (drawn from the warm-up stream): lowered when
        compiled alone on the first input set, failing on later ones."""
        name = self.fresh("helper")
        condition = self.warm_rng.choice(["(t < 0).any()", "t.sum() < 0", "(t > 2.0).any()"])
        self.feature("helper-guard")
        self.helpers.append(
            f"def {name}(t, u):\n    if {condition}:\n        raise ValueError(\"{name} rejects its input\")\n"
            f"    return t + u"
        )
        return name

    # statements of f --------------------------------------------------------------

    def block(self, names: list[str], depth: int, count: int, in_loop: bool = False) -> list[str]:
        """Statements that only rebind names in ``names`` (bound before) or bind fresh ones it appends."""
        lines: list[str] = []
        for _ in range(count):
            lines += self.statement(names, depth, in_loop)
        return lines or ["pass"]

    def statement(self, names: list[str], depth: int, in_loop: bool) -> list[str]:
        kinds = [
            ("assign", 3), ("branch", 5), ("alias", 1.2), ("effect", 3), ("guard", 1), ("inplace", 1.2),
            ("state", 1.2), ("random", 0.8), ("try", 1.2 if depth < 2 else 0), ("loop", 1 if depth < 2 else 0),
            ("helper", 1.2), ("closure", 0.6), ("warning-filter", 0.5), ("raising", 0.7),
        ]
        if in_loop:
            kinds.append(("break", 1.5))
        kind = self.rng.choices([k for k, _ in kinds], weights=[w for _, w in kinds])[0]
        lines = getattr(self, "statement_" + kind.replace("-", "_"))(names, depth, in_loop)
        if self.stream_rng.random() < 0.07:
            lines = lines + self.own_stream_statement(names)
        if self.check_rng.random() < 0.06:
            lines = lines + self.check_call_statement(names)
        if self.positions_rng.random() < 0.06 and self.positions_enabled:
            lines = lines + self.positions_statement(names)
        if self.layouts_enabled and self.layout_rng.random() < 0.05:
            lines = lines + self.layout_statement(names)
        if self.merges_enabled and self.merge_rng.random() < 0.05:
            lines = lines + self.merge_statement(names)
        if self.blocks_enabled and self.blocks_rng.random() < 0.05:
            lines = lines + self.block_statement(names)
        if self.fusions_enabled and self.fusion_rng.random() < 0.005:
            lines = lines + self.fused_output_statement(names)
        if self.handlers_enabled and self.handler_rng.random() < 0.05:
            lines = lines + self.handler_statement(names)
        if self.grad_modes_enabled and depth < 2 and self.grad_mode_rng.random() < 0.05:
            lines = lines + self.grad_mode_statement(names, depth, in_loop)
        if self.attributes_enabled and self.attribute_rng.random() < 0.05:
            lines = lines + self.attribute_statement(names)
        if self.global_rebinds_enabled and self.rebind_rng.random() < 0.025:
            lines = lines + self.global_rebind_statement(names)
        if self.failing_outputs_enabled and self.failing_output_rng.random() < 0.03:
            lines = lines + self.failing_output_statement(names)
        if self.drawn_ranges_enabled and self.drawn_range_rng.random() < 0.04:
            lines = lines + self.drawn_range_statement(names, in_loop)
        return lines

    def drawn_range_statement(self, names: list[str], in_loop: bool) -> list[str]:
        """A uniform draw compared with a constant, as LayerDrop does: a bound the range
        decides (``<= 0``, ``>= 1``, NaN) or one it does not (``0.5``), the draw on either
        side, tested by ``if``, ``not`` or a conditional expression, skipping the rest of
        a loop's pass or updating a tensor."""
        rng = self.drawn_range_rng
        self.drawn_range_counter += 1
        draw = f"draw{self.drawn_range_counter}"
        name = rng.choice(self.rebindable(names))
        bound = rng.choice(("0.0", "-1.0", "0.5", "1.0", "float('nan')", "2"))
        test = rng.choice((f"{draw} < {bound}", f"{bound} > {draw}", f"not {draw} >= {bound}", f"{draw} <= {bound}"))
        size = rng.choice(("[]", "[]", "1"))
        lines = [f"{draw} = torch.rand({size})"]
        form = rng.choice(("update", "expression") + (("continue",) if in_loop else ()))
        self.feature("drawn-range-" + form)
        if form == "update":
            lines += [f"if {test}:", f"    {name} = {name} + 1.0"]
        elif form == "expression":
            lines.append(f"{name} = {name} * 2.0 if {test} else {name}")
        else:
            lines += [f"if {test}:", "    continue"]
        return lines

    def failing_output_statement(self, names: list[str]) -> list[str]:
        """An output call whose own arguments make it fail at the call: the callee
        rejects them (TypeError, KeyError), caught in ``f`` or not, after an in-place
        write that a graph failing in its place would lose; or logging reports that the
        message does not format them, on stderr with the call stack at the call."""
        rng = self.failing_output_rng
        name = rng.choice(names)
        end = rng.choice(("5", "0.5", 'b";"'))
        rejected = [
            ("print-end", f'print("v", {name}.sum(), end={end})', "TypeError"),
            ("print-sep", f'print("a", {name}.shape, sep=b"-")', "TypeError"),
            ("log-level", f'logger.log("loud", "v %s", {name}.sum())', "TypeError"),
            ("log-level", f'logger.log({name}.sum(), "v")', "TypeError"),
            ("log-no-message", "logger.warning()", "TypeError"),
            ("log-extra", f'logger.warning("extra %s", {name}.sum(), extra={{"message": "clash"}})', "KeyError"),
            ("warn-twice", 'warnings.warn("careful", UserWarning, category=UserWarning)', "TypeError"),
        ]
        unformatted = [
            'logger.warning("count %d", "many")',
            f'logger.warning("a %s b %s", {name}.sum())',
            'logger.error("%x", 1.5)',
            f'logger.warning("no conversion", {name}.shape)',
        ]
        if rng.random() < 0.3:
            self.feature("failing-output-unformatted")
            return [rng.choice(unformatted)]
        kind, call, error = rng.choice(rejected)
        self.feature("failing-output-" + kind)
        lines = ["TOTAL.add_(1.0)"] if rng.random() < 0.5 else []
        if rng.random() < 0.7:
            self.feature("failing-output-caught")
            return lines + ["try:", f"    {call}", f"except {error} as error:", '    print("caught", type(error).__name__)']
        return lines + [call]

    def global_rebind_statement(self, names: list[str]) -> list[str]:
        """A module global rebound by ``f`` (``global TOTAL``): to a new tensor or list in
        one arm or both, to an argument (the global then aliases it, and a later in-place
        write through the global writes the argument), or unconditionally and read
        back. What the call leaves in the global, and whether it is the object it was,
        is observed; autograd frees the rebound tensor, so the harness holds what it names
        (``observe.Normaliser``)."""
        rng = self.rebind_rng
        name = rng.choice(names)
        condition = self.condition(names, rng)
        kind = rng.choice(("tensor-both-arms", "tensor-one-arm", "to-argument", "list", "unconditional"))
        self.feature("global-rebind-" + kind)
        if kind == "list":
            self.globals_rebound.add("HISTORY")
            return [
                f"if {condition}:", f"    HISTORY = HISTORY + [{name}.sum()]",
                "else:", f"    HISTORY = {rng.choice(('[]', 'HISTORY[:1]', 'HISTORY'))}",
            ]
        self.globals_rebound.add("TOTAL")
        if kind == "tensor-both-arms":
            return [
                f"if {condition}:", f"    TOTAL = TOTAL + {name}",
                "else:", f"    TOTAL = TOTAL {rng.choice(BINARY)} {rng.choice(CONSTANTS)}",
            ]
        if kind == "tensor-one-arm":
            return [f"if {condition}:", f"    TOTAL = {rng.choice(('TOTAL * ', 'TOTAL + '))}{name}"]
        if kind == "to-argument":
            lines = [f"if {condition}:", f"    TOTAL = {rng.choice(('x', 'y'))}"]
            if rng.random() < 0.5:
                lines += [rng.choice(("TOTAL.mul_(0.5)", "TOTAL.add_(1.0)", f"{name} = {name} + TOTAL"))]
            return lines
        target = rng.choice(self.rebindable(names))
        return [f"TOTAL = TOTAL + {name}", f"{target} = {target} * TOTAL"]

    def attribute_statement(self, names: list[str]) -> list[str]:
        """A data-dependent branch that reads or writes through ``GAUGE``, an object whose
        attribute access may run the program's code (``ATTRIBUTE_DEFINITIONS``): at module
        level (a property or a ``__getattr__`` read in one arm), or in ``GAUGE.step``,
        a method whose arm moves ``self.base`` to its own device (left out when it is a
        no-op, but ``LoudGauge`` has a ``__setattr__``), initializes ``self.cache`` once,
        and calls ``self.scale`` (which ``LoudGauge`` overrides)."""
        rng = self.attribute_rng
        target = rng.choice(self.rebindable(names))
        name = rng.choice(names)
        if self.attribute_definitions is None:
            owner = rng.choice(("Gauge", "LoudGauge", "LookupGauge"))
            self.feature("attribute-owner-" + owner.lower())
            true_arm = []
            if rng.random() < 0.6:
                true_arm.append('self.base = self.base.to("cpu")')
                self.feature("attribute-device-move")
            if rng.random() < 0.4:
                true_arm += ['if not hasattr(self, "cache"):', "    self.cache = t * 0.0 + 1.0"]
                self.feature("attribute-memoized")
            true_arm.append(rng.choice(("z = self.scale(t) + self.base", "z = self.scale(t) * self.level")))
            self.feature("attribute-method")
            false_arm = [rng.choice(("z = t - 1.0", "z = t * self.level", "z = t + self.base"))]
            condition = rng.choice(("t.sum() > 0", "(t > 0.5).any()", "t.mean() < 0"))
            step = [f"if {condition}:"] + self.indent(true_arm) + ["else:"] + self.indent(false_arm) + ["return z"]
            cache = "        self.cache = torch.tensor(2.0)\n" if rng.random() < 0.5 else ""
            self.attribute_definitions = ATTRIBUTE_DEFINITIONS.format(
                cache=cache, step="\n".join("        " + line for line in step), owner=owner,
            )
            self.attribute_owner = owner
        if rng.random() < 0.5:
            self.feature("attribute-method-call")
            return [f"{target} = GAUGE.step({target})"]
        read = "GAUGE.extra_shift" if self.attribute_owner == "LookupGauge" and rng.random() < 0.5 else "GAUGE.level"
        self.feature("attribute-read-in-arm")
        return [
            f"if {self.condition([name])}:",
            f"    {target} = {target} + {read}",
            "else:",
            f"    {target} = {target} * 0.5",
        ]

    def fused_output_statement(self, names: list[str]) -> list[str]:
        """Two layer norms sharing their inputs (inductor fuses them into one kernel) with
        console or log output between them that has no tensor in it (an operator inductor
        gives no device unless graphmend gives it a tensor)."""
        rng = self.fusion_rng
        kind = rng.choice(("print", "log"))
        self.feature(f"fused-output-{kind}")
        name, other = rng.choice(names), rng.choice(names)
        target = rng.choice(self.rebindable(names))
        first, second = self.fresh("norm"), self.fresh("norm")
        output = 'print("between the norms")' if kind == "print" else 'logger.warning("between the norms")'
        return [
            f"{first} = torch.nn.functional.layer_norm({name} + {other}, {name}.shape[-1:])",
            output,
            f"{second} = torch.nn.functional.layer_norm({other} * 2.0 - {name}, {other}.shape[-1:])",
            f"{target} = {target} + {first} * 0.5 + {second}",
        ]

    def block_statement(self, names: list[str]) -> list[str]:
        """Code only eager runs (``if not is_compiling():``, the else arm of ``if
        is_compiling()``, TorchDynamo answers the test while tracing), or a ``with``
        whose context manager swallows an exception raised in the middle of its body
        (the names bound before the raise are what the code after it reads)."""
        rng = self.blocks_rng
        target = rng.choice(self.rebindable(names))
        name = rng.choice(names)
        kind = rng.choice(("not-compiling", "not-compiling-and", "compiling-else", "suppress"))
        self.feature(f"block-{kind}")
        spelling = rng.choice(("torch.compiler.is_compiling()", "is_compiling()", "torch._dynamo.is_compiling()"))
        if spelling == "is_compiling()":
            self.compile_state_import = True
        eager_only = [
            f'print("eager only", {name}.sum())',
            f"{target} = {target} * 2.0" if rng.random() < 0.5 else f'logger.warning("eager %s", {name}.sum())',
        ]
        if rng.random() < 0.5:
            eager_only.append(f"if {name}.sum() > 0:")
            eager_only.append(f"    {target} = {target} + 1.0")
        if kind == "not-compiling":
            return [f"if not {spelling}:"] + self.indent(eager_only)
        if kind == "not-compiling-and":
            return [f"if not {spelling} and box.n >= {rng.randint(0, 3)}:"] + self.indent(eager_only)
        if kind == "compiling-else":
            return [f"if {spelling}:", f"    {target} = {target} + 0.5", "else:"] + self.indent(eager_only)
        raising = rng.choice((
            f"{target} = {target} + torch.ones(5)",
            f"{target} = {target} * (1.0 / len(items))",
            f"{target} = helper_that_may_raise({target})",
        ))
        if "helper_that_may_raise" in raising:
            self.define_helper_that_may_raise()
        return [
            "with contextlib.suppress(RuntimeError, ZeroDivisionError):",
            f"    {target} = {target} * 3.0",
            f"    {raising}",
            f"    {target} = {target} - 2.0",
            f"if {self.condition([target])}:",
            f"    {target} = {target} * 0.5",
        ]

    def define_helper_that_may_raise(self) -> None:
        if not any(h.startswith("def helper_that_may_raise") for h in self.helpers):
            self.helpers.append(
                "def helper_that_may_raise(t):\n    if t.sum() > 0:\n        raise RuntimeError(\"positive\")\n    return t - 1.0"
            )

    def handler_statement(self, names: list[str]) -> list[str]:
        """A ``try`` whose body raises or not by the data, and a handler that runs code
        while the exception is in flight: output that reads it (``sys.exc_info()``),
        sometimes a branch on tensor data and a log record, then the exception raised
        again (bare ``raise``), replaced (``raise ... from error``), replaced with the
        first as its implicit context, or swallowed."""
        rng = self.handler_rng
        target = rng.choice(self.rebindable(names))
        name = rng.choice(names)
        raising = rng.choice((
            [f"if {name}.sum() > {rng.choice((-1.0, 0.0, 1.0))}:", '    raise ValueError("over the threshold")'],
            [f"{target} = helper_that_may_raise({target})"],
            [f"{target} = {target} * (1.0 / len(items))"],
        ))
        if "helper_that_may_raise" in raising[0]:
            self.define_helper_that_may_raise()
        handler = [f'print("in flight", type(sys.exc_info()[1]).__name__, {name}.sum())']
        if rng.random() < 0.5:
            self.feature("handler-branch")
            handler += [f"if ({name} > 0).any():", f"    {target} = {target} * 2.0"]
        if rng.random() < 0.5:
            handler.append('logger.warning("handling %s", error)')
        ending = rng.choice(("swallow", "reraise", "from", "context"))
        self.feature(f"handler-{ending}")
        handler += {
            "swallow": [],
            "reraise": ["raise"],
            "from": ['raise ProgramError("replaced") from error'],
            "context": ['raise ProgramError("while handling")'],
        }[ending]
        body = [f"{target} = {target} * 1.5"] + raising
        return ["try:"] + self.indent(body) + ["except Exception as error:"] + self.indent(handler)

    def grad_mode_statement(self, names: list[str], depth: int, in_loop: bool) -> list[str]:
        """Generated statements under a grad mode of their own (``no_grad``,
        ``enable_grad``, ``set_grad_enabled``, ``inference_mode``): the claims made
        there, the refusals kept only under grad, and the gradients and errors of
        tensors made there and used after."""
        manager = self.grad_mode_rng.choice((
            "torch.no_grad()", "torch.no_grad()", "torch.enable_grad()", "torch.set_grad_enabled(False)",
            "torch.inference_mode()",
        ))
        self.feature("grad-mode-" + manager[len("torch."):].split("(")[0].replace("_", "-"))
        body = self.block(names if depth else list(names), depth + 1, self.grad_mode_rng.randint(1, 2), in_loop)
        return [f"with {manager}:"] + self.indent(body)

    def merge_statement(self, names: list[str]) -> list[str]:
        """Rows gathered at captured positions, computed, written back, under a test of
        whether there are any (CLAP's fusion); the body sometimes draws random numbers,
        calls a batch norm (which asks whether its input is empty), calls a module with
        a forward hook (which ``torch.cond`` cannot capture), divides by a Python count
        that may be zero, prints, or binds a name read after the branch."""
        self.merges = True
        rng = self.merge_rng
        self.merge_counter += 1
        suffix = f"_m{self.merge_counter}"
        name = rng.choice(names)
        target = rng.choice(self.rebindable(names))
        flat, positions, total, rows = f"flat{suffix}", f"pos{suffix}", f"acc{suffix}", f"rows{suffix}"
        threshold = rng.choice(("0.0", "0.5", "10.0"))  # 10.0: no position at all
        test = rng.choice((f"len({positions}) > 0", f"{positions}.numel() != 0", f"{positions}.shape[0] >= 1"))
        kind = rng.choice(("plain", "random", "norm", "hooked", "count", "print", "read-after"))
        self.feature(f"merge-{kind}")
        body = [f"{rows} = {flat}[{positions}] * 2.0 + torch.tanh({total}[{positions}])"]
        if kind == "random":
            body.append(f"{rows} = {rows} + torch.rand_like({rows}) * 0.1")
        elif kind == "norm":
            body.append(f"{rows} = ROW_NORM({rows}.reshape(-1, 1)).reshape(-1)")
        elif kind == "hooked":
            body.append(f"{rows} = ROW_HOOKED({rows}.reshape(-1, 1)).reshape(-1)")
        elif kind == "count":
            body.append(f"{rows} = {rows} * (1.0 / len(items))")
        elif kind == "print":
            body.append(f'print("rows", {rows}.sum())')
        body.append(f"{total}[{positions}] = {rows}")
        after = [f"{target} = {target} + {total}.reshape({target}.shape)"]
        if kind == "read-after":
            after = [f"{rows} = {flat}", f"if {test}:"] + ["    " + line for line in body] + [
                f"{target} = {target} + {total}.reshape({target}.shape) + {rows}.sum() * 0.25"
            ]
            body = None
        lines = [
            f"{flat} = {name}.flatten()",
            f"({positions},) = torch.where({flat} > {threshold})",
            f"{total} = {flat} * 0.5",
        ]
        if body is not None:
            lines += [f"if {test}:"] + ["    " + line for line in body]
        return lines + after

    def layout_statement(self, names: list[str]) -> list[str]:
        """Tensors whose strides the trace must get as the kernels lay them out: the
        positions of a 2-D mask (``torch.nonzero`` writes them column by column), and
        a batch norm of a transposed tensor (the CPU kernel returns it contiguous; torch
        2.13 traces it laid out as its input) reshaped after a statement that breaks
        the original's graph. Binds only fresh names, and rebinds one name to a value of
        its shape."""
        self.layouts = True
        rng = self.layout_rng
        self.layout_counter += 1
        suffix = f"_l{self.layout_counter}"
        name = rng.choice(names)
        target = rng.choice(self.rebindable(names))
        flat, grid, positions, total = f"flat{suffix}", f"grid{suffix}", f"pos{suffix}", f"acc{suffix}"
        kind = rng.choice(("grid-where", "grid-nonzero", "norm-of-transpose"))
        self.feature(f"layout-{kind}")
        lines = [f"{flat} = {name}.flatten()", f"{grid} = torch.stack([{flat}, -{flat}, {flat} * 0.5], dim=1)"]
        threshold = rng.choice(("0.0", "0.5", "10.0"))
        if kind == "grid-where":
            rows, columns = f"rows{suffix}", f"cols{suffix}"
            lines += [
                f"{rows}, {columns} = torch.where({grid} > {threshold})",
                f"{total} = torch.zeros_like({flat})",
                f"{total}.index_add_(0, {rows}, {grid}[{rows}, {columns}] * ({columns} + 1).to({flat}.dtype))",
                f"{target} = {target} + {total}.reshape({target}.shape)",
            ]
        elif kind == "grid-nonzero":
            lines += [
                f"{positions} = torch.nonzero({grid}.t() > {threshold})",
                f"{total} = torch.zeros_like({flat})",
                f"{total}.index_add_(0, {positions}[:, 1], {flat}[{positions}[:, 1]] * 2.0)",
                f"{target} = {target} + {total}.reshape({target}.shape) + {positions}.t().reshape(-1).sum() * 0.25",
            ]
        else:
            normed = f"normed{suffix}"
            between = rng.choice((
                [f'print("normed", {flat}.sum())'],
                [f"({positions},) = torch.where({flat} > {threshold})", f"{normed}_n = {flat}[{positions}].sum()"],
                [f"if {flat}.sum() > {threshold}:", f"    {target} = {target} * 0.5"],
            ))
            lines += [f"{normed} = NORM({grid}.float().unsqueeze(0).transpose(1, 2))"] + between + [
                f"{target} = {target} + {normed}.transpose(1, 2).reshape(-1).sum() * 0.125",
            ]
        return lines

    def positions_statement(self, names: list[str]) -> list[str]:
        """Positions of nonzero elements, used as indices, printed, copied to Python; or
        a loop over the classes a one-hot mask chose. Binds only fresh names, and may
        rebind one name to a value of its shape."""
        self.positions = True
        rng = self.positions_rng
        self.positions_counter += 1
        suffix = f"_p{self.positions_counter}"
        name = rng.choice(names)
        target = rng.choice(self.rebindable(names))
        flat, positions, total = f"flat{suffix}", f"pos{suffix}", f"acc{suffix}"
        threshold = rng.choice(("0.0", "0.5", "-1.0", "10.0"))  # 10.0: no position at all
        lines = [f"{flat} = {name}.flatten()"]
        kind = rng.choice(("where", "nonzero", "argwhere", "printed", "copied", "copied-in-helper", "routing"))
        if self.mask_rng.random() < 0.15:  # its own stream: the seeds found before keep their programs
            kind = "mask-index"
        if self.helper_branches_enabled and self.helper_branch_rng.random() < 0.15:  # own stream, as above
            kind = "branched-in-helper"
        if kind == "routing" and self.hit_rows_rng.random() < 0.5:  # own stream, as above
            kind = "routing-hit-rows"
        self.feature(f"positions-{kind}")
        scatter_back = [
            f"{total} = torch.zeros_like({flat})",
            f"{total}.index_add_(0, {positions}, {flat}[{positions}] * 2.0)",
            f"{target} = {target} + {total}.reshape({target}.shape)",
        ]
        if kind == "where":
            lines += [f"({positions},) = torch.where({flat} > {threshold})"] + scatter_back
        elif kind == "nonzero":
            lines += [f"{positions} = ({flat} > {threshold}).nonzero(as_tuple=True)[0]"] + scatter_back
        elif kind == "argwhere":
            lines += [f"{positions} = torch.argwhere({flat} > {threshold})[:, 0]"] + scatter_back
        elif kind == "branched-in-helper":
            self.helper_branches = True
            lines += [
                f"({positions},) = torch.where({flat} > {threshold})",
                f"{total} = scattered_if_any({positions}, {flat}, torch.zeros_like({flat}))",
                f"{target} = {target} + {total}.reshape({target}.shape)",
            ]
        elif kind == "mask-index":
            mask = f"mask{suffix}"
            lines += [
                f"{mask} = ({flat} > {threshold}) & ({flat} < 2.5)",
                f"{total} = {flat}[{mask}].sum() + {flat}[~{mask}].abs().sum() * 0.5",
                f"{target} = {target} + {total}",
            ]
        elif kind == "printed":
            lines += [
                f"{positions} = ({flat} > {threshold}).nonzero()",
                f'print("positions", {positions}.sum(), {positions}.shape[0])',
            ]
        elif kind == "copied":
            lines += [
                f"{positions} = torch.nonzero({flat} > {threshold})",
                f'print("positions", {positions}.tolist())',
            ]
        elif kind == "copied-in-helper":
            lines += [
                f"{positions} = ({flat} > {threshold}).nonzero()",
                f'print("positions", positions_as_list({positions}))',
            ]
        elif kind == "routing-hit-rows":
            # transformers 5's form: the rows of ``nonzero()``, each row's class unpacked.
            mask, hits, expert, part, chosen = (f"mask{suffix}", f"hits{suffix}", f"expert{suffix}",
                                                f"part{suffix}", f"e{suffix}")
            lines += [
                f"{total} = torch.zeros_like({flat})",
                "with torch.no_grad():",
                f"    {mask} = F.one_hot(({flat} > {threshold}).long(), num_classes=2)",
                f"    {mask} = {mask}.permute(1, 0)",
                f"    {hits} = torch.greater({mask}.sum(dim=(-1,)), 0).nonzero()",
                f"for {chosen} in {hits}:",
                f"    {chosen} = {chosen}[0]",
                f"    if {chosen} == 2:",
                "        continue",
                f"    {expert} = ROUTER.experts[{chosen}]",
                f"    ({positions},) = torch.where({mask}[{chosen}])",
                f"    {part} = {expert}({flat}[{positions}]) * 2.0",
                f"    {total}.index_add_(0, {positions}, {part})",
                f"{target} = {target} + {total}.reshape({target}.shape)",
            ]
        else:
            mask, hits, expert, part, chosen = (f"mask{suffix}", f"hits{suffix}", f"expert{suffix}",
                                                f"part{suffix}", f"e{suffix}")
            lines += [
                f"{mask} = F.one_hot(({flat} > {threshold}).long(), num_classes=2).permute(1, 0)",
                f"{total} = torch.zeros_like({flat})",
                f"{hits} = ({mask}.sum(dim=(-1,)) > 0).nonzero(as_tuple=True)[0].tolist()",
                f"for {chosen} in {hits}:",
                f"    {expert} = ROUTER.experts[{chosen}]",
                f"    ({positions},) = torch.where({mask}[{chosen}])",
                f"    {part} = {expert}({flat}[{positions}]) * 2.0",
                f"    {total}.index_add_(0, {positions}, {part})",
                f"{target} = {target} + {total}.reshape({target}.shape)",
            ]
        return lines

    def check_call_statement(self, names: list[str]) -> list[str]:
        """A call of the validation helper: it raises ``error_type(msg)`` when the
        condition fails (eagerly; traced, TorchDynamo's error or a break), with a
        message that may hold tensor values, sometimes caught right there."""
        self.check_calls = True
        rng = self.check_rng
        name = rng.choice(names)
        bound = rng.choice(("0.5", "2.0", "8.0", "-1.0"))
        condition = rng.choice((
            f"{name}.sum() < {bound} * {name}.numel()",
            f"({name}.abs() < {bound} + 2.0).all()",
            f"{name}.mean() > -{bound}",
            f"({name} > -3.0).all()",
        ))
        message = rng.choice((
            '"the check failed"',
            f'f"the sum is {{{name}.sum()}}"',
            f'f"mean {{{name}.mean():.3f}} of {{{name}.numel()}} entries"',
            f'f"entries {{tuple({name}.shape)}}"',
        ))
        error = rng.choice(("", ", IndexError", ", error_type=ProgramError"))
        before, after = self.item_count_for_check(name)
        if before:
            condition, message = self.item_check_parts
        call = f"torch_compilable_check({condition}, {message}{error})"
        self.feature("check-call")
        if rng.random() < 0.3:
            self.feature("check-call-caught")
            caught = "ProgramError" if "ProgramError" in error else "IndexError" if "IndexError" in error else "ValueError"
            return before + ["try:", f"    {call}", f"except {caught} as error:", '    print("check caught", error)'] + after
        return before + [call] + after

    def item_count_for_check(self, name: str) -> tuple[list[str], list[str]]:
        """Sometimes (a stream of its own) the check compares a count copied to Python by
        ``.item()`` (Trap keeps it a tensor when only the check reads it): an int or a
        float count, against a size or a constant, in the message too, and sometimes
        read again after the check. Sets ``item_check_parts`` (condition, message)."""
        rng = self.item_rng
        if not self.item_checks_enabled or rng.random() >= 0.5:
            return [], []
        self.item_counter += 1
        count = f"count_k{self.item_counter}"
        value = rng.choice((f"({name} > 0).sum()", f"({name} > 0.5).long().sum()", f"{name}.sum()", f"({name} < 0).any()"))
        comparison = rng.choice((
            f"{count} == {name}.numel()", f"{count} != {name}.shape[0]", f"{count} <= len({name})", f"{count} >= 1",
            f"{count} == 0",
        ))
        message = rng.choice((
            f'f"{{{count}}} of {{{name}.numel()}} entries"', f'f"count {{{count}:>4}}"', '"counted"',
            f'f"count {{{count}!r}}"',
        ))
        self.item_check_parts = (comparison, message)
        self.feature("check-call-item")
        after = [f'print("count", {count})'] if rng.random() < 0.25 else []
        return [f"{count} = {value}.item()"], after

    def own_stream_statement(self, names: list[str]) -> list[str]:
        """Output through the program's own stream (``OWN_STREAM``), whose ``write`` is
        Python code appending to ``WRITTEN``, a global the function may read back."""
        self.own_stream = True
        name = self.stream_rng.choice(names)
        forms = [
            ("own-stream-print", [f'print("own", {name}.sum(), file=OWN_STREAM)']),
            ("own-stream-print", ['print("own", file=OWN_STREAM)']),
            ("own-stream-write", ['OWN_STREAM.write("own raw\\n")']),
            ("own-stream-redirect", [
                "with contextlib.redirect_stdout(OWN_STREAM):",
                f'    print("redirected", {name}.sum())',
            ]),
            ("stdout-swapped", [
                "saved_stdout = sys.stdout",
                "sys.stdout = OWN_STREAM",
                f'print("swapped", {name}.sum())',
                "sys.stdout = saved_stdout",
            ]),
            ("stdout-swapped", [
                "saved_stdout = sys.stdout",
                "sys.stdout = OWN_STREAM",
                "try:",
                f'    print("swapped", {name}.sum())',
                "finally:",
                "    sys.stdout = saved_stdout",
            ]),
            # ``print(file=sys.stderr)`` names the stream, found when performed (Defer):
            # swapped in traced code before the print, pointed at another standard
            # stream, or read into a name before it.
            ("stderr-swapped", [
                "saved_stderr = sys.stderr",
                "sys.stderr = OWN_STREAM",
                f'print("swapped", {name}.sum(), file=sys.stderr)',
                "sys.stderr = saved_stderr",
            ]),
            ("stderr-to-stdout", [
                "saved_stderr = sys.stderr",
                "sys.stderr = sys.stdout",
                f'print("to stdout", {name}.sum(), file=sys.stderr)',
                "sys.stderr = saved_stderr",
            ]),
            ("stderr-held", [
                "held_stderr = sys.stderr",
                f'print("held", {name}.sum(), file=held_stderr)',
            ]),
            ("own-stream-handler", [f'stream_logger.warning("own log %s", {name}.sum())']),
            ("own-stream-read", ['print("written", len(WRITTEN))']),
        ]
        kind, lines = self.stream_rng.choice(forms)
        self.feature(kind)
        if self.stream_rng.random() < 0.3:
            self.feature("own-stream-read")
            lines = lines + ['print("written", len(WRITTEN))']
        return lines

    def statement_assign(self, names, depth, in_loop):
        if depth == 0 and self.chance(0.6):
            target = self.fresh()
            line = f"{target} = {self.expression(names)}"
            names.append(target)
            return [line]
        return [f"{self.pick(self.rebindable(names))} = {self.expression(names)}"]

    def rebindable(self, names: list[str]) -> list[str]:
        return [n for n in names if n not in ("x", "y")] or names

    def arm(self, names: list[str], targets: list[str], depth: int, in_loop: bool) -> list[str]:
        """One arm of a data-dependent branch: binds every target, plus some spice."""
        lines = []
        local = list(names)
        for target in targets:
            roll = self.rng.random()
            if roll < 0.12:
                source = self.pick(["x", "y"] + [n for n in names if n not in ("x", "y")][:2])
                lines.append(f"{target} = {source}")
                self.feature("alias-in-arm")
            elif roll < 0.22:
                lines.append(f"{target} = torch.sqrt({self.pick(local)}.abs()) * {self.pick(CONSTANTS)}")
                self.feature("sqrt-in-arm")
            elif roll < 0.3:
                lines.append(f"{target} = {self.pick(local)} + torch.rand_like({self.pick(local)})")
                self.feature("random-in-arm")
            else:
                lines.append(f"{target} = {self.expression(local)}")
            if target not in local:
                local.append(target)
        for _ in range(self.rng.choice([0, 0, 1, 1, 2])):
            lines += self.spice(local, depth)
        if self.chance(0.2):
            self.rng.shuffle(lines)
        return lines

    def spice(self, names: list[str], depth: int) -> list[str]:
        """A statement with an effect beyond binding names, for a branch arm."""
        kind = self.pick([
            "inplace-method", "inplace-keyword", "out-keyword", "global-write", "container", "attribute",
            "print", "log", "warn", "stderr", "random", "raising-expression", "helper", "closure-call",
            "dict-state",
        ])
        name = self.pick(self.rebindable(names))
        if kind == "closure-call" and not self.closure:
            kind = "helper"
        self.feature(kind)
        if kind == "inplace-method":
            return [f"{name}.{self.pick(['add_(1.0)', 'mul_(2.0)', 'neg_()', 'copy_(' + self.pick(names) + ' * 0.5)'])}"]
        if kind == "inplace-keyword":
            return [f"F.relu({name}, inplace=True)"]
        if kind == "out-keyword":
            return [f"torch.{self.pick(['exp', 'tanh', 'abs'])}({self.pick(names)}, out={name})"]
        if kind == "global-write":
            self.globals_written.add("COUNT")
            return [self.pick(["COUNT += 1", f"TOTAL.add_({self.pick(names)})", f"HISTORY.append({self.pick(names)}.sum())"])]
        if kind == "container":
            return [self.pick([f"items.append({name})", f"items.append({name} * 2.0)", "items.clear()"])]
        if kind == "attribute":
            return [self.pick([f"box.t = {name}", "box.n = box.n + 1", f"box.t = {name}.clone()"])]
        if kind == "dict-state":
            return [self.pick([f'table["k"] = {name}', f'CACHE["last"] = {name}.sum()'])]
        if kind == "print":
            return [self.pick([f'print("arm", {name})', 'print("arm")', f'print("arm", {name}.sum(), sep=":")'])]
        if kind == "log":
            return [self.pick([f'logger.info("arm %s", {name})', 'logger.warning("arm")'])]
        if kind == "warn":
            return [self.pick(['warnings.warn("arm")', 'warnings.warn("arm", RuntimeWarning)'])]
        if kind == "stderr":
            return [self.pick(['sys.stderr.write("arm\\n")', 'print("arm", file=sys.stderr)', 'sys.stdout.write("arm\\n")'])]
        if kind == "random":
            return [f"{name} = {name} + torch.randn_like({name})"]
        if kind == "raising-expression":
            return [self.pick([
                f"{name} = {name} * (1.0 / len(items))",
                f"{name} = {name} + torch.ones(5)",
                f"{name} = {name} * (1 // box.n)",
            ])]
        if kind == "helper":
            return [f"{name} = {self.helper()}({name}, {self.pick(names)})"]
        if kind == "closure-call":
            if self.closure:
                return [f"{name} = bump({name})"]
            return [f"{name} = {self.helper()}({name}, {self.pick(names)})"]
        return []

    def statement_branch(self, names, depth, in_loop):
        condition = self.condition(names)
        self.feature("branch")
        if self.chance(0.65):
            fresh = [self.fresh() for _ in range(self.rng.randint(0, 2))] if depth == 0 else []
            targets = fresh + self.rng.sample(self.rebindable(names), min(len(self.rebindable(names)), self.rng.randint(0 if fresh else 1, 2)))
            first = self.arm(names, targets, depth, in_loop)
            second = self.arm(names, targets, depth, in_loop)
            names.extend(t for t in fresh if t not in names)
            return [f"if {condition}:"] + self.indent(first) + ["else:"] + self.indent(second)
        targets = self.rng.sample(self.rebindable(names), 1)
        return [f"if {condition}:"] + self.indent(self.arm(names, targets, depth, in_loop))

    def statement_alias(self, names, depth, in_loop):
        self.feature("alias")
        target = self.fresh("z")
        lines = [f"if {self.condition(names)}:", f"    {target} = x", "else:", f"    {target} = y"]
        follow = self.pick(["mul", "is", "both", "return"])
        if follow in ("mul", "both"):
            lines.append(f"{target}.mul_(10.0)" if not self.requires_grad else f"{target} = {target} * 10.0")
            self.feature("inplace-through-alias")
        if follow in ("is", "both"):
            lines.append(f'print("alias", {target} is x, {target} is y)')
            self.feature("identity-check")
        if follow == "return" and depth == 0:
            self.alias_return = target
        if depth == 0:
            names.append(target)
        return lines

    def statement_effect(self, names, depth, in_loop):
        name = self.pick(names)
        forms = [
            ("print", f'print("v", {name})'), ("print", 'print("checkpoint")'),
            ("print", f'print("sum", {name}.sum(), end=";\\n")'), ("print", f'print(f"f {{{name}.sum()}}")'),
            ("stdout-write", 'sys.stdout.write("raw\\n")'), ("stderr", 'sys.stderr.write("err\\n")'),
            ("stderr", f'print("to stderr", {name}, file=sys.stderr)'),
            ("log", f'logger.info("val %s", {name})'), ("log", 'logger.warning("careful")'),
            ("log", f'logger.debug("dbg %s", {name}.sum())'), ("log", f'logger.error("err %s", {name}.shape)'),
            ("warn", 'warnings.warn("careful")'), ("warn", 'warnings.warn("deprecated", DeprecationWarning)'),
            ("warn", 'warnings.warn("odd", category=RuntimeWarning)'),
            ("log-list-handler", 'print("seen", len(SEEN))'),
            ("print-mutable", 'print("items", len(items), box.n)'),
            # Formatting at the call a value the analysis cannot type (a global), left
            # to the check while tracing: a Python int there, a tensor in the last.
            ("format-untyped", f'logger.warning("rows %d of %s" % ({name}.shape[0] + COUNT, COUNT))'),
            ("format-untyped", f'print("rows {{}}".format(str({name}.dim() * COUNT)))'),
            ("format-untyped", f'print(f"scaled {{COUNT + {name}.shape[-1]:>4}}")'),
            ("format-untyped-tensor", f'logger.warning("v {{}}".format({name}))'),
        ]
        kind, text = self.pick(forms)
        self.feature(kind)
        lines = [text]
        if kind == "log-list-handler":
            self.list_handler = True
            lines = [f'logger.info("record %s", {name}.sum())', text]
        if kind == "print" and self.chance(0.4):
            target = self.pick(self.rebindable(names))
            lines.append(f"{target}.add_(1.0)" if target not in ("x", "y") or not self.requires_grad else f"{target} = {target} + 1.0")
            self.feature("mutation-after-print")
        return lines

    def statement_guard(self, names, depth, in_loop):
        self.feature("guard")
        name = self.pick(names)
        forms = [
            (f"({name} < -5).any()", 'raise ValueError("too small")'),
            ("not torch.equal(x, y)", 'raise ValueError("x and y differ")'),
            (f"({name}.abs() > 1e6).any()", 'raise RuntimeError("overflow")'),
            ("(x < -5).any()", 'raise ProgramError("custom failure")'),
            ("(x < -5).any()", "raise ValueError"),
            (f"({name} < -5).any()", 'raise ValueError(f"bad sum {x.sum()}")'),
            ("(y < -5).any()", "raise ERROR"),
            ("(y < -5).any()", 'raise make_error("built")'),
        ]
        test, raise_statement = self.pick(forms)
        lines = [f"if {test}:", f"    {raise_statement}"]
        if "ERROR" in raise_statement and "make" not in raise_statement:
            self.feature("raise-instance")
            lines = ['ERROR = ValueError("prebuilt")'] + lines
        if "make_error" in raise_statement:
            self.feature("raise-factory")
            if "def make_error" not in "\n".join(self.helpers):
                self.helpers.append('def make_error(message):\n    return ProgramError(message)')
        return lines

    def statement_inplace(self, names, depth, in_loop):
        name = self.pick(self.rebindable(names))
        kind = self.pick(["inplace-method", "inplace-keyword", "out-keyword"])
        self.feature(kind)
        if kind == "inplace-method":
            return [f"{name}.{self.pick(['add_(0.5)', 'mul_(2.0)', 'sub_(' + self.pick(names) + ')'])}"]
        if kind == "inplace-keyword":
            return [f"{name} = F.relu({name}, inplace=True)"]
        return [self.pick([
            f"torch.tanh({self.pick(names)}, out={name})",
            f"torch.mul({self.pick(names)}, 2.0, out={name})",
        ])]

    def statement_state(self, names, depth, in_loop):
        name = self.pick(names)
        kind = self.pick(["container", "attribute", "dict-state", "global-write"])
        self.feature(kind)
        if kind == "container":
            return [self.pick([f"items.append({name})", f"items.append({name}.sum())", f"{name} = {name} + len(items)"])]
        if kind == "attribute":
            return [self.pick([f"box.t = {name}", "box.n = box.n + 1", f"box.t = {name} * 2.0"])]
        if kind == "dict-state":
            return [self.pick([f'table["k"] = {name}', 'table["n"] = table.get("n", 0) + 1'])]
        self.globals_written.add("COUNT")
        return [self.pick(["COUNT += 1", f"TOTAL.add_({name})", f"HISTORY.append({name})"])]

    def statement_random(self, names, depth, in_loop):
        self.feature("random")
        name = self.pick(self.rebindable(names))
        return [self.pick([
            f"{name} = {name} + torch.randn_like({name}) * 0.1",
            f"{name} = {name} * torch.bernoulli(torch.full_like({name}, 0.5))",
            "torch.rand(1)",
        ])]

    def statement_try(self, names, depth, in_loop):
        form = self.pick(["except", "finally", "except-finally", "helper-except"])
        self.feature(f"try-{form}")
        if form == "helper-except":
            target = self.pick(self.rebindable(names))
            helper = self.helper()
            self.feature("nested-helper-caught")
            lines = ["try:"]
            if self.warm_enabled and self.warm_rng.random() < 0.5:
                # A break inside the ``try``: TorchDynamo runs ``f`` eagerly from there
                # and compiles the helper's frame on its own (or reuses its graph).
                self.feature("helper-caught-after-break")
                self.warm_after_break = True
                lines.append("    torch._dynamo.graph_break()")
                if self.warm_rng.random() < 0.5:
                    helper = self.guarded_helper()
            return lines + [
                f"    {target} = {helper}({target}, {self.pick(names)})",
                f"except {self.pick(['ValueError', 'Exception', 'RuntimeError', '(ValueError, RuntimeError)'])} as error:",
                '    print("caught", type(error).__name__, error)',
                f"    {target} = {target} * 0.0",
            ]
        body = self.indent(self.block(names if depth else list(names), depth + 1, self.rng.randint(1, 3), in_loop))
        lines = ["try:"] + body
        if form in ("except", "except-finally"):
            lines += [
                f"except {self.pick(['ValueError', 'Exception', 'ZeroDivisionError', 'RuntimeError', 'UserWarning'])} as error:",
                '    print("handled", type(error).__name__, str(error)[:40])',
            ]
        if form in ("finally", "except-finally"):
            lines += ["finally:", f'    print("finally", {self.pick(["x.sum()", "len(items)", "COUNT"])})']
            lines += self.finally_read(names)
        return lines

    def finally_read(self, names: list[str]) -> list[str]:
        """Sometimes (a stream of its own) the ``finally`` block also prints a name the
        try body may rebind: a ``return``, ``break`` or ``continue`` in the body reaches
        it too, so the name's value there is the body's."""
        if not self.finally_reads_enabled or self.finally_rng.random() >= 0.5:
            return []
        self.feature("finally-read")
        name = self.finally_rng.choice(names)
        return [f'    print("finally read", {name}.sum())']

    def statement_loop(self, names, depth, in_loop):
        self.feature("loop")
        count = self.rng.randint(1, 3)
        body = self.block(names if depth else list(names), depth + 1, self.rng.randint(1, 3), True)
        return [f"for i in range({count}):"] + self.indent(body)

    def statement_break(self, names, depth, in_loop):
        word = self.pick(["break", "continue"])
        self.feature(word)
        return [f"if {self.condition(names)}:", f"    {word}"]

    def statement_helper(self, names, depth, in_loop):
        target = self.pick(self.rebindable(names))
        self.feature("helper-call")
        return [f"{target} = {self.helper()}({target}, {self.pick(names)})"]

    def statement_closure(self, names, depth, in_loop):
        if depth or self.closure:
            return self.statement_assign(names, depth, in_loop)
        self.closure = True
        self.feature("closure")
        self.feature("nonlocal")
        return [
            "acc = x * 0.0",
            "def bump(t):",
            "    nonlocal acc",
            f"    acc = acc + t{' * 0.5' if self.chance(0.5) else ''}",
            "    return t + 1.0",
            f"if {self.condition(names)}:",
            f"    {self.pick(self.rebindable(names))} = bump({self.pick(names)})",
            'print("acc", acc)' if self.chance(0.5) else "items.append(acc)",
        ]

    def statement_warning_filter(self, names, depth, in_loop):
        self.feature("warning-filter-error")
        guarded = self.chance(0.6)
        inner = [
            "with warnings.catch_warnings():",
            f'    warnings.simplefilter("{self.pick(["error", "error", "ignore"])}")',
            f"    if {self.condition(names)}:",
            '        warnings.warn("filtered")',
            f"    {self.pick(self.rebindable(names))} = {self.expression(names)}",
        ]
        if not guarded:
            return inner
        return ["try:"] + self.indent(inner) + ["except UserWarning as error:", '    print("warning as error", error)']

    def statement_raising(self, names, depth, in_loop):
        self.feature("raising-expression")
        target = self.pick(self.rebindable(names))
        raising = self.pick([
            f"{target} = {target} * (1.0 / len(items))",
            f"{target} = {target} + torch.ones(5)",
            f"{target} = {target}[{self.pick(['0', '7'])}] + {target}",
        ])
        return [f"if {self.condition(names)}:", f"    {raising}"]

    def indent(self, lines: list[str]) -> list[str]:
        return ["    " + line for line in lines]

    def ending(self, names: list[str]) -> list[str]:
        alias = getattr(self, "alias_return", None)
        roll = self.rng.random()
        if alias and roll < 0.5:
            self.feature("return-alias")
            return [f"return {alias}, {alias} is x"]
        if roll < 0.35:
            return [f"return {self.expression(names)}"]
        if roll < 0.5:
            self.feature("return-input")
            return [f"if {self.condition(names)}:", "    return x", "return y"]
        if roll < 0.6:
            self.feature("tuple-return")
            return [f"return {self.expression(names)}, {self.pick(names)}"]
        self.feature("return-branch")
        return [f"if {self.condition(names)}:", f"    return {self.expression(names)}", f"return {self.expression(names)}"]

    def before_call_definition(self, body: list[str]) -> tuple[str | None, list[str]]:
        """``before_call(index)``, which the harness calls before each call of ``f`` (in
        the call's own output settings): from a later call on, the program turns its
        warnings into errors, or prints through a stream whose ``write`` is Python code
        appending to ``WRITTEN``, or shows warnings or a logger's records so, into
        ``BETWEEN_WRITTEN`` (``warnings.showwarning`` replaced; ``sys.stderr`` swapped
        where warnings are shown by the warnings module's own code on every call; a
        handler's stream swapped; the logger's ``warning`` replaced on the logger itself). What a trace decided for the settings it saw must not
        hold for a call made under others; ``f`` starts with what would show it (a
        warning after an in-place write, an output then a read of what was written), and
        may have more of it anywhere. Returns the definition (or None) and ``f``'s body."""
        rng = self.between_rng
        if rng.random() >= 0.08:
            return None, body
        first = rng.choice((1, 2))
        kind = rng.choice(("warnings-error", "stdout-python-stream"))
        if kind == "stdout-python-stream" and self.warning_display_rng.random() < 0.5:
            kind = self.warning_display_rng.choice(("showwarning-python", "stderr-python-stream"))
        elif kind == "stdout-python-stream" and self.log_display_rng.random() < 0.5:
            kind = self.log_display_rng.choice(("log-handler-python-stream", "log-method-replaced"))
        self.feature("between-calls-" + kind)
        every_call = ""
        if kind == "warnings-error":
            change = 'warnings.filterwarnings("error", module=__name__)'
            opening = ["TOTAL.add_(1.0)", 'warnings.warn("between calls")']
        elif kind == "stdout-python-stream":
            self.own_stream = True
            change = "sys.stdout = OWN_STREAM"
            opening = ['print("between calls", x.sum())', "x = x * (1.0 + len(WRITTEN))"]
        else:
            # How much was written is kept in ``box``, observed when the call fails later
            # on too: not by appending to a list (its length is guarded on, so the
            # function would compile again on every call, reading it afresh), nor by an
            # in-place write of a global tensor (a graph input written in place right
            # after the output makes graphmend keep the output's break).
            self.between_calls_definitions = True
            output = 'between_logger.warning("between calls")' if kind.startswith("log") else 'warnings.warn("between calls")'
            opening = [output, "box.n = len(BETWEEN_WRITTEN)", "x = x * (1.0 + len(BETWEEN_WRITTEN))"]
            if kind == "log-handler-python-stream":
                every_call = "    between_logger.propagate = False\n"
                change = "between_logger.handlers[0].setStream(BETWEEN_STREAM)"
            elif kind == "log-method-replaced":
                # As ``mock.patch.object(between_logger, "warning")`` does for a call.
                every_call = '    between_logger.propagate = False\n    vars(between_logger).pop("warning", None)\n'
                change = "between_logger.warning = keep_log_call"
            elif kind == "showwarning-python":
                change = "warnings.showwarning = keep_warning"
            else:
                every_call = "    warnings.showwarning = warnings._showwarning_orig\n"
                change = "sys.stderr = BETWEEN_STREAM"
        declarations = 0
        while declarations < len(body) and body[declarations].startswith("global "):
            declarations += 1
        body = body[:declarations] + opening + body[declarations:]
        return f"def before_call(index):\n{every_call}    if index >= {first}:\n        {change}\n", body

    def program(self) -> Program:
        shape = self.pick([(4,), (4,), (2, 3)])
        names = ["x", "y"]
        body: list[str] = []
        if self.requires_grad:
            self.feature("autograd")
        boundaries = []  # (line, names bound there) between f's top-level statements
        for _ in range(self.rng.randint(3, 8)):
            boundaries.append((len(body), list(names)))
            body += self.statement(names, 0, False)
        boundaries.append((len(body), list(names)))
        constructs = None
        if self.programs_enabled:
            constructs = ProgramConstructs(
                self.seed, shape, self.feature, self.module_tensors_enabled, self.later_kinds_enabled
            )
            body = self.with_program_constructs(constructs, body, boundaries)
        body += self.ending(names)
        if self.globals_written or any("COUNT" in line and "+=" in line for line in body):
            body = ["global COUNT"] + body
            self.feature("global-declaration")
        if self.globals_rebound:
            body = [f"global {', '.join(sorted(self.globals_rebound))}"] + body
        compile_site = self.rng.choices(COMPILE_SITES, weights=[6, 2, 2])[0]
        self.feature(f"compiled-from-{compile_site}")
        compiled_dynamic = self.dynamic_enabled and self.dynamic_rng.random() < 0.3
        if compiled_dynamic:
            self.feature("compiled-dynamic")
        before_call = None
        if self.between_calls_enabled:
            before_call, body = self.before_call_definition(body)
        lines = [HEADER.format(shape=shape)]
        if self.list_handler:
            lines.append("logger.addHandler(ListHandler())\n")
        if self.own_stream:
            lines.append(OWN_STREAM_DEFINITIONS)
        if self.between_calls_definitions:
            lines.append(BETWEEN_CALLS_DEFINITIONS)
        if self.check_calls:
            lines.append("from graphmend_fuzz_checks import torch_compilable_check\n")
        if self.positions:
            lines.append(POSITIONS_DEFINITIONS)
        if self.layouts:
            lines.append(LAYOUT_DEFINITIONS)
        if self.helper_branches:
            lines.append(HELPER_BRANCH_DEFINITIONS)
        if self.merges:
            lines.append(MERGE_DEFINITIONS)
        if self.attribute_definitions is not None:
            lines.append(self.attribute_definitions)
        if any(f.startswith("block-") for f in self.features):
            lines.append("import contextlib\n")
        if self.compile_state_import:
            lines.append("from torch.compiler import is_compiling\n")
        if constructs is not None and constructs.defined:
            lines.append(constructs.definitions())
        lines += [helper + "\n\n" for helper in self.helpers]
        if before_call is not None:
            lines.append(before_call)
        lines.append("def f(x, y, box, items, table):\n" + "\n".join(self.indent(body)) + "\n")
        if compile_site == "module":
            lines.append(f"\n{BACKEND_LINE}\ncompiled_f = torch.compile(f, backend=BACKEND, dynamic={compiled_dynamic})\n")
        source = "\n".join(lines)
        warm_helpers = ()
        helper_names = tuple(h.split("(", 1)[0][len("def "):] for h in self.helpers if h.startswith("def helper")
                             and not h.startswith("def helper_that_may_raise"))
        if self.warm_enabled and helper_names and (self.warm_after_break or self.warm_rng.random() < 0.2):
            self.feature("helpers-compiled-first")
            warm_helpers = helper_names
        caller_catches = compile_site == "other-module" and self.warm_enabled and self.warm_rng.random() < 0.5
        if caller_catches:
            self.feature("caller-in-other-module-catches")
        # Not under autograd: the rows of a leaf that requires grad could not be written
        # in place, and their gradients are the leaf's.
        inputs_share_memory = (
            self.shared_inputs_enabled and not self.requires_grad and self.shared_rng.random() < 0.25
        )
        if inputs_share_memory:
            self.feature("inputs-share-memory")
        calls_from_threads = self.threads_enabled and self.threads_rng.random() < 0.2
        if calls_from_threads:
            self.feature("calls-from-threads")
        transposed_inputs = ()
        if self.transposed_enabled and len(shape) == 2 and not inputs_share_memory and self.transposed_rng.random() < 0.4:
            transposed_inputs = self.transposed_rng.choice((("x",), ("y",), ("x", "y")))
            self.feature("inputs-transposed-" + "-".join(transposed_inputs))
        inputs_are_tracked = self.tracked_enabled and self.tracked_rng.random() < 0.12
        if inputs_are_tracked:
            self.feature("inputs-tracked-subclass")
            source = source.replace("\ndef f(x, y, box, items, table):", TRACKED_DEFINITIONS + "\n\ndef f(x, y, box, items, table):", 1)
        return Program(
            seed=self.seed,
            source=source,
            features=self.features,
            requires_grad=self.requires_grad,
            shape=shape,
            log_level=self.pick([10, 20]),
            compile_site=compile_site,
            warm_helpers=warm_helpers,
            caller_catches=caller_catches,
            inputs_share_memory=inputs_share_memory,
            calls_from_threads=calls_from_threads,
            inputs_are_tracked=inputs_are_tracked,
            transposed_inputs=transposed_inputs,
            compiled_dynamic=compiled_dynamic,
            parameters_require_grad=bool(constructs is not None and constructs.parameters),
        )

    def with_program_constructs(self, constructs, body: list[str], boundaries: list) -> list[str]:
        """``body`` with the statements of the seed's program constructs put between its
        top-level statements, each where the names it reads are bound."""
        placed = []
        for kind in constructs.chosen_kinds():
            line, names = constructs.rng_for(kind).choice(boundaries)
            placed.append((line, constructs.statement(kind, names, self.rebindable(names))))
        for line, statements in sorted(placed, key=lambda item: item[0], reverse=True):
            body = body[:line] + statements + body[line:]
        return body


def generate(seed: int, positions: bool = True, item_checks: bool = True, finally_reads: bool = True,
             layouts: bool = True, merges: bool = True, blocks: bool = True, fusions: bool = True,
             warm: bool = True, shared_inputs: bool = True, threads: bool = True,
             handlers: bool = True, grad_modes: bool = True, attribute_code: bool = True,
             tracked_inputs: bool = False, global_rebinds: bool = True,
             transposed_inputs: bool = True, dynamic_compiles: bool = True,
             helper_branches: bool = True, failing_outputs: bool = True, between_calls: bool = True,
             programs: bool = False, drawn_ranges: bool = False, module_tensors: bool = True,
             later_kinds: bool = False) -> Program:
    """The program of ``seed``; ``positions=False``: as the grammar drew it before the
    positions construct existed (the seeds of earlier long runs; it implies the four
    below False); ``item_checks=False``: before checks of ``.item()`` counts;
    ``finally_reads=False``: before ``finally`` blocks read the try body's names;
    ``layouts=False``: before tensors whose traced layout must match the kernels';
    ``merges=False``: before branches on whether positions are empty;
    ``blocks=False``: before compile-state tests and ``with`` blocks that swallow;
    ``fusions=False``: before output between two layer norms inductor fuses;
    ``warm=False``: before helpers compiled alone first and called after a break;
    ``shared_inputs=False``: before arguments that share memory;
    ``threads=False``: before calls from threads of their own;
    ``handlers=False``: before code run while an exception is in flight;
    ``grad_modes=False``: before statements under a grad mode of their own;
    ``attribute_code=False``: before attribute access that runs the program's code;
    ``global_rebinds=False``: before module globals rebound by ``f``;
    ``transposed_inputs=False``: before arguments laid out transposed;
    ``dynamic_compiles=False``: before programs compiled with ``dynamic=True``;
    ``helper_branches=False``: before positions handed to a helper that branches on
    their count;
    ``failing_outputs=False``: before output calls whose own arguments make them fail;
    ``between_calls=False``: before output settings changed between calls;
    ``programs=True``: with the program constructs around ``f`` (``program_constructs``:
    modules, hooks, mixture-of-experts blocks, parameters and backward, print options,
    rebuilt code objects, compiles of compiled functions, nested guards), off by
    default so that the seeds the tests name keep their programs (the long run turns
    them on);
    ``module_tensors=False``: the program constructs as drawn before modules keeping
    tensors Where decides while tracing (``MODULE_TENSOR_KINDS``: fixed values kept as
    one-element tensors, attributes written back as their own conversion), the seeds
    of earlier long runs;
    ``drawn_ranges=True``: with branches on a comparison of ``torch.rand`` that the
    draw's range may decide (LayerDrop), off by default for the same reason (the long
    run turns them on with the program constructs);
    ``later_kinds=True``: with the program constructs added after the run over seeds
    810000-810225 (``program_constructs.LATER_KINDS``: loops whose frame TorchDynamo
    gives up, a module met at two static sizes), off by default for the same reason;
    ``tracked_inputs=True``: with arguments of a tensor subclass that logs its
    operations, off by default: under torch 2.13 most differences such programs show
    are torch's own failures with ``__torch_function__`` subclasses, which the original
    compiled meets in another form (AOTAutograd's "Multiple dispatch failed" under
    ``aot_eager``, TorchDynamo's "Can't unpack scalar tensors" where the mended program
    gets Python's "iteration over a 0-d tensor", the recompile limit of
    ``__torch_function__`` frames); the rule tests cover what graphmend must do for
    them (``is_plain_tensor``)."""
    return _Generator(
        seed, positions, item_checks and positions, finally_reads and positions, layouts and positions,
        merges and positions, blocks and positions, fusions and positions, warm and positions,
        shared_inputs and positions, threads and positions, handlers and positions, grad_modes and positions,
        attribute_code and positions, tracked_inputs and positions, global_rebinds and positions,
        transposed_inputs and positions, dynamic_compiles and positions, helper_branches and positions,
        failing_outputs and positions, between_calls and positions, programs,
        drawn_ranges=drawn_ranges and positions, module_tensors=module_tensors, later_kinds=later_kinds,
    ).program()
