"""`python -m nccl_k8s.results.rules docs/diagnosis.md`: regenerate the docs' table of codes."""

from __future__ import annotations

import sys
from pathlib import Path

from nccl_k8s.results.rules import with_codes_table

for arg in sys.argv[1:]:
    path = Path(arg)
    path.write_text(with_codes_table(path.read_text(encoding="utf-8")), encoding="utf-8")
