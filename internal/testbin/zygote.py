# The zygote behind testbin.Zygote: it imports the modules named in argv
# once, then runs each request (one JSON line on fd 3) in a fork of itself,
# as `python -c SCRIPT ARGS...` would run it: its own stdin, stdout and
# stderr files, cwd, sys.argv and a fresh __main__, exit status as Python
# gives it. Replies (JSON lines on fd 4): {"id", "pid", "status"} when the
# child has ended, status being its raw wait status. Children run at once,
# each watched through a pidfd; EOF on fd 3 (the test process ended) ends
# the zygote, and SIGKILLs what still runs.
import importlib
import json
import os
import selectors
import signal
import sys

for name in sys.argv[1:]:
    importlib.import_module(name)

REQ, REPLY = 3, 4
sel = selectors.DefaultSelector()
sel.register(REQ, selectors.EVENT_READ)
running = {}  # pidfd -> (id, pid)
buf = b""


def child(req):
    for fd in [REQ, REPLY, *running]:
        os.close(fd)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    for fd, path, mode in ((0, req["stdin"], os.O_RDONLY), (1, req["stdout"], os.O_WRONLY), (2, req["stderr"], os.O_WRONLY)):
        f = os.open(path, mode)
        os.dup2(f, fd)
        os.close(f)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    if req.get("cwd"):
        os.chdir(req["cwd"])
    signal.alarm(int(req.get("timeout", 0)))
    import atexit
    import types

    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    sys.argv = ["-c", *req["args"]]
    code = 0
    try:
        exec(compile(req["script"], "<string>", "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        typ, val, tb = sys.exc_info()
        tb = tb.tb_next  # from the program's frame on, as python -c prints it
        sys.excepthook(typ, val.with_traceback(tb), tb)
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


def reply(msg):
    os.write(REPLY, (json.dumps(msg) + "\n").encode())


while True:
    for key, _ in sel.select():
        fd = key.fd
        if fd == REQ:
            data = os.read(REQ, 1 << 16)
            if not data:
                for pfd, (_, pid) in running.items():
                    os.kill(pid, signal.SIGKILL)
                sys.exit(0)
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                req = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    try:
                        child(req)
                    except BaseException:
                        import traceback

                        traceback.print_exc()
                    finally:
                        os._exit(127)
                pfd = os.pidfd_open(pid)
                running[pfd] = (req["id"], pid)
                sel.register(pfd, selectors.EVENT_READ)
        else:
            rid, pid = running.pop(fd)
            sel.unregister(fd)
            os.close(fd)
            _, status = os.waitpid(pid, 0)
            reply({"id": rid, "pid": pid, "status": status})
