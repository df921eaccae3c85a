"""The secret a job's pods share, with which a fix posted in the job's store is signed.

The job's rendezvous store (torch's ``TCPStore``) has no authentication: whoever
reaches its port can write any key. A pod therefore applies a fix read from it only
when the fix carries an HMAC-SHA256 made with a secret every pod of the job holds
and no one else does: ``PODCODE_JOB_SECRET`` (the secret itself) or
``PODCODE_JOB_SECRET_FILE`` (a file that holds it, such as a Kubernetes Secret
mounted as a volume). Without one, nothing is posted or applied, and the error
says how to set one up.

The environment is passed in; the file is read here and nowhere else.
"""

from __future__ import annotations

import os

from interactive.base.errors import PodcodeError
from interactive.base.types import Environ

ENV = "PODCODE_JOB_SECRET"
"""The secret itself (``secretKeyRef`` in the pod's ``env``)."""
ENV_FILE = "PODCODE_JOB_SECRET_FILE"
"""A file holding the secret (a Secret mounted as a volume); read when ``ENV`` is unset."""
MIN_BYTES = 16
"""A shorter secret is refused: it could be guessed by whoever reaches the store."""
DOCS = "docs/frameworks/distributed.md#the-jobs-secret"
"""Where the set-up of the secret is explained."""


class JobSecretError(PodcodeError):
    """No usable secret: a fix is neither posted nor applied across pods."""


def _missing() -> JobSecretError:
    return JobSecretError(
        f"no job secret: a fix is carried between the job's pods only when it is signed "
        f"with a secret they share; set {ENV} (from a Kubernetes Secret, secretKeyRef) "
        f"or {ENV_FILE} (the path of the mounted Secret) in every pod of the job; "
        f"see {DOCS}"
    )


def load(environ: Environ | None = None) -> bytes:
    """The job's secret, from ``PODCODE_JOB_SECRET`` or else the file named by
    ``PODCODE_JOB_SECRET_FILE`` (surrounding whitespace, a trailing newline
    included, is dropped); raises :class:`JobSecretError` saying how to set one."""
    environ = os.environ if environ is None else environ
    raw = environ.get(ENV, "").strip().encode()
    source = ENV
    if not raw:
        path = environ.get(ENV_FILE, "").strip()
        if not path:
            raise _missing()
        try:
            with open(path, "rb") as file:
                raw = file.read().strip()
        except OSError as exc:
            raise JobSecretError(
                f"{ENV_FILE}={path!r} cannot be read ({exc.strerror}); see {DOCS}"
            ) from None
        source = f"{ENV_FILE}={path!r}"
    if len(raw) < MIN_BYTES:
        raise JobSecretError(
            f"the job secret from {source} has {len(raw)} bytes, fewer than {MIN_BYTES}: "
            f"use a random one (e.g. 32 bytes of `openssl rand -hex 32`); see {DOCS}"
        )
    return raw
