"""Serving one model to many threads, without knowing the model: calls run together in the batches the scheduler
plans (:class:`RequestBatcher`, :class:`Policy`), cancelled from another thread (:class:`CancelHandle`), counted
for monitoring (:class:`ServingCounts`)."""
from .cancel import CallCancelled, CancelHandle
from .request_batcher import RequestBatcher, ServingCounts
from .scheduler import Policy

__all__ = ["CallCancelled", "CancelHandle", "Policy", "RequestBatcher", "ServingCounts"]
