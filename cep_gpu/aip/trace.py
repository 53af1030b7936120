"""What :func:`cep_gpu.aip.trace` records: the sequence instances alive after each event."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class InstanceView:
    """One live sequence instance, for :func:`trace`."""

    name: str
    model: int
    state: str
    ids: dict[str, int]  # alias -> id of the bound event



@dataclass
class TraceStep:
    """What happened when one event arrived (see :func:`trace`)."""

    row: int
    id: int
    ts: int
    type: str
    alive: list[InstanceView]
    accepted: list[InstanceView]
    composite: list[tuple[int, ...]] = field(default_factory=list)  # ids, declaration order

