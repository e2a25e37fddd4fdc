"""RabbitMQBackend: broker delivery over a metadata store (``amqp://...?store=<backend URL>``)."""

from relaymq.backends.rabbitmq.backend import RabbitMQBackend

__all__ = ["RabbitMQBackend"]
