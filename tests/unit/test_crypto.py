"""Encrypted arguments: sealing, opening, rotation, and keys that never show."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from jobmaster import crypto
from jobmaster import payload as wire
from jobmaster.config import load_config
from jobmaster.crypto import DecryptError, Keyring
from jobmaster.errors import ConfigError, JobmasterError

KEY_A = "a-first-secret-key-0123456789"
KEY_B = "b-second-secret-key-0123456789"


@pytest.fixture(autouse=True)
def _unset_keys() -> Iterator[None]:
    yield
    crypto.set_keys(None)


def test_round_trip() -> None:
    ring = Keyring([KEY_A])
    token = ring.seal([1, "two", None], {"x": [1.5, {"y": True}]}, "jid\njob")
    assert ring.open(token, "jid\njob") == ([1, "two", None], {"x": [1.5, {"y": True}]})


def test_the_token_holds_no_plaintext_and_differs_each_time() -> None:
    ring = Keyring([KEY_A])
    token = ring.seal(["card-4242424242424242"], {"password": "hunter2"})
    assert "4242" not in token and "hunter2" not in token and "password" not in token
    assert token != ring.seal(["card-4242424242424242"], {"password": "hunter2"})  # fresh nonce
    assert token.startswith("jm1.") and KEY_A not in token


def test_a_tampered_token_fails_with_a_reason() -> None:
    ring = Keyring([KEY_A])
    version, kid, body = ring.seal([1], {}).split(".")
    raw = bytearray(base64.urlsafe_b64decode(body))
    raw[-1] ^= 1
    tampered = f"{version}.{kid}.{base64.urlsafe_b64encode(bytes(raw)).decode()}"
    with pytest.raises(DecryptError, match="authentication failed") as caught:
        ring.open(tampered)
    assert str(caught.value).startswith("cannot decrypt the arguments: ")


def test_a_token_moved_to_another_job_fails() -> None:
    ring = Keyring([KEY_A])
    token = ring.seal([1], {}, "jid-1\ntests.a")
    with pytest.raises(DecryptError, match="authentication failed"):
        ring.open(token, "jid-2\ntests.a")


def test_rotation_the_first_key_seals_every_key_opens() -> None:
    old = Keyring([KEY_A]).seal(["old"], {})
    rotated = Keyring([KEY_B, KEY_A])
    assert rotated.open(old) == (["old"], {})
    new = rotated.seal(["new"], {})
    assert Keyring([KEY_B]).open(new) == (["new"], {})
    with pytest.raises(DecryptError, match="matches none"):
        Keyring([KEY_A]).open(new)


def test_a_wrong_keyring_fails_with_a_reason_that_shows_no_key() -> None:
    token = Keyring([KEY_A]).seal(["x"], {})
    with pytest.raises(DecryptError) as caught:
        Keyring([KEY_B]).open(token)
    assert "matches none of the 1 key(s)" in caught.value.reason
    assert KEY_A not in str(caught.value) and KEY_B not in str(caught.value)
    with pytest.raises(DecryptError, match="no secret_key is configured"):
        Keyring([]).open(token)


@pytest.mark.parametrize(
    "token",
    [None, 12, "", "jm1.abc", "jm2.00000000.AAAA", "jm1.00000000.!!!!", "jm1.00000000.AAAA"],
)
def test_malformed_tokens_fail_as_bad_payloads(token: object) -> None:
    with pytest.raises(wire.BadPayload, match="cannot decrypt the arguments"):
        Keyring([KEY_A]).open(token)


def test_sealing_without_a_key_says_to_set_secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBMASTER_SECRET_KEY", raising=False)
    crypto.set_keys(None)
    payload = wire.build("tests.x", [1], {}, queue="default")
    with pytest.raises(JobmasterError, match="set secret_key"):
        crypto.seal_payload(payload)


def test_payload_helpers_seal_in_place_and_open_without_changing_it() -> None:
    crypto.set_keys([KEY_A])
    payload = wire.build("tests.x", [1, "secret"], {"k": "v"}, queue="default")
    crypto.seal_payload(payload)
    assert payload["args"] == [] and payload["kwargs"] == {}
    assert "secret" not in wire.encode(payload).decode()
    assert crypto.arguments(payload) == ([1, "secret"], {"k": "v"})
    assert payload["args"] == []  # still sealed: a retry must not store the plaintext
    plain = wire.build("tests.x", [2], {}, queue="default")
    assert crypto.arguments(plain) == ([2], {})


def test_the_keyring_comes_from_the_environment_when_not_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBMASTER_SECRET_KEY", f"{KEY_B}, {KEY_A}")
    crypto.set_keys(None)
    assert len(crypto.keyring()) == 2
    assert crypto.keyring().open(Keyring([KEY_A]).seal([1], {})) == ([1], {})


def test_the_setting_takes_a_string_a_list_or_comma_separated_env() -> None:
    assert load_config(None, env={}).secret_key == []
    assert load_config(None, env={"JOBMASTER_SECRET_KEY": f"{KEY_A},{KEY_B}"}).secret_key == [
        KEY_A,
        KEY_B,
    ]


def test_bad_secret_keys_are_refused_without_showing_them() -> None:
    short = "tooshort"
    with pytest.raises(ConfigError) as caught:
        load_config(None, env={"JOBMASTER_SECRET_KEY": short})
    assert "at least 16" in str(caught.value) and short not in str(caught.value)
    with pytest.raises(ConfigError, match="secret_key") as caught:
        crypto.set_keys([KEY_A, short])
    assert short not in str(caught.value)
    with pytest.raises(ConfigError, match="must be a string or a list of strings"):
        crypto.set_keys([KEY_A, 7])  # type: ignore[list-item]


def test_the_keys_never_appear_in_reprs() -> None:
    config = load_config(None, env={"JOBMASTER_SECRET_KEY": KEY_A})
    assert config.secret_key == [KEY_A]
    assert KEY_A not in repr(config)
    assert KEY_A not in repr(Keyring([KEY_A]))


def test_a_sealed_text_opens_only_as_what_and_for_whom_it_was_sealed() -> None:
    """A job's sealed result or error names its jid and purpose (issue 23, item 3):
    it cannot be passed off as another job's, as its error, or as arguments."""
    crypto.set_keys([KEY_A])
    token = crypto.seal_text('{"card": "4242"}', "jid-1", crypto.RESULT)
    assert crypto.looks_sealed(token) and not crypto.looks_sealed('"jm1.x"')
    assert crypto.open_text(token, "jid-1", crypto.RESULT) == '{"card": "4242"}'
    for jid, purpose in [("jid-2", crypto.RESULT), ("jid-1", crypto.ERROR)]:
        with pytest.raises(DecryptError, match=f"the {purpose} of job {jid}"):
            crypto.open_text(token, jid, purpose)
    with pytest.raises(DecryptError):
        Keyring([KEY_A]).open(token, "jid-1\nresult")  # not as arguments either
