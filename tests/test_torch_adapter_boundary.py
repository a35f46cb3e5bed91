"""Torch's private API is reached only through ``graphmend.torch_adapter``.

Every module of graphmend outside the adapter package is parsed; an import of a
``torch._*`` module (or of any private module or name below ``torch``), or an attribute
chain rooted at the name ``torch`` with a private attribute (``torch._dynamo...``,
``torch._C...``, ``torch.nn.modules.dropout._DropoutNd``), is a failure naming
file:line. Dunders (``torch.__version__``) are not private API. Strings and comments do not count: names a user's source may spell (the
compile entry points graphmend recognises) are text, not uses.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "graphmend"


def _inside_adapter(path: Path, root: Path) -> bool:
    return path == root / "torch_adapter.py" or root / "torch_adapter" in path.parents


def _private(name: str) -> bool:
    # ``torch.__file__``, ``torch.__version__``: a module's own dunders, not private API.
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_module(name: str | None) -> bool:
    parts = (name or "").split(".")
    return parts[0] == "torch" and any(_private(part) for part in parts[1:])


def _chain(node: ast.Attribute) -> list[str] | None:
    """``torch.a._b`` as ``["torch", "a", "_b"]``; None where the chain does not start at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _private_uses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {alias.name}") for alias in node.names if _private_module(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and _private_module(node.module):
                found.append((node.lineno, f"from {node.module} import ..."))
            elif node.level == 0 and (node.module or "").split(".")[0] == "torch":
                found += [
                    (node.lineno, f"from {node.module} import {alias.name}")
                    for alias in node.names if _private(alias.name)
                ]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            # Each use once: at its first private attribute (``torch._C`` of ``torch._C._nn.gelu``).
            chain = _chain(node)
            if chain and chain[0] == "torch" and not any(_private(part) for part in chain[1:-1]):
                found.append((node.lineno, ".".join(chain)))
    return sorted(found)


def private_torch_uses(root: Path = SOURCE) -> list[str]:
    failures = []
    for path in sorted(root.rglob("*.py")):
        if _inside_adapter(path, root):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        failures += [f"{path.relative_to(root.parent)}:{line}: {what}" for line, what in _private_uses(tree)]
    return failures


def test_private_torch_names_only_in_the_adapter():
    failures = private_torch_uses()
    assert not failures, "torch's private API outside graphmend.torch_adapter:\n" + "\n".join(failures)


def test_the_check_finds_each_kind_of_use():
    source = (
        "import torch._dynamo\n"
        "from torch._dynamo.comptime import comptime\n"
        "from torch import _C\n"
        "x = torch._C._nn.gelu\n"
        "@torch._dynamo.disable\n"
        "def f(): pass\n"
        "y = 'torch._dynamo.optimize'  # torch._dynamo in a comment\n"
        "z = torch.compile, torch.__version__, torch.nn.Linear, other._private\n"
        "w = torch.nn.modules.dropout._DropoutNd\n"
        "from torch.utils._pytree import tree_leaves\n"
        "from torch.library import _register_effectful_op\n"
    )
    assert [line for line, _ in _private_uses(ast.parse(source))] == [1, 2, 3, 4, 5, 9, 10, 11]
