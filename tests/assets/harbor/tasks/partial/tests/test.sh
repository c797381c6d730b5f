#!/bin/bash
# Partial credit: one entry per property, in reward.json.
answer="$(cat /app/answer.txt 2>/dev/null)"
greeting=0; punctuation=0; data=0
case "$answer" in "$EXPECTED_GREETING"*) greeting=1 ;; esac
case "$answer" in *", world!") punctuation=1 ;; esac
[ "$(od -An -tx1 /app/data.bin | tr -d ' \n')" = "0001fffe62696e61727980" ] && data=1
if [ "$data" = 1 ]; then
  echo "{\"greeting\": $greeting, \"punctuation\": $punctuation}" > /logs/verifier/reward.json
else
  echo '{"greeting": 0, "punctuation": 0}' > /logs/verifier/reward.json
fi
