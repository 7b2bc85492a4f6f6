"""Tables that read in the terminal they are printed in: a column is shown whole or not at all.

rich squeezes a table wider than the terminal by cutting every column ("17…", "0.…"), numbers included. A
`Fitted` table instead decides at print time, from the width it is given (80 columns when piped), which of
its columns fit: text columns (policy labels, names) may wrap, a number never does; columns that do not fit
are left out from the right, and a note under the table names every column left out. `--wide` shows every
column at its full width, however wide the table gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

TEXT_FLOOR = 12  # a wrapping text column gets at least this many cells, so that a label still reads
_EDGES = 1  # a vertical border between columns and at each edge
_PADDING = 2  # a space each side of a cell


@dataclass(frozen=True)
class Column:
    """One column of a printed table.

    Args:
        header: Its header (a newline splits it over two lines).
        text: Whether its cells are text that may wrap (a policy label, a name); a column of numbers, times
            or identifiers is never wrapped nor cut.
        wide: Whether only `--wide` shows it (the default set of columns is what fits 80 columns).
    """

    header: str
    text: bool = False
    wide: bool = False


@dataclass(frozen=True)
class Fitted:
    """A table that shows, at the width it is printed at, the columns that fit whole (a rich renderable).

    The first column (what a row is about) is always shown; of the others, the default ones are shown from the
    left while they fit, and a note names the columns left out. Text is left-aligned, numbers right-aligned.
    With `wide`, every column is shown at its full width.
    """

    title: str
    columns: Sequence[Column]
    rows: Sequence[Sequence[str]] = field(default_factory=list)
    wide: bool = False

    def widened(self) -> Fitted:
        """The same table with every column (`--wide`)."""
        return replace(self, wide=True)

    def shown(self, width: int) -> list[int]:
        """The indices of the columns shown in `width` cells."""
        if self.wide:
            return list(range(len(self.columns)))
        shown = [i for i, c in enumerate(self.columns) if i == 0 or not c.wide]
        while len(shown) > 1 and self._least_width(shown) > width:
            shown.pop()  # the rightmost first: the default columns are ordered by what matters most
        return shown

    def left_out(self, width: int) -> list[str]:
        """The headers of the columns not shown in `width` cells."""
        shown = set(self.shown(width))
        return [c.header.replace("\n", " ") for i, c in enumerate(self.columns) if i not in shown]

    def _natural(self, i: int) -> int:
        """The cells column `i` takes unwrapped: its widest cell or header line."""
        cells = [row[i] for row in self.rows] + self.columns[i].header.split("\n")
        return max(cell_len(cell) for cell in cells)

    def _least_width(self, shown: Iterable[int], wrapped: bool = True) -> int:
        """The fewest cells the columns `shown` take, with the borders and the padding: numbers whole, text
        down to `TEXT_FLOOR` (or whole, unless `wrapped`)."""
        shown = list(shown)
        return sum(min(self._natural(i), TEXT_FLOOR) if wrapped and self.columns[i].text else self._natural(i)
                   for i in shown) + _EDGES * (len(shown) + 1) + _PADDING * len(shown)

    def _text_widths(self, shown: list[int], width: int) -> dict[int, int]:
        """The width of each text column shown: what is left after the numbers, shared so that a narrow
        column keeps its natural width and the widest ones share the rest."""
        text = sorted((i for i in shown if self.columns[i].text), key=self._natural)
        numbers = self._least_width(i for i in shown if not self.columns[i].text)
        left = width - numbers - (_EDGES + _PADDING) * len(text)
        widths = {}
        for n, i in enumerate(text):
            widths[i] = max(min(self._natural(i), left // (len(text) - n)), min(self._natural(i), TEXT_FLOOR))
            left -= widths[i]
        return widths

    def table(self, width: int) -> Table:
        """The rich table of the columns shown in `width` cells."""
        shown = self.shown(width)
        text_widths = {} if self.wide else self._text_widths(shown, width)
        table = Table(title=self.title)
        for i in shown:
            column = self.columns[i]
            table.add_column(column.header, justify="left" if column.text else "right",
                             no_wrap=not column.text, overflow="fold",  # too narrow a terminal: folded, not cut
                             width=text_widths.get(i))
        for row in self.rows:
            table.add_row(*(Text(row[i]) for i in shown))  # cells are plain text: "[" is no markup here
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        table = self.table(width)
        if self.wide:  # every column whole: wider than the terminal if it must be
            width = max(width, self._least_width(range(len(self.columns)), wrapped=False))
        yield from console.render(table, options.update(width=width, max_width=width))
        left_out = self.left_out(options.max_width)
        if left_out:
            yield Text(f"not shown in {options.max_width} columns: {', '.join(left_out)} (--wide shows every "
                       "column)", style="dim")


def fitted(title: str, columns: Sequence[Column], rows: Iterable[Sequence[Any]]) -> Fitted:
    """A `Fitted` table of `rows`, each cell turned into its string."""
    return Fitted(title, tuple(columns), [[str(cell) for cell in row] for row in rows])

