"""Fuzzing the config loader: any TOML, any value of any setting, any env value.

The promise under test (SPEC section 6): a config is either loaded or refused
with a ``ConfigError`` of one line that names the key and the file (or the
environment variable), and ``jobmaster check`` turns that into exit 2 without
a traceback. Never another exception: a traceback at start-up is what a
deploy shows instead of the one line that says what to fix.
"""

from __future__ import annotations

import datetime
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobmaster.cli import main
from jobmaster.config import Config, load_config
from jobmaster.errors import ConfigError
from jobmaster.settings import SETTINGS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# Nothing listens on port 1: `jobmaster check` on a valid config fails to
# connect (exit 1) instead of reaching the shared Redis on its default port.
NOWHERE = "redis://127.0.0.1:1/0"

FUZZ = settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# --- TOML values and a writer for them ----------------------------------------------

# TOML strings hold Unicode scalar values only: no lone surrogates.
toml_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=16)
toml_keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
offsets = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(
    lambda minutes: datetime.timezone(datetime.timedelta(minutes=minutes))
)

toml_scalars = st.one_of(
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, -1, 1, 2**63 - 1, -(2**63), 10**30, -(10**30)]),
    st.floats(),  # inf, -inf and nan included
    toml_text,
    st.sampled_from(["", " ", "auto", "embedded", "0", "-1", "true", "default:0", "a:b"]),
    st.datetimes(timezones=st.none() | offsets),
    st.dates(),
    st.times(),
)

toml_values = st.recursive(
    toml_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(toml_keys, inner, max_size=3),
    max_leaves=8,
)


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def toml_float(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)  # 1e+16, 5e-324, -0.0: all valid TOML


def toml_value(value: Any) -> str:  # noqa: PLR0911 - one return per TOML type
    """``value`` written as TOML (tomli-w is not a dependency; this is all we need)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return toml_float(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, datetime.date | datetime.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{toml_string(key)} = {toml_value(item)}" for key, item in value.items())
        return "{" + ", ".join(pairs) + "}"
    raise AssertionError(f"no TOML for {value!r}")


def same_toml(a: Any, b: Any) -> bool:
    """Equality that takes nan as equal to itself (to check the writer)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_toml(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_toml(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


# --- what a refusal must look like ------------------------------------------------


def assert_one_line(message: str) -> None:
    assert message, "an empty error message"
    assert "\n" not in message and "\r" not in message, f"not one line: {message!r}"
    assert "Traceback" not in message


def load_or_refuse(path: Path) -> Config | ConfigError:
    """``load_config`` on ``path`` with an empty environment: a Config or a ConfigError.

    Any other exception propagates, and hypothesis reports the document.
    """
    try:
        return load_config(path, env={})
    except ConfigError as error:
        assert_one_line(str(error))
        assert str(error).startswith(f"{path}: "), f"does not name the file: {error}"
        return error


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    return tmp_path / "jobmaster.toml"


# --- every setting, every kind of TOML value ---------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(SETTINGS))
@FUZZ
@given(value=toml_values)
@example(value=10**400)  # TOML has no integer limit; float() of it overflows
@example(value=-(10**400))
@example(value=math.inf)
@example(value=math.nan)
@example(value="~\x00")  # expanduser refuses NUL
@example(value=["~\x00"])
def test_any_value_of_any_setting_loads_or_is_refused_naming_key_and_file(
    name: str, value: Any, config_path: Path
) -> None:
    document = f"{name} = {toml_value(value)}\n"
    config_path.write_text(document, encoding="utf-8")
    assert same_toml(tomllib.loads(document)[name], value), "the test's TOML writer is wrong"
    outcome = load_or_refuse(config_path)
    if isinstance(outcome, ConfigError):
        assert repr(name) in str(outcome), f"does not name the key {name!r}: {outcome}"
        return
    # Loaded: the value in force is what the setting's own parser makes of it.
    expected = SETTINGS[name].parse(value)
    if name == "processes" and expected is None:  # "auto": the usable CPUs
        assert outcome.processes >= 1
    elif name == "data_dir":  # made absolute, relative to the file
        assert Path(outcome.data_dir).is_absolute()
    elif name == "pythonpath":  # each made absolute, relative to the file, in order
        assert len(outcome.pythonpath) == len(expected)
        assert all(Path(item).is_absolute() for item in outcome.pythonpath)
    else:
        assert getattr(outcome, name) == expected


# --- any document ------------------------------------------------------------------

# Documents of settings and unknown keys with any values, some of them with
# [periodic.NAME] tables of any content: mostly wrong, sometimes valid.
periodic_keys = st.sampled_from(
    ["job", "cron", "every", "args", "kwargs", "queue", "enabled", "catch_up", "timezone", "unique"]
)
periodic_tables = st.dictionaries(
    toml_keys,
    st.dictionaries(periodic_keys | toml_keys, toml_values, max_size=5)
    | st.fixed_dictionaries(
        {"job": st.just("app.jobs.nightly") | toml_values},
        optional={
            "cron": st.sampled_from(["0 3 * * *", "* * * * * *", "0 0 31 2 *", "x"]) | toml_values,
            "every": st.sampled_from([1, 0.5, 0, -1]) | toml_values,
            "timezone": st.sampled_from(["UTC", "Europe/Paris", "Europe", "../etc", ""])
            | toml_values,
            "unique": st.sampled_from(["until_executed", True, False]) | toml_values,
        },
    ),
    max_size=2,
)
documents = st.builds(
    lambda top, periodic: (top, periodic),
    st.dictionaries(
        st.sampled_from(sorted(SETTINGS)) | toml_keys.filter(lambda key: key != "periodic"),
        toml_values,
        max_size=4,
    ),
    st.none() | periodic_tables | toml_values,
)


def write_document(top: dict[str, Any], periodic: Any) -> str:
    lines = [f"{toml_string(key)} = {toml_value(value)}" for key, value in top.items()]
    if isinstance(periodic, dict) and all(isinstance(t, dict) for t in periodic.values()):
        for name, table in periodic.items():
            lines.append(f"[periodic.{toml_string(name)}]")
            lines += [f"{toml_string(key)} = {toml_value(value)}" for key, value in table.items()]
    elif periodic is not None:
        lines.append(f"periodic = {toml_value(periodic)}")
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(60)
@FUZZ
@given(document=documents)
@example(document=({}, {"a\nb": {"cron": 1}}))  # a table name with a newline
@example(document=({"shutdown_timeout": 10**400}, None))
def test_any_document_of_settings_and_periodic_tables_loads_or_is_refused(
    document: tuple[dict[str, Any], Any], config_path: Path
) -> None:
    config_path.write_text(write_document(*document), encoding="utf-8")
    outcome = load_or_refuse(config_path)
    if isinstance(outcome, ConfigError):
        # Which key is to blame: the message quotes it, or the periodic table's name.
        names = [repr(key) for key in document[0]] + ["periodic"]
        assert any(name in str(outcome) for name in names), f"names no key: {outcome}"


@pytest.mark.timeout(60)
@FUZZ
@given(text=st.text(max_size=200) | st.binary(max_size=200))
@example(text="a = " + "9" * 5000)  # tomllib raises a bare ValueError past 4300 digits
@example(text=b"\xff\xfe")
@example(text="a = " + "[" * 5000 + "]" * 5000)  # tomllib: RecursionError
@example(text="a = " + "{a=" * 3000 + "1" + "}" * 3000)
@example(text="[periodic]\nx = 1\n")
@example(text="periodic = 3\n")
@example(text="[periodic.a]\njob = 'x'\nevery = 1\n[periodic.a.b]\n")
def test_any_text_as_the_config_file_loads_or_is_refused_naming_the_file(
    text: str | bytes, config_path: Path
) -> None:
    if isinstance(text, str):
        config_path.write_text(text, encoding="utf-8", errors="surrogatepass")
    else:
        config_path.write_bytes(text)
    load_or_refuse(config_path)


# --- environment overrides ---------------------------------------------------------

ENV_VARS = sorted((var, name) for name, setting in SETTINGS.items() for var in setting.env_vars)

# What os.environ can hold on POSIX: any text but NUL, undecodable bytes
# arriving as lone surrogates (surrogateescape).
env_text = st.text(st.characters(exclude_characters="\x00"), max_size=40) | st.sampled_from(
    ["auto", "embedded", "0", "-1", "1e400", "9" * 5000, "nan", "inf", "a,b", "x:0", " , "]
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("var", "name"), ENV_VARS)
@FUZZ
@given(text=env_text)
def test_any_env_override_loads_or_is_refused_naming_the_variable(
    var: str, name: str, text: str
) -> None:
    try:
        config = load_config(None, env={var: text})
    except ConfigError as error:
        assert_one_line(str(error))
        assert str(error).startswith(f"environment {var}: "), str(error)
        return
    if text.strip():  # an empty variable counts as unset
        assert getattr(config, name) == SETTINGS[name].parse(text) or name == "processes"


# --- the command line ---------------------------------------------------------------

# Keys `check` may be fuzzed with: not app/middleware (it would import fuzzed
# module names) and none of the redis_* settings (the environment pins the URL
# to NOWHERE; a fuzzed sentinel address could point anywhere).
CLI_KEYS = sorted(
    name for name in SETTINGS if name not in ("app", "middleware") and not name.startswith("redis_")
)


@pytest.mark.timeout(60)
@settings(FUZZ, max_examples=15)
@given(
    document=st.text(max_size=80)
    | st.builds(
        lambda key, value: f"{key} = {toml_value(value)}\n",
        st.sampled_from(CLI_KEYS),
        toml_values,
    )
)
@example(document="a = " + "9" * 5000)
@example(document="shutdown_timeout = " + "9" * 400)
@example(document="concurrency = 0\n")
@example(document="concurency = 4\n")
def test_check_command_exits_2_with_one_line_or_runs_never_a_traceback(
    document: str, config_path: Path
) -> None:
    config_path.write_text(document, encoding="utf-8", errors="surrogatepass")
    result = CliRunner().invoke(
        main,
        ["check", "-c", str(config_path)],
        env={"JOBMASTER_REDIS_URL": NOWHERE, "REDIS_URL": NOWHERE},
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}\n{result.output}"
    )
    assert "Traceback" not in result.output
    # A valid config gets as far as Redis, which is nowhere: exit 1, not 0 or 2.
    assert result.exit_code in (1, 2), result.output
    if result.exit_code == 2:
        [line] = result.stderr.splitlines()
        assert line.startswith(f"jobmaster: {config_path}: "), line
