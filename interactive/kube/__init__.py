"""Kubernetes: the client set-up, the table from API refusals to advice, label and
annotation names, the pod side (labels, events, the pod's own object) and the laptop side
(finding sessions, exec, port-forward).

Runs on: the pod and the laptop. May import: ``base``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interactive.kube.pod import PodClient


def discover_pod() -> PodClient | None:
    """:meth:`PodClient.discover`, importing the Kubernetes client (0.2 s and more) where it
    is called: a session calls it in a worker thread, so that its event loop (which serves
    the control API and the login links) does not stop meanwhile. Outside Kubernetes (no
    ``POD_NAME``, no ``KUBERNETES_SERVICE_HOST``) it imports nothing: a session that ends
    at once is not kept waiting at exit for an import that serves nothing."""
    if not (os.environ.get("POD_NAME") or os.environ.get("KUBERNETES_SERVICE_HOST")):
        return None
    from interactive.kube.pod import PodClient

    return PodClient.discover()
