#!/bin/sh
# Test fixture: a "python" whose torch probe answers, then leaves a process in a
# session of its own holding stdout (as a sitecustomize hook could), and exits.
setsid sh -c 'echo $$ > "$PROBE_DAEMON_PID"; exec sleep 60' &
echo '{"version": "2.5.0", "cuda": false, "fsdp2": true, "transformers": false, "accelerate": false}'
