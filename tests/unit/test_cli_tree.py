"""One rule for every command and group: ``-c FILE`` and ``--redis-url`` are
taken before a group's command as well as after it, and bad input is exit 2.

``jobmaster dead -c X list`` and ``jobmaster -c X dead list`` said "No such
option '-c'" while the top-level help says -c works for any command. The tree
is walked (tests/cli_tree.py): a group or command added later is covered.
The command never gets further than loading its config (a missing file), so
nothing here reaches Redis or forks.
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from jobmaster import exitcodes
from jobmaster.cli import main
from tests.cli_tree import PATHS, arguments

pytestmark = pytest.mark.timeout(60)


def placements(path: tuple[str, ...], option: list[str]) -> list[list[str]]:
    """The option before each group, before the command and after it."""
    tail = arguments(path)
    return [[*path[:at], *option, *path[at:], *tail] for at in range(len(path) + 1)]


def test_the_tree_is_walked_whole() -> None:
    assert {"run", "check", "enqueue", "status", "cancel", "web", "worker"} <= {p[0] for p in PATHS}
    groups = {p[0] for p in PATHS if len(p) > 1}
    assert groups == {
        "batches", "ctl", "dead", "periodic", "queue", "retries", "scheduled"
    }  # fmt: skip


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
@pytest.mark.parametrize("form", ["-c", "--config", "--config="])
def test_config_is_taken_anywhere_in_the_path(
    path: tuple[str, ...], form: str, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.toml"
    option = [f"{form}{missing}"] if form.endswith("=") else [form, str(missing)]
    for args in placements(path, option):
        result = CliRunner().invoke(main, args)
        assert "No such option" not in result.output, (args, result.output)
        assert result.exit_code == exitcodes.USAGE, (args, result.output)
        assert f"{missing}: cannot read" in result.output, (args, result.output)


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_redis_url_is_taken_anywhere_in_the_path(path: tuple[str, ...]) -> None:
    for args in placements(path, ["--redis-url", "bogus://x"]):
        result = CliRunner().invoke(main, args)
        assert "No such option" not in result.output, (args, result.output)
        assert result.exit_code == exitcodes.USAGE, (args, result.output)
        assert "--redis-url: must be" in result.output, (args, result.output)


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_an_unknown_option_is_bad_usage(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--no-such-option"])
    assert result.exit_code == exitcodes.USAGE, result.output


def test_each_group_says_it_takes_config() -> None:
    for group in {p[0] for p in PATHS if len(p) > 1}:
        command = main.commands[group]
        assert isinstance(command, click.Group)
        shown = CliRunner().invoke(main, [group, "--help"]).output
        assert "-c, --config FILE" in shown and "--redis-url" in shown, group


def test_the_readme_shows_the_exit_code_table() -> None:
    """exitcodes.TABLE is the one source; the README's table is its copy."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    rows = [f"| `{code}` | {meaning} |" for code, meaning in exitcodes.TABLE]
    assert "\n".join(rows) in readme
