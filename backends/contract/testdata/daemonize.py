#!/usr/bin/env python3
"""Test fixture: leaves a daemon behind, as loggers and experiment trackers do
(double fork and setsid, stdout and stderr inherited and held), then either
exits (--then exit) or keeps running (--then hang). It writes the daemon's pid
to DIR/daemon.pid and its own to DIR/main.pid."""

import os
import sys
import time

d, then = sys.argv[1], sys.argv[2]


def write(name, pid):
    with open(os.path.join(d, name + ".tmp"), "w") as f:
        f.write(str(pid))
    os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name))


if os.fork() == 0:
    os.setsid()  # out of the run's process group and session
    if os.fork() == 0:
        write("daemon.pid", os.getpid())
        print("daemon: running", flush=True)
        time.sleep(300)
        os._exit(0)
    os._exit(0)
os.wait()
while not os.path.exists(os.path.join(d, "daemon.pid")):
    time.sleep(0.01)
write("main.pid", os.getpid())
print("main: daemon started", flush=True)
if then == "hang":
    time.sleep(300)
sys.exit(int(then) if then.isdigit() else 0)
