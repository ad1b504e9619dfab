"""A stdio child that turns a granted path into a symlink to the state
directory, then crashes; restarted, it tries to list that path, writes what
it got to $HOME/report.txt, and serves as the fake upstream.

  symlink_grant.py GRANT STATE -- FAKE_UPSTREAM ARGS...
"""
import os
import sys

grant, state = sys.argv[1], sys.argv[2]
rest = sys.argv[sys.argv.index("--") + 1:]
if not os.path.islink(grant):
    os.symlink(state, grant)
    sys.exit(3)  # restarted by the gateway, which opens the grant again
try:
    got = "LISTED %s" % sorted(os.listdir(grant))
except OSError as e:
    got = "DENIED %s" % e.strerror
with open(os.path.join(os.environ["HOME"], "report.txt"), "w") as f:
    f.write(got + "\n")
os.execv(sys.executable, [sys.executable] + rest)
