"""The executor tells the target invoker whose run it calls (issue 31): an HTTP call is signed with that
owner's own key."""

from __future__ import annotations

from random import Random

from tests.fakes import RecordingDispatcher, RecordingMetrics, ScriptedInvoker
from tests.services.test_auditing import FIRE, planned_job
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.services.executing import Executor, ExecutorConfig


def test_the_invocation_names_the_runs_owner(store: MemoryStore, clock: FakeClock) -> None:
    dispatcher = RecordingDispatcher()
    job = planned_job(store, clock, dispatcher)
    run = store.get_run(job.job_id, FIRE)
    assert run is not None and run.owner == "alice"
    invoker = ScriptedInvoker()
    clock.set(FIRE)

    Executor(
        store, invoker, dispatcher, clock, RecordingMetrics(), ExecutorConfig(worker_id="w"), Random(1)
    ).execute(RunMessage.for_run(run))

    [(_, invocation)] = invoker.calls
    assert invocation.owner == "alice" and invocation.run_id == run.run_id
