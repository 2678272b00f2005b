"""Which lane a run's message travels in. Pure.

On AWS an executor invocation takes a batch of up to 10 messages and ends only when its slowest run ends: a
run whose synchronous call may take minutes would hold its nine batch-mates' Lambda environment, finished or
not. Such runs travel in a lane of their own, one message per invocation, so an executor holds only what it
runs. The lane follows from the call's share of the timeout, which every message carries."""

from __future__ import annotations

from tickwork.domain.dispatch import RunMessage
from tickwork.domain.execution import call_seconds

# A call that may take longer than this goes in the long-call lane. The default job timeout (60 s) stays in
# the batched lane: most calls are short, and a batch of 10 needs a tenth of the environments.
LONG_CALL_SECONDS = 60


def is_long_call(message: RunMessage) -> bool:
    """Whether `message`'s run may hold its invocation for minutes: its call may outlast LONG_CALL_SECONDS.
    A message without its timeout (it reads the job) stays in the batched lane."""
    timeout = message.timeout_seconds
    return timeout is not None and call_seconds(timeout) > LONG_CALL_SECONDS
