"""What a job's history and an owner's audit log answer (domain/revisions.py): a job's revisions, one
revision, the diff between two, and every write of the owner's jobs, newest first, each a page at a time
with a cursor only that listing accepts. Another owner's job, or its revisions, answer as a missing one."""

from __future__ import annotations

from dataclasses import dataclass

from tickwork.domain.errors import NotFoundError
from tickwork.domain.revisions import FieldChange, Revision, diff
from tickwork.services.ports import RevisionReader
from tickwork.services.runs import decode_cursor, encode_cursor, plausible_id
from tickwork.services.watching import JobOwnership

MAX_REVISIONS_PAGE = 100


@dataclass(frozen=True, slots=True)
class RevisionPage:
    revisions: list[Revision]
    next_cursor: str | None


class RevisionService:
    def __init__(self, jobs: JobOwnership, reader: RevisionReader) -> None:
        self._jobs = jobs
        self._reader = reader

    def history(self, owner: str, job_id: str, limit: int, cursor: str | None) -> RevisionPage:
        """The job's revisions, newest first; a deleted job's too (its revisions name their owner)."""
        limit = max(1, min(limit, MAX_REVISIONS_PAGE))
        scope = f"revisions|{owner}|{job_id}"
        before = decode_cursor(cursor, ("k",), scope)["k"] if cursor else None
        revisions, after = (
            self._reader.job_revisions(job_id, limit, before) if plausible_id(job_id) else ([], None)
        )
        if not revisions:
            self._jobs.get(owner, job_id)  # none yet (a job older than revisions), or not the owner's: 404
        elif any(revision.owner != owner for revision in revisions):
            raise NotFoundError(f"job {job_id} not found")
        return RevisionPage(revisions, None if after is None else encode_cursor({"k": after}, scope))

    def revision(self, owner: str, job_id: str, number: int) -> Revision:
        found = self._reader.get_revision(job_id, number) if plausible_id(job_id) else None
        if found is None or found.owner != owner:
            raise NotFoundError(f"job {job_id} has no revision {number}")
        return found

    def diff(
        self, owner: str, job_id: str, before: int, after: int
    ) -> tuple[Revision, Revision, list[FieldChange]]:
        """What changed from revision `before` to `after` (either order), field by field."""
        old, new = self.revision(owner, job_id, before), self.revision(owner, job_id, after)
        return old, new, diff(old.definition, new.definition)

    def audit(self, owner: str, limit: int, cursor: str | None) -> RevisionPage:
        """Every write of the owner's jobs (deleted ones too), newest first."""
        limit = max(1, min(limit, MAX_REVISIONS_PAGE))
        scope = f"audit|{owner}"
        before = decode_cursor(cursor, ("k",), scope)["k"] if cursor else None
        revisions, after = self._reader.owner_audit(owner, limit, before)
        return RevisionPage(revisions, None if after is None else encode_cursor({"k": after}, scope))
