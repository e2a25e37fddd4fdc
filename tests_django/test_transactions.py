"""A task enqueued inside ``transaction.atomic()`` goes through Django's own connection: the
job commits with the view's data, or rolls back with it; from sync code and from an async
view (which opens its transaction in a sync function, as Django requires)."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.db import connection, transaction
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist

from tests_django import djtasks


class Boom(Exception):
    pass


@pytest.fixture(autouse=True)
def orders() -> None:
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS orders (n integer)")
        cursor.execute("DELETE FROM orders")


def order_and_enqueue(n: int, fail: bool = False) -> TaskResult:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO orders (n) VALUES (%s)", [n])
        result = djtasks.add.enqueue(n, 1)
        if fail:
            raise Boom
    return result


def ordered() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT n FROM orders ORDER BY n")
        return [n for (n,) in cursor.fetchall()]


def test_a_task_enqueued_in_a_committed_transaction_runs() -> None:
    result = order_and_enqueue(1)
    assert result.status == TaskResultStatus.READY
    call_command("relaymq_worker", "--drain")
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 2
    assert ordered() == [1]


def test_a_task_enqueued_in_a_rolled_back_transaction_never_was() -> None:
    seen: list[TaskResult] = []
    with pytest.raises(Boom), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO orders (n) VALUES (2)")
        seen.append(djtasks.add.enqueue(2, 1))
        raise Boom
    with pytest.raises(TaskResultDoesNotExist):
        djtasks.add.get_result(seen[0].id)
    assert ordered() == []


def test_from_an_async_view() -> None:
    async def view(n: int, fail: bool) -> TaskResult:
        return await sync_to_async(order_and_enqueue)(n, fail)

    kept = asyncio.run(view(3, False))
    with pytest.raises(Boom):
        asyncio.run(view(4, True))
    call_command("relaymq_worker", "--drain")
    kept.refresh()
    assert kept.status == TaskResultStatus.SUCCESSFUL and kept.return_value == 4
    assert ordered() == [3]
