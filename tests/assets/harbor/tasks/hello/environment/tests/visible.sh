#!/bin/sh
# A test the agent can see and run (the verifier's own are in /tests, which it never sees).
[ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ] && echo PASS || echo FAIL
