"""The RQ worker classes: `migrator worker` runs :class:`Worker`; tests run :class:`SimpleWorker` in their
own process (and ``rq worker --worker-class migrator.ops.worker.SimpleWorker``).

Both stop within :data:`COMMAND_POLL_S` of being told to. An RQ worker listens for stop and kill commands
on a pub/sub thread; rq 2.12 has that thread read with a 60 s timeout and, when the worker stops,
unsubscribes and then waits for the thread. With redis-py 8 that wait has no bound, and a thread that read
the unsubscribe reply before it was told to stop waits out its whole timeout for a new subscription: a
burst worker, or a worker sent SIGTERM, exited 60 s late about every other time.
"""

from __future__ import annotations

import rq

#: how long the command listener waits for a message before it looks whether the worker stops (rq's own
#: poll until 2.1; a command still arrives at once, the poll only bounds the stop)
COMMAND_POLL_S = 0.2


class _PromptStop(rq.worker.BaseWorker):
    def subscribe(self) -> None:
        """rq's subscribe, with the listener's wait bounded by :data:`COMMAND_POLL_S`."""
        self.log.info("Worker %s: subscribing to channel %s", self.name, self.pubsub_channel_name)
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(
            sleep_time=COMMAND_POLL_S, daemon=True, exception_handler=self._pubsub_exception_handler)


class Worker(_PromptStop, rq.Worker):
    """A forking RQ worker (each job in a work-horse process) that stops promptly."""


class SimpleWorker(_PromptStop, rq.SimpleWorker):
    """An RQ worker that runs each job in its own process, and stops promptly."""
