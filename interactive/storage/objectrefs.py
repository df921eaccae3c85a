"""ObjectRefs inside a Ray task's arguments, saved with the objects they point at.

Ray resolves the ObjectRefs passed as a task's own arguments; one inside a list, a dict
or an object reaches the task as a reference, and the task calls ``ray.get`` on it.
Pickled as it is, such a reference names an object of this job's cluster, which is gone
(or out of reach) when "debug again" loads the inputs later, elsewhere. So when a Ray
worker saves a failed task's inputs, each nested reference is saved with its object,
fetched from the cluster (within :data:`FETCH_SECONDS`). Loading the inputs puts the object
back into Ray (``ray.put``, in the Ray the loading process is connected to, or a local
one it starts) and gives the task a reference again, as in the job.
"""

from __future__ import annotations

import io
import logging
import pickle
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

FETCH_SECONDS = 30.0
"""How long saving the inputs waits for one nested object (its task may still run)."""


def put_again(value: Any) -> Any:
    """Loading side: ``value`` put into Ray, its new ObjectRef."""
    import ray

    return ray.put(value)


def dumps_resolved(value: Any, buffer_callback: Callable[[pickle.PickleBuffer], Any]) -> bytes:
    """Pickle ``value`` (as Ray does, with cloudpickle) with each ObjectRef inside it
    replaced by its object, put into Ray again when loaded. Raises what ``ray.get`` raises
    (``GetTimeoutError`` past :data:`FETCH_SECONDS`, the error of a failed task)."""
    import ray
    from ray import cloudpickle

    class Resolving(cloudpickle.CloudPickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, ray.ObjectRef):
                return put_again, (ray.get(obj, timeout=FETCH_SECONDS),)
            return super().reducer_override(obj)  # type: ignore[no-untyped-call]

    out = io.BytesIO()
    pickler = Resolving(out, protocol=5, buffer_callback=buffer_callback)  # type: ignore[no-untyped-call]
    pickler.dump(value)  # type: ignore[no-untyped-call]
    return out.getvalue()
