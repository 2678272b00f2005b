"""A job's concurrency key (issue 28, part 2), on the in-memory store and slots: the runs of one owner's
jobs naming the same key with limit 1 never run at once (the second waits in the queue, never fails),
while another owner's job naming the same key runs beside them; an edit of the key reaches the runs
already planned; a callback run's heartbeat keeps its key's slot."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.fakes import RecordingDispatcher, RecordingMetrics, ScriptedInvoker
from tests.services.test_callbacks import ACCEPTED, HEARTBEAT, LINKS, SECRET, TIMEOUT
from tests.services.test_executing import FIRE, HTTP
from tickwork.adapters.memory.slots import MemorySlots
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.jobs import JobPatch, JobSpec, PoliciesPatch
from tickwork.domain.models import Completion, Concurrency, Job, Policies, Run, RunState
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.slots import ALL, Pool, SlotLimits, key_pool
from tickwork.services.callbacks import Callbacks
from tickwork.services.executing import Executor, ExecutorConfig, Outcome
from tickwork.services.jobs import JobService, JobServiceConfig
from tickwork.services.planning import Planner

HOST = Concurrency("api.example.com", 1)
CAP = 10


class KeyWorld:
    """Jobs of two owners on one store, one instance-wide bound of CAP and the slots every executor shares."""

    def __init__(self, store: MemoryStore, clock: FakeClock) -> None:
        self.store, self.clock = store, clock
        self.dispatcher = RecordingDispatcher()
        self.metrics = RecordingMetrics()
        self.invoker = ScriptedInvoker()
        self.slots = MemorySlots()
        self.limits = SlotLimits(CAP)
        self.jobs = JobService(store, self.dispatcher, clock, JobServiceConfig(shard_count=1))

    def create(
        self,
        owner: str,
        name: str,
        concurrency: Concurrency | None = HOST,
        expression: str = "*/5 * * * *",
        **spec: object,
    ) -> Job:
        return self.jobs.create(
            owner,
            JobSpec(
                name=name,
                schedule=parse_schedule(expression),
                target=HTTP,
                policies=Policies(concurrency=concurrency),
                **spec,  # type: ignore[arg-type]
            ),
        )

    def plan(self) -> None:
        Planner(self.store, self.dispatcher, self.clock).plan(0, FIRE - timedelta(seconds=110))
        self.clock.set(FIRE + timedelta(milliseconds=100))

    def message(self, job: Job) -> RunMessage:
        [run] = [r for r in self.dispatcher.sent if r.job_id == job.job_id]
        return RunMessage.from_json(RunMessage.for_run(run).to_json())  # as the queue hands it over

    def executor(self, worker: str, callbacks: bool = False) -> Executor:
        config = ExecutorConfig(worker_id=worker, limits=self.limits, callbacks=LINKS if callbacks else None)
        return Executor(
            self.store, self.invoker, self.dispatcher, self.clock, self.metrics, config, slots=self.slots
        )

    def run(self, job: Job) -> Run:
        run = self.store.get_run(job.job_id, FIRE)
        assert run is not None
        return run

    def in_flight(self, pool: Pool) -> int:
        return self.slots.in_flight(pool, self.clock.now())


@pytest.fixture
def world(store: MemoryStore, clock: FakeClock) -> KeyWorld:
    return KeyWorld(store, clock)


def test_one_owners_jobs_sharing_a_key_of_limit_1_never_run_at_once_another_owners_do(
    world: KeyWorld,
) -> None:
    first, second = world.create("alice", "sync a"), world.create("alice", "sync b")
    bobs = world.create("bob", "sync c")
    world.plan()
    alices_pool, bobs_pool = key_pool("alice", HOST.key, 1), key_pool("bob", HOST.key, 1)
    during: list[tuple[str, Outcome, int, int, int]] = []

    def others_arrive_while_the_first_runs() -> None:
        for job in (second, bobs):
            outcome = world.executor(f"worker-{job.name[-1]}").execute(world.message(job))
            seen = (world.in_flight(alices_pool), world.in_flight(bobs_pool), world.in_flight(Pool(ALL, CAP)))
            during.append((job.name, outcome, *seen))

    world.invoker.during_call = others_arrive_while_the_first_runs
    assert world.executor("worker-a").execute(world.message(first)) is Outcome.SUCCEEDED

    # alice's second job waited for her key's one slot (never ran, never failed); bob's job, naming the
    # same key, ran in his own pool while alice's first run held hers.
    assert during == [
        ("sync b", Outcome.WAITING_FOR_SLOT, 1, 0, 1),
        ("sync c", Outcome.SUCCEEDED, 1, 0, 1),
    ]
    assert world.run(second).state is RunState.PLANNED and world.run(bobs).state is RunState.SUCCEEDED
    [waiting] = world.dispatcher.messages
    assert waiting.run_id == world.run(second).run_id and waiting.slot_waits == 1 and waiting.hops == 0
    assert waiting.concurrency == HOST and world.metrics.counts["SlotWaits"] == 1
    assert [invocation.job_id for _, invocation in world.invoker.calls] == [first.job_id, bobs.job_id]

    # Once the first run ended its slot is free: the waiting run's message, asked again, runs.
    assert world.in_flight(alices_pool) == 0
    world.clock.set(waiting.not_before)
    assert world.executor("worker-b").execute(waiting) is Outcome.SUCCEEDED
    assert world.run(second).state is RunState.SUCCEEDED and world.in_flight(Pool(ALL, CAP)) == 0


def test_a_job_without_a_key_is_not_held_back_by_the_keys_pool(world: KeyWorld) -> None:
    keyed, free = world.create("alice", "keyed"), world.create("alice", "free", concurrency=None)
    world.plan()
    during: list[Outcome] = []
    world.invoker.during_call = lambda: during.append(world.executor("worker-b").execute(world.message(free)))

    assert world.executor("worker-a").execute(world.message(keyed)) is Outcome.SUCCEEDED

    assert during == [Outcome.SUCCEEDED]


def test_an_edited_key_reaches_a_planned_runs_message_at_its_claim(world: KeyWorld) -> None:
    """The run's view is rewritten by the edit; its message, sent before, still names the old key: the claim
    on the view is refused, the message goes back once with the view's key, its slots freed, and runs in the
    new key's pool."""
    job = world.create("alice", "sync")
    world.plan()
    stale = world.message(job)
    world.jobs.update("alice", job.job_id, JobPatch(policies=PoliciesPatch(concurrency=Concurrency("db", 2))))
    assert world.executor("worker-a").execute(stale) is Outcome.DEFERRED
    [again] = world.dispatcher.messages
    assert again.concurrency == Concurrency("db", 2) and again.hops == 1
    assert world.in_flight(key_pool("alice", HOST.key, 1)) == 0 and world.in_flight(Pool(ALL, CAP)) == 0
    assert world.metrics.counts["ConcurrencyKeyChanges"] == 1

    seen: list[int] = []
    world.invoker.during_call = lambda: seen.append(world.in_flight(key_pool("alice", "db", 2)))
    assert world.executor("worker-b").execute(RunMessage.from_json(again.to_json())) is Outcome.SUCCEEDED
    assert seen == [1] and world.run(job).state is RunState.SUCCEEDED


def test_a_removed_key_lets_the_planned_run_go_without_it(world: KeyWorld) -> None:
    job = world.create("alice", "sync")
    world.plan()
    stale = world.message(job)
    world.jobs.update("alice", job.job_id, JobPatch(policies=PoliciesPatch(concurrency=None)))

    assert world.executor("worker-a").execute(stale) is Outcome.DEFERRED
    [again] = world.dispatcher.messages
    assert again.concurrency is None
    assert world.executor("worker-b").execute(again) is Outcome.SUCCEEDED


def test_a_callback_runs_heartbeat_moves_its_keys_slot_with_its_lease(world: KeyWorld) -> None:
    job = world.create(
        "alice",
        "callback",
        completion=Completion.CALLBACK,
        heartbeat_seconds=HEARTBEAT,
        timeout_seconds=TIMEOUT,
    )
    world.plan()
    world.invoker.results.append(ACCEPTED)
    assert world.executor("worker-a", callbacks=True).execute(world.message(job)) is Outcome.ACCEPTED
    [(_, invocation)] = world.invoker.calls
    assert invocation.callback is not None
    token = invocation.callback.heartbeat.split("/callbacks/")[1].split("/")[0]
    accepted = world.run(job).lease_expires_at
    assert accepted is not None
    pool = key_pool("alice", HOST.key, 1)

    # Past the accepted lease, the key's slot is still held: the heartbeat moved it with the run's.
    world.clock.set(accepted - timedelta(seconds=5))
    callbacks = Callbacks(
        world.store, world.dispatcher, world.clock, SECRET, slots=(world.slots, world.limits)
    )
    beating = callbacks.heartbeat(token)
    assert beating.lease_expires_at is not None and beating.lease_expires_at > accepted
    world.clock.set(accepted + timedelta(seconds=1))
    assert world.in_flight(pool) == 1 and world.in_flight(Pool(ALL, CAP)) == 1

    # Another of alice's jobs of the key (every minute: its create plans its next fires) waits meanwhile.
    other = world.create("alice", "other", expression="* * * * *")
    later = next(r for r in world.dispatcher.sent if r.job_id == other.job_id)
    world.clock.set(later.due_at)
    assert world.clock.now() < beating.lease_expires_at
    message = RunMessage.for_run(later)
    assert world.executor("worker-c").execute(message) is Outcome.WAITING_FOR_SLOT
    assert world.run(job).state is RunState.RUNNING
