"""errors.describe: one error as a log line or a stored reason."""

from __future__ import annotations

from migrator.errors import MigratorError, ShardFrozen, describe


def test_a_migrator_error_is_its_message_without_the_tag():
    exc = ShardFrozen("shard 7 is frozen for a cutover", phase="cutover")
    assert str(exc) == "[router/cutover] shard 7 is frozen for a cutover"
    assert describe(exc) == "shard 7 is frozen for a cutover"
    assert describe(MigratorError("plain")) == "plain"


def test_anything_else_is_its_type_and_text():
    assert describe(ValueError("bad value")) == "ValueError: bad value"
    assert describe(KeyboardInterrupt()) == "KeyboardInterrupt: "
    assert describe(TimeoutError("drain took 30 s")) == "TimeoutError: drain took 30 s"
