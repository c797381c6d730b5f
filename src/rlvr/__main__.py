"""`python -m rlvr` runs the `rlvr` command, so launchers that start modules can start it:
`torchrun --nproc-per-node N -m rlvr train CONFIG` (docs/SCALING.md)."""
from rlvr.cli import entry

if __name__ == "__main__":
    entry()
