"""The museum example: the rules of examples/museum.tesla and a seeded generator of museum events.

Rooms hold paintings; vibration sensors on the paintings report ``Vibration(room, painting, value)``,
presence sensors report ``PeopleNear(room, painting)`` and badge readers ``StaffAt(room)``. The
generator is vectorised (10^7 events take a few seconds) and deterministic for a given seed.

>>> from cep_gpu.museum import generate_museum, MUSEUM_RULES
>>> events = generate_museum(10_000, seed=1)
>>> sorted(events["type"].unique())
['PeopleNear', 'StaffAt', 'Vibration']
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MUSEUM_RULES = """\
define Touch(room: string, painting: string)
from   Vibration(painting=$p and value>3.0) and
       each PeopleNear(painting=$p) within 2 min. from Vibration
where  room=Vibration.room and painting=Vibration.painting

define Theft(room: string, painting: string)
from   Vibration(room=$r and painting=$p and value>3.0) and
       each PeopleNear(painting=$p) within 5 min. from Vibration
       and not StaffAt(room=$r) within 1 min. from Vibration
where  room=Vibration.room and painting=Vibration.painting

define Alarm(painting: string, level: float)
from   Vibration(room=$r and painting=$p and value>3.0) and
       v=Avg(Vibration(room=$r and painting=$p)
             within 5 min. from Vibration).value > 3.0
where  painting=Vibration.painting and level=v
"""

#: share of each event type in the stream
MIX = {"Vibration": 0.3, "PeopleNear": 0.6, "StaffAt": 0.1}


def generate_museum(
    n_events: int,
    seed: int = 0,
    n_rooms: int = 20,
    paintings_per_room: int = 10,
    events_per_second: float = 2.0,
    start: str = "2024-01-01 09:00:00",
) -> pd.DataFrame:
    """A time-ordered museum event stream with columns type, ts (datetime64[ns]), id, room,
    painting, value (value only on Vibration events).

    Vibration values are mostly low (exponential, mean 1.2) with rare bursts of strong shaking on
    one painting, so that all three rules fire now and then.
    """
    if n_events < 0:
        raise ValueError("n_events must be >= 0")
    rng = np.random.default_rng(seed)
    types = np.array(list(MIX))
    kind = rng.choice(len(types), size=n_events, p=list(MIX.values()))
    gaps = rng.exponential(1.0 / events_per_second, size=n_events)
    ts_ns = (np.cumsum(gaps) * 1e9).astype(np.int64) + pd.Timestamp(start).value

    room = rng.integers(0, n_rooms, size=n_events)
    local = rng.integers(0, paintings_per_room, size=n_events)
    painting = room * paintings_per_room + local
    value = rng.exponential(1.2, size=n_events)
    # bursts: every ~500 events, one painting shakes hard for a short while
    burst = rng.random(n_events) < 0.02
    value = np.where(burst, 3.0 + rng.exponential(2.0, size=n_events), value)

    room_names = np.array([f"R{r:02d}" for r in range(n_rooms)], dtype=object)
    painting_names = np.array([f"P{p:04d}" for p in range(n_rooms * paintings_per_room)], dtype=object)
    is_vib = kind == 0
    is_staff = kind == 2
    return pd.DataFrame(
        {
            "type": types[kind].astype(object),
            "ts": ts_ns.astype("datetime64[ns]"),
            "id": np.arange(n_events, dtype=np.int64),
            "room": room_names[room],
            "painting": np.where(is_staff, None, painting_names[painting]),
            "value": np.where(is_vib, np.round(value, 3), np.nan),
        }
    )
