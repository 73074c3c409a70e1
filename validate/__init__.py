"""Validation package: runs on the GPU instance as `python3 -m validate`."""
