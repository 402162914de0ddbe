"""The producer's lean path (pusher.py): shared round trips, each caller's own
reply or error, no re-send of a push that may have run, and forks.

To make "these calls share one round trip" a fact rather than a likelihood,
a test holds the sender lock while its threads queue their pushes, then lets
go: the first thread to get the lock sends them all.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from jobmaster.client import Client
from jobmaster.embedded import RedisServerProcess
from jobmaster.errors import EnqueueError, EnqueueUnconfirmed
from jobmaster.keys import Keys
from tests import helpers
from tests.helpers import holds_for, wait_until

K = Keys()
pytestmark = pytest.mark.timeout(60)


def together(
    client: Client, count: int, push: Callable[[int], Any], meanwhile: Any = None
) -> list[Any]:
    """``push(i)`` from ``count`` threads, all queued behind the held sender lock,
    then sent in one round trip; each thread's jid or exception, by ``i``."""
    pusher = client.pusher
    assert pusher is not None
    results: list[Any] = [None] * count

    def call(index: int) -> None:
        try:
            results[index] = push(index)
        except Exception as error:  # each caller's own, checked by the test
            results[index] = error

    threads = [threading.Thread(target=call, args=(i,)) for i in range(count)]
    with pusher._lock:
        for thread in threads:
            thread.start()
        wait_until(lambda: len(pusher._waiting) == count, timeout=10)
        trips = pusher.round_trips
        if meanwhile is not None:
            meanwhile()
    for thread in threads:
        thread.join(timeout=30)
    assert pusher.round_trips == trips + 1, "the calls did not share one round trip"
    return results


def queued(store: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in store.lrange(K.queue(queue), 0, -1)]


def test_concurrent_callers_share_a_round_trip_and_each_gets_its_own_jid(
    client: Client, store: redis.Redis
) -> None:
    jids = together(client, 16, lambda i: client.push({"job": "x.y", "args": [i]}))
    assert all(isinstance(jid, str) for jid in jids) and len(set(jids)) == 16
    by_jid = {job["jid"]: job["args"] for job in queued(store)}
    assert by_jid == {jid: [i] for i, jid in enumerate(jids)}  # each caller's own job
    assert all(store.get(K.status(jid)) == b"queued" for jid in jids)


def test_an_error_reply_reaches_its_own_caller_only(client: Client, store: redis.Redis) -> None:
    store.set(K.queue("weird"), "forged")

    def push(i: int) -> Any:
        return client.push({"job": "x.y", "args": [i], "queue": "weird" if i % 2 else "fine"})

    results = together(client, 8, push)
    for i, result in enumerate(results):
        if i % 2:
            assert isinstance(result, EnqueueError), result
            assert f"{K.queue('weird')} holds a string" in str(result)
        else:
            assert isinstance(result, str), result
    assert len({id(error) for error in results[1::2]}) == 4  # an exception each
    assert sorted(job["args"][0] for job in queued(store, "fine")) == [0, 2, 4, 6]


def test_a_script_flushed_meanwhile_is_loaded_and_each_call_runs_once(
    client: Client, store: redis.Redis
) -> None:
    client.push({"job": "x.y"})
    jids = together(client, 6, lambda i: client.push({"job": "x.y"}), store.script_flush)
    assert all(isinstance(jid, str) for jid in jids)
    assert len(queued(store)) == 7 and {job["jid"] for job in queued(store)} >= set(jids)


def test_a_connection_the_server_closed_while_idle_is_replaced_without_an_error(
    client: Client, store: redis.Redis
) -> None:
    client.push({"job": "x.y"})
    pusher = client.pusher
    assert pusher is not None and pusher._poll is not None
    store.client_kill_filter(_type="normal", skipme=True)  # as a restart or idle timeout does
    poll = pusher._poll
    wait_until(lambda: poll.poll(0), timeout=10, message="the close never reached us")
    assert isinstance(client.push({"job": "x.y"}), str)  # nothing was sent on the dead one
    assert len(queued(store)) == 2


def test_a_push_that_never_left_is_a_plain_enqueue_error() -> None:
    client = Client(f"redis://127.0.0.1:{helpers.free_port()}/0?socket_connect_timeout=1")
    with pytest.raises(EnqueueError) as raised:
        client.push({"job": "x.y"})
    assert not isinstance(raised.value, EnqueueUnconfirmed)


class ReplyEater:
    """A TCP forwarder to Redis that, once ``eat`` is set, forwards what the
    client sends but drops what Redis answers: the commands run, their
    replies never arrive (a connection lost after Redis ran them)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.eat = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, name="test-reply-eater", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self.sockets += [client, server]
            for source, sink, replies in ((client, server, False), (server, client, True)):
                pump = threading.Thread(target=self._pump, args=(source, sink, replies))
                pump.daemon = True
                pump.start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if not (replies and self.eat.is_set()):
                    sink.sendall(chunk)
        except OSError:
            pass  # either side closed

    def close(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()


def test_a_lost_reply_fails_each_caller_with_its_jid_and_is_never_sent_again(
    redis_server: RedisServerProcess, store: redis.Redis
) -> None:
    """Every push of the round trip ran, but no reply came back before the
    socket timeout: each caller gets an EnqueueUnconfirmed naming its jid, and
    nothing is sent again (that would have enqueued each job twice); the jid's
    status tells the job landed."""
    eater = ReplyEater(redis_server.port)
    try:
        client = Client(f"redis://127.0.0.1:{eater.port}/0?socket_timeout=0.5")
        client.push({"job": "x.y"})  # connected, script loaded
        push = lambda i: client.push({"job": "x.y", "args": [i]})  # noqa: E731
        results = together(client, 8, push, eater.eat.set)
        assert all(isinstance(error, EnqueueUnconfirmed) for error in results), results
        assert len({id(error) for error in results}) == 8  # an exception each
        jids = [error.jids[0] for error in results]
        assert all(f"jid {jid}" in str(error) for jid, error in zip(jids, results, strict=True))
        wait_until(lambda: len(queued(store)) == 9, timeout=10)
        holds_for(0.5, lambda: len(queued(store)) == 9, "a push was sent again")
        assert {job["jid"] for job in queued(store)} >= set(jids)
        assert all(store.get(K.status(jid)) == b"queued" for jid in jids)
        eater.eat.clear()
        assert isinstance(client.push({"job": "x.y"}), str)  # a new connection for the next one
        assert len(queued(store)) == 10
    finally:
        eater.close()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_starts_over_whatever_its_parent_was_sending(
    client: Client, store: redis.Redis
) -> None:
    """The fork happens while the parent's sender lock is held and three calls
    wait behind it: the child neither waits for that lock nor sends those calls
    (the parent does), nor touches the parent's connection."""
    client.push({"job": "x.y", "args": ["first"]})
    pusher = client.pusher
    assert pusher is not None
    parent_conn = pusher._conn
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(client.push({"job": "x.y", "args": ["p"]})))
        for _ in range(3)
    ]
    with pusher._lock:
        for thread in threads:
            thread.start()
        wait_until(lambda: len(pusher._waiting) == 3, timeout=10)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.alarm(20)  # a child stuck on the inherited lock dies, and fails the test
                jid = client.push({"job": "x.y", "args": ["child"]})
                own = pusher._conn is not parent_conn and not pusher._waiting
                code = 0 if jid and own else 1
            finally:
                os._exit(code)
        deadline = time.monotonic() + 30
        while not (done := os.waitpid(pid, os.WNOHANG))[0] and time.monotonic() < deadline:
            time.sleep(0.01)
        if not done[0]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        assert done[0] and os.WIFEXITED(done[1]) and os.WEXITSTATUS(done[1]) == 0
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == 3 and all(isinstance(jid, str) for jid in results)
    assert isinstance(client.push({"job": "x.y", "args": ["last"]}), str)  # ours still works
    args = sorted(job["args"][0] for job in queued(store))
    assert args == ["child", "first", "last", "p", "p", "p"]  # each once


def test_a_readonly_reply_is_sent_again_once_on_a_new_connection(
    private_redis: RedisServerProcess,
) -> None:
    """READONLY (a primary demoted by a failover) means the push did not run: it
    is sent again once, on a new connection (through Sentinel, to the new
    primary); still refused, the caller gets it, and the next push reconnects."""
    store = private_redis.client()
    client = Client(private_redis.url)
    client.push({"job": "x.y"})
    store.replicaof("127.0.0.1", helpers.free_port())  # read-only from now on
    sent = int(store.info("commandstats")["cmdstat_evalsha"]["calls"])
    with pytest.raises(EnqueueError, match="read only replica") as raised:
        client.push({"job": "x.y"})
    assert isinstance(raised.value.__cause__, redis.ReadOnlyError)
    assert int(store.info("commandstats")["cmdstat_evalsha"]["calls"]) == sent + 2
    store.replicaof("NO", "ONE")
    assert isinstance(client.push({"job": "x.y"}), str)
    assert store.llen(K.queue("default")) == 2


def test_many_threads_pushing_for_a_while_each_get_their_own_jids(
    client: Client, store: redis.Redis
) -> None:
    """Gates opened and nudges sent in every interleaving the threads happen on:
    every call answered, each once, none lost or doubled."""
    jids: list[list[str | None]] = [[] for _ in range(16)]

    def produce(index: int) -> None:
        for n in range(150):
            jids[index].append(client.push({"job": "x.y", "args": [index, n]}))

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=50)
    assert not any(thread.is_alive() for thread in threads)
    by_jid = {job["jid"]: job["args"] for job in queued(store)}
    assert len(by_jid) == 16 * 150
    assert all(by_jid[jid] == [i, n] for i in range(16) for n, jid in enumerate(jids[i]))  # type: ignore[index]
    pusher = client.pusher
    assert pusher is not None and pusher.round_trips <= 16 * 150
