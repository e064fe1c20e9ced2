"""Bounded time series the live charts draw: cluster rates and each group's lag. Pure (the
caller passes the time); not thread-safe (the console's trio thread owns them)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Mapping
from typing import Final

__all__ = ["Series", "SeriesBook"]

DEFAULT_POINTS: Final = 450        # 15 minutes at one point every 2 s
DEFAULT_SERIES: Final = 64


class Series:
    """(time_s, {name: value}) points, the oldest dropped past `max_points`."""

    def __init__(self, max_points: int = DEFAULT_POINTS) -> None:
        self.points: deque[tuple[float, dict[str, float | None]]] = deque(maxlen=max_points)

    def add(self, time_s: float, values: Mapping[str, float | None]) -> None:
        self.points.append((time_s, dict(values)))

    def columns(self, names: list[str]) -> list[list[float | None]]:
        """uPlot's data layout: [[t...], [names[0] values...], ...]."""
        out: list[list[float | None]] = [[t for t, _ in self.points]]
        for name in names:
            out.append([v.get(name) for _, v in self.points])
        return out

    def last(self) -> tuple[float, dict[str, float | None]] | None:
        return self.points[-1] if self.points else None


class SeriesBook:
    """Series by key (e.g. (user, group id)); at most `max_series`, least recently used first out."""

    def __init__(self, max_series: int = DEFAULT_SERIES, max_points: int = DEFAULT_POINTS) -> None:
        self.max_series = max_series
        self.max_points = max_points
        self._series: OrderedDict[Hashable, Series] = OrderedDict()

    def get(self, key: Hashable) -> Series:
        s = self._series.get(key)
        if s is None:
            while len(self._series) >= self.max_series:
                self._series.popitem(last=False)
            s = self._series[key] = Series(self.max_points)
        self._series.move_to_end(key)
        return s

    def __len__(self) -> int:
        return len(self._series)
