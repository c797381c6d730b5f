#!/bin/bash
# Runs in the verifier's own image (/opt/marker), with only the declared artifacts of the agent's environment.
if [ -f /opt/marker ] && [ "$(cat /app/out.txt 2>/dev/null)" = 42 ] && [ ! -e /app/scratch.txt ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
