// Command disttool is the Go half of scripts/dist.sh, vramguard's release
// script: it writes the Python wheels, the man pages and shell completions,
// inspects the built binaries' ELF headers, and rehearses the container
// image that the Dockerfile describes. scripts/dist.sh drives it; it is not
// meant to be run by hand, and it is never part of the vramguard binary.
//
//	disttool elf    -binary BIN -arch amd64|arm64
//	disttool wheel  -binary BIN -arch amd64|arm64 -version V -readme README.md -out DIR
//	disttool docs   -version V -date YYYY-MM-DD -out DIR
//	disttool image  -dockerfile Dockerfile -context DIR -arch amd64|arm64 -version V -manifest YAML [-run]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "elf":
		err = cmdELF(os.Args[2:])
	case "wheel":
		err = cmdWheel(os.Args[2:])
	case "docs":
		err = cmdDocs(os.Args[2:])
	case "image":
		err = cmdImage(os.Args[2:])
	case imageExec:
		err = cmdImageExec()
	default:
		usage()
	}
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "disttool:", err)
		}
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: disttool elf|wheel|docs|image [flags] (run by scripts/dist.sh)")
	os.Exit(2)
}

// archs maps Go's architecture names to the names the formats use.
var archs = map[string]struct {
	wheel, deb, triplet string
}{
	"amd64": {"x86_64", "amd64", "x86_64-linux-gnu"},
	"arm64": {"aarch64", "arm64", "aarch64-linux-gnu"},
}

func archFlag(fs *flag.FlagSet) *string {
	return fs.String("arch", "", "target architecture: amd64 or arm64")
}

func checkArch(a string) error {
	if _, ok := archs[a]; !ok {
		return fmt.Errorf("-arch %q: want amd64 or arm64", a)
	}
	return nil
}

// parseFlags parses a command's args into fs, then returns an error naming
// the first of the required flags left empty.
func parseFlags(fs *flag.FlagSet, args []string, required ...string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, n := range required {
		if fs.Lookup(n).Value.String() == "" {
			return fmt.Errorf("%s: -%s is required", fs.Name(), n)
		}
	}
	return nil
}
