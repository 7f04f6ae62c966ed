"""Events cross from worker processes pickled (executors/procs.py): a round
trip keeps every field, content included (Event.__reduce__)."""

from __future__ import annotations

import pickle

from spearpy.observe.events import TOOL_END, Event


def test_an_event_round_trips_whole() -> None:
    event = Event(TOOL_END, "3ddd4c5fe06a", 7, 1795566662.5, 1000,
                  {"name": "add", "output_bytes": 2}, {"output": "20"})
    again = pickle.loads(pickle.dumps(event, protocol=pickle.HIGHEST_PROTOCOL))
    assert again == event and again.content == {"output": "20"} and again.fd == 1000
    bare = pickle.loads(pickle.dumps(Event("run_start", "r", 0, 1.0)))
    assert bare == Event("run_start", "r", 0, 1.0) and bare.data == {} and bare.content is None
