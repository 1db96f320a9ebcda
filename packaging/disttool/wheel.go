package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/probe"
)

// A vramguard wheel (PEP 427) is a platform wheel with no Python build
// step, the way ruff and uv ship theirs:
//
//	vramguard/                        the importable package: import vramguard,
//	                                  %load_ext vramguard, python -m vramguard
//	vramguard/_pythonpath/            the probe directory `vramguard run` puts
//	                                  on a job's PYTHONPATH (probe.PackagedDir)
//	vramguard-V.data/scripts/vramguard  the binary; pip installs it in the
//	                                  environment's bin/, on PATH
//	vramguard-V.dist-info/            METADATA, WHEEL, RECORD
//
// Both Python trees are the probe embedded in the binary, byte for byte
// (probe.Files), so the binary recognises its own package (probe.Installed).
// The tag names the oldest glibc the binary runs on, read from its ELF
// symbol versions: a binary linked against a newer glibc than the tag says
// would install and then fail to start.

// pep440 matches the normalized public and local versions dist.sh makes.
var pep440 = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?$`)

const wheelSummary = "Supervise PyTorch training jobs, explain how they die, see every GPU byte and who owns it"

type wheelFile struct {
	name string
	data []byte
	mode os.FileMode
}

// manylinuxTag is the platform tag for a binary needing glibc (as
// "2.34") on arch; 2.17 is the oldest glibc any manylinux tag in use names.
func manylinuxTag(glibc, arch string) (string, error) {
	if versionLess(glibc, "2.17") {
		glibc = "2.17"
	}
	maj, min, ok := strings.Cut(glibc, ".")
	if !ok {
		return "", fmt.Errorf("glibc version %q", glibc)
	}
	if _, err := strconv.Atoi(maj); err != nil {
		return "", fmt.Errorf("glibc version %q", glibc)
	}
	if _, err := strconv.Atoi(min); err != nil {
		return "", fmt.Errorf("glibc version %q", glibc)
	}
	return fmt.Sprintf("manylinux_%s_%s_%s", maj, min, archs[arch].wheel), nil
}

// wheelRecordHash is RECORD's hash of b: sha256, URL-safe base64, no padding.
func wheelRecordHash(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256=" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// buildWheel returns the wheel's file name and content.
func buildWheel(version, platTag string, binary, readme []byte, mtime time.Time) (string, []byte, error) {
	if !pep440.MatchString(version) {
		return "", nil, fmt.Errorf("version %q is not a normalized PEP 440 version", version)
	}
	name := "vramguard-" + version
	tag := "py3-none-" + platTag
	distInfo := name + ".dist-info/"

	var files []wheelFile
	probeFiles := probe.Files()
	names := make([]string, 0, len(probeFiles))
	for n := range probeFiles {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if strings.HasPrefix(n, "vramguard/") {
			files = append(files, wheelFile{n, probeFiles[n], 0o644})
		}
	}
	for _, n := range names {
		files = append(files, wheelFile{probe.PackagedDir + "/" + n, probeFiles[n], 0o644})
	}
	files = append(files, wheelFile{name + ".data/scripts/vramguard", binary, 0o755})

	var meta strings.Builder
	for _, l := range []string{
		"Metadata-Version: 2.1",
		"Name: vramguard",
		"Version: " + version,
		"Summary: " + wheelSummary,
		"Home-page: https://github.com/vramguard/vramguard",
		"Project-URL: Source, https://github.com/vramguard/vramguard",
		"Project-URL: Documentation, https://github.com/vramguard/vramguard#readme",
		"Keywords: pytorch,gpu,cuda,oom,training,checkpoints,monitoring",
		"Platform: Linux",
		"Classifier: Environment :: Console",
		"Classifier: Environment :: GPU :: NVIDIA CUDA",
		"Classifier: Intended Audience :: Science/Research",
		"Classifier: Operating System :: POSIX :: Linux",
		"Classifier: Programming Language :: Python :: 3",
		"Classifier: Topic :: Scientific/Engineering :: Artificial Intelligence",
		"Classifier: Topic :: System :: Monitoring",
		"Requires-Python: >=3.8",
		"Description-Content-Type: text/markdown",
	} {
		meta.WriteString(l + "\n")
	}
	meta.WriteString("\n")
	meta.Write(readme)
	files = append(files, wheelFile{distInfo + "METADATA", []byte(meta.String()), 0o644})
	files = append(files, wheelFile{distInfo + "WHEEL", []byte(
		"Wheel-Version: 1.0\n" +
			"Generator: vramguard-dist (scripts/dist.sh)\n" +
			"Root-Is-Purelib: false\n" +
			"Tag: " + tag + "\n"), 0o644})

	var record strings.Builder
	for _, f := range files {
		fmt.Fprintf(&record, "%s,%s,%d\n", f.name, wheelRecordHash(f.data), len(f.data))
	}
	record.WriteString(distInfo + "RECORD,,\n")
	files = append(files, wheelFile{distInfo + "RECORD", []byte(record.String()), 0o644})

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: mtime}
		h.SetMode(f.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return "", nil, err
		}
		if _, err := w.Write(f.data); err != nil {
			return "", nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return "", nil, err
	}
	return name + "-" + tag + ".whl", buf.Bytes(), nil
}

// sourceDate is SOURCE_DATE_EPOCH (reproducible builds), else the start of
// 1980, the earliest time a zip file can hold.
func sourceDate() (time.Time, error) {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
		}
		t := time.Unix(n, 0).UTC()
		if t.Year() >= 1980 {
			return t, nil
		}
	}
	return time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC), nil
}

func cmdWheel(args []string) error {
	fs := flag.NewFlagSet("wheel", flag.ContinueOnError)
	bin := fs.String("binary", "", "the built vramguard binary for -arch")
	arch := archFlag(fs)
	version := fs.String("version", "", "PEP 440 version")
	readme := fs.String("readme", "", "README.md, the long description")
	out := fs.String("out", "", "directory to write the wheel into")
	if err := parseFlags(fs, args, "binary", "arch", "version", "readme", "out"); err != nil {
		return err
	}
	info, err := checkedELF(*bin, *arch)
	if err != nil {
		return err
	}
	plat, err := manylinuxTag(info.GLIBC, *arch)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(*bin)
	if err != nil {
		return err
	}
	rd, err := os.ReadFile(*readme)
	if err != nil {
		return err
	}
	mtime, err := sourceDate()
	if err != nil {
		return err
	}
	name, whl, err := buildWheel(*version, plat, b, rd, mtime)
	if err != nil {
		return err
	}
	p := filepath.Join(*out, name)
	if err := os.WriteFile(p, whl, 0o644); err != nil {
		return err
	}
	fmt.Println(p)
	return nil
}
