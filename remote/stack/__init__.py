"""A host's GPU stack as gpuprov records it: `manifest`, what one host's stack is (kernel,
driver, CUDA, cuDNN, NCCL, torch, every package with its version and wheel digest), gathered on
the host by its script, checked here, written by the engine as each run's `stack.json` and
compared across hosts by the report (drift).
"""
