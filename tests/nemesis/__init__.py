"""The nemesis: a split under queue load and sysbench with a seeded, replayable fault schedule.

``python -m tests.nemesis --seed N`` replays one seed; ``--seeds 50`` is a soak. Each seed's schedule
is a pure function of the seed (:mod:`tests.nemesis.schedule`); :mod:`tests.nemesis.run` runs it.
"""
