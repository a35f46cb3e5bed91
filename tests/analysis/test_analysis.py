"""The analysis core: bindings, entry points, reaching definitions, data dependence, purity."""

import ast
import textwrap

import pytest

from graphmend.analysis.bindings import ModuleBindings
from graphmend.analysis.entry_points import find_entry_points, reachable_functions
from graphmend.analysis.purity import PurityAnalysis
from graphmend.analysis.scopes import iter_functions
from graphmend.analysis.tensor_values import DataDependence


def parse(source: str):
    tree = ast.parse(textwrap.dedent(source))
    return tree, ModuleBindings(tree, "transformers.models.t5.modeling_t5")


def branch_dependence(source: str) -> list[bool]:
    """For each ``if`` in function ``f``: is its test data-dependent?"""
    tree, bindings = parse(source)
    facts = next(f for f in iter_functions(tree, bindings) if f.name == "f")
    data = DataDependence(facts)
    return [
        data.is_data_dependent(node.test, facts.node_for(node))
        for node in ast.walk(facts.function)
        if isinstance(node, ast.If)
    ]


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import torch\ndef f(x):\n    if x.sum() > 0:\n        pass", [True]),
        ("import torch\ndef f(x):\n    s = torch.max(x) + 1\n    if s > 3:\n        pass", [True]),
        # Parameters, shapes, dtypes, hasattr and flags are static.
        ("def f(self, x, flag):\n    if flag and hasattr(self, 'a') and x.shape[0] > 2 and x.dtype == 1:\n        pass", [False]),
        # The last definition kills the earlier one...
        ("def f(x):\n    y = x.sum()\n    y = 3\n    if y > 0:\n        pass", [False]),
        # ...but an earlier definition reaching through a loop's back edge still counts.
        ("def f(x):\n    y = 3\n    for i in range(2):\n        if y > 0:\n            pass\n        y = x.sum()", [True]),
        # One of two reaching definitions is data-dependent.
        ("def f(x, c):\n    if c:\n        y = x.sum()\n    else:\n        y = 1\n    if y > 0:\n        pass", [False, True]),
        # Augmented assignment propagates dependence.
        ("def f(x):\n    n = 0\n    n += x.max()\n    if n:\n        pass", [True]),
        # A builtin called with the same name as a tensor method is not a tensor value.
        ("import math\ndef f(x):\n    if math.floor(2.5) > 1:\n        pass", [False]),
        # Which object a name holds is static, even a name a tensor value reaches
        # (qwen2-audio's `if labels is not None:` after labels came from merged rows)...
        ("def f(x, y):\n    y = None if y is None else y * x.sum()\n    if y is not None:\n        pass", [False]),
        ("def f(x, y):\n    y = x.sum()\n    if y is x or self.cache is None:\n        pass", [False]),
        # ...but an operand that computes may read tensor values.
        ("def f(x):\n    if bool(x.sum()) is True:\n        pass", [True]),
    ],
)
def test_data_dependence_is_flow_sensitive(source, expected):
    assert branch_dependence(source) == expected


def test_bindings_resolve_aliases_and_detect_rebinding():
    tree, bindings = parse(
        """
        import torch as T
        import torch.nn
        from torch import compile as compile_fn
        import logging
        from ...utils import logging as hf_logging
        logger = logging.getLogger(__name__)
        hf = hf_logging.get_logger(__name__)
        twice = logging.getLogger("a")
        twice = logging.getLogger("b")
        def rebinds():
            global print
            print = None
        """
    )
    assert bindings.qualified_name(ast.parse("T.equal", mode="eval").body) == "torch.equal"
    assert bindings.qualified_name(ast.parse("compile_fn", mode="eval").body) == "torch.compile"
    assert bindings.qualified_name(ast.parse("torch.nn.Linear", mode="eval").body) == "torch.nn.Linear"
    assert bindings.loggers == {"logger", "hf"}
    assert not bindings.is_unbound_builtin("print")
    assert bindings.is_unbound_builtin("len")


@pytest.mark.parametrize(
    "source, functions, classes",
    [
        ("import torch\n@torch.compile\ndef f(x):\n    return x", {"f"}, set()),
        ("import torch\n@torch.compile(backend='eager')\ndef f(x):\n    return x", {"f"}, set()),
        ("import torch as T\ndef f(x):\n    return x\ng = T.compile(f)", {"f"}, set()),
        ("from torch import compile\ndef f(x):\n    return x\ng = compile(f, fullgraph=True)", {"f"}, set()),
        ("import torch\nclass M(torch.nn.Module):\n    pass\nm = M()\nc = torch.compile(m)", set(), {"M"}),
        ("import torch\nclass M(torch.nn.Module):\n    pass\nm = M().eval()\nm.compile()", set(), {"M"}),
    ],
)
def test_entry_points_in_every_spelling(source, functions, classes):
    tree, bindings = parse(source)
    found = find_entry_points(tree, bindings)
    assert found.functions == functions and found.classes == classes and not found.everything


def test_reachability_follows_calls_and_instantiated_classes():
    tree, bindings = parse(
        """
        import torch
        def helper(x):
            return x
        def unrelated(x):
            return x
        class Block(torch.nn.Module):
            def forward(self, x):
                return helper(x)
        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()
            def forward(self, x):
                return self.block(x)
        compiled = torch.compile(Model())
        """
    )
    reached = reachable_functions(tree, find_entry_points(tree, bindings))
    assert {node.name for node in reached} == {"helper", "forward"}
    # both forwards: Block's is reached through what Model's constructor builds
    assert len([node for node in reached if node.name == "forward"]) == 2


def test_reachability_leaves_out_what_runs_when_a_model_is_built():
    """Issue 17 (check's precision): a compiled model's constructor and its classmethods
    (``from_pretrained``) run when it is built or loaded, never under compile; a class
    that compiled code builds by calling it brings its constructor."""
    tree, bindings = parse(
        """
        import torch
        class Output:
            def __init__(self, value):
                print("built")
                self.value = value
        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                print("constructing")
            @classmethod
            def from_pretrained(cls, path):
                print("loading")
                return cls()
            def forward(self, x):
                if isinstance(x, Output):
                    x = x.value
                return Output(x)
        compiled = torch.compile(Model())
        """
    )
    reached = reachable_functions(tree, find_entry_points(tree, bindings))
    owners = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            owners.update({id(item): node.name for item in node.body})
    assert sorted((owners[id(node)], node.name) for node in reached) == [
        ("Model", "forward"), ("Output", "__init__"),
    ]


def test_unresolvable_compile_target_puts_everything_in_scope():
    tree, bindings = parse("import torch\ndef make():\n    pass\nc = torch.compile(make())")
    assert find_entry_points(tree, bindings).everything


@pytest.mark.parametrize(
    "body, pure",
    [
        ("def g(x):\n    y = torch.relu(x) * 2\n    return math.sqrt(2) * y", True),
        ("def g(x):\n    print(x)\n    return x", False),
        ("def g(x):\n    if x is None:\n        raise ValueError('x')\n    return x", False),
        ("def g(self, x):\n    self.cache = x\n    return x", False),
        ("def g(x):\n    return torch.rand(3) + x", False),
        ("def g(x):\n    return unknown_function(x)", False),
        ("def g(x):\n    return x.add_(1)", False),
        ("def g(x):\n    return h(x)\ndef h(x):\n    return x * 3", True),
    ],
)
def test_purity_unknown_means_impure(body, pure):
    tree, bindings = parse("import math\nimport torch\n" + body)
    purity = PurityAnalysis(tree, bindings)
    assert (purity.function_impurity(purity.functions["g"]) is None) is pure


def test_purity_with_empty_kwargs_allows_the_kwargs_validation_raise():
    tree, bindings = parse(
        "def g(config, seq_len=None, **rope_kwargs):\n"
        "    if len(rope_kwargs) > 0:\n        raise ValueError('unexpected')\n    return config"
    )
    purity = PurityAnalysis(tree, bindings)
    function = purity.functions["g"]
    assert purity.function_impurity(function) is not None
    assert purity.function_impurity(function, calling_keywords=("seq_len",)) is None
    assert purity.function_impurity(function, calling_keywords=("other",)) is not None


ORDER_SOURCE = """
import torch
def f(x):
    a = 0
    b = 0
    c = 0
    for i in range(3):
        a = b
        b = a + c
        c = x.sum()
    if b > 0:
        pass
    if a > 0:
        pass
"""


def test_dependence_does_not_depend_on_the_order_of_questions():
    """Issue 17: a definition's answer computed while a cycle was cut (``a = b`` while
    ``b = a + c`` was being asked about) was cached as not data-dependent, so whether
    ``if a > 0`` was reported depended on which statement was asked first."""
    tree, bindings = parse(ORDER_SOURCE)
    facts = next(f for f in iter_functions(tree, bindings) if f.name == "f")
    branches = [node for node in ast.walk(facts.function) if isinstance(node, ast.If)]
    forward = DataDependence(facts)
    in_order = [forward.is_data_dependent(node.test, facts.node_for(node)) for node in branches]
    backward = DataDependence(facts)
    reversed_order = [backward.is_data_dependent(node.test, facts.node_for(node)) for node in reversed(branches)]
    assert in_order == [True, True]
    assert reversed_order == [True, True]


@pytest.mark.parametrize(
    "jump",
    ["return x", "raise ValueError()", "y = x.undefined_attribute", "break", "continue"],
)
def test_a_definition_in_try_reaches_its_finally_past_any_jump(jump):
    """A ``finally`` block runs after the try body leaves it by any jump (or an
    exception), so a binding made before the jump reaches the reads in ``finally``:
    Where selected a branch's name only when a read may see it, and a read in
    ``finally`` after a ``return`` was missed (the compiled form kept the earlier value)."""
    from graphmend.analysis.cfg import ControlFlowGraph
    from graphmend.analysis.reaching import ReachingDefinitions

    source = textwrap.dedent(
        f"""
        def f(x):
            for step in range(2):
                h = 1
                try:
                    h = 2
                    {jump}
                finally:
                    print(h)
        """
    )
    function = ast.parse(source).body[0]
    graph = ControlFlowGraph(function)
    reaching = ReachingDefinitions(graph)
    loop = function.body[0]
    try_statement = loop.body[1]
    printed = graph.node_of[try_statement.finalbody[0]]
    values = {d.value.value for d in reaching.reaching(printed, "h") if d.value is not None}
    assert 2 in values


@pytest.mark.parametrize(
    "block",
    [
        # a context manager may swallow an exception from the middle of its body
        "with contextlib.suppress(RuntimeError):\n        h = 2\n        helper()\n        h = 3",
        # an exception the inner handlers do not take goes on to the outer ones
        "try:\n        try:\n            h = 2\n            helper()\n            h = 3\n"
        "        except KeyError:\n            return x\n    except RuntimeError:\n        pass",
        # inside a try, a `with` that does not swallow the exception passes it on
        "try:\n        with open_thing():\n            h = 2\n            helper()\n            h = 3\n"
        "    except RuntimeError:\n        pass",
    ],
    ids=["with-swallows", "nested-try", "with-in-try"],
)
def test_a_binding_before_a_raise_mid_block_reaches_the_code_after_it(block):
    """A statement in the middle of a ``with`` (or of an inner ``try``) may raise; the
    code after the block then sees the bindings made before it (``h = 2``), not only
    those of the whole block or of none of it."""
    from graphmend.analysis.cfg import ControlFlowGraph
    from graphmend.analysis.reaching import ReachingDefinitions

    source = f"def f(x):\n    h = 1\n    {block}\n    print(h)\n"
    function = ast.parse(source).body[0]
    graph = ControlFlowGraph(function)
    reaching = ReachingDefinitions(graph)
    printed = graph.node_of[function.body[-1]]
    values = {d.value.value for d in reaching.reaching(printed, "h") if d.value is not None}
    assert values == {1, 2, 3}
