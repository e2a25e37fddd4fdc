"""Tasks with pydantic models as arguments and results (imported by the pydantic tests only)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from relaymq import JobContext, task


class Address(BaseModel):
    street: str
    zip_code: str = Field(pattern=r"^[0-9]{5}$")


class Customer(BaseModel):
    name: str
    age: int = Field(ge=0)
    addresses: list[Address] = []


class Receipt(BaseModel):
    customer: str
    count: int


@task(queue="tests")
async def register(customer: Customer, note: str = "") -> Receipt:
    """Sees a ``Customer`` model (validated on the worker), returns a model."""
    assert isinstance(customer, Customer), type(customer)
    assert all(isinstance(a, Address) for a in customer.addresses)
    return Receipt(customer=customer.name + note, count=len(customer.addresses))


@task(queue="tests")
def register_plain(ctx: JobContext, customers: list[Customer] | None) -> list[str]:
    """A plain function with a context first and an optional list of models."""
    return [c.name for c in customers or []]
