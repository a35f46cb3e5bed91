"""``check`` and ``fix`` analyse a file inside a package under its dotted module name.

Without it, relative imports (``from ..utils import logging``) do not resolve and a
``logger = logging.get_logger(__name__)`` bound through them is not recognised, so
``check`` would decline what ``graphmend run --package`` fixes on import.
"""

from __future__ import annotations

from graphmend.cli.check import module_name_for

UTILS_LOGGING = """
import logging as _logging

def get_logger(name=None):
    return _logging.getLogger(name)
"""

MODEL = """
import torch
from ..utils import logging

logger = logging.get_logger(__name__)

def forward(x, use_cache):
    if use_cache:
        logger.warning_once("old cache format")
    return x + 1
"""


def _package(write):
    # Named as transformers is: its ``utils.logging.get_logger`` is a known logger factory.
    for name in (
        "src/transformers/__init__.py",
        "src/transformers/utils/__init__.py",
        "src/transformers/models/__init__.py",
    ):
        write(name, "")
    write("src/transformers/utils/logging.py", UTILS_LOGGING)
    return write("src/transformers/models/model.py", MODEL)


def test_module_name_for_walks_up_the_package(write, tmp_path):
    model = _package(write)
    assert module_name_for(str(model)) == ("transformers.models.model", False)
    assert module_name_for(str(tmp_path / "src/transformers/models/__init__.py")) == (
        "transformers.models",
        True,
    )
    loose = write("script.py", "x = 1\n")
    assert module_name_for(str(loose)) == (None, False)
    odd = write("src/transformers/not-a-name.py", "x = 1\n")
    assert module_name_for(str(odd)) == (None, False)


def test_a_logger_bound_through_a_relative_import_is_fixable(cli, write):
    model = _package(write)
    outcome = cli("check", "--all", model)
    assert (
        ":9:" in outcome.out
        and "LC `logger.warning_once(...)` call (fixed by Defer)" in outcome.out
    )


def test_fix_writes_it(cli, write):
    model = _package(write)
    outcome = cli("fix", "--write", "--all", model)
    assert outcome.code == 0, outcome.err
    text = model.read_text()
    assert '        __graphmend__.log(logger).warning_once("old cache format")\n' in text
