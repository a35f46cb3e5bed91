"""Every spelling of compilation is an entry point (issue 16, "Entry points").

Each row is a module; the entry functions and classes it must find. Rows that must
find nothing are named after the reason (``re.compile`` is not ``torch.compile``).
"""

import ast
import textwrap

import pytest

import graphmend
from graphmend.analysis.bindings import ModuleBindings
from graphmend.analysis.entry_points import find_entry_points, method_decorators, model_classes

PRELUDE = "import functools\nimport torch\nimport torch.nn as nn\n"


def entry(source: str, module_name: str = "main", **options):
    tree = ast.parse(PRELUDE + textwrap.dedent(source))
    return find_entry_points(tree, ModuleBindings(tree, module_name), **options)


SPELLINGS = {
    "call": ("def f(x): return x\ng = torch.compile(f)", {"f"}, set()),
    "call_with_model_keyword": ("def f(x): return x\ng = torch.compile(model=f)", {"f"}, set()),
    "decorator": ("@torch.compile\ndef f(x): return x", {"f"}, set()),
    "decorator_factory": ("@torch.compile(backend='eager')\ndef f(x): return x", {"f"}, set()),
    "factory_called_later": ("def f(x): return x\ng = torch.compile(backend='eager')(f)", {"f"}, set()),
    "alias_of_torch_compile": ("c = torch.compile\ndef f(x): return x\ng = c(f)", {"f"}, set()),
    "alias_of_an_alias": ("c = torch.compile\nd = c\n@d\ndef f(x): return x", {"f"}, set()),
    "from_torch_import_compile_as": (
        "from torch import compile as tc\ndef f(x): return x\ng = tc(f)", {"f"}, set()
    ),
    "partial": (
        "c = functools.partial(torch.compile, backend='eager')\n@c\ndef f(x): return x", {"f"}, set()
    ),
    "module_compile_method": ("class M(nn.Module): pass\nm = M()\nm.compile()", set(), {"M"}),
    "module_compile_on_a_new_instance": ("class M(nn.Module): pass\nM().to('cpu').compile()", set(), {"M"}),
    "nn_module_compile_unbound": ("class M(nn.Module): pass\nm = M()\nnn.Module.compile(m)", set(), {"M"}),
    "self_compile_in_a_method": (
        "class M(nn.Module):\n    def setup(self):\n        self.compile()", set(), {"M"}
    ),
    "dynamo_optimize_call": ("def f(x): return x\ng = torch._dynamo.optimize('eager')(f)", {"f"}, set()),
    "dynamo_optimize_decorator": ("@torch._dynamo.optimize('eager')\ndef f(x): return x", {"f"}, set()),
    "dynamo_optimize_bound_first": (
        "opt = torch._dynamo.optimize('eager')\ndef f(x): return x\ng = opt(f)", {"f"}, set()
    ),
    "helper_in_this_module": (
        (
            "def compile_model(m, **kw):\n    return torch.compile(m, **kw)\n"
            "class M(nn.Module): pass\nmodel = compile_model(M())"
        ),
        set(),
        {"M"},
    ),
    "helper_of_a_helper": (
        (
            "def inner(m):\n    return torch.compile(m)\ndef outer(backend, m):\n    return inner(m)\n"
            "def f(x): return x\ng = outer('eager', f)"
        ),
        {"f"},
        set(),
    ),
    "attribute_of_self_a_trainer_compiles": (
        (
            "class M(nn.Module): pass\n"
            "class Trainer:\n"
            "    def __init__(self):\n"
            "        self.model = M()\n"
            "        self.model.to('cpu')\n"
            "        self.model = torch.compile(self.model)\n"
            "    def train(self):\n"
            "        return self.model(1).item()\n"
        ),
        set(),
        {"M"},
    ),
    "attribute_of_self_wrapped_after_compiling": (
        (
            "class M(nn.Module): pass\n"
            "class Trainer:\n"
            "    def setup(self, parallel):\n"
            "        self.net: nn.Module = M().to('cpu')\n"
            "        self.net = torch.compile(self.net)\n"
            "        if parallel:\n"
            "            self.net = nn.DataParallel(self.net)\n"
        ),
        set(),
        {"M"},
    ),
    "helper_as_decorator": (
        "def compiled(fn):\n    return torch.compile(fn, backend='eager')\n@compiled\ndef f(x): return x",
        {"f"},
        set(),
    ),
}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_every_spelling_is_an_entry_point(name):
    source, functions, classes = SPELLINGS[name]
    found = entry(source)
    assert (found.functions, found.classes, found.everything) == (functions, classes, False)


def test_a_helper_parameter_is_not_an_unresolved_target():
    found = entry("def compile_model(m):\n    return torch.compile(m)\n")
    assert found.helpers == {"compile_model": 0} and not found.found


NOT_COMPILATION = {
    "re_compile": "import re\npattern = re.compile('x')",
    "builtin_compile": "code = compile('1', '<s>', 'eval')",
    "torch_compile_factory_never_applied": "c = torch.compile(backend='eager')",
}


@pytest.mark.parametrize("name", sorted(NOT_COMPILATION))
def test_what_is_not_compilation_finds_nothing(name):
    found = entry(NOT_COMPILATION[name])
    assert not found.found and not found.imported


def test_a_target_imported_from_another_module_is_recorded_by_its_qualified_name():
    found = entry("from model import Net\nfrom utils import step\nm = Net()\nc = torch.compile(m)\ns = torch.compile(step)")
    assert found.imported == {"model.Net", "utils.step"} and not found.everything


def test_an_attribute_of_self_holding_an_imported_model_is_that_model():
    found = entry(
        "from model import GPT\n"
        "class Trainer:\n"
        "    def __init__(self, name):\n"
        "        if name:\n"
        "            self.model = GPT(name)\n"
        "        else:\n"
        "            self.model = GPT.from_pretrained('gpt2')\n"
        "        self.model = torch.compile(self.model)\n"
    )
    assert "model.GPT" in found.imported and not found.everything


def test_an_attribute_of_self_the_class_never_resolves_puts_everything_in_scope():
    unassigned = entry("class Trainer:\n    def setup(self):\n        self.model = torch.compile(self.model)\n")
    assert unassigned.everything
    built = entry(
        "def make():\n    pass\n"
        "class Trainer:\n    def setup(self):\n        self.model = make()\n"
        "        self.model = torch.compile(self.model)\n"
    )
    assert built.everything


def test_a_helper_defined_in_another_module_is_known_through_known_helpers():
    source = "from utils import compile_model\nclass M(nn.Module): pass\nmodel = compile_model(M())"
    assert not entry(source).found
    found = entry(source, known_helpers={"utils.compile_model": 0})
    assert found.classes == {"M"}


def test_names_compiled_elsewhere_are_entry_points():
    found = entry("def f(x): return x\nclass M: pass", compiled_elsewhere=["f", "M", "missing"])
    assert (found.functions, found.classes) == ({"f"}, {"M"})


def test_model_classes_are_nn_modules_and_classes_with_forward():
    tree = ast.parse(
        PRELUDE
        + "class A(nn.Module): pass\nclass B(A): pass\nclass C:\n    def forward(self, x): return x\n"
        "class D: pass\nclass E(SomeLibraryModel):\n    def forward(self, x): return x\n"
    )
    assert model_classes(tree, ModuleBindings(tree, "m")) == {"A", "B", "C", "E"}


MODEL_ONLY = """
import torch


def helper(x):
    print("helper")
    return x


def unrelated(x):
    print("unrelated")
    return x


class Model(torch.nn.Module):
    def forward(self, x):
        return helper(x)
"""


def test_entry_scope_without_a_compile_call_mends_model_code_and_what_it_reaches():
    result = graphmend.mend_module_source(MODEL_ONLY, scope="entry")
    assert {f.function for f in result.findings} == {"helper"}
    assert {f.function for f in graphmend.mend_module_source(MODEL_ONLY).findings} == {"helper", "unrelated"}


# transformers 4.52.4's ``dynamic_rope_update``: put on Phi-3's rotary embedding's
# ``forward`` in another file; its wrapper holds the LongRoPE branch that breaks.
METHOD_DECORATOR = """
import functools
import torch


def dynamic_update(rope_forward):
    def update(self, position_ids):
        if torch.max(position_ids) + 1 > self.limit:
            print("long")

    @functools.wraps(rope_forward)
    def wrapper(self, x, position_ids):
        update(self, position_ids)
        return rope_forward(self, x, position_ids)

    return wrapper


def unrelated(x):
    print("unrelated")
    return x
"""

NOT_METHOD_DECORATORS = {
    "wrapper_without_self": "def d(f):\n    def w(x):\n        return f(x)\n    return w\n",
    "wrapper_not_returned": "def d(f):\n    def w(self, x):\n        return f(self, x)\n    return f\n",
    "wrapper_not_calling_the_decorated": "def d(f):\n    def w(self, x):\n        return x\n    return w\n",
    "no_parameter": "def d():\n    def w(self, x):\n        return x\n    return w\n",
}


def test_method_decorators_wrap_a_method_and_return_the_wrapper():
    tree = ast.parse(METHOD_DECORATOR)
    assert method_decorators(tree) == {"dynamic_update"}


@pytest.mark.parametrize("name", NOT_METHOD_DECORATORS)
def test_not_a_method_decorator(name):
    assert method_decorators(ast.parse(NOT_METHOD_DECORATORS[name])) == set()


def test_entry_scope_takes_in_a_method_decorator_and_what_its_wrapper_reaches():
    result = graphmend.mend_module_source(METHOD_DECORATOR, scope="entry")
    assert {f.function for f in result.findings} == {"dynamic_update.<locals>.update"}
