"""The Redis settings, checked at load time, before anything is forked.

``checked_settings`` refuses a missing TLS file and the settings that only
make sense together (a TLS file without ``rediss://``, a password in the
URL and in ``redis_password``), naming the key and where it was set: the
option, the environment variable or the file. It needs the settings table
for that, so it sits above settings.py; the target itself (redis_target.py)
sits below it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NoReturn
from urllib.parse import parse_qs, urlsplit

from jobmaster.environment import env_value
from jobmaster.errors import ConfigError
from jobmaster.redis_target import mask_url
from jobmaster.settings import SETTINGS

FILE_KEYS = ("redis_ssl_ca_certs", "redis_ssl_certfile", "redis_ssl_keyfile")
TLS_KEYS = (*FILE_KEYS, "redis_ssl_cert_reqs")


class _Sources:
    """Where the value in force of each setting was set, to name it in an error."""

    def __init__(
        self, file_label: str | None, env: Mapping[str, str], overrides: Mapping[str, Any]
    ) -> None:
        self.settings = SETTINGS
        self.file_label = file_label
        self.env = env
        self.overrides = overrides

    def of(self, key: str) -> str:
        """An option, a variable, the file, or the default."""
        setting = self.settings[key]
        if self.overrides.get(key) not in (None, [], ()):
            return f"option {setting.option or key}"
        found = env_value(setting.env_vars, self.env)
        if found is not None:
            return f"environment {found[0]}"
        return self.file_label or "the default"

    def refuse(self, key: str, message: str) -> NoReturn:
        where = self.of(key)
        prefix = f"{where}: {key!r}" if where == self.file_label else f"{where}: {key}"
        raise ConfigError(f"{prefix} {message}")


def checked_settings(
    values: Mapping[str, Any],
    *,
    base: str,
    file_label: str | None,
    env: Mapping[str, str],
    overrides: Mapping[str, Any],
) -> dict[str, Any]:
    """The TLS files of ``values``, checked and made absolute; ``ConfigError`` for a
    missing one or for Redis settings that contradict each other.

    A relative path in the file is read from the file's folder, as
    ``data_dir`` is; from the environment, from the working directory. Each
    error blames one key that was set on purpose, and says where it was set.
    """
    sources = _Sources(file_label, env, overrides)
    files = {}
    for key in FILE_KEYS:
        if values[key]:
            folder = base if sources.of(key) == file_label else os.getcwd()
            files[key] = _readable(str(values[key]), folder, key, sources)
    _check_combinations(values, sources)
    return files


def _readable(text: str, folder: str, key: str, sources: _Sources) -> str:
    """``text`` as an absolute path to a file this process can read.

    Checked now so that a mistyped certificate path is a config error naming
    the key, not a TLS failure in every child; absolute so that every process
    opens the same file, whatever its working directory.
    """
    try:
        full = os.path.abspath(os.path.join(folder, os.path.expanduser(text)))
    except ValueError:  # a name the file system cannot encode
        sources.refuse(key, f"must be the path of a readable file, got {text!r}")
    if not os.path.isfile(full):
        sources.refuse(key, f"must be the path of a readable file, got {text!r}: no file {full!r}")
    if not os.access(full, os.R_OK):
        sources.refuse(key, f"must be the path of a readable file, got {text!r}: cannot read it")
    return full


def _check_combinations(values: Mapping[str, Any], sources: _Sources) -> None:
    url = str(values["redis_url"])
    scheme = "embedded" if url == "embedded" else urlsplit(url).scheme.lower()
    tls_set = [key for key in TLS_KEYS if values[key] != sources.settings[key].default]
    if tls_set and scheme != "rediss":
        # A forgotten "s" would send the password in clear to a server that
        # the operator meant to reach over TLS.
        sources.refuse(
            tls_set[0],
            f"is a TLS setting: it needs a rediss:// redis_url, got {mask_url(url)} "
            f"(from {sources.of('redis_url')})",
        )
    if values["redis_ssl_keyfile"] and not values["redis_ssl_certfile"]:
        sources.refuse("redis_ssl_keyfile", "needs redis_ssl_certfile, the certificate of that key")
    if values["redis_sentinels"] and scheme not in ("redis", "rediss"):
        sources.refuse(
            "redis_sentinels",
            "need a redis:// or rediss:// redis_url (for the database, user and password), "
            f"got {mask_url(url)}",
        )
    in_url = _credentials_in(url) if scheme in ("redis", "rediss", "unix") else set()
    for key, what in (("redis_username", "user"), ("redis_password", "password")):
        if values[key] and what in in_url:
            sources.refuse(key, f"is set and redis_url has a {what} too: keep one of them")


def _credentials_in(url: str) -> set[str]:
    """Which of "user" and "password" a URL carries (redis-py also reads ``?password=``)."""
    try:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        found = set()
        if parts.username or query.get("username"):
            found.add("user")
        if parts.password or query.get("password"):
            found.add("password")
        return found
    except ValueError:
        return set()
