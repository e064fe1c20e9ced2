"""The live charts' series stay bounded: old points and least recently used series go first, and columns come out in uPlot's layout."""

from raftlog.console.history import Series, SeriesBook


def test_series_keeps_the_newest_points_in_columns():
    s = Series(max_points=3)
    for t in range(5):
        s.add(float(t), {"a": t * 10, "b": None})
    assert s.columns(["a", "b", "c"]) == [[2.0, 3.0, 4.0], [20, 30, 40], [None, None, None], [None, None, None]]
    assert s.last() == (4.0, {"a": 40, "b": None})
    assert Series().last() is None


def test_book_drops_the_least_recently_used_series():
    book = SeriesBook(max_series=2, max_points=5)
    a = book.get("a")
    book.get("b")
    assert book.get("a") is a      # a is now the most recent
    book.get("c")                  # evicts b
    assert len(book) == 2 and book.get("a") is a
    assert book.get("b") is not None and len(book) == 2
