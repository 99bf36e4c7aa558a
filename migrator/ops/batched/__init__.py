"""The batched split: a move of more tables than one rename fence takes, copied and tailed once, cut over in batches.

Everything a batched migration (``Spec.batched``) decides and does lives here;
the rest of the code asks these modules:

* :mod:`.sizing` - whether a move is batched (:func:`~.sizing.batched`), how
  many tables its shards hold (:func:`~.sizing.count_tables`,
  :func:`~.sizing.table_count`), the batches a plan shows
  (:func:`~.sizing.preview`) and the size of the next batch
  (:func:`~.sizing.next_batch`). Runs where a plan or a hand-over runs.
* :mod:`.handover` - giving a batch its shards (:func:`~.handover.hand_over`)
  and bringing the batched migration's check up to now right before
  (:func:`~.handover.refresh_parent`), with what each guarantees.
* :mod:`.run` - the pipeline's step of a batched migration
  (:func:`~.run.step`, called by ``jobs.pipeline.finish``): the one full check,
  the hand-overs, one cutover after another, the end.

This package imports nothing at its own level: :mod:`migrator.ops.command`
asks :mod:`.sizing` while planning, and :mod:`.run` calls the commands, so
each part is imported by name (``from migrator.ops.batched import sizing``).
"""
