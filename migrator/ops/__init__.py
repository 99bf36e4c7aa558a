"""Operator tools on top of the engine.

One plain function per command (:mod:`migrator.ops.command`), called alike by
the CLI, the RQ jobs (``jobs/``) and playbooks; the RQ steps of a migration
(:mod:`migrator.ops.steps`); the pipeline's cutover retries
(:mod:`migrator.ops.cutover_retry`) and the batched split's steps
(:mod:`migrator.ops.batched`), each returning its next action to the job; playbooks, the live status view, metrics,
the audit trail and the demo.
"""
