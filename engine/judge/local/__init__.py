"""The local backend: pre-warmed sandbox workers on this machine (the worker side is standard library only)."""
