"""The dashboard's job page shows a complete job's result (bounded, escaped)."""

from __future__ import annotations

import json

import pytest
import redis
from starlette.testclient import TestClient

from jobmaster.keys import Keys

pytestmark = pytest.mark.timeout(60)
K = Keys()
JID = "0123456789abcdef01234567"


def test_the_job_page_shows_the_result_of_a_complete_job(
    client: TestClient, conn: redis.Redis
) -> None:
    conn.set(K.status(JID), "complete")
    conn.set(K.result(JID), json.dumps({"html": "<script>alert(1)</script>", "n": 2}))
    html = client.get(f"/jobs/{JID}").text
    assert '<th>result</th><td class="result"><pre>{' in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "&#34;n&#34;: 2" in html  # pretty-printed, quotes escaped


def test_no_result_reads_none_and_other_statuses_show_no_result_row(
    client: TestClient, conn: redis.Redis
) -> None:
    conn.set(K.status(JID), "complete")
    assert '<td class="result"><code>None</code>' in client.get(f"/jobs/{JID}").text
    conn.set(K.status(JID), "working")
    conn.set(K.result(JID), "1")
    assert 'class="result"' not in client.get(f"/jobs/{JID}").text


def test_a_huge_or_forged_result_is_shown_in_part(client: TestClient, conn: redis.Redis) -> None:
    conn.set(K.status(JID), "complete")
    conn.set(K.result(JID), b"[" + b"1," * (5 * 1024 * 1024) + b"1]")
    answer = client.get(f"/jobs/{JID}")
    assert answer.status_code == 200 and "bytes in all)" in answer.text
    assert len(answer.text) < 200 * 1024
    conn.delete(K.result(JID))
    conn.hset(K.result(JID), "a", "b")  # another type: read as none
    assert '<td class="result"><code>None</code>' in client.get(f"/jobs/{JID}").text
