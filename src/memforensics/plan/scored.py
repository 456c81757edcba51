"""How many made-up predictions match their targets at one line of a script, round by round.

A plan's predictions are unknown, so where a script scores them (``pred == y``) the plan says how
many match: an accuracy that rises as the model trains, so that loops bounded by it (a patience
loop, a "best so far" checkpoint) run to their own limits. A line may score several
comparisons in one round (rounds are separated by a backward pass): the batches of a validation
loop, one prediction at a time (``p.item() == t``), or a train, a validation and a test mask one
after the other. In the first round, the first comparison of each size matches one prediction
(comparisons of one size are taken for one evaluation's batches, of different sizes for
different subsets, each scored on its own); each later round matches one more in all, shared
among the comparisons by their sizes in the round before with D'Hondt's divisor method: a larger
comparison takes more, and since that method is house-monotone, no comparison's matches ever
fall from one round to the next. So each subset's accuracy rises from above 0, and the total
rises by one a round until every prediction matches.
"""

from __future__ import annotations

import heapq


class Scored:
    """The comparisons one line scored in the current round, and the matches each takes."""

    def __init__(self, passes: int) -> None:
        self.passes = passes
        """The backward passes counted when this round began."""
        self._round = 0
        self._sizes: list[int] = []
        self._seen: set[int] = set()
        """The sizes compared this round."""
        self._seats: list[int] = []
        self._basis: list[int] = []
        self._heap: list[tuple[float, int]] = []

    def next_round(self, passes: int) -> None:
        """A backward pass ran since this line last scored: the round's matches, one more in
        all, are shared by the sizes the comparisons had in the round that ended."""
        self.passes = passes
        self._round += 1
        ended, self._sizes = self._sizes, []
        self._seen = set()
        if ended == self._basis and self._seats:
            self._seat()
            return
        self._basis = ended
        self._seats = _first_of_each_size(ended)
        self._heap = [
            (-size / (seats + 1), j)
            for j, (size, seats) in enumerate(zip(ended, self._seats, strict=True))
            if seats < size
        ]
        heapq.heapify(self._heap)
        for _ in range(self._round):
            self._seat()

    def _seat(self) -> None:
        """One more match, to the comparison with the highest quotient (size / (seats + 1));
        none where every comparison matches whole."""
        if not self._heap:
            return
        _, j = heapq.heappop(self._heap)
        self._seats[j] += 1
        size = self._basis[j]
        if self._seats[j] < size:
            heapq.heappush(self._heap, (-size / (self._seats[j] + 1), j))

    def matched(self, count: int) -> int:
        """How many of the next comparison's ``count`` predictions match (its first ones)."""
        j = len(self._sizes)
        first = count not in self._seen
        self._sizes.append(count)
        self._seen.add(count)
        seats = self._seats[j] if j < len(self._seats) else int(first)
        return max(0, min(count, seats))


def _first_of_each_size(sizes: list[int]) -> list[int]:
    """The first round's matches: one for the first comparison of each size, none for the
    others (and none for an empty one)."""
    seen: set[int] = set()
    seats = []
    for size in sizes:
        seats.append(int(size > 0 and size not in seen))
        seen.add(size)
    return seats
