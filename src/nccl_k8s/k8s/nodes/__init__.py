"""`nodes check`, the bad-node finder: `_nodecheck` runs 2-node tests through the run lifecycle
and writes verdicts on the nodes; `_badnodes` is its pure plan and verdicts, `_level` the
level they judge against.
"""
