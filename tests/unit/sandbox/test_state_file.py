"""The sandbox's state file is written atomically, from several threads at once too (two hosts
stopped or started together)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from migrator.sandbox import Sandbox
from migrator.sandbox.procs import SandboxState


def test_saves_from_many_threads_at_once_leave_one_whole_state(tmp_path):
    sb = Sandbox(tmp_path)
    sb.state = SandboxState(dir=str(tmp_path), base_port=100, pairs=2, spare_pairs=1, shards=8, rows=20,
                            procs=sb._layout(2, 1, 100))
    with ThreadPoolExecutor(8) as pool:
        for f in [pool.submit(lambda: [sb._save() for _ in range(50)]) for _ in range(8)]:
            f.result()
    assert SandboxState.from_json(sb.state_file.read_text()) == sb.state
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no temporary file left
