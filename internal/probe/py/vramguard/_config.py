"""The probe's configuration: what `vramguard run` sets in the job's
environment (probe.Env on the Go side), or start()'s arguments."""

import os

ENV_SOCKET = "VRAMGUARD_PROBE_SOCKET"
ENV_HZ = "VRAMGUARD_PROBE_HZ"
ENV_RUN_DIR = "VRAMGUARD_RUN_DIR"
ENV_OOM_SNAPSHOT = "VRAMGUARD_OOM_SNAPSHOT"
ENV_ATOMIC_SAVE = "VRAMGUARD_ATOMIC_SAVE"
ENV_RUN_ID = "VRAMGUARD_RUN_ID"
ENV_ATTEMPT = "VRAMGUARD_ATTEMPT"
ENV_AGENT_SOCKET = "VRAMGUARD_AGENT_SOCKET"

DEFAULT_HZ = 1.0
MAX_HZ = 20.0
MIN_HZ = 0.01


class Config:
    def __init__(self):
        self.socket_path = ""
        self.hz = DEFAULT_HZ
        self.run_dir = ""
        self.oom_snapshot = False
        self.atomic_save = False
        self.run_id = ""
        self.attempt = 0
        self.agent_path = ""

    def file_prefix(self, kind, pid):
        """RUN_DIR/<kind>-[<attempt>-]<pid>"""
        if self.attempt > 0:
            return os.path.join(self.run_dir, "%s-%d-%d" % (kind, self.attempt, pid))
        return os.path.join(self.run_dir, "%s-%d" % (kind, pid))

    @classmethod
    def from_env(cls, env):
        c = cls()
        c.socket_path = env.get(ENV_SOCKET, "")
        c.hz = clamp_hz(env.get(ENV_HZ) or DEFAULT_HZ)
        c.run_dir = env.get(ENV_RUN_DIR, "")
        c.oom_snapshot = env.get(ENV_OOM_SNAPSHOT, "") not in ("", "0")
        c.atomic_save = env.get(ENV_ATOMIC_SAVE, "") not in ("", "0")
        c.run_id = env.get(ENV_RUN_ID, "")
        c.agent_path = env.get(ENV_AGENT_SOCKET, "")
        try:
            c.attempt = max(int(env.get(ENV_ATTEMPT) or 0), 0)
        except ValueError:
            c.attempt = 0
        return c


def clamp_hz(v):
    try:
        hz = float(v)
    except (TypeError, ValueError):
        return DEFAULT_HZ
    if not hz > 0:  # also catches NaN
        return DEFAULT_HZ
    return min(max(hz, MIN_HZ), MAX_HZ)


def default_socket(env):
    home = env.get("VRAMGUARD_HOME")
    if not home:
        xdg = env.get("XDG_STATE_HOME")
        if xdg:
            home = os.path.join(xdg, "vramguard")
        else:
            home = os.path.join(os.path.expanduser("~"), ".local", "state", "vramguard")
    return os.path.join(home, "probe.sock")
