"""``[tool.graphmend]`` in the nearest pyproject.toml, and flags overriding it."""

from __future__ import annotations

import pytest

from graphmend.cli.config import ConfigError, find_config_file, load_settings


def test_select_ignore_and_all_from_pyproject(cli, write, library_module):
    write(
        "pyproject.toml", '[project]\nname = "x"\n\n[tool.graphmend]\nall = true\nignore = ["TI"]\n'
    )
    write("src/library.py", library_module)
    result = cli("check", "src")
    assert [line.split()[1] for line in result.out.splitlines()[:-1]] == ["LC", "DC"]


def test_flags_override_the_file(cli, write, compiled_module):
    write("pyproject.toml", '[tool.graphmend]\nselect = "TI"\nrules = ["trap"]\n')
    write("model.py", compiled_module)
    from_file = cli("check", "model.py")
    assert [line.split()[1] for line in from_file.out.splitlines()[:-1]] == ["TI"]
    overridden = cli("check", "--select", "LC,DC", "--rules", "defer,where", "model.py")
    assert [line.split()[1] for line in overridden.out.splitlines()[:-1]] == ["LC", "DC"]


def test_nearest_file_with_a_graphmend_table_wins(write, tmp_path):
    write("pyproject.toml", '[tool.graphmend]\nscope = "all"\n')
    write("inner/pyproject.toml", '[project]\nname = "inner"\n')  # not ours: keep looking
    write("inner/deeper/pyproject.toml", '[tool.graphmend]\nselect = ["DC"]\n')
    write("inner/deeper/m.py", "x = 1\n")
    assert find_config_file(str(tmp_path / "inner" / "m.py")) == str(tmp_path / "pyproject.toml")
    settings = load_settings([str(tmp_path / "inner" / "deeper" / "m.py")])
    assert settings.select == {"DC"} and settings.scope == "entry"
    assert load_settings([str(tmp_path / "inner")]).scope == "all"


def test_packages_and_rules_as_strings(write, tmp_path):
    write("pyproject.toml", '[tool.graphmend]\npackages = "a, b"\nrules = "where,trap"\n')
    settings = load_settings([str(tmp_path)])
    assert settings.packages == ("a", "b")
    assert settings.rules == ("trap", "where")  # the pipeline's order, whatever was written


@pytest.mark.parametrize(
    "table, message",
    [
        ('select = ["XX"]', "unknown category 'XX'"),
        ("rules = 3", "expected a list of rule names"),
        ('rules = ["nope"]', "unknown rule 'nope'"),
        ('scope = "some"', "scope: expected one of"),
        ('all = "yes"', "all: expected true or false"),
        ("packages = [1]", "packages: expected a list of package names"),
        ("select = [", "not valid TOML"),
    ],
)
def test_bad_settings_are_usage_errors(cli, write, table, message):
    write("pyproject.toml", f"[tool.graphmend]\n{table}\n")
    write("m.py", "x = 1\n")
    result = cli("check", "m.py")
    assert result.code == 2
    assert result.err.count("\n") == 1 and message in result.err
    with pytest.raises(ConfigError):
        load_settings(["m.py"])


def test_unknown_key_is_a_warning(cli, write):
    write("pyproject.toml", "[tool.graphmend]\ncolour = true\n")
    write("m.py", "x = 1\n")
    result = cli("check", "m.py")
    assert result.code == 0
    assert "warning:" in result.err and "unknown key 'colour' ignored" in result.err


def test_a_broken_pyproject_that_is_not_ours_is_ignored(cli, write):
    write("pyproject.toml", "this is [not toml\n")
    write("m.py", "x = 1\n")
    assert cli("check", "m.py").code == 0
