"""Command groups of the `rlvr` CLI (`rlvr tasks ...`, `rlvr sandbox ...`) and the consoles they share."""
