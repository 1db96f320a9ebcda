package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// The image rehearsal. No container engine runs here (no daemon, and no
// registry to pull the base from), so scripts/dist.sh does what building
// and starting the image would do, with the Dockerfile as the script:
//
//  1. the Dockerfile is read and its build arguments applied; COPY sources
//     must exist in the build context and survive .dockerignore;
//  2. a root file system is laid out: in place of the base image, the
//     glibc of the Debian release the base is built from (this machine's
//     libc6 packages: Debian 12 like distroless's debian12 images), its
//     users (root, nobody, nonroot 65532), then every COPY;
//  3. every ELF file COPY put there must start on that root: its loader
//     and every library it needs are there, and the glibc is new enough;
//  4. with -run (as root, for the architecture of this machine), the
//     entrypoint and command run in their own mount and network
//     namespaces, chrooted into that root made read-only, as the image's
//     USER, with the DaemonSet's mounts (its token, a writable state
//     directory, the host's /proc): the agent must answer /healthz and
//     report the stamped version, then stop cleanly on SIGTERM.
//
// What it cannot do: pull the real base, or run the arm64 image (no
// emulator here); for arm64 steps 1-3 run.

func cmdImage(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	dockerfile := fs.String("dockerfile", "", "the Dockerfile")
	contextDir := fs.String("context", "", "the build context (the repository root)")
	arch := archFlag(fs)
	version := fs.String("version", "", "the version stamped into the binary, passed as the VERSION build argument")
	manifest := fs.String("manifest", "", "the Kubernetes manifest whose container runs the image")
	work := fs.String("work", "", "scratch directory for the root file system")
	run := fs.Bool("run", false, "start the image's entrypoint (root, and -arch must be this machine's)")
	if err := parseFlags(fs, args, "dockerfile", "context", "arch", "version", "work"); err != nil {
		return err
	}
	if err := checkArch(*arch); err != nil {
		return err
	}
	b, err := os.ReadFile(*dockerfile)
	if err != nil {
		return err
	}
	instrs, err := parseDockerfile(b)
	if err != nil {
		return fmt.Errorf("%s: %w", *dockerfile, err)
	}
	spec, err := evalDockerfile(instrs, map[string]string{
		"TARGETARCH": *arch, "TARGETOS": "linux", "TARGETPLATFORM": "linux/" + *arch, "VERSION": *version,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", *dockerfile, err)
	}
	if v := spec.Labels["org.opencontainers.image.version"]; v != *version {
		return fmt.Errorf("%s: label org.opencontainers.image.version is %q, want %q", *dockerfile, v, *version)
	}
	fmt.Printf("image %s: FROM %s, %d COPY, USER %s, ENTRYPOINT %q CMD %q\n", *arch, spec.Base, len(spec.Copies), spec.User, spec.Entrypoint, spec.Cmd)

	rootfs := filepath.Join(*work, "rootfs-"+*arch)
	if err := os.RemoveAll(rootfs); err != nil {
		return err
	}
	uid, gid, err := layout(rootfs, spec, *contextDir, *arch)
	if err != nil {
		return err
	}
	if *manifest != "" {
		if err := checkManifest(*manifest, spec, uid); err != nil {
			return err
		}
		fmt.Printf("image %s: %s runs it with the same arguments and user\n", *arch, *manifest)
	}
	if !*run {
		return nil
	}
	if runtime.GOARCH != *arch {
		return fmt.Errorf("-run: this machine is %s; an %s image cannot start here", runtime.GOARCH, *arch)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("-run needs root (chroot, namespaces, a user switch); run scripts/dist.sh as root, or set DIST_IMAGE_RUN=0 to rehearse without starting the image")
	}
	return startImage(rootfs, *work, spec, uid, gid, *version)
}

// standIn returns the Debian package holding the glibc of arch on this
// machine and maps its shared objects to where they are on an arch system.
func standIn(arch string) (pkg string, files map[string]string, version string, err error) {
	triplet := archs[arch].triplet
	pkg = "libc6"
	cross := runtime.GOARCH != arch
	if cross {
		pkg = "libc6-" + archs[arch].deb + "-cross"
	}
	out, err := exec.Command("dpkg-query", "-L", pkg).Output()
	if err != nil {
		return pkg, nil, "", fmt.Errorf("the glibc of %s comes from Debian's %s here, which is not installed (%v)", arch, pkg, err)
	}
	files = map[string]string{}
	for _, p := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		base := path.Base(p)
		if !strings.Contains(base, ".so") {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		dir := path.Dir(p)
		switch {
		case cross && dir == "/usr/"+triplet+"/lib":
			files["/lib/"+triplet+"/"+base] = p
			if strings.HasPrefix(base, "ld-linux") {
				files["/lib/"+base] = p
			}
		case !cross && (dir == "/lib/"+triplet || dir == "/usr/lib/"+triplet || dir == "/lib64"):
			files[p] = p
		}
	}
	v, err := exec.Command("dpkg-query", "-W", "-f=${Version}", pkg).Output()
	if err != nil {
		return pkg, nil, "", fmt.Errorf("version of %s: %v", pkg, err)
	}
	version = string(v)
	if i := strings.IndexAny(version, "-+~"); i > 0 {
		version = version[:i]
	}
	return pkg, files, version, nil
}

// Users of the distroless base images.
const passwd = "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
const group = "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"

// layout builds the image's root file system and checks that its
// binaries start on it; it returns the USER's uid and gid.
func layout(rootfs string, spec imageSpec, contextDir, arch string) (int, int, error) {
	pkg, libs, glibc, err := standIn(arch)
	if err != nil {
		return 0, 0, err
	}
	mk := func(p string, mode os.FileMode) error {
		if err := os.MkdirAll(filepath.Join(rootfs, p), 0o755); err != nil {
			return err
		}
		return os.Chmod(filepath.Join(rootfs, p), mode)
	}
	for _, d := range []string{"/", "/etc", "/usr/bin", "/root", "/home/nonroot", "/proc", "/sys", "/dev", "/var/lib"} {
		if err := mk(d, 0o755); err != nil {
			return 0, 0, err
		}
	}
	if err := mk("/tmp", 0o1777); err != nil {
		return 0, 0, err
	}
	if err := os.Chown(filepath.Join(rootfs, "home/nonroot"), 65532, 65532); err != nil && os.Geteuid() == 0 {
		return 0, 0, err
	}
	for name, text := range map[string]string{"/etc/passwd": passwd, "/etc/group": group} {
		if err := os.WriteFile(filepath.Join(rootfs, name), []byte(text), 0o644); err != nil {
			return 0, 0, err
		}
	}
	for dst, src := range libs {
		if err := copyFile(src, filepath.Join(rootfs, dst), 0o755); err != nil {
			return 0, 0, err
		}
	}
	fmt.Printf("image %s: base stand-in: %d shared objects of %s (glibc %s) and the base's users\n", arch, len(libs), pkg, glibc)

	ignore, err := readDockerignore(contextDir)
	if err != nil {
		return 0, 0, err
	}
	for _, c := range spec.Copies {
		if path.IsAbs(c.src) || strings.HasPrefix(path.Clean(c.src), "..") {
			return 0, 0, fmt.Errorf("line %d of the Dockerfile: COPY %s is outside the build context", c.line, c.src)
		}
		if ignore.excluded(c.src) {
			return 0, 0, fmt.Errorf("line %d of the Dockerfile: COPY %s: .dockerignore leaves it out of the build context", c.line, c.src)
		}
		src := filepath.Join(contextDir, filepath.FromSlash(c.src))
		fi, err := os.Stat(src)
		if err != nil {
			return 0, 0, fmt.Errorf("line %d of the Dockerfile: COPY %s: %w (scripts/dist.sh builds it first)", c.line, c.src, err)
		}
		if !fi.Mode().IsRegular() {
			return 0, 0, fmt.Errorf("line %d of the Dockerfile: COPY %s: not a file", c.line, c.src)
		}
		dst := filepath.Join(rootfs, filepath.FromSlash(c.dst))
		if err := copyFile(src, dst, fi.Mode().Perm()); err != nil {
			return 0, 0, err
		}
		if err := checkStarts(rootfs, c.dst, arch, glibc); err != nil {
			return 0, 0, err
		}
		fmt.Printf("image %s: COPY %s %s: starts on the base (loader and libraries there, glibc %s is new enough)\n", arch, c.src, c.dst, glibc)
	}

	uid, gid, err := resolveUser(spec.User, passwd, group)
	if err != nil {
		return 0, 0, err
	}
	if uid == 0 {
		return 0, 0, fmt.Errorf("the Dockerfile's USER %q is root; the image must not run as root by default", spec.User)
	}
	entry := filepath.Join(rootfs, filepath.FromSlash(spec.Entrypoint[0]))
	if fi, err := os.Stat(entry); err != nil || fi.Mode().Perm()&0o001 == 0 {
		return 0, 0, fmt.Errorf("the Dockerfile's ENTRYPOINT %s is not an executable file of the image (%v)", spec.Entrypoint[0], err)
	}
	return uid, gid, nil
}

// checkStarts checks that the file at p in rootfs, if an ELF executable,
// finds its loader and libraries there and a glibc as new as it needs.
func checkStarts(rootfs, p, arch, glibc string) error {
	full := filepath.Join(rootfs, filepath.FromSlash(p))
	head := make([]byte, 4)
	f, err := os.Open(full)
	if err != nil {
		return err
	}
	_, err = io.ReadFull(f, head)
	f.Close()
	if err != nil || !bytes.Equal(head, []byte("\x7fELF")) {
		return nil
	}
	info, err := inspectELF(full)
	if err != nil {
		return err
	}
	if err := info.check(arch); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if _, err := os.Stat(filepath.Join(rootfs, info.Interpreter)); err != nil {
		return fmt.Errorf("%s: its loader %s is not in the base", p, info.Interpreter)
	}
	for _, lib := range info.Needed {
		if _, err := os.Stat(filepath.Join(rootfs, "lib", archs[arch].triplet, lib)); err != nil {
			return fmt.Errorf("%s: needs %s, which the base does not have", p, lib)
		}
	}
	if versionLess(glibc, info.GLIBC) {
		return fmt.Errorf("%s: needs glibc %s, the base has %s", p, info.GLIBC, glibc)
	}
	return nil
}

func resolveUser(user, passwd, group string) (int, int, error) {
	if user == "" {
		return 0, 0, nil
	}
	u, g, hasG := strings.Cut(user, ":")
	lookup := func(table, name string) (int, int, bool) {
		for _, l := range strings.Split(table, "\n") {
			f := strings.Split(l, ":")
			if len(f) >= 3 && (f[0] == name || f[2] == name) {
				id, _ := strconv.Atoi(f[2])
				gid := id
				if len(f) >= 4 {
					gid, _ = strconv.Atoi(f[3])
				}
				return id, gid, true
			}
		}
		return 0, 0, false
	}
	uid, gid, ok := lookup(passwd, u)
	if !ok {
		n, err := strconv.Atoi(u)
		if err != nil {
			return 0, 0, fmt.Errorf("USER %s: no such user in the base", user)
		}
		uid, gid = n, n
	}
	if hasG {
		if id, _, ok := lookup(group, g); ok {
			gid = id
		} else if n, err := strconv.Atoi(g); err == nil {
			gid = n
		} else {
			return 0, 0, fmt.Errorf("USER %s: no such group in the base", user)
		}
	}
	return uid, gid, nil
}

// checkManifest checks that the DaemonSet's container runs this image
// with the image's own command and as its user.
func checkManifest(manifest string, spec imageSpec, uid int) error {
	b, err := os.ReadFile(manifest)
	if err != nil {
		return err
	}
	text := string(b)
	m := regexp.MustCompile(`(?m)^\s*args:\s*(\[.*\])\s*$`).FindStringSubmatch(text)
	if m == nil {
		return fmt.Errorf("%s: no args: [...] line for the container", manifest)
	}
	var args []string
	if err := json.Unmarshal([]byte(m[1]), &args); err != nil {
		return fmt.Errorf("%s: args: %v", manifest, err)
	}
	if !slices.Equal(args, spec.Cmd) {
		return fmt.Errorf("%s: args %q differ from the Dockerfile's CMD %q; keep them one command", manifest, args, spec.Cmd)
	}
	u := regexp.MustCompile(`(?m)^\s*runAsUser:\s*(\d+)\s*$`).FindStringSubmatch(text)
	if u == nil || u[1] != strconv.Itoa(uid) {
		return fmt.Errorf("%s: runAsUser %v, want the image's user %d", manifest, u, uid)
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

// lastLines returns the last n lines of b, for error messages.
func lastLines(b []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
