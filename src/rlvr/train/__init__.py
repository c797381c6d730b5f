"""The learning side: advantage estimators, losses, the loop, SFT warm start, checkpoints. Needs
rlvr[train]."""
