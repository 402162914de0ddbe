"""``log_levels``: levels of single loggers, from the file or the environment."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobmaster.config import load_config
from jobmaster.errors import ConfigError
from jobmaster.log import setup_logging

pytestmark = pytest.mark.timeout(30)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobmaster.toml"
    path.write_text(text)
    return path


def test_a_table_with_quoted_names(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, '[log_levels]\n"jobmaster.worker.executor" = "WARNING"\nmyapp = "debug"\n'),
        env={},
    )
    assert config.log_levels == {"jobmaster.worker.executor": "warning", "myapp": "debug"}


def test_unquoted_dotted_names_are_read_back_as_logger_names(tmp_path: Path) -> None:
    # TOML nests ``a.b.c = "x"`` into tables; the user meant the logger a.b.c.
    path = write(tmp_path, '[log_levels]\njobmaster.worker.executor = "warning"\n')
    assert load_config(path, env={}).log_levels == {"jobmaster.worker.executor": "warning"}


def test_the_environment_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[log_levels]\nmyapp = "debug"\n')
    env = {"JOBMASTER_LOG_LEVELS": "jobmaster.worker.executor=warning, myapp=error"}
    config = load_config(path, env=env)
    assert config.log_levels == {"jobmaster.worker.executor": "warning", "myapp": "error"}


def test_the_default_is_no_logger_apart() -> None:
    assert load_config(None, env={}).log_levels == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[log_levels]\nmyapp = "loud"\n',
            "'log_levels' entry 'myapp' must be one of debug, info, warning, error, critical, "
            "got 'loud'",
        ),
        ('log_levels = "info"\n', "'log_levels' must be \"logger=level\" entries"),
        ("log_levels = 3\n", "'log_levels' must be a table"),
        ("[log_levels]\nmyapp = {}\n", "'log_levels' entry 'myapp' must be one of"),
    ],
)
def test_mistakes_name_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_config(path, env={})
    assert str(raised.value).startswith(f"{path}: {message}")


def test_a_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"^environment JOBMASTER_LOG_LEVELS: entry 'x'"):
        load_config(None, env={"JOBMASTER_LOG_LEVELS": "x=loud"})


@pytest.fixture
def restored_levels(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    saved = {name: logging.getLogger(name).level for name in ("", "jobmaster.tests.a")}
    yield
    for name, level in saved.items():  # setLevel also clears the loggers' caches
        logging.getLogger(name or None).setLevel(level)


@pytest.mark.usefixtures("restored_levels")
def test_setup_logging_sets_each_named_logger() -> None:
    setup_logging("warning", "text", {"jobmaster.tests.a": "debug"})
    assert logging.getLogger().level == logging.WARNING
    assert logging.getLogger("jobmaster.tests.a").isEnabledFor(logging.DEBUG)
    assert not logging.getLogger("jobmaster.tests.b").isEnabledFor(logging.INFO)
