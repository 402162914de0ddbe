"""The ``jobmaster`` group itself: ``run`` is its default command, but the
group's own options (--help, --version) stay the group's."""

from __future__ import annotations

from click.testing import CliRunner

import jobmaster
from jobmaster.cli import main


def test_version_is_the_groups_option_not_run() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert jobmaster.__version__ in result.output


def test_help_lists_the_commands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    for command in (
        "run",
        "check",
        "enqueue",
        "stats",
        "ps",
        "ctl",
        "dead",
        "queue",
        "batches",
        "cancel",
    ):
        assert command in result.output


def test_a_bare_option_still_goes_to_run() -> None:
    """``jobmaster -c FILE`` is ``jobmaster run -c FILE``: a missing file is
    run's config error (exit 2), not the group's "no such option"."""
    result = CliRunner().invoke(main, ["-c", "/nonexistent/jobmaster.toml"])
    assert result.exit_code == 2
    assert "No such option" not in result.output
    assert "/nonexistent/jobmaster.toml" in result.output
