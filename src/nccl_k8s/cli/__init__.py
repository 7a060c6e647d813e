"""Command-line interface: parse, call one library function, print, map errors to exit codes."""
