"""``graphmend check``: output lines, summary, JSON, exit codes, settings, bad input."""

from __future__ import annotations

import json
import os
import time

import pytest

import graphmend.cli.check

DECLINED_MODULE = """\
import torch
items = []


@torch.compile
def f(x):
    if x.sum() > 0:
        items.append(x)
    return x
"""


def test_one_line_per_finding_then_a_summary(cli, write, compiled_module):
    write("model.py", compiled_module)
    result = cli("check", "model.py")
    assert result.code == 1
    assert result.out.splitlines() == [
        "model.py:6:5: LC `print(...)` call (fixed by Defer)",
        "model.py:7:5: DC data-dependent branch `if x.sum() > 0:` (fixed by Where)",
        (
            "model.py:11:9: TI `y.sum().item()` copies a tensor value to Python "
            "(not fixable: the value leaves the graph; no source rewrite keeps it inside)"
        ),
        "Found 3 break candidates in 1 file (2 fixable, 1 not fixable); 1 file checked.",
    ]
    assert result.err == ""


def test_a_declined_rewrite_says_why(cli, write):
    write("model.py", DECLINED_MODULE)
    result = cli("check", "model.py")
    assert result.code == 1
    assert (
        "model.py:7:5: DC data-dependent branch `if x.sum() > 0:` (Where declined [W106 setup_statement_runs_on_both_paths]: line 8: " in result.out
    )
    assert "(0 fixable, 1 declined, 0 not fixable)" in result.out


def test_nothing_found_exits_0(cli, write):
    write("clean.py", "import torch\n\n@torch.compile\ndef f(x):\n    return x + 1\n")
    result = cli("check", "clean.py")
    assert (result.code, result.out) == (0, "No break candidates found; 1 file checked.\n")


def test_entry_points_only_unless_all(cli, write, library_module):
    write("library.py", library_module)
    narrow = cli("check", "library.py")
    assert narrow.code == 0
    assert narrow.out.splitlines() == [
        "No break candidates found; 1 file checked.",
        (
            "Scope: code reachable from torch.compile calls in the files given, nn.Module "
            "classes and method decorators; 1 file of those checked has none of it and was not looked at. Pass the files "
            "that compile them too, or use --all to check every function."
        ),
    ]
    result = cli("check", "--all", "library.py")
    assert result.code == 1
    assert "library.py:5:5: LC" in result.out


def test_json_document(cli, write, compiled_module):
    write("model.py", compiled_module)
    write("broken.py", "def f(:\n")
    result = cli("check", "--format", "json", "model.py", "broken.py")
    assert result.code == 1
    document = json.loads(result.out)
    assert set(document) == {"findings", "errors", "summary"}
    first = document["findings"][0]
    assert first == {
        "path": "model.py",
        "line": 6,
        "col": 5,
        "code": "LC",
        "title": "print/logging/warnings call",
        "message": "`print(...)` call",
        "function": "step",
        "rule": "Defer",
        "fixed": True,
        "reason": None,
        "condition": None,
        "outcome": "fixed by Defer",
        "follows": None,
        "caveat": None,
        "while_tracing": None,
    }
    assert [f["code"] for f in document["findings"]] == ["LC", "DC", "TI"]
    assert document["errors"] == [
        {"path": "broken.py", "error": "cannot parse: invalid syntax (line 1)"}
    ]
    assert document["summary"] == {
        "files_checked": 1,
        "files_with_findings": 1,
        "break_candidates": 3,
        "fixable": 2,
        "declined": 0,
        "not_fixable": 1,
        "errors": 1,
        "scope": "entry",
        "files_without_compiled_code": 0,
        "suppressed": 0,
        "follow_ons": 0,
        "fixable_in_order_only": 0,
    }


def test_json_with_nothing_found_is_valid(cli, write):
    write("clean.py", "x = 1\n")
    document = json.loads(cli("check", "--format=json", "clean.py").out)
    assert document["findings"] == [] and document["summary"]["break_candidates"] == 0


def test_select_and_ignore(cli, write, compiled_module):
    write("model.py", compiled_module)
    selected = cli("check", "--select", "dc,TI", "model.py")
    assert [line.split()[1] for line in selected.out.splitlines()[:-1]] == ["DC", "TI"]
    ignored = cli("check", "--ignore", "TI,LC,DC", "model.py")
    assert ignored.code == 0
    assert ignored.out.startswith("No break candidates found")


def test_rules_option_limits_the_rules(cli, write, compiled_module):
    write("model.py", compiled_module)
    result = cli("check", "--rules", "where", "model.py")
    assert " LC " not in result.out and " DC " in result.out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["check"], "the following arguments are required: PATH"),
        (["check", "--select", "XX", "."], "--select: unknown category 'XX'"),
        (["check", "--rules", "nope", "."], "--rules: unknown rule 'nope'"),
        (["check", "--format", "yaml", "."], "invalid choice: 'yaml'"),
        (["check", "--bogus", "."], "unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_exit_2_in_one_line(cli, argv, message):
    result = cli(*argv)
    assert result.code == 2
    assert result.err.count("\n") == 1 and message in result.err
    assert result.err.startswith("graphmend check: error: ")


def test_missing_path_is_a_usage_error_but_the_rest_is_checked(cli, write, compiled_module):
    write("model.py", compiled_module)
    result = cli("check", "missing.py", "model.py")
    assert result.code == 2
    assert result.err == "missing.py: no such file or directory\n"
    assert "model.py:6:5: LC" in result.out


def test_only_missing_paths_give_their_error_line_and_no_summary(cli):
    result = cli("check", "missing.py")
    assert result.code == 2
    assert result.err == "missing.py: no such file or directory\n"
    assert result.out == ""


def test_bad_files_get_one_line_each_and_the_batch_goes_on(cli, write, compiled_module):
    write("a_not_utf8.py", b"x = 1\n\ny = '\xff'\n")
    write("b_syntax.py", "def f(:\n    pass\n")
    write("c_bad_cookie.py", "# -*- coding: no-such-codec -*-\nx = 1\n")
    write("d_null.py", b"x = 1\x00\n")
    write(
        "e_latin1.py",
        b"# -*- coding: latin-1 -*-\nimport torch\n@torch.compile\ndef f(x):\n    print('\xe9')\n    return x\n",
    )
    write("f_bom.py", "\ufeffimport torch\n@torch.compile\ndef f(x):\n    print(1)\n    return x\n")
    write("g_model.py", compiled_module)
    result = cli("check", ".")
    assert result.code == 1
    errors = result.err.splitlines()
    assert errors[:3] == [
        "a_not_utf8.py: cannot decode: not valid UTF-8 (byte 0xff on line 3)",
        "b_syntax.py: cannot parse: invalid syntax (line 1)",
        "c_bad_cookie.py: cannot decode: unknown encoding: no-such-codec",
    ]
    assert errors[3].startswith("d_null.py: cannot parse: ") and "null bytes" in errors[3]
    assert len(errors) == 4
    assert "e_latin1.py:5:5: LC" in result.out
    assert "f_bom.py:4:5: LC" in result.out
    assert "g_model.py:11:9: TI" in result.out
    assert result.out.splitlines()[-1].endswith("3 files checked. 4 files could not be checked.")
    assert "Traceback" not in result.err


def test_an_internal_failure_is_one_line_and_the_batch_goes_on(
    cli, write, monkeypatch, compiled_module
):
    write("a.py", compiled_module)
    write("b.py", compiled_module)
    real_mend = graphmend.cli.check.mend_module_source

    def failing_on_a(source, *, filename, **options):
        if filename.endswith("a.py"):
            raise RuntimeError("boom")
        return real_mend(source, filename=filename, **options)

    monkeypatch.setattr(graphmend.cli.check, "mend_module_source", failing_on_a)
    result = cli("check", "a.py", "b.py")
    assert (
        result.err == "a.py: graphmend failed on this file (RuntimeError: boom); please report it\n"
    )
    assert "b.py:6:5: LC" in result.out
    assert result.code == 1


def test_folders_skip_hidden_caches_and_virtual_environments(cli, write, compiled_module):
    write("pkg/model.py", compiled_module)
    write("pkg/sub/deep.py", compiled_module)
    write("pkg/notes.txt", "print(1)\n")
    write(".hidden/model.py", compiled_module)
    write("pkg/__pycache__/model.py", compiled_module)
    write("env1/pyvenv.cfg", "home = /usr\n")
    write("env1/lib/model.py", compiled_module)
    write("node_modules/x.py", compiled_module)
    result = cli("check", ".")
    paths = sorted({line.split(":")[0] for line in result.out.splitlines()[:-1]})
    assert paths == [os.path.join("pkg", "model.py"), os.path.join("pkg", "sub", "deep.py")]


def test_an_explicitly_named_file_is_checked_whatever_its_name(cli, write, compiled_module):
    write("script", compiled_module)
    assert "script:6:5: LC" in cli("check", "script").out


def test_many_files_stream(cli, write, tmp_path, monkeypatch):
    """2,000 files: each read when its turn comes, none held, one bad one does not stop it."""
    folder = tmp_path / "many"
    for index in range(2000):
        write(
            f"many/d{index // 100:02d}/m{index:04d}.py",
            f"def f{index}(x):\n    return x + {index}\n",
        )
    write("many/d05/zz_bad.py", "def f(:\n")
    reads = []
    real_read_source = graphmend.cli.check.read_source

    def counting_read_source(path):
        reads.append(path)
        return real_read_source(path)

    monkeypatch.setattr(graphmend.cli.check, "read_source", counting_read_source)
    seen_before_listing = []
    real_walk = os.walk

    def watching_walk(*args, **kwargs):
        for entry in real_walk(*args, **kwargs):
            seen_before_listing.append(len(reads))
            yield entry

    monkeypatch.setattr(graphmend.cli.check.os, "walk", watching_walk)
    started = time.perf_counter()
    result = cli("check", str(folder))
    elapsed = time.perf_counter() - started
    assert result.code == 1
    assert len(reads) == 2001
    assert result.err.count("\n") == 1 and "zz_bad.py: cannot parse" in result.err
    summary, scope = result.out.splitlines()[-2:]
    assert summary == "No break candidates found; 2000 files checked. 1 file could not be checked."
    # Nothing compiles these functions: the answer says so, and how to widen it.
    assert scope.startswith("Scope: ") and "2000 files of those checked have none of it" in scope
    # Streaming: later folders are listed only after earlier files were read.
    assert seen_before_listing[-1] > 0
    assert elapsed < 30


SUPPRESSED = '''
import torch

@torch.compile
def step(x):
    if x.sum() > 0:
        x = x + 1
    print("step", x.shape)  # graphmend: ignore
    return x
'''


def test_check_leaves_suppressed_findings_out_and_counts_them(cli, tmp_path):
    path = tmp_path / "model.py"
    path.write_text(SUPPRESSED)
    outcome = cli("check", str(path))
    assert " LC " not in outcome.out
    assert " DC " in outcome.out
    assert "1 suppressed by `# graphmend: ignore` comments." in outcome.out


def test_exclude_in_pyproject_skips_walked_files_not_named_ones(cli, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.graphmend]\nexclude = ["generated", "legacy_*.py"]\n')
    for relative in ("model.py", "generated/model.py", "legacy_model.py", "sub/legacy_model.py"):
        target = tmp_path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(SUPPRESSED.replace("  # graphmend: ignore", ""))
    monkeypatch.chdir(tmp_path)
    walked = cli("check", ".")
    assert "model.py:" in walked.out
    assert "generated" not in walked.out and "legacy_model.py" not in walked.out.replace("sub/legacy_model.py", "")
    assert "sub/legacy_model.py" in walked.out  # the pattern is relative to pyproject.toml's folder
    assert "3 files checked" not in walked.out and "2 files checked" in walked.out
    named = cli("check", "generated/model.py")
    assert "generated/model.py:" in named.out


def test_exclude_must_be_a_list_of_patterns(cli, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.graphmend]\nexclude = "generated"\n')
    (tmp_path / "model.py").write_text(SUPPRESSED)
    monkeypatch.chdir(tmp_path)
    outcome = cli("check", ".")
    assert outcome.code == 2
    assert "exclude: expected a list of glob patterns" in outcome.err


def test_eager_code_that_calls_a_compiled_model_is_not_reported(cli, write):
    """A training loop that is not compiled, in a class that compiles its model
    (``self.model = torch.compile(self.model)``): its ``loss.item()`` runs eagerly and is
    no graph break; the model's own code is still checked."""
    write(
        "train.py",
        """\
        import torch
        import torch.nn as nn


        class GPT(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(4, 4)

            def forward(self, x):
                y = self.lin(x)
                if y.sum() > 0:
                    y = y * 2
                else:
                    y = y + 1
                return y


        class Trainer:
            def __init__(self):
                self.model = GPT()
                self.model = torch.compile(self.model)

            def train(self):
                for step in range(3):
                    loss = self.model(torch.randn(2, 4)).sum()
                    loss.backward()
                    print(f"step {step}: loss {loss.item():.4f}")
        """,
    )
    outcome = cli("check", "train.py")
    assert outcome.out.splitlines() == [
        "train.py:12:9: DC data-dependent branch `if y.sum() > 0:` (fixed by Where)",
        "Found 1 break candidate in 1 file (1 fixable, 0 not fixable); 1 file checked.",
    ]
    assert outcome.code == 1


TWO_OUTPUTS_MODULE = """\
import logging

import torch

logger = logging.getLogger(__name__)


@torch.compile
def f(x):
    print("a", x.shape)
    logger.warning("b %s", x.shape)
    for step in range(2):
        print("step", step)
    return x + 1


@torch.compile
def g(x):
    if (x < 0).any():
        raise ValueError("negative")
    print("c", x.shape)
    return x * 2


@torch.compile
def h(x):
    for step in range(2):
        print("step", step)
    return x
"""


def test_an_output_the_run_may_keep_under_inductor_is_not_fixed_alone(cli, write):
    """Under inductor, the default backend, no output shares a graph with a lowered
    guard (checked while tracing): ``check`` said "fixed" for an output after a lowered
    guard where the run kept its break. Outputs after other outputs, and in loops, share
    their graph under inductor too (it keeps them in order)."""
    write("model.py", TWO_OUTPUTS_MODULE)
    result = cli("check", "model.py")
    caveat = "(fixed by Defer under eager or aot_eager; under inductor, the default, it keeps its break where"
    assert result.out.splitlines() == [
        "model.py:10:5: LC `print(...)` call (fixed by Defer)",
        "model.py:11:5: LC `logger.warning(...)` call (fixed by Defer)",
        "model.py:13:9: LC `print(...)` call (fixed by Defer)",
        "model.py:19:5: VG validation guard `if (x < 0).any(): raise` (fixed by Trap)",
        f"model.py:21:5: LC `print(...)` call {caveat} the guard lowered at line 19 shares its graph)",
        "model.py:28:9: LC `print(...)` call (fixed by Defer)",
        "Found 6 break candidates in 1 file (6 fixable, 1 of them only under eager or aot_eager, "
        "0 not fixable); 1 file checked.",
    ]
    as_json = json.loads(cli("check", "--format", "json", "model.py").out)
    findings = as_json["findings"] if isinstance(as_json, dict) else as_json
    assert [finding["caveat"] is None for finding in findings] == [True, True, True, True, False, True]


# transformers 5's routing loop over the experts a batch hit, experts stacked in tensors.
EXPERT_HIT_MODULE = """\
import torch
import torch.nn as nn


class Experts(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_experts = 4
        self.gate_up_proj = nn.Parameter(torch.randn(4, 16, 8))
        self.down_proj = nn.Parameter(torch.randn(4, 8, 8))
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states, top_k_index, top_k_weights):
        final_hidden_states = torch.zeros_like(hidden_states)
        with torch.no_grad():
            expert_mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            if expert_idx == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[token_idx]
            gate, up = nn.functional.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current_hidden_states = self.act_fn(gate) * up
            current_hidden_states = nn.functional.linear(current_hidden_states, self.down_proj[expert_idx])
            current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
            final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))
        return final_hidden_states
"""


def test_a_loop_over_the_experts_hit_is_fixed_by_capture(cli, write):
    write("experts.py", EXPERT_HIT_MODULE)
    result = cli("check", "--all", "experts.py")
    assert result.code == 1
    assert result.out.splitlines() == [
        "experts.py:18:13: DS loop over the chosen classes `expert_hit` (`.nonzero()`) (fixed by Capture)",
        "experts.py:21:13: DC data-dependent branch `if expert_idx == self.num_experts:` (fixed by Capture)",
        "experts.py:23:36: DS `torch.where` has a data-dependent output shape (fixed by Capture)",
        "Found 3 break candidates in 1 file (3 fixable, 0 not fixable); 1 file checked.",
    ]


FORMATTED_VALUES_MODULE = """
import logging
import torch

logger = logging.getLogger(__name__)


def buckets_for(length):
    return 2 ** ((2 * length).bit_length() - 1)


@torch.compile
def f(x, n):
    y = x.sin()
    buckets = buckets_for(x.shape[1])
    logger.warning(f"Setting num_buckets to {buckets}...")
    return y.cos()


@torch.compile
def g(x, n):
    print("n is %d of %d" % (n, x.shape[0]))
    print(f"mean {x.mean()}")
    return x
"""


def test_a_fix_decided_while_tracing_names_the_values_and_the_condition(cli, write):
    """A call that formats values the analysis cannot show are not tensors is fixed if
    they are not, while tracing (D208); one that formats a value computed from tensor
    data is declined (D107)."""
    write("model.py", FORMATTED_VALUES_MODULE)
    result = cli("check", "model.py")
    condition = "while tracing [D208 message_formatted_at_the_call]"
    assert result.out.splitlines()[:3] == [
        f"model.py:16:5: LC `logger.warning(...)` call (fixed by Defer if `buckets` is not a tensor {condition})",
        f"model.py:22:5: LC `print(...)` call (fixed by Defer if `n` is not a tensor {condition})",
        "model.py:23:5: LC `print(...)` call (Defer declined [D107 arguments_do_not_format_tensor_values]: "
        "an argument formats `x.mean()`, computed from tensor data, at the call)",
    ]
    findings = json.loads(cli("check", "--format", "json", "model.py").out)["findings"]
    assert [finding["while_tracing"] for finding in findings] == [
        f"if `buckets` is not a tensor {condition}", f"if `n` is not a tensor {condition}", None,
    ]


LAYERDROP_MODULE = """\
import torch


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])
        self.layerdrop = 0.0

    def forward(self, x):
        for layer in self.layers:
            if self.training:
                dropout_probability = torch.rand([])
                if dropout_probability < self.layerdrop:
                    continue
            x = layer(x)
        return x


model = torch.compile(Stack())
"""


def test_a_draw_compared_with_a_value_known_while_tracing_is_fixed_if_that_value_decides(cli, write):
    write("stack.py", LAYERDROP_MODULE)
    result = cli("check", "stack.py")
    condition = "if the other operand is decided while tracing [W210 other_operand_decides]"
    assert result.out.splitlines()[0] == (
        "stack.py:14:20: DC comparison of a uniform draw `dropout_probability < self.layerdrop` "
        f"(fixed by Where {condition})"
    )
    findings = json.loads(cli("check", "--format", "json", "stack.py").out)["findings"]
    assert findings[0]["while_tracing"] == condition
