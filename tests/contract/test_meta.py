"""The meta store on every backend: get / put / compare-and-set / list by prefix / delete of
small records, their time to live on the backend's clock, and the lease built on them."""

from __future__ import annotations

import asyncio

from relaymq.backends.base import Backend
from relaymq.testing import FakeClock
from tests.conftest import MakeBackend


async def test_put_get_list_and_delete(backend: Backend, q: str) -> None:
    k = f"t:{q}:"
    assert await backend.meta_get(k + "a") is None
    await backend.meta_put(k + "b", b"\x00two")
    await backend.meta_put(k + "a", b"one")
    a = await backend.meta_get(k + "a")
    assert a is not None and a.key == k + "a" and a.value == b"one" and a.expires is None
    await backend.meta_put(k + "a", b"uno")
    again = await backend.meta_get(k + "a")
    assert again is not None and again.value == b"uno" and again.version > a.version
    listed = await backend.meta_list(k)
    assert [(r.key, r.value) for r in listed] == [(k + "a", b"uno"), (k + "b", b"\x00two")]
    assert await backend.meta_list(k + "c") == []
    assert await backend.meta_delete(k + "a") is True
    assert await backend.meta_delete(k + "a") is False
    assert await backend.meta_get(k + "a") is None
    assert [r.key for r in await backend.meta_list(k)] == [k + "b"]


async def test_swap_writes_only_from_the_version_read(backend: Backend, q: str) -> None:
    key = f"t:{q}:s"
    assert await backend.meta_swap(key, None, b"1") is True  # created
    assert await backend.meta_swap(key, None, b"x") is False  # exists
    first = await backend.meta_get(key)
    assert first is not None and first.value == b"1"
    assert await backend.meta_swap(key, first.version, b"2") is True
    assert await backend.meta_swap(key, first.version, b"3") is False  # stale version
    now = await backend.meta_get(key)
    assert now is not None and now.value == b"2" and now.version > first.version
    assert await backend.meta_swap(f"t:{q}:none", 1, b"x") is False  # nothing is created
    assert await backend.meta_get(f"t:{q}:none") is None


async def test_one_of_concurrent_swaps_wins(
    make_backend: MakeBackend, clock: FakeClock, q: str
) -> None:
    handles = [await make_backend(clock) for _ in range(4)]
    key = f"t:{q}:race"
    created = await asyncio.gather(
        *(h.meta_swap(key, None, b"%d" % i) for i, h in enumerate(handles * 4))
    )
    assert created.count(True) == 1
    record = await handles[1].meta_get(key)
    assert record is not None
    moved = await asyncio.gather(
        *(h.meta_swap(key, record.version, b"m%d" % i) for i, h in enumerate(handles * 4))
    )
    assert moved.count(True) == 1
    final = await handles[2].meta_get(key)
    assert final is not None and final.value == b"m%d" % moved.index(True)


async def test_a_record_lapses_after_its_ttl(backend: Backend, clock: FakeClock, q: str) -> None:
    k = f"t:{q}:"
    await backend.meta_put(k + "short", b"s", ttl=10)
    await backend.meta_put(k + "long", b"l", ttl=100)
    await backend.meta_put(k + "ever", b"e")
    short = await backend.meta_get(k + "short")
    assert short is not None and short.expires is not None
    assert abs(short.expires - (clock() + 10)) < 0.01  # on the backend's (test) clock
    clock.advance(11)
    assert await backend.meta_get(k + "short") is None
    assert [r.key for r in await backend.meta_list(k)] == [k + "ever", k + "long"]
    assert await backend.meta_delete(k + "short") is False
    assert await backend.meta_swap(k + "short", None, b"again", ttl=10) is True  # absent now
    clock.advance(100)
    assert [r.key for r in await backend.meta_list(k)] == [k + "ever"]
    assert await backend.meta_swap(k + "ever", None, b"x", ttl=0) is False


async def test_a_lease_is_exclusive_renewed_and_given_up(
    make_backend: MakeBackend, clock: FakeClock, q: str
) -> None:
    a, b = await make_backend(clock), await make_backend(clock)
    name = f"lease-{q}"
    assert await a.lease(name, "A", 10)
    assert not await b.lease(name, "B", 10)
    clock.advance(8)
    assert await a.lease(name, "A", 10)  # renewed: it holds until 18 from now on
    clock.advance(8)
    assert not await b.lease(name, "B", 10)
    assert not await b.lease(name, "B", 0)  # giving up another's lease changes nothing
    assert not await b.lease(name, "B", 10)
    assert not await a.lease(name, "A", 0)  # given up
    assert await b.lease(name, "B", 10)
    taken = await asyncio.gather(
        *(h.lease(f"{name}-race", f"o{i}", 10) for i, h in enumerate([a, b] * 4))
    )
    assert taken.count(True) == 1
