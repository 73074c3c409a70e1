"""What the user sees and keeps: the live step lines and the recap (`recap`), the per-host run
log and the masking of secrets (`runlog`).

May import: `remote.errors`. Nothing else of remote/.
"""
