"""The gateway: an agent from outside as the policy. `core` is the sans-IO endpoint that records every call's
tokens, `wire` the wire format, `server` the HTTP side, `agents` the agent rollouts, `launch` what runs in the
episode's sandbox."""
