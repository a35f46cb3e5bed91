"""A seeded generator of small programs ``def f(x, y): ...`` for differential testing.

Each program mixes elementwise arithmetic, data-dependent branches, output calls
(print / logging / warnings), validation guards, in-place mutation after output,
fixed-range loops, and a few constructs that graphmend must leave alone. The
generator keeps a model of which constructs graphmend can fix, so a test can
demand zero graph breaks after mending when every construct is fixable.

The model (mirrors the rules' documented legality conditions):

* [Where] a data-dependent ``if`` is fixable when both arms only assign safe
  elementwise expressions (``+ - *``, ``torch.relu/sigmoid/tanh``, ``.abs()``, pure
  module functions) to names that are bound on every path, or both arms return one
  tensor each. Division, an impure call, an in-place call or augmented assignment
  (``h += e`` is in place on a tensor), a print in an arm, an ``and``/``or``
  condition, ``.item()`` or tuple-valued returns are not.
* [Trap] ``if <tensor condition>: raise E("constant")`` is fixable; a message that
  formats a tensor value, or a condition calling ``.item()`` or using ``or``, is not.
* [Defer] print / logger / warnings.warn calls are fixable unless they format a
  tensor value (f-string, ``.item()``), pass a caller-dependent keyword, or a
  fixable (lowered) guard follows them in program order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

CONSTANTS = ("0.5", "2.0", "1.5", "0.25", "3.0")
ELEMENTWISE_FUNCTIONS = ("torch.relu", "torch.sigmoid", "torch.tanh")
BINARY_OPERATORS = ("+", "-", "*")
PROGRAM_EXCEPTION = "ProgramError"


@dataclass
class Program:
    seed: int
    source: str
    fixable: bool
    unfixable: list[str] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    log_level: int = 10
    shape: tuple = (4,)

    def describe(self) -> str:
        verdict = "fixable" if self.fixable else "unfixable: " + "; ".join(self.unfixable)
        return f"seed {self.seed} ({verdict})\n{self.source}"


class _Generator:
    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.lines: list[str] = []
        self.tensors = ["x", "y"]  # names bound to tensors on every path
        self.counter = 0
        self.unfixable: list[str] = []
        self.features: set[str] = set()
        # program order of top-level effects and guards, for Defer's no-trap-after rule:
        # ("effect", fixable_by_itself, description) or ("trap", lowered)
        self.order: list[tuple] = []
        self.needs_record = False
        self.needs_scale = False
        self.needs_exception = False

    # helpers ---------------------------------------------------------------------

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, options):
        return self.rng.choice(list(options))

    def pick_form(self, forms, unfixable_share: float = 0.12):
        """A fixable form most of the time; the last field of each form says which."""
        wanted = not self.chance(unfixable_share)
        candidates = [form for form in forms if form[-1] == wanted] or list(forms)
        return self.pick(candidates)

    def not_fixable(self, why: str) -> None:
        self.unfixable.append(why)

    def emit(self, indent: int, text: str) -> None:
        for line in text.split("\n"):
            self.lines.append("    " * indent + line)

    def fresh(self) -> str:
        self.counter += 1
        return f"h{self.counter}"

    def intermediates(self) -> list[str]:
        return [t for t in self.tensors if t not in ("x", "y")]

    def tensor_expression(self, depth: int = 0, names=None) -> str:
        """A safe elementwise expression, never a bare name (no aliasing)."""
        names = names or self.tensors
        roll = self.rng.random()
        if depth >= 2 or (depth > 0 and roll < 0.35):
            leaf = self.pick(names)
            return f"{leaf}.abs()" if self.chance(0.15) else leaf
        if roll < 0.55:
            left = self.tensor_expression(depth + 1, names)
            right = self.pick(CONSTANTS) if self.chance(0.35) else self.tensor_expression(depth + 1, names)
            operator = self.pick(BINARY_OPERATORS)
            return f"({left} {operator} {right})" if depth else f"{left} {operator} {right}"
        if roll < 0.85:
            return f"{self.pick(ELEMENTWISE_FUNCTIONS)}({self.tensor_expression(depth + 1, names)})"
        leaf = self.pick(names)
        return f"{leaf}.abs() * {self.pick(CONSTANTS)}"

    def condition(self) -> str:
        options = [
            "x.sum() > 0",
            "y.max() > 0.5",
            "not (x > 0).all()",
            f"{self.pick(self.tensors)}.mean() < 0",
            f"({self.pick(self.tensors)} > 1).any()",
        ]
        return self.pick(options)

    # statements ------------------------------------------------------------------

    def assignment(self, indent: int) -> None:
        name = self.fresh()
        self.emit(indent, f"{name} = {self.tensor_expression()}")
        self.tensors.append(name)

    def static_branch(self, indent: int) -> None:
        """A branch on a static fact: no graph break, nothing to rewrite."""
        target = self.pick(self.intermediates() or ["x"])
        if target in ("x", "y"):
            target = self.fresh()
            self.emit(indent, f"{target} = {self.tensor_expression()}")
            self.tensors.append(target)
        test = self.pick(["x.shape[0] > 2", "x.dim() == 1", "y.numel() >= 4"])
        self.emit(indent, f"if {test}:\n    {target} = {self.tensor_expression()}")
        self.features.add("static-branch")

    def arm_statement(self, target: str, names: list[str], broken: str | None) -> str:
        if broken == "division":
            return f"{target} = {self.tensor_expression(1, names)} / ({self.pick(names)}.abs() + 1.0)"
        if broken == "impure":
            self.needs_record = True
            return f"{target} = record({self.tensor_expression(1, names)})"
        if self.chance(0.12):
            self.needs_scale = True
            return f"{target} = scale({self.tensor_expression(1, names)})"
        if self.chance(0.15) and target in names:
            return f"{target} {self.pick(['+=', '-=', '*='])} {self.tensor_expression(1, names)}"
        return f"{target} = {self.tensor_expression(0, names)}"

    def where_branch(self, indent: int, allow_break: bool = True) -> None:
        """A data-dependent branch whose arms assign names."""
        condition = self.condition()
        broken = None
        if allow_break and self.chance(0.2):
            broken = self.pick(["division", "impure", "inplace", "print", "boolop", "item"])
        if broken == "boolop":
            condition = f"{self.condition()} and {self.condition()}"
        elif broken == "item":
            condition = f"{self.pick(self.tensors)}.sum().item() > 0"
        has_else = self.chance(0.7)
        existing = self.intermediates() or []
        if has_else:
            new_names = [self.fresh() for _ in range(self.rng.randint(0 if existing else 1, 2))]
            targets = new_names + self.rng.sample(existing, min(len(existing), self.rng.randint(0, 2)))
            if not targets:
                new_names = [self.fresh()]
                targets = new_names
        else:
            if not existing:
                name = self.fresh()
                self.emit(indent, f"{name} = {self.tensor_expression()}")
                self.tensors.append(name)
                existing = [name]
            new_names = []
            targets = self.rng.sample(existing, min(len(existing), self.rng.randint(1, 2)))
            if self.chance(0.25):
                targets = targets + ["x"]  # rebinding an argument name
        arms = []
        for arm_index in range(2 if has_else else 1):
            names = list(self.tensors)
            body = []
            arm_targets = list(targets)
            if has_else and not new_names and len(arm_targets) > 1 and self.chance(0.3):
                # each arm assigns a different, already bound name
                arm_targets = [arm_targets[arm_index % len(arm_targets)]]
            for target in arm_targets:
                arm_broken = broken if broken in ("division", "impure") and not body else None
                body.append(self.arm_statement(target, names, arm_broken))
                if target not in names:
                    names.append(target)
            if broken == "inplace" and arm_index == 0:
                body.insert(0, f"{self.pick(self.intermediates() or ['x'])}.add_(1.0)")
            if broken == "print" and arm_index == 0:
                body.append('print("taken")')
            arms.append(body)
        self.emit(indent, f"if {condition}:")
        self.emit(indent + 1, "\n".join(arms[0]))
        if has_else:
            self.emit(indent, "else:")
            self.emit(indent + 1, "\n".join(arms[1]))
        if any(operator in statement for arm in arms for statement in arm for operator in ("+=", "-=", "*=")):
            # ``h += e`` calls ``__iadd__``, in place on a tensor: not run on both paths
            self.not_fixable("augmented assignment in a branch arm")
            self.features.add("augmented-assignment-in-arm")
        self.tensors.extend(n for n in new_names if n not in self.tensors)
        if "x" in targets and not has_else:
            self.features.add("rebinds-argument")
        self.features.add("where")
        if broken:
            self.features.add(f"where-declined-{broken}")
            self.not_fixable(f"branch with {broken}")
        if broken == "inplace":
            self.features.add("inplace-in-arm")

    def effect(self, indent: int, in_loop: bool = False, kind: str | None = None) -> None:
        kind = kind or self.pick(["print", "print", "log", "warn"])
        tensor = self.pick(self.tensors)
        other = self.pick(self.tensors)
        fixable = True
        if kind == "print":
            forms = [
                (f'print("v", {tensor})', True),
                ('print("checkpoint")', True),
                (f'print("pair", {tensor}, {other}, sep=" | ")', True),
                (f'print("sum", {tensor}.sum(), end=";\\n")', True),
                (f'print("shape", {tensor}.shape)', True),
                (f'print("list", [{tensor}, {other}])', True),
                (f'print(f"v {{{tensor}}}")', False),
                (f'print("s", {tensor}.sum().item())', False),
            ]
            if in_loop:
                forms.append((f'print(f"step {{i}}", {tensor})', True))
            text, fixable = self.pick_form(forms)
        elif kind == "log":
            forms = [
                (f'logger.info("val %s", {tensor})', True),
                ('logger.warning("careful")', True),
                (f'logger.debug("dbg %s %s", {tensor}, {other})', True),
                ('logger.info("n=%d", 3)', True),
                (f'logger.error("err %s", {tensor}.sum())', True),
                (f'logger.info("v %s", {tensor}.sum().item())', False),
                (f'logger.info(f"v {{{tensor}}}")', False),
                ('logger.warning("with stack", stacklevel=1)', False),
            ]
            text, fixable = self.pick_form(forms)
            self.features.add("log")
        else:
            forms = [
                ('warnings.warn("careful")', True),
                ('warnings.warn("deprecated path", DeprecationWarning)', True),
                ('warnings.warn("odd values", category=RuntimeWarning)', True),
                ('warnings.warn("explicit level", UserWarning, stacklevel=1)', True),
                (f'warnings.warn(f"bad {{{tensor}.sum()}}")', False),
            ]
            text, fixable = self.pick_form(forms)
            self.features.add("warn")
        self.emit(indent, text)
        self.features.add(kind)
        if not fixable:
            self.not_fixable(f"output call `{text}`")
        self.order.append(("effect", fixable, text))
        if kind == "print" and not in_loop and self.chance(0.5):
            # mutate after printing: the replayed print must show the value at the call
            candidates = self.intermediates() or []
            if self.chance(0.15):
                candidates = candidates + ["x"]
            if candidates:
                target = self.pick(candidates)
                self.emit(indent, f"{target}.{self.pick(['add_(1.0)', 'mul_(2.0)', 'neg_()'])}")
                self.features.add("mutation-after-print")

    def guard(self, indent: int) -> None:
        tensor = self.pick(self.tensors)
        forms = [
            ("if not torch.equal(x, y):", 'raise ValueError("x and y differ")', True),
            ("if (x < -5).any():", 'raise RuntimeError("too small")', True),
            ("if not (y > -5).all():", 'raise ValueError("y out of range")', True),
            (f"if ({tensor}.abs() > 1e6).any():", 'raise ValueError("overflow")', True),
            ("if not torch.equal(x, y):", "raise ValueError", True),
            ("if (x < -5).any():", f'raise {PROGRAM_EXCEPTION}("custom failure")', True),
            ("if (x < -5).any():", 'raise ValueError(f"bad sum {x.sum()}")', False),
            ("if x.min().item() < -5:", 'raise RuntimeError("too small")', False),
            ("if (x < -5).any() or (y < -5).any():", 'raise RuntimeError("either too small")', False),
        ]
        test, raise_statement, fixable = self.pick_form(forms)
        if PROGRAM_EXCEPTION in raise_statement:
            self.needs_exception = True
        self.emit(indent, f"{test}\n    {raise_statement}")
        self.features.add("guard")
        if not fixable:
            self.not_fixable(f"guard `{test} {raise_statement}`")
        self.order.append(("trap", fixable))

    def loop(self, indent: int) -> None:
        count = self.rng.randint(2, 3)
        if not self.intermediates():
            self.assignment(indent)
        self.emit(indent, f"for i in range({count}):")
        for _ in range(self.rng.randint(1, 3)):
            roll = self.rng.random()
            if roll < 0.45:
                target = self.pick(self.intermediates())
                self.emit(indent + 1, f"{target} = {self.pick(ELEMENTWISE_FUNCTIONS)}({target}) * 0.5 + {self.pick(['x', 'y'])}")
            elif roll < 0.7:
                self.effect(indent + 1, in_loop=True, kind=self.pick(["print", "print", "log", "warn"]))
            else:
                self.where_branch_in_loop(indent + 1)
        self.features.add("loop")

    def where_branch_in_loop(self, indent: int) -> None:
        target = self.pick(self.intermediates())
        condition = self.condition()
        self.emit(
            indent,
            f"if {condition}:\n    {target} = {target} * 0.5 + 1.0\nelse:\n    {target} = {self.tensor_expression(1)} - 0.5",
        )
        self.features.add("where-in-loop")

    def item_use(self, indent: int) -> None:
        name = self.fresh()
        source = self.pick(self.tensors)
        self.emit(indent, f"s = {source}.sum().item()\n{name} = {self.pick(self.tensors)} * s")
        self.tensors.append(name)
        self.not_fixable("`.item()`")
        self.features.add("item")

    def ending(self, indent: int) -> None:
        roll = self.rng.random()
        if roll < 0.45:
            self.emit(indent, f"return {self.tensor_expression()}")
        elif roll < 0.6:
            first, _ = self.pick(self.tensors), self.pick(self.tensors)  # two draws: keeps the seeds' programs
            self.emit(indent, f"return {first} * 1.0, {self.tensor_expression()}")
            self.features.add("tuple-return")
        else:
            condition = self.condition()
            broken = self.pick([None] * 6 + ["division", "tuple"])
            first = self.tensor_expression()
            second = self.tensor_expression()
            if broken == "division":
                first = f"{self.tensor_expression(1)} / ({self.pick(self.tensors)}.abs() + 1.0)"
                self.not_fixable("returning branch with division")
            elif broken == "tuple":
                first = f"({self.tensor_expression(1)}, {self.tensor_expression(1)})"
                second = f"({self.tensor_expression(1)}, {self.tensor_expression(1)})"
                self.not_fixable("returning branch with tuples")
            if self.chance(0.5):
                self.emit(indent, f"if {condition}:\n    return {first}\nreturn {second}")
            else:
                self.emit(indent, f"if {condition}:\n    return {first}\nelse:\n    return {second}")
            self.features.add("where-return")

    # whole program ---------------------------------------------------------------

    def body(self) -> None:
        indent = 1
        if self.chance(0.45):
            for _ in range(self.rng.randint(1, 2)):
                self.guard(indent)
        weights = [
            ("assign", 4), ("where", 4), ("effect", 4), ("guard", 0.6), ("loop", 2),
            ("item", 0.25), ("static", 0.6),
        ]
        kinds = [k for k, _ in weights]
        for _ in range(self.rng.randint(3, 7)):
            kind = self.rng.choices(kinds, weights=[w for _, w in weights])[0]
            if kind == "assign":
                self.assignment(indent)
            elif kind == "where":
                self.where_branch(indent)
            elif kind == "effect":
                self.effect(indent)
            elif kind == "guard":
                self.guard(indent)
            elif kind == "loop":
                self.loop(indent)
            elif kind == "item":
                self.item_use(indent)
            else:
                self.static_branch(indent)
        self.ending(indent)
        lowered_after = False
        for entry in reversed(self.order):
            if entry[0] == "trap":
                lowered_after = lowered_after or entry[1]
            elif entry[1] and lowered_after:
                self.not_fixable(f"output `{entry[2]}` before a lowered guard")

    def program(self) -> Program:
        self.body()
        header = ["import logging", "import warnings", "", "import torch", "",
                  "logger = logging.getLogger(__name__)", ""]
        if self.needs_exception:
            header += [f"class {PROGRAM_EXCEPTION}(Exception):", "    pass", ""]
        if self.needs_record:
            header += ["CALLS = []", "", "def record(t):", "    CALLS.append(1)", "    return t + 1.0", ""]
        if self.needs_scale:
            header += ["def scale(t):", "    return t * 2.0 + 1.0", ""]
        source = "\n".join(header + ["", "def f(x, y):"] + self.lines) + "\n"
        shape = self.pick([(4,), (2, 3), (3,)])
        return Program(
            seed=self.seed,
            source=source,
            fixable=not self.unfixable,
            unfixable=self.unfixable,
            features=self.features,
            log_level=self.pick([10, 20]),
            shape=shape,
        )


def generate(seed: int) -> Program:
    return _Generator(seed).program()
