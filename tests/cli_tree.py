"""The whole ``jobmaster`` command tree, walked: every leaf command with the
path of groups above it, and arguments that let it get as far as loading its
config. Shared by the tests of the -c rule and of the exit-code table, so a
command added later is covered by both without a line more."""

from __future__ import annotations

from collections.abc import Iterator

import click

from jobmaster.cli import main


def leaves(group: click.Group = main, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaves(command, (*path, name))
        else:
            yield (*path, name)


def command_at(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def arguments(path: tuple[str, ...], value: str = "0123456789abcdef01234567") -> list[str]:
    """A value for each single argument (JID, NAME, IDENTITY, JOB...); none for
    the variadic ones."""
    return [
        value
        for param in command_at(path).params
        if isinstance(param, click.Argument) and param.nargs == 1
    ]


PATHS = tuple(leaves())
