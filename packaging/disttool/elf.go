package main

import (
	"debug/elf"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// elfInfo is what the release needs to know of a built binary: that it is
// for the architecture it is named for, that it needs nothing at run time
// but glibc (NVML is opened with dlopen when a driver is there), and the
// oldest glibc it runs on, which names the wheel's manylinux tag and the
// .deb's libc6 dependency.
type elfInfo struct {
	Arch        string   `json:"arch"`
	Interpreter string   `json:"interpreter"`
	Needed      []string `json:"needed"`
	// GLIBC is the newest GLIBC_x.y symbol version the binary asks for:
	// the oldest glibc it runs on.
	GLIBC string `json:"glibc"`
}

// glibcLibs are the libraries of glibc itself (Debian's libc6); a minimal
// glibc base image has these and nothing else.
var glibcLibs = []string{"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "libresolv.so.2", "librt.so.1"}

var loaders = map[string]string{
	"amd64": "/lib64/ld-linux-x86-64.so.2",
	"arm64": "/lib/ld-linux-aarch64.so.1",
}

// checkedELF reads the binary at path and checks it is one for arch.
func checkedELF(path, arch string) (elfInfo, error) {
	if err := checkArch(arch); err != nil {
		return elfInfo{}, err
	}
	info, err := inspectELF(path)
	if err != nil {
		return elfInfo{}, err
	}
	if err := info.check(arch); err != nil {
		return elfInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

func inspectELF(path string) (elfInfo, error) {
	f, err := elf.Open(path)
	if err != nil {
		return elfInfo{}, err
	}
	defer f.Close()
	var info elfInfo
	switch f.Machine {
	case elf.EM_X86_64:
		info.Arch = "amd64"
	case elf.EM_AARCH64:
		info.Arch = "arm64"
	default:
		info.Arch = f.Machine.String()
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return info, fmt.Errorf("%s: read interpreter: %w", path, err)
			}
			info.Interpreter = strings.TrimRight(string(b), "\x00")
		}
	}
	if info.Needed, err = f.ImportedLibraries(); err != nil {
		return info, fmt.Errorf("%s: %w", path, err)
	}
	syms, err := f.DynamicSymbols()
	if err != nil && len(info.Needed) > 0 {
		return info, fmt.Errorf("%s: %w", path, err)
	}
	for _, s := range syms {
		if v, ok := strings.CutPrefix(s.Version, "GLIBC_"); ok && s.Section == elf.SHN_UNDEF && versionLess(info.GLIBC, v) {
			info.GLIBC = v
		}
	}
	return info, nil
}

// check refuses a binary that is not one the release can ship for arch.
func (i elfInfo) check(arch string) error {
	if i.Arch != arch {
		return fmt.Errorf("built for %s, not %s", i.Arch, arch)
	}
	if i.Interpreter != loaders[arch] {
		return fmt.Errorf("interpreter %q, want glibc's %s (a cgo build; CGO_ENABLED=0 has no NVML)", i.Interpreter, loaders[arch])
	}
	for _, n := range i.Needed {
		if !slices.Contains(glibcLibs, n) {
			return fmt.Errorf("needs %s, which is not part of glibc: a minimal glibc base (and a manylinux wheel) would not run it", n)
		}
	}
	if i.GLIBC == "" {
		return fmt.Errorf("asks for no GLIBC_ symbol version; not a glibc binary")
	}
	return nil
}

// versionLess compares dotted numeric versions ("2.17" < "2.34"); "" is
// less than any version.
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	if a == "" {
		return b != ""
	}
	for k := 0; k < max(len(pa), len(pb)); k++ {
		var x, y int
		if k < len(pa) {
			x, _ = strconv.Atoi(pa[k])
		}
		if k < len(pb) {
			y, _ = strconv.Atoi(pb[k])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

func cmdELF(args []string) error {
	fs := flag.NewFlagSet("elf", flag.ContinueOnError)
	bin := fs.String("binary", "", "the built vramguard binary")
	arch := archFlag(fs)
	if err := parseFlags(fs, args, "binary", "arch"); err != nil {
		return err
	}
	info, err := checkedELF(*bin, *arch)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(info)
}
