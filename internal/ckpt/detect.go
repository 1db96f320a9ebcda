// Package ckpt understands checkpoint files and directories written by
// PyTorch and the libraries around it (torch zip and legacy formats,
// safetensors, torch.distributed.checkpoint directories, HF Trainer
// checkpoint-N directories, Lightning .ckpt, plain pickles) without Python.
//
// Everything is detected by content, never by file name, and only the bytes
// needed are read: the zip central directory, the pickle, the safetensors
// header. Pickles are decoded symbolically by package pickle; nothing from a
// checkpoint is ever executed or imported, and this package must never gain a
// code path that does.
package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vramguard/vramguard/internal/ckpt/ziparc"
	"github.com/vramguard/vramguard/internal/lazyre"
	"github.com/vramguard/vramguard/internal/pickle"
)

// Format names, as reported in Entry.Format and Report.Format.
const (
	FormatTorchZip    = "torch-zip"
	FormatTorchLegacy = "torch-legacy"
	FormatTorchTar    = "torch-tar" // the pre-1.0 tar layout
	FormatSafetensors = "safetensors"
	FormatDCP         = "dcp"
	FormatHFTrainer   = "hf-trainer"
	FormatPickle      = "pickle"
)

// legacyMagic is torch's MAGIC_NUMBER, the first pickle of a legacy file.
var legacyMagic = []byte{0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}

// sniffLen is how much of a file's head detection looks at.
const sniffLen = 512

// detectFile says which checkpoint format a file's bytes are in, or "" when
// they are not a checkpoint at all. It reads the head and, for zips, the tail.
func detectFile(r io.ReaderAt, size int64) string {
	head := make([]byte, sniffLen)
	n, _ := r.ReadAt(head, 0)
	head = head[:n]
	if len(head) < 2 {
		return ""
	}
	switch {
	case bytes.HasPrefix(head, []byte("PK\x03\x04")):
		if name, ok := ziparc.FirstLocalName(r); ok && looksTorchRecord(name) {
			return FormatTorchZip
		}
		if a, err := ziparc.Open(r, size, ziparc.DefaultLimits); err == nil {
			if _, ok := torchRoot(a); ok {
				return FormatTorchZip
			}
		}
		return ""
	case len(head) >= 10 && head[8] == '{' && (head[9] == '"' || head[9] == '}' || head[9] == ' ' || head[9] == '\n') &&
		binary.LittleEndian.Uint64(head) >= 2 && binary.LittleEndian.Uint64(head) <= maxSafetensorsHeader:
		// Checked before pickle: a header length of 0x..80 starts with the
		// PROTO opcode's byte.
		return FormatSafetensors
	case len(head) >= 10 && head[8] == '{' && head[9] == '"' && binary.LittleEndian.Uint64(head) > maxSafetensorsHeader &&
		binary.LittleEndian.Uint64(head) <= uint64(size-8):
		// A whole header over the format's limit: a safetensors file
		// that every reader refuses (said so), not something else.
		return FormatSafetensors
	case head[0] == 0x80 && head[1] >= 2 && head[1] <= 5:
		if isLegacyHead(head) {
			return FormatTorchLegacy
		}
		return FormatPickle
	case isTar(r):
		return FormatTorchTar
	case head[0] == 'v' && size < maxLFSPointer:
		if _, ok := readLFSPointer(r, size); ok {
			return FormatLFSPointer
		}
	case isProto01Pickle(r, size, head[0]):
		return FormatPickle
	}
	return ""
}

// looksTorchRecord reports whether a zip record name is one torch writes:
// <root>/data.pkl, <root>/version, <root>/byteorder, <root>/data/N,
// <root>/.data/..., <root>/constants.pkl, <root>/code/...
func looksTorchRecord(name string) bool {
	i := strings.IndexByte(name, '/')
	if i <= 0 {
		return false
	}
	rest := name[i+1:]
	switch {
	case rest == "data.pkl", rest == "version", rest == ".data/version", rest == "byteorder", rest == "constants.pkl",
		strings.HasPrefix(rest, "data/"), strings.HasPrefix(rest, ".data/"), strings.HasPrefix(rest, "code/"):
		return true
	}
	return false
}

func isLegacyHead(head []byte) bool {
	// Protocol 2 (torch's default): PROTO 2, LONG1 10, <10 bytes>.
	if len(head) >= 14 && head[2] == 0x8a && head[3] == 10 && bytes.Equal(head[4:14], legacyMagic) {
		return true
	}
	return false
}

func isTar(r io.ReaderAt) bool {
	var blk [512]byte
	if n, _ := r.ReadAt(blk[:], 0); n < 512 {
		return false
	}
	if string(blk[257:262]) != "ustar" {
		return false
	}
	// torch's legacy tar holds the records storages, tensors, pickle, sys_info.
	name := string(bytes.TrimRight(blk[:100], "\x00"))
	switch strings.TrimPrefix(name, "./") {
	case "storages", "tensors", "pickle", "sys_info":
		return true
	}
	return false
}

// isProto01Pickle accepts a text-protocol pickle only if it decodes fully;
// text files that happen to start with a pickle opcode are not pickles.
func isProto01Pickle(r io.ReaderAt, size int64, first byte) bool {
	if !strings.ContainsRune("(]}cNIFSVLl)dpg", rune(first)) || size > 64<<20 {
		return false
	}
	res, err := decodePickle(r, 0, size)
	return err == nil && res.End == size
}

// detectDir says whether a directory is itself one checkpoint, by what it
// holds, never by a file name alone:
//
//   - torch.distributed.checkpoint (DCP): shards named __N_M.distcp, or a
//     .metadata file that is a pickled DCP Metadata object (storage_data,
//     state_dict_metadata). Any other file named .metadata (notes, editor or
//     OS metadata) does not make a directory a checkpoint.
//   - HF Trainer: trainer_state.json in a directory named checkpoint-N, or in
//     a directory with no subdirectories (a Trainer output_dir that holds
//     checkpoint-N folders is not itself one checkpoint).
func detectDir(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	hasMeta, hasState, hasSubdir := false, false, false
	for _, e := range ents {
		name := e.Name()
		switch {
		case entryIsDir(dir, e):
			hasSubdir = true
		case !entryIsRegular(dir, e):
		case dcpShardName.MatchString(name):
			return FormatDCP
		case name == ".metadata":
			hasMeta = true
		case name == "trainer_state.json":
			hasState = true
		}
	}
	if hasMeta && isDCPMetadata(filepath.Join(dir, ".metadata")) {
		return FormatDCP
	}
	if hasState && (hfCheckpointName.MatchString(filepath.Base(dir)) || !hasSubdir) {
		return FormatHFTrainer
	}
	return ""
}

// dcpShardName is how torch's FileSystemWriter names data files:
// __{rank}_{n}.distcp.
var dcpShardName = lazyre.New(`^__[0-9]+_[0-9]+\.distcp$`)

// hfCheckpointName is the HF Trainer's checkpoint folder name.
var hfCheckpointName = lazyre.New(`^checkpoint-([0-9]+)$`)

// maxDCPMetadata bounds the .metadata pickle decoded to recognise a DCP
// directory.
const maxDCPMetadata = 64 << 20

// isDCPMetadata reports whether p is a pickled torch.distributed.checkpoint
// Metadata object: a pickle whose value is an object with storage_data or
// state_dict_metadata in its state.
func isDCPMetadata(p string) bool {
	f, size, err := openFile(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [2]byte
	if size < 4 || size > maxDCPMetadata {
		return false
	}
	if n, _ := f.ReadAt(head[:], 0); n < 2 || head[0] != 0x80 || head[1] < 2 || head[1] > 5 {
		return false
	}
	res, err := decodePickle(f, 0, size)
	if err != nil {
		return false
	}
	c, ok := res.Value.(*pickle.Call)
	if !ok {
		return false
	}
	st := asStateDict(c)
	if st == nil {
		return false
	}
	_, a := st.Get("storage_data")
	_, b := st.Get("state_dict_metadata")
	return a || b
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// UnreadableError wraps a failure to open or read the input itself (missing,
// permission denied, an I/O error), which the CLI reports with exit 2 rather
// than as an invalid checkpoint.
type UnreadableError struct{ Err error }

func (e *UnreadableError) Error() string { return e.Err.Error() }
func (e *UnreadableError) Unwrap() error { return e.Err }

// Unreadable is an UnreadableError for what the os package said of a path:
// "PATH: no such file or directory", without the system call's name (a
// stat or open the user did not ask for).
func Unreadable(err error) *UnreadableError {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &UnreadableError{fmt.Errorf("%s: %w", pe.Path, pe.Err)}
	}
	return &UnreadableError{err}
}

func openFile(path string) (*os.File, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, Unreadable(err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, Unreadable(err)
	}
	return f, st.Size(), nil
}
