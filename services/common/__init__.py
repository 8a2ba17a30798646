"""Domain types shared by the coordinator, the assignor, the storage layer and the worker SDK."""

from services.common.items import Items, TaskId

__all__ = ["Items", "TaskId"]
