"""doctor: will a run deploy and start, and if not, why; read before a deploy, and by deploy
itself when the API server refuses it.

`_doctor` (the reads), with the pure checks of `_preflight` (API server, admission, add-ons),
`_nodechecks` (GPU and RDMA resources, taints, selection) and `_nodefit` (which nodes could take
one of the run's pods, as the scheduler's filters would decide).
"""
