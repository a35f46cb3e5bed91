"""A pytest plugin that both arms load (``-p upstream_shims``): the stored copies of
PyTorch's test files come from other torch versions than the installed one, and import a
few names it lacks. Each gets a stand-in, the same in both arms, so the files collect;
tests that need the real thing fail in both arms alike."""

from __future__ import annotations

import sys
import types
import unittest

import torch
import torch._dynamo.test_case as dynamo_test_case
import torch._dynamo.testing as dynamo_testing
import torch._dynamo.utils as dynamo_utils
from torch.testing._internal import common_utils, inductor_utils


def _identity(function):
    return function


if not hasattr(dynamo_test_case, "TestCaseWithNestedGraphBreaks"):

    class TestCaseWithNestedGraphBreaks(dynamo_test_case.TestCase):
        """Newer files list it before ``LoggingTestCase`` among a class's bases, which an
        alias of ``TestCase`` makes an impossible order; a subclass that turns nested
        graph breaks on for each test, as its name says, collects."""

        def setUp(self):
            super().setUp()
            import torch._dynamo.config as dynamo_config

            self._nested_graph_breaks_before = getattr(dynamo_config, "nested_graph_breaks", False)
            dynamo_config.nested_graph_breaks = True

        def tearDown(self):
            import torch._dynamo.config as dynamo_config

            dynamo_config.nested_graph_breaks = self._nested_graph_breaks_before
            super().tearDown()

    dynamo_test_case.TestCaseWithNestedGraphBreaks = TestCaseWithNestedGraphBreaks

# A decorator of test_functions.py that the installed torch does not have.
if not hasattr(dynamo_testing, "requires_numpy_pytorch_interop"):
    dynamo_testing.requires_numpy_pytorch_interop = _identity

# Translation validation is off by default: the decorator had nothing to disable.
if not hasattr(common_utils, "disable_translation_validation_if_dynamic_shapes"):
    common_utils.disable_translation_validation_if_dynamic_shapes = _identity

# Shapes are static by default, which is what the old decorator required.
if not hasattr(dynamo_testing, "requires_static_shapes"):
    dynamo_testing.requires_static_shapes = _identity


class _MissingCompileProfiler:
    """The compile profiler is gone from the installed torch; the one test that uses it
    fails in both arms alike, with this message."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("torch._dynamo.utils.CompileProfiler is not in this torch")


if not hasattr(dynamo_utils, "CompileProfiler"):
    dynamo_utils.CompileProfiler = _MissingCompileProfiler

if not hasattr(inductor_utils, "HAS_CUDA"):
    inductor_utils.HAS_CUDA = torch.cuda.is_available()

try:
    import functorch._src.config
except ImportError:
    import functorch

    _private = types.ModuleType("functorch._src")
    _private.config = types.ModuleType("functorch._src.config")
    _private.config.use_dynamic_shapes = False
    functorch._src = _private
    sys.modules["functorch._src"] = _private
    sys.modules["functorch._src.config"] = _private.config

# A helper the oldest test_repros.py imports from a sibling test file.
if "test_minifier" not in sys.modules:
    _minifier = types.ModuleType("test_minifier")
    _minifier.requires_cuda = lambda: unittest.skipIf(
        not torch.cuda.is_available(), "requires cuda"
    )
    sys.modules["test_minifier"] = _minifier

# The installed torch calls the guard-manager testing hook with a third argument (the
# guard builder); the hook the sibling utils.py of test_repros.py installs takes two.
try:
    import utils as _dynamo_test_utils
except ImportError:
    _dynamo_test_utils = None
if _dynamo_test_utils is not None and hasattr(_dynamo_test_utils, "install_guard_manager_testing_hook"):
    _install_two_argument_hook = _dynamo_test_utils.install_guard_manager_testing_hook

    def _install_guard_manager_testing_hook(hook):
        def adapted(guard_manager, f_locals, *_rest):
            return hook(guard_manager, f_locals)

        return _install_two_argument_hook(adapted)

    _dynamo_test_utils.install_guard_manager_testing_hook = _install_guard_manager_testing_hook

