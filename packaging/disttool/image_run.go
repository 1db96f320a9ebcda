package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// imageExec is the hidden subcommand that runs inside the new namespaces.
const imageExec = "image-exec"

type mountSpec struct {
	Src, Dst string // Dst inside the root file system
	ReadOnly bool
}

// runSpec is what startImage hands to the namespaced child.
type runSpec struct {
	Rootfs   string
	Argv     []string
	Env      []string
	Dir      string
	UID, GID int
	Mounts   []mountSpec
	Port     string
	Version  string
}

// flagValue returns the value of --name in argv ("--name V" or "--name=V").
func flagValue(argv []string, name string) string {
	for i, a := range argv {
		if a == name && i+1 < len(argv) {
			return argv[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// startImage prepares what the DaemonSet would mount for the image's
// command (a token Secret readable by the pod's group, an emptyDir state
// directory, the host's /proc for hostPID) and runs the command in fresh
// mount and network namespaces.
func startImage(rootfs, work string, spec imageSpec, uid, gid int, version string) error {
	argv := append(slices.Clone(spec.Entrypoint), spec.Cmd...)
	listen := flagValue(argv, "--listen")
	_, port, ok := strings.Cut(listen, ":")
	if !ok || port == "" {
		return fmt.Errorf("the image's command has no --listen HOST:PORT to check (%q)", argv)
	}
	var mounts []mountSpec
	if home := flagValue(argv, "--home"); home != "" {
		// An emptyDir under fsGroup: group-owned, setgid, open.
		state := filepath.Join(work, "state")
		if err := os.MkdirAll(state, 0o777); err != nil {
			return err
		}
		if err := os.Chown(state, 0, gid); err != nil {
			return err
		}
		if err := os.Chmod(state, 0o777|os.ModeSetgid); err != nil {
			return err
		}
		mounts = append(mounts, mountSpec{Src: state, Dst: home})
	}
	if tf := flagValue(argv, "--token-file"); tf != "" {
		// A Secret with defaultMode 0440 under fsGroup: root's, the
		// pod's group may read it.
		tok := make([]byte, 24)
		if _, err := rand.Read(tok); err != nil {
			return err
		}
		p := filepath.Join(work, "token")
		if err := os.WriteFile(p, []byte(hex.EncodeToString(tok)), 0o440); err != nil {
			return err
		}
		if err := os.Chown(p, 0, gid); err != nil {
			return err
		}
		if err := os.Chmod(p, 0o440); err != nil {
			return err
		}
		mounts = append(mounts, mountSpec{Src: p, Dst: tf, ReadOnly: true})
	}
	mounts = append(mounts, mountSpec{Src: "/proc", Dst: "/proc"}, mountSpec{Src: "/sys", Dst: "/sys", ReadOnly: true})
	for _, d := range []string{"null", "zero", "random", "urandom"} {
		mounts = append(mounts, mountSpec{Src: "/dev/" + d, Dst: "/dev/" + d})
	}
	// Mount points, made while the root is still writable.
	for _, m := range mounts {
		fi, err := os.Stat(m.Src)
		if err != nil {
			return err
		}
		dst := filepath.Join(rootfs, filepath.FromSlash(m.Dst))
		if fi.IsDir() {
			err = os.MkdirAll(dst, 0o755)
		} else if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
			err = os.WriteFile(dst, nil, 0o644)
		}
		if err != nil {
			return err
		}
	}
	dir := spec.Workdir
	if dir == "" {
		dir = "/"
	}
	home := "/"
	for _, l := range strings.Split(passwd, "\n") {
		if f := strings.Split(l, ":"); len(f) >= 6 && f[2] == strconv.Itoa(uid) {
			home = f[5]
		}
	}
	env := append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home, "HOSTNAME=vramguard-rehearsal"}, spec.Env...)
	rs := runSpec{Rootfs: rootfs, Argv: argv, Env: env, Dir: dir, UID: uid, GID: gid, Mounts: mounts, Port: port, Version: version}
	in, err := json.Marshal(rs)
	if err != nil {
		return err
	}
	cmd := exec.Command("/proc/self/exe", imageExec)
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("starting the image: %w", err)
	}
	return nil
}

// cmdImageExec runs in its own mount and network namespaces: it mounts,
// starts the image's command and checks the agent it starts.
func cmdImageExec() error {
	var rs runSpec
	if err := json.NewDecoder(os.Stdin).Decode(&rs); err != nil {
		return err
	}
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("bring up lo in the new network namespace: %w", err)
	}
	if err := unix.Mount(rs.Rootfs, rs.Rootfs, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind the root: %w", err)
	}
	for _, m := range rs.Mounts {
		dst := filepath.Join(rs.Rootfs, filepath.FromSlash(m.Dst))
		if err := unix.Mount(m.Src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.Src, m.Dst, err)
		}
		if m.ReadOnly {
			if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
				return fmt.Errorf("make %s read-only: %w", m.Dst, err)
			}
		}
	}
	// readOnlyRootFilesystem: true, as in the DaemonSet.
	if err := unix.Mount("", rs.Rootfs, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}

	// One writer for both streams: exec copies into it from one goroutine
	// at a time, and it is read only once cmd.Wait has returned (<-done),
	// which waits for that copying to end.
	var out bytes.Buffer
	cmd := exec.Command(rs.Argv[0], rs.Argv[1:]...)
	cmd.Env, cmd.Dir = rs.Env, rs.Dir
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     rs.Rootfs,
		Credential: &syscall.Credential{Uid: uint32(rs.UID), Gid: uint32(rs.GID), Groups: []uint32{}},
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %q in the image: %w", rs.Argv, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	fail := func(format string, a ...any) error {
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s\nthe agent said:\n%s", fmt.Sprintf(format, a...), lastLines(out.Bytes(), 20))
	}

	base := "http://127.0.0.1:" + rs.Port
	client := &http.Client{Timeout: 2 * time.Second}
	get := func(p string) (int, []byte, error) {
		resp, err := client.Get(base + p)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, b, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			return fmt.Errorf("%q exited before it served (%v)\nthe agent said:\n%s", rs.Argv, err, lastLines(out.Bytes(), 20))
		default:
		}
		code, _, err := get("/healthz")
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			return fail("/healthz did not answer 200 within 30 s (last: %d %v)", code, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	code, body, err := get("/api/v1/status")
	var status struct{ Version string }
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &status) != nil {
		return fail("/api/v1/status: %d %v %s", code, err, body)
	}
	if status.Version != rs.Version {
		return fail("/api/v1/status reports version %q, want the stamped %q", status.Version, rs.Version)
	}
	uid, err := procUID(cmd.Process.Pid)
	if err != nil || uid != rs.UID {
		return fail("the agent runs as uid %d (%v), want %d", uid, err, rs.UID)
	}
	// A write to the root must fail: readOnlyRootFilesystem holds.
	if err := os.WriteFile(filepath.Join(rs.Rootfs, "usr/bin/probe-write"), nil, 0o644); err == nil || !errors.Is(err, syscall.EROFS) {
		return fail("the root is writable (%v)", err)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("on SIGTERM the agent ended with %v\nthe agent said:\n%s", err, lastLines(out.Bytes(), 20))
		}
	case <-time.After(15 * time.Second):
		return fail("the agent did not stop within 15 s of SIGTERM")
	}
	fmt.Printf("image: %q ran as uid %d on a read-only glibc-only root, answered /healthz, reported version %s, stopped on SIGTERM\n",
		rs.Argv, rs.UID, status.Version)
	return nil
}

func procUID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			f := strings.Fields(v)
			if len(f) > 1 {
				return strconv.Atoi(f[1]) // effective
			}
		}
	}
	return -1, fmt.Errorf("no Uid line")
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
