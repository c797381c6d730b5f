"""The vLLM engines on Ray (`[policy] engines = K`): the trainer's side (`engines`), one engine actor
(`actor`), the changing set of engines (`members`) and the weight-sync group (`weight_sync`). Here "engine"
always means a vLLM engine."""
