"""The predicates behind ``reads_plainly``/``writes_plainly``/``is_the_method``
(runtime/attribute_access.py), on real objects: which accesses run the program's code."""

import torch

from graphmend.runtime.attribute_access import (
    _InstanceOf,
    why_not_the_method,
    why_reading_runs_code,
    why_writing_runs_code,
)


class Plain:
    limit = 3

    def __init__(self):
        self.value = 1

    def method(self):
        return self.value


class WithProperty:
    @property
    def value(self):
        return 1


class WithGetattr:
    def __getattr__(self, name):
        return 1


class WithGetattribute:
    def __getattribute__(self, name):
        return object.__getattribute__(self, name)


class WithSetattr:
    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)


class Slotted:
    __slots__ = ("value",)


class Override(Plain):
    def method(self):
        return 2


class Aliasing:
    """transformers' configurations: an alias map in ``__getattribute__`` (same module and name)."""

    attribute_map = {"hidden": "hidden_size"}

    def __init__(self):
        self.hidden_size = 8


def test_plain_reads_of_instance_class_and_module_attributes():
    module = torch.nn.Linear(2, 2)
    module.register_buffer("scale", torch.ones(2))
    assert why_reading_runs_code(Plain(), "value") is None
    assert why_reading_runs_code(Plain(), "limit") is None
    assert why_reading_runs_code(Plain(), "method") is None
    assert why_reading_runs_code(module, "weight") is None
    assert why_reading_runs_code(module, "scale") is None
    assert why_reading_runs_code(module, "training") is None
    assert why_reading_runs_code([], "append") is None
    assert why_reading_runs_code(_InstanceOf(torch.Tensor), "shape") is None
    slotted = Slotted()
    slotted.value = 1
    assert why_reading_runs_code(slotted, "value") is None


def test_reads_that_run_code_or_find_nothing():
    assert "property" in why_reading_runs_code(WithProperty(), "value")
    assert "__getattr__" in why_reading_runs_code(WithGetattr(), "value")
    assert "__getattribute__" in why_reading_runs_code(WithGetattribute(), "value")
    assert "does not exist" in why_reading_runs_code(Plain(), "missing")
    assert "does not exist" in why_reading_runs_code(torch.nn.Linear(2, 2), "missing")
    assert why_reading_runs_code(_InstanceOf(torch.Tensor), "missing") is not None
    subclass = type("Sub", (torch.Tensor,), {})
    assert why_reading_runs_code(_InstanceOf(subclass), "shape") is not None


def test_an_aliasing_getattribute_is_followed_only_for_transformers_configurations():
    Aliasing.__getattribute__ = lambda self, key: object.__getattribute__(self, key)
    assert "__getattribute__" in why_reading_runs_code(Aliasing(), "hidden_size")
    try:
        from transformers import PretrainedConfig
    except ImportError:
        return
    config = PretrainedConfig()
    config.hidden_size = 8
    assert why_reading_runs_code(config, "hidden_size") is None
    assert why_reading_runs_code(config, "not_there") is not None


def test_writes():
    assert why_writing_runs_code(Plain(), "value") is None
    assert why_writing_runs_code(torch.nn.Linear(2, 2), "weight") is None
    assert "__setattr__" in why_writing_runs_code(WithSetattr(), "value")
    assert "property" in why_writing_runs_code(WithProperty(), "value")


def test_the_method_is_the_analysed_function():
    assert why_not_the_method(Plain(), "method", "Plain.method", __name__) is None
    assert why_not_the_method(Override(), "method", "Plain.method", __name__) is not None
    shadowed = Plain()
    shadowed.method = lambda: 3
    assert "instance attribute" in why_not_the_method(shadowed, "method", "Plain.method", __name__)
    assert why_not_the_method(Plain(), "method", "Plain.method", "elsewhere") is not None
