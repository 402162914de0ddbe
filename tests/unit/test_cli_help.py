"""What ``--help`` shows: ``-c FILE`` on the group itself, and the settings'
flags typed as click types its own (INTEGER RANGE, FLOAT RANGE), not TEXT."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from jobmaster.cli import main

pytestmark = pytest.mark.timeout(30)


def help_of(*args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_groups_help_shows_the_config_option() -> None:
    assert re.search(r"^\s+-c, --config FILE\s+The TOML config file", help_of(), re.MULTILINE)


@pytest.mark.parametrize("command", ["run", "worker", "check"])
def test_numeric_flags_show_their_type_and_range(command: str) -> None:
    text = " ".join(help_of(command).split())  # click wraps long lines
    assert "-p, --processes INTEGER|auto" in text
    assert "-t, --concurrency INTEGER RANGE" in text
    assert "--shutdown-timeout FLOAT RANGE" in text
    assert "--max-child-mb INTEGER|auto" in text
    assert "JOBMASTER_CONCURRENCY; x>=1]" in text
    assert not re.search(r"--(processes|concurrency|shutdown-timeout|max-child-mb) TEXT", text)


def test_a_bad_number_keeps_the_settings_message() -> None:
    """The flag is parsed by the settings registry, as the file and env are: one
    line naming the option, exit 2, no click usage block."""
    result = CliRunner().invoke(main, ["check", "-t", "0"])
    assert result.exit_code == 2
    assert result.output == "jobmaster: option --concurrency: must be an integer >= 1, got '0'\n"


def test_the_config_file_before_the_command_goes_to_that_command() -> None:
    result = CliRunner().invoke(main, ["-c", "/nonexistent/jobmaster.toml", "check"])
    assert result.exit_code == 2
    assert "unexpected extra argument" not in result.output
    assert "/nonexistent/jobmaster.toml: cannot read" in result.output
