"""Django tasks, defined with Django's own decorator."""

from __future__ import annotations

from django.tasks import TaskContext, task


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=50)
def shout(word: str) -> str:
    return word.upper()


@task(takes_context=True)
def where(context: TaskContext, tag: str) -> dict[str, object]:
    return {"tag": tag, "id": context.task_result.id, "attempt": context.attempt}


@task
async def async_double(n: int) -> int:
    return 2 * n


@task
def explode() -> None:
    raise ValueError("boom")
