"""A run's lifecycle over the API client: deploy, follow, name the culprit, collect, clean up.

`_deploy`, `_monitor` (following a run; `_verdicts` words a failed run's culprit from `_culprit`'s
attribution, `_progress` its live summary), `_watch` (the list+watch informer), `_status`,
`_logs`, `_collect`, `_cleanup`, `_explain` (doctor --run: why each pod of a run is where it is),
`_bundle` (the debug bundle), `_tracing` (OpenTelemetry spans); shared by them: `_plumbing`
(labels, finding a run, its workload and pods), `_pods` (pure pod-state interpretation),
`_outcomes` (the dataclasses returned), `_settings` (how they wait).
"""
