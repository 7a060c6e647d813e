"""Whether an imported nccl-tests table was cut off: the output stops before the sweep its
header announced, with no footer after it.

nccl-tests ends every table with `# Out of bounds values` and `# Avg bus bandwidth` lines, and
sweeps sizes from minBytes to maxBytes (`size *= stepFactor`, or `size += stepBytes`), printing
each size rounded down to whole elements per rank. A table is cut off when no footer follows it
and either its last line is a row cut in the middle, or the size after its last row (as the
sweep steps, past the rounding) would still have been within maxBytes: the output stopped
(a killed rank, a log cut at a size limit, a paste) before the run ended.

Neither alone is enough, and real outputs show why (tests/data/nccl-tests): a sweep stops below
maxBytes when the step does not land on it (`-b 8 -e 1G -f 4` ends at 512M) or when nccl-tests
lowered maxBytes to what the GPU's memory holds (`# Reducing maxBytes to N`, or silently in old
versions, which still print the footer); a paste often leaves the footer out after the whole
sweep.
"""

from __future__ import annotations

from dataclasses import dataclass

from nccl_k8s.results.compare import human_size
from nccl_k8s.results.schema import RunConfig

#: The widest element nccl-tests sends (8 bytes): a printed size is the scheduled one rounded
#: down to whole elements per rank, so at most this times the rank count below it.
_WIDEST_ELEMENT = 8
#: The rank count assumed for that rounding when the output does not say.
_RANKS_UNKNOWN = 1024


@dataclass(frozen=True)
class CutOff:
    """Where a cut-off table stops against what its header announced."""

    op: str
    #: The last whole row's size.
    last_bytes: int
    #: The header's maxBytes (or what nccl-tests reduced it to for memory).
    max_bytes: int | None
    #: The size the sweep would have measured next; None when the header does not say how it
    #: steps.
    next_bytes: int | None
    #: Whole rows read from the table (out- and in-place count as one).
    rows: int
    #: "file:line" of a last row cut in the middle (not stored), None when the last row is whole.
    cut_row: str | None = None
    #: Whether nccl-tests lowered maxBytes for memory (`# Reducing maxBytes to N`).
    reduced: bool = False

    def text(self, origin: str) -> str:
        stop = f"stops at {human_size(self.last_bytes)} after {self.rows} rows"
        if self.cut_row is not None:
            stop += f" (and {self.cut_row} is a row cut in the middle, not stored)"
        announced = ""
        if self.max_bytes is not None:
            upto = human_size(self.max_bytes)
            announced = (
                f", nccl-tests lowered maxBytes to {upto} for memory"
                if self.reduced
                else f", its header announced sizes up to {upto}"
            )
            if self.next_bytes is not None:
                announced += f" ({human_size(self.next_bytes)} next)"
        return (
            f"{origin}: the {self.op} table {stop}{announced}, and no footer ('# Avg bus "
            "bandwidth') follows: the output is cut off; the rows read are stored, marked partial"
        )


def next_size(last_bytes: int, config: RunConfig, *, world_size: int | None) -> int | None:
    """The size nccl-tests' sweep measures after the one printed as `last_bytes`; None when the
    config does not say how it steps."""
    factor, step = config.stepfactor, config.stepbytes
    if not (factor is not None and factor > 1) and not step:
        return None
    slack = _WIDEST_ELEMENT * (world_size or _RANKS_UNKNOWN)
    size = config.minbytes if config.minbytes is not None else last_bytes
    while size <= last_bytes + slack:
        grown = size * factor if factor is not None and factor > 1 else size + (step or 0)
        if grown <= size:
            return None
        size = grown
    return size


def cut_off(
    op: str,
    sizes: list[int],
    config: RunConfig,
    *,
    footer: bool,
    world_size: int | None,
    reduced_max: int | None = None,
    cut_row: str | None = None,
) -> CutOff | None:
    """The cut of a table whose rows have `sizes` (in order, each size once per row), or None
    when it ended as nccl-tests ends a table (a footer, or the whole announced sweep)."""
    if footer or not sizes:
        return None
    last = sizes[-1]
    max_bytes = reduced_max if reduced_max is not None else config.maxbytes
    following = next_size(last, config, world_size=world_size)
    stopped_early = max_bytes is not None and following is not None and following <= max_bytes
    if not stopped_early and cut_row is None:
        return None
    return CutOff(
        op,
        last,
        max_bytes,
        following,
        len(sizes),
        cut_row=cut_row,
        reduced=reduced_max is not None,
    )


__all__ = ["CutOff", "cut_off", "next_size"]
