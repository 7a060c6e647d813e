"""What several benchmarks share: `commit()`, the commit a measurement says it measured, and
`table_main`, the one `main` of the benchmarks/*_tables.py scripts that own a generated
BENCHMARKS.md block.

    python benchmarks/X_tables.py DIR                         # print the block
    python benchmarks/X_tables.py DIR --write BENCHMARKS.md   # put it in place

With --write, the text between the script's begin and end markers is replaced; a block not yet
in the file goes where the script's `first_at(doc)` says (an index into the file), or the script
stops with the marker it looked for.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent


def commit() -> str:
    """HEAD's short hash, `+dirty` when src/ has uncommitted changes."""
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "src"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return rev + ("+dirty" if dirty else "")


def write_block(
    doc_path: pathlib.Path,
    text: str,
    begin: str,
    end: str,
    first_at: Callable[[str], int] | None = None,
) -> None:
    doc = doc_path.read_text()
    if begin in doc:
        start, stop = doc.index(begin), doc.index(end) + len(end) + 1
        doc = doc[:start] + text + doc[stop:]
    elif first_at is not None:
        at = first_at(doc)
        doc = doc[:at] + text + doc[at:]
    else:
        raise SystemExit(f"{doc_path}: no {begin} block to replace")
    doc_path.write_text(doc)


def table_main(
    render: Callable[[pathlib.Path], str],
    begin: str,
    end: str,
    first_at: Callable[[str], int] | None = None,
) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=pathlib.Path)
    ap.add_argument("--write", type=pathlib.Path)
    args = ap.parse_args()
    text = render(args.folder)
    if args.write:
        write_block(args.write, text, begin, end, first_at)
    else:
        sys.stdout.write(text)
