"""Files that are the user's own: a directory only the user can change,
files created in it that nothing planted can redirect, and files read only
when the user owns them.

    d = owned.Dir.open(path, create=True)   # refuses a directory others can write
    d.write_atomic(name, fn)                # fn(file object); staged, fsynced, renamed
    d.entries(match)                        # [(name, stat, why not the user's or "")]
    f = owned.open_file(path)               # a regular file of the user's, or Unsafe

Everything in a Dir goes through the directory's descriptor, held from the
check on: a directory renamed or replaced by a symlink afterwards does not
move where the files go.
"""

import os
import stat

_STAGE = ".vramguard-stage-"
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


class Unsafe(Exception):
    """A file or directory that is not the user's alone; the message says
    whose it is or who else can write it."""


def _who(uid):
    try:
        import pwd

        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except (KeyError, ImportError):
        return "uid %d" % uid


def not_own_file(st):
    """Why a stat of a file is not the user's own file, or ""."""
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return "owned by %s" % _who(st.st_uid)
    if st.st_mode & 0o022:
        return "writable by others (mode %04o)" % stat.S_IMODE(st.st_mode)
    return ""


def open_file(path):
    """path opened for reading, never through a symbolic link, when it is a
    regular file the user owns that no one else can write; else Unsafe."""
    try:
        fd = os.open(path, _OPEN_FLAGS | os.O_NOFOLLOW)
    except OSError as e:
        if os.path.islink(path):
            raise Unsafe("%s is a symbolic link: give the file it points to, if it is yours" % path) from None
        raise Unsafe("%s: %s" % (path, e.strerror or e)) from None
    why = not_own_file(os.fstat(fd))
    if why:
        os.close(fd)
        raise Unsafe("%s is %s, not a file of yours" % (path, why))
    return os.fdopen(fd, "rb")


class Dir:
    def __init__(self, path, fd):
        self.path, self.fd = path, fd

    @classmethod
    def open(cls, path, create=False):
        """The directory at path, created (0700) if missing and create is
        set; Unsafe when another user owns it or others can write it."""
        path = os.path.abspath(path)
        if create and not os.path.lexists(path):
            try:
                parent = os.path.dirname(path)
                if parent:
                    os.makedirs(parent, exist_ok=True)
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            except OSError as e:
                raise Unsafe("cannot create %s: %s" % (path, e.strerror or e)) from None
        try:
            fd = os.open(path, _OPEN_FLAGS | os.O_DIRECTORY)
        except OSError as e:
            raise Unsafe("cannot open %s: %s" % (path, e.strerror or e)) from None
        st = os.fstat(fd)
        why = ""
        if st.st_uid != os.geteuid():
            why = "is owned by %s" % _who(st.st_uid)
        elif st.st_mode & 0o022:
            why = "is writable by others (mode %04o)" % stat.S_IMODE(st.st_mode)
        if why:
            os.close(fd)
            raise Unsafe("%s %s: another user could replace or remove what is saved there; "
                         "give a directory only you can write" % (path, why))
        return cls(path, fd)

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def writable(self):
        return os.access(".", os.W_OK | os.X_OK, dir_fd=self.fd)

    def entries(self, match):
        """(name, stat, why it is not the user's own file or "") of every
        name match() accepts; stat is None for one that vanished."""
        out = []
        for name in os.listdir(self.fd):
            if not match(name):
                continue
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except OSError:
                continue
            out.append((name, st, not_own_file(st)))
        return out

    def open_file(self, name):
        """name in this directory opened for reading, when it is the user's
        own file; else Unsafe."""
        try:
            fd = os.open(name, _OPEN_FLAGS | os.O_NOFOLLOW, dir_fd=self.fd)
        except OSError as e:
            raise Unsafe("%s: %s" % (os.path.join(self.path, name), e.strerror or e)) from None
        why = not_own_file(os.fstat(fd))
        if why:
            os.close(fd)
            raise Unsafe("%s is %s, not a file of yours" % (os.path.join(self.path, name), why))
        return os.fdopen(fd, "rb")

    def write_atomic(self, name, write):
        """write(f) into a fresh file staged in this directory (created with
        O_EXCL|O_NOFOLLOW, mode 0600), fsynced, then renamed to name: a kill
        at any point leaves the previous file of that name whole. Returns the
        file's size."""
        stage = "%s%d-%s" % (_STAGE, os.getpid(), os.urandom(6).hex())
        fd = os.open(stage, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                     0o600, dir_fd=self.fd)
        done = False
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
                size = os.fstat(f.fileno()).st_size
            os.rename(stage, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            done = True
            os.fsync(self.fd)
            return size
        finally:
            if not done:
                try:
                    os.unlink(stage, dir_fd=self.fd)
                except OSError:
                    pass

    def remove(self, name):
        os.unlink(name, dir_fd=self.fd)

    def clean_stages(self):
        """Remove staged files of processes that are gone (a save killed
        before its rename)."""
        for name in os.listdir(self.fd):
            if not name.startswith(_STAGE):
                continue
            try:
                pid = int(name[len(_STAGE):].split("-", 1)[0])
                os.kill(pid, 0)
                continue
            except ProcessLookupError:
                pass
            except (ValueError, OSError):
                continue
            try:
                os.unlink(name, dir_fd=self.fd)
            except OSError:
                pass
