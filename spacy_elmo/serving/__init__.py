"""One model served to many threads, without knowing the model: calls batched, cancelled and counted."""
from .cancel import CallCancelled, CancelHandle
from .request_batcher import RequestBatcher, ServingCounts
from .scheduler import Policy

__all__ = ["CallCancelled", "CancelHandle", "Policy", "RequestBatcher", "ServingCounts"]
