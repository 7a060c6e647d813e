"""Starting ranks: locally through torch's elastic launcher, and (later) the in-pod bootstrap."""
