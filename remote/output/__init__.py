"""What the user sees and keeps: the live step lines and the recap (`recap`), the per-host run
log and the masking of secrets (`runlog`), and the one terminal stack that the recap and the
benchmark report print through (`term`: colours only on a terminal, text made printable).

May import: `remote.errors`. Nothing else of remote/.
"""
