"""Fetcher.queue_order: strict order as listed, weighted order by draw, without Redis."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from jobmaster.keys import Keys
from jobmaster.worker.fetch import Fetcher

DRAWS = 20_000


def fetcher(weights: list[tuple[str, int]], *, strict: bool) -> Fetcher:
    """A Fetcher over a stand-in context: queue_order needs only config and keys."""
    ctx = SimpleNamespace(
        config=SimpleNamespace(queue_weights=weights, strict=strict),
        keys=Keys(),
    )
    return Fetcher(ctx)  # type: ignore[arg-type]


def test_strict_returns_listed_order() -> None:
    weights = [("low", 1), ("critical", 5), ("default", 2)]
    subject = fetcher(weights, strict=True)
    for _ in range(50):
        assert subject.queue_order() == ["low", "critical", "default"]


def test_queue_keys_are_namespaced() -> None:
    subject = fetcher([("a", 1), ("b", 2)], strict=False)
    assert subject.queue_keys == {"a": Keys().queue("a"), "b": Keys().queue("b")}


def test_single_queue_is_its_own_order() -> None:
    assert fetcher([("only", 4)], strict=False).queue_order() == ["only"]


def test_weighted_first_choice_follows_weights() -> None:
    weights = [("critical", 3), ("default", 2), ("low", 1)]
    subject = fetcher(weights, strict=False)
    names = sorted(name for name, _ in weights)
    firsts: Counter[str] = Counter()
    orders: set[tuple[str, ...]] = set()
    for _ in range(DRAWS):
        order = subject.queue_order()
        assert sorted(order) == names  # a permutation: every queue, none twice
        firsts[order[0]] += 1
        orders.add(tuple(order))
    total = sum(weight for _, weight in weights)
    for name, weight in weights:
        share = firsts[name] / DRAWS
        assert abs(share - weight / total) <= 0.03, (name, share, weight / total)
    assert len(orders) == 6  # every order happens: no queue is always last


def test_weighted_order_with_equal_weights_is_not_fixed() -> None:
    subject = fetcher([("a", 1), ("b", 1)], strict=False)
    firsts = Counter(subject.queue_order()[0] for _ in range(2000))
    assert set(firsts) == {"a", "b"}
    assert 0.4 <= firsts["a"] / 2000 <= 0.6
