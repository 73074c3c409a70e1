"""What the user sees and keeps: the live step lines and the recap (`recap`), the per-host run
log and the masking of secrets (`runlog`), and the one terminal stack that the recap and the
benchmark report print through (`term`: colours only on a terminal, text made printable), the
signs of life of long steps (`progress`) and the JUnit XML of a run (`junit`).
"""
