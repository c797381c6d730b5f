"""The policy backends behind `rlvr.rollout.policy.Policy`: `hf`, `openai`, `scripted`, `vllm` and the
built-in model, built by `backends.make_policy`; what a trainer needs of a policy (`trainable`), the
generation copy of its weights (`weights`), and the gold policy that plays reference solutions (`gold`)."""
