"""Config loading: defaults, precedence, and one readable line per mistake."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from jobmaster.config import Config, PeriodicEntry, load_config, mask_url
from jobmaster.cpus import usable_cpus
from jobmaster.errors import ConfigError
from jobmaster.settings import SETTINGS, reference_markdown
from tests import helpers


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a fresh folder so that relative paths and labels are predictable."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(folder: Path, text: str, name: str = "jobmaster.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def load(text: str, folder: Path, **kwargs: Any) -> Config:
    """Load ``text`` as ./jobmaster.toml, with an empty environment by default."""
    write(folder, text)
    kwargs.setdefault("env", {})
    return load_config("jobmaster.toml", **kwargs)


def error(text: str, folder: Path, **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(text, folder, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- defaults and sources --------------------------------------------------------


def test_defaults_without_a_file(in_tmp: Path) -> None:
    config = load_config(env={})
    assert config.source is None
    assert config.app == []
    assert config.redis_url == f"redis://127.0.0.1:{helpers.FORBIDDEN_PORT}/0"  # the spec default
    assert config.processes == usable_cpus()
    assert config.concurrency == 5
    assert config.queues == ["default"]
    assert config.queue_weights == [("default", 1)]
    assert config.strict is False
    assert config.shutdown_timeout == 25.0
    assert config.preload is True
    assert config.max_child_mb == 0
    assert config.memory_metric == "uss"
    assert config.heartbeat_ttl == 60.0
    assert config.namespace == "jobmaster"
    assert config.data_dir == str(in_tmp / ".jobmaster")
    assert config.log_level == "info"
    assert config.log_format == "text"
    assert config.poll_interval == 1.0
    assert config.periodic == {}


def test_config_has_one_attribute_per_setting() -> None:
    names = {f.name for f in dataclasses.fields(Config)} - {"source", "periodic"}
    assert names == set(SETTINGS)


def test_config_defaults_are_not_shared() -> None:
    first, second = Config(), Config()
    first.queues.append("low")
    assert second.queues == ["default"]
    assert SETTINGS["queues"].default == ["default"]


def test_file_values(in_tmp: Path) -> None:
    config = load(
        """
app = ["myapp.jobs", "other.tasks"]
redis_url = "redis://redis.example:6380/2"
processes = 4
concurrency = 10
queues = ["critical:3", "default:2", "low"]
strict = true
shutdown_timeout = 8
max_child_mb = 512
log_level = "DEBUG"
log_format = "json"
""",
        in_tmp,
    )
    assert config.source == str(in_tmp / "jobmaster.toml")
    assert config.app == ["myapp.jobs", "other.tasks"]
    assert config.redis_url == "redis://redis.example:6380/2"
    assert config.processes == 4
    assert config.concurrency == 10
    assert config.queue_weights == [("critical", 3), ("default", 2), ("low", 1)]
    assert config.queue_names == ["critical", "default", "low"]
    assert config.strict is True
    assert config.shutdown_timeout == 8.0
    assert isinstance(config.shutdown_timeout, float)
    assert config.max_child_mb == 512
    assert config.log_level == "debug"
    assert config.log_format == "json"


def test_env_beats_file(in_tmp: Path) -> None:
    env = {
        "JOBMASTER_PROCESSES": "3",
        "JOBMASTER_CONCURRENCY": "7",
        "JOBMASTER_QUEUES": "critical:5, low",
        "JOBMASTER_SHUTDOWN_TIMEOUT": "12.5",
        "JOBMASTER_MAX_CHILD_MB": "auto",
        "JOBMASTER_LOG_FORMAT": "json",
    }
    config = load("processes = 8\nconcurrency = 2\nqueues = ['x']\n", in_tmp, env=env)
    assert config.processes == 3
    assert config.concurrency == 7
    assert config.queues == ["critical:5", "low"]
    assert config.shutdown_timeout == 12.5
    assert config.max_child_mb == "auto"
    assert config.log_format == "json"


def test_cli_beats_env(in_tmp: Path) -> None:
    config = load(
        "processes = 8\n",
        in_tmp,
        env={"JOBMASTER_PROCESSES": "3", "JOBMASTER_QUEUES": "a,b"},
        overrides={"processes": "2", "queues": ("c:2", "d"), "app": ("myapp",)},
    )
    assert config.processes == 2
    assert config.queue_weights == [("c", 2), ("d", 1)]
    assert config.app == ["myapp"]


def test_cli_none_and_empty_lists_mean_not_given(in_tmp: Path) -> None:
    config = load(
        "processes = 8\nqueues = ['a']\n",
        in_tmp,
        overrides={"processes": None, "queues": (), "concurrency": 9},
    )
    assert config.processes == 8
    assert config.queues == ["a"]
    assert config.concurrency == 9


def test_cli_queue_option_may_hold_commas(in_tmp: Path) -> None:
    config = load_config(env={}, overrides={"queues": ("critical:3,default", "low")})
    assert config.queue_names == ["critical", "default", "low"]


def test_processes_auto_restores_usable_cpus(in_tmp: Path) -> None:
    config = load("processes = 64\n", in_tmp, env={"JOBMASTER_PROCESSES": "auto"})
    assert config.processes == usable_cpus()


def test_jobmaster_redis_url_wins_over_redis_url(in_tmp: Path) -> None:
    env = {"REDIS_URL": "redis://platform:6380/0"}
    assert load_config(env=env).redis_url == "redis://platform:6380/0"
    env["JOBMASTER_REDIS_URL"] = "redis://ours:6380/1"
    assert load_config(env=env).redis_url == "redis://ours:6380/1"
    overrides = {"redis_url": "unix:///tmp/redis.sock"}
    assert load_config(env=env, overrides=overrides).redis_url == "unix:///tmp/redis.sock"


def test_empty_env_values_are_ignored(in_tmp: Path) -> None:
    config = load("concurrency = 4\n", in_tmp, env={"JOBMASTER_CONCURRENCY": " "})
    assert config.concurrency == 4


def test_env_defaults_to_os_environ(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBMASTER_CONCURRENCY", "11")
    assert load_config().concurrency == 11


def test_redis_url_embedded(in_tmp: Path) -> None:
    assert load('redis_url = "Embedded"\n', in_tmp).redis_url == "embedded"


# --- errors -----------------------------------------------------------------------


def test_unknown_key_with_suggestion(in_tmp: Path) -> None:
    message = error("concurency = 4\n", in_tmp)
    assert message == "jobmaster.toml: unknown key 'concurency' (did you mean 'concurrency'?)"


def test_unknown_key_without_suggestion(in_tmp: Path) -> None:
    assert error("zzz = 1\n", in_tmp) == "jobmaster.toml: unknown key 'zzz'"


def test_impossible_value_names_file_and_key(in_tmp: Path) -> None:
    message = error("concurrency = 0\n", in_tmp)
    assert message == "jobmaster.toml: 'concurrency' must be an integer >= 1, got 0"


def test_error_names_the_path_as_given(in_tmp: Path) -> None:
    (in_tmp / "deploy").mkdir()
    write(in_tmp / "deploy", "concurrency = 0\n", "worker.toml")
    with pytest.raises(ConfigError, match=r"^deploy/worker.toml: 'concurrency' "):
        load_config(Path("deploy/worker.toml"), env={})


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("processes = true", "'processes' must be an integer >= 1, got True"),
        ("concurrency = 2.5", "'concurrency' must be an integer >= 1, got 2.5"),
        ("concurrency = '4'", None),  # a string is parsed like an env value
        ("shutdown_timeout = -1", "'shutdown_timeout' must be a number >= 0, got -1"),
        ("shutdown_timeout = true", "'shutdown_timeout' must be a number >= 0, got True"),
        ("heartbeat_ttl = 1", "'heartbeat_ttl' must be a number >= 2, got 1"),
        ("poll_interval = 0", "'poll_interval' must be a number > 0, got 0"),
        ("strict = 1", "'strict' must be true or false, got 1"),
        ("memory_metric = 'vms'", "'memory_metric' must be one of uss, pss, rss, got 'vms'"),
        ("log_level = 'loud'", "'log_level' must be one of debug, info, warning, error, critical"),
        ("namespace = 'a{b}'", "'namespace' must be letters, digits"),
        ("namespace = ''", "'namespace' must be letters, digits"),
        ("app = ['my-app']", "'app' must be a list of module names, got 'my-app'"),
        ("app = 3", "'app' must be a list of module names, got 3"),
        ("crash_queue = 'a b'", "'crash_queue' queue names must be non-empty"),
        ("data_dir = 5", "'data_dir' must be a string, got 5"),
    ],
)
def test_wrong_types_and_values(in_tmp: Path, line: str, expected: str | None) -> None:
    if expected is None:
        load(line + "\n", in_tmp)
        return
    assert error(line + "\n", in_tmp).startswith(f"jobmaster.toml: {expected}")


def test_ints_are_accepted_for_floats(in_tmp: Path) -> None:
    config = load("memory_grace = 10\ndead_max_days = 7\n", in_tmp)
    assert config.memory_grace == 10.0
    assert isinstance(config.memory_grace, float)


def test_env_error(in_tmp: Path) -> None:
    message = error("", in_tmp, env={"JOBMASTER_PROCESSES": "abc"})
    assert message == "environment JOBMASTER_PROCESSES: must be an integer >= 1, got 'abc'"


def test_env_error_names_the_fallback_variable(in_tmp: Path) -> None:
    message = error("", in_tmp, env={"REDIS_URL": "http://x"})
    assert message.startswith('environment REDIS_URL: must be "embedded" or a redis://')


def test_cli_error(in_tmp: Path) -> None:
    message = error("", in_tmp, overrides={"processes": "0"})
    assert message == "option --processes: must be an integer >= 1, got '0'"


def test_cli_unknown_setting(in_tmp: Path) -> None:
    assert "did you mean 'processes'" in error("", in_tmp, overrides={"procesess": 1})


def test_missing_file(in_tmp: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config("jobmaster.toml", env={})
    assert str(info.value) == "jobmaster.toml: cannot read: No such file or directory"


def test_invalid_toml(in_tmp: Path) -> None:
    message = error("concurrency = \n", in_tmp)
    assert message.startswith("jobmaster.toml: not valid TOML: ")
    assert "line 1" in message


# --- queues and max_child_mb ------------------------------------------------------


@pytest.mark.parametrize(
    ("queues", "expected"),
    [
        ("['low:0']", "queue 'low': weight must be an integer >= 1, got '0'"),
        ("['low:x']", "queue 'low': weight must be an integer >= 1, got 'x'"),
        ("['low:']", "queue 'low': weight must be an integer >= 1, got ''"),
        ("[':3']", "queue names must be non-empty"),
        ("['a', 'a:2']", "queue 'a' is listed twice"),
        ("[]", "must list at least one queue"),
        ("[1, 2]", "must be a list of"),
    ],
)
def test_bad_queues(in_tmp: Path, queues: str, expected: str) -> None:
    assert error(f"queues = {queues}\n", in_tmp).startswith(f"jobmaster.toml: 'queues' {expected}")


def test_queue_weights_are_normalised(in_tmp: Path) -> None:
    assert load("queues = ['a:03', ' b ']\n", in_tmp).queues == ["a:3", "b"]


@pytest.mark.parametrize(
    ("value", "expected"), [("512", 512), ("0", 0), ('"auto"', "auto"), ('"AUTO"', "auto")]
)
def test_max_child_mb(in_tmp: Path, value: str, expected: object) -> None:
    assert load(f"max_child_mb = {value}\n", in_tmp).max_child_mb == expected


@pytest.mark.parametrize("value", ["-1", '"big"', "true", "1.5"])
def test_bad_max_child_mb(in_tmp: Path, value: str) -> None:
    message = error(f"max_child_mb = {value}\n", in_tmp)
    assert message.startswith("jobmaster.toml: 'max_child_mb' must be an integer >= 0 or \"auto\"")


# --- periodic -------------------------------------------------------------------


def test_periodic_entries(in_tmp: Path) -> None:
    config = load(
        """
[periodic.nightly]
cron = "0 3 * * *"
job = "myapp.jobs.nightly"
args = [1, "a"]

[periodic.ping]
every = 30
job = "myapp.jobs.ping"
kwargs = { loud = true }
queue = "low"
enabled = false

[periodic.seconds]
cron = "*/10 * * * * 5"
job = "myapp.jobs.tick"
""",
        in_tmp,
    )
    assert config.periodic["nightly"] == PeriodicEntry(
        name="nightly", job="myapp.jobs.nightly", cron="0 3 * * *", args=[1, "a"]
    )
    ping = config.periodic["ping"]
    assert (ping.every, ping.cron, ping.kwargs, ping.queue, ping.enabled) == (
        30.0,
        None,
        {"loud": True},
        "low",
        False,
    )
    assert config.periodic["seconds"].cron == "*/10 * * * * 5"


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (
            'cron = "0 3 * *"\njob = "j"',
            "'cron' must be a cron expression of 5 or 6 fields, got '0 3 * *'",
        ),
        ('cron = "61 * * * *"\njob = "j"', "'cron' must be a cron expression"),
        ('cron = "0 3 * * * 0 2030"\njob = "j"', "'cron' must be a cron expression"),
        ("cron = 5\njob = 'j'", "'cron' must be a cron expression"),
        ('cron = "0 3 * * *"\nevery = 60\njob = "j"', "needs exactly one of 'cron' and 'every'"),
        ('job = "j"', "needs exactly one of 'cron' and 'every'"),
        ('cron = "0 3 * * *"', "'job' is required"),
        ('cron = "0 3 * * *"\njob = ""', "'job' must be the name of a job, got ''"),
        ('cron = "0 3 * * *"\njob = "j"\njbo = 1', "unknown key 'jbo' (did you mean 'job'?)"),
        ('every = 0\njob = "j"', "'every' must be a number > 0, got 0"),
        ('every = 5\njob = "j"\nargs = "x"', "'args' must be a list, got 'x'"),
        ('every = 5\njob = "j"\nkwargs = [1]', "'kwargs' must be a table, got [1]"),
        ('every = 5\njob = "j"\nqueue = "a b"', "'queue' must be a queue name, got 'a b'"),
        ('every = 5\njob = "j"\nenabled = "maybe"', "'enabled' must be true or false"),
    ],
)
def test_bad_periodic(in_tmp: Path, table: str, expected: str) -> None:
    message = error(f"[periodic.nightly]\n{table}\n", in_tmp)
    assert message.startswith(f"jobmaster.toml: [periodic.nightly] {expected}")


def test_periodic_must_be_tables(in_tmp: Path) -> None:
    message = error("periodic = 3\n", in_tmp)
    assert message == "jobmaster.toml: 'periodic' must hold [periodic.NAME] tables"


# --- data_dir -------------------------------------------------------------------


def test_data_dir_is_relative_to_the_config_file(in_tmp: Path) -> None:
    (in_tmp / "etc").mkdir()
    write(in_tmp / "etc", 'data_dir = "state"\n')
    (in_tmp / "elsewhere").mkdir()
    os.chdir(in_tmp / "elsewhere")
    config = load_config("../etc/jobmaster.toml", env={})
    assert config.data_dir == str(in_tmp / "etc" / "state")
    assert config.source == str(in_tmp / "etc" / "jobmaster.toml")


def test_pythonpath_is_relative_to_the_config_file(in_tmp: Path) -> None:
    (in_tmp / "etc").mkdir()
    write(in_tmp / "etc", 'pythonpath = ["src", "../lib", "/opt/app"]\n')
    (in_tmp / "elsewhere").mkdir()
    os.chdir(in_tmp / "elsewhere")
    config = load_config("../etc/jobmaster.toml", env={})
    assert config.pythonpath == [str(in_tmp / "etc" / "src"), str(in_tmp / "lib"), "/opt/app"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('pythonpath = "src"', "'pythonpath' must be a list of paths such as [\"src\"], got 'src'"),
        ("pythonpath = [1]", "'pythonpath' must be a list of paths such as [\"src\"], got [1]"),
        ('pythonpath = ["a\\u0000b"]', "'pythonpath' must be a path without NUL characters"),
    ],
)
def test_pythonpath_of_the_wrong_type_names_the_key_and_the_file(
    in_tmp: Path, text: str, message: str
) -> None:
    assert error(text + "\n", in_tmp).startswith(f"jobmaster.toml: {message}")


def test_default_data_dir_is_beside_the_config_file(in_tmp: Path) -> None:
    (in_tmp / "etc").mkdir()
    write(in_tmp / "etc", "")
    assert load_config("etc/jobmaster.toml", env={}).data_dir == str(in_tmp / "etc" / ".jobmaster")


def test_absolute_data_dir_is_kept(in_tmp: Path) -> None:
    target = in_tmp / "abs"
    assert load(f'data_dir = "{target}"\n', in_tmp).data_dir == str(target)


def test_data_dir_without_a_file_is_relative_to_cwd(in_tmp: Path) -> None:
    assert load_config(env={}).data_dir == str(in_tmp / ".jobmaster")


# --- passwords ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:secret@host", "redis://:***@host"),
        ("redis://user:secret@h", "redis://user:***@h"),
        ("rediss://user:s3cr:et@h:6380/1", "rediss://user:***@h:6380/1"),
        ("redis://host:6380/0", "redis://host:6380/0"),
        ("redis://user@host", "redis://user@host"),
        ("embedded", "embedded"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_bad_redis_url_error_hides_the_password(in_tmp: Path) -> None:
    message = error('redis_url = "http://:hunter2@host"\n', in_tmp)
    assert "hunter2" not in message
    assert message.startswith("jobmaster.toml: 'redis_url' must be \"embedded\" or a redis://")
    assert "'http://:***@host'" in message


def test_bad_redis_port_error_hides_the_password(in_tmp: Path) -> None:
    message = error("", in_tmp, env={"REDIS_URL": "redis://:hunter2@host:port"})
    assert "hunter2" not in message


def test_redis_url_masked_property() -> None:
    assert Config(redis_url="redis://:pw@h:1/0").redis_url_masked == "redis://:***@h:1/0"


def test_reference_markdown_lists_every_setting() -> None:
    table = reference_markdown()
    for name, setting in SETTINGS.items():
        assert f"| `{name}` |" in table
        for flag in setting.cli:
            assert f"`{flag}`" in table
    assert "`JOBMASTER_REDIS_URL`, `REDIS_URL`" in table


def test_async_loop_uvloop_without_uvloop_is_refused_at_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refused in the master (and ``jobmaster check``): each child would fail
    at its start, and the master fork them again and again."""
    import importlib.util

    from jobmaster.settings import loop_kind

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else real(name, *a)
    )
    with pytest.raises(ValueError, match="uvloop is not installed"):
        loop_kind("uvloop")
    assert loop_kind("AUTO") == "auto" and loop_kind("asyncio") == "asyncio"
