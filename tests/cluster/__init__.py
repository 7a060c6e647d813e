"""A local Kubernetes-like cluster for end-to-end tests (issue 3); see INTERFACE.md and README.md.

Test infrastructure only: `src/` never imports it. Import the parts from their modules
(`tests.cluster.store`, `tests.cluster.cluster`) so that importing the package stays cheap.
"""
