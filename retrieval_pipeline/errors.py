"""User-facing errors.

Every error a user can cause or fix derives from :class:`RetrievalPipelineError` and
carries a message that says what went wrong and what to do. The CLI prints these
without a stack trace; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class RetrievalPipelineError(Exception):
    """Base class for errors that a user can act on."""


class ConfigurationError(RetrievalPipelineError, ValueError):
    """A setting, provider name or environment variable is invalid."""


class DatabaseUnavailableError(RetrievalPipelineError):
    """PostgreSQL cannot be reached or started."""


class DatabaseTimeoutError(DatabaseUnavailableError):
    """A statement ran past the statement timeout and was cancelled."""


class DimensionMismatchError(RetrievalPipelineError):
    """The embedder's dimension or model differs from the index's."""


class InvalidQueryError(RetrievalPipelineError, ValueError):
    """A query is empty, too long or otherwise unusable."""


class IngestError(RetrievalPipelineError):
    """A source file could not be loaded; the message names the file and the reason."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class AccessDeniedError(RetrievalPipelineError):
    """The caller is not authenticated, or lacks the grant an operation needs."""


class WriteConflictError(RetrievalPipelineError, ValueError):
    """A write would replace a hidden document, or change who can read one."""


class RecordRejectedError(RetrievalPipelineError):
    """The database refused a record (a NUL character in its text, a duplicate id).

    Raised by the store's writes after their transaction rolled back, so nothing of
    the refused write is stored. The driver's error is the ``__cause__``.
    """

    def __init__(self, reason: str, source_ids: tuple[str, ...] = ()) -> None:
        super().__init__(f"database rejected: {reason}")
        self.reason = reason
        self.source_ids = source_ids
