"""Digests of the shipped timed loops (bench/loops/): written by tools/build_loops.py
(`make loops`), not by hand. The engine loads a library only when its bytes have the
digest here and SOURCE_SHA256 is the digest of the loop's text it runs (bench.native)."""

#: The compiler that built them (the ziglang wheel), and its targets.
ZIG = "0.13.0"
TARGETS = {
    "aarch64": "aarch64-linux-gnu.2.17",
    "x86_64": "x86_64-linux-gnu.2.17",
}
#: sha256 of bench.native._SOURCE, the text they were built from.
SOURCE_SHA256 = "2fff57654777d5446cefc667adee479f1dab13a08bc17223df4a2ade6bdf93b5"
#: sha256 of each machine's library (platform.machine() -> hex).
SHA256 = {
    "aarch64": "352986ab53eb59c6eb6d89f3e69ab458ab69e48f09d0951a79dd1f703cba23b2",
    "x86_64": "96f2d1dc32acd89192db11451305fa5a3c1936e642a26f949f34a99e386f6c17",
}
