package ckpt

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/vramguard/vramguard/internal/pickle"
)

// Verdicts of the security scan.
const (
	VerdictSafe      = "safe"      // on the allowlist
	VerdictUnknown   = "unknown"   // not known to be dangerous, not on the allowlist
	VerdictDangerous = "dangerous" // can run code, touch files or the network, or cannot be resolved
)

// dangerousModules are modules any reference into is reported as dangerous.
var dangerousModules = []string{
	"os", "posix", "nt", "subprocess", "_posixsubprocess", "sys", "runpy", "importlib", "imp", "zipimport", "pkgutil",
	"marshal", "pickle", "_pickle", "cPickle", "dill", "cloudpickle", "joblib", "shelve", "copyreg", "copy_reg",
	"socket", "_socket", "ssl", "shutil", "ctypes", "_ctypes", "cffi", "code", "codeop", "commands", "pty", "tty",
	"webbrowser", "multiprocessing", "asyncio", "threading", "_thread", "thread", "signal", "platform",
	"pydoc", "bdb", "pdb", "cProfile", "profile", "timeit", "trace", "tracemalloc", "tempfile",
	"functools", "operator", "_operator", "types", "inspect", "gc", "weakref", "site", "sysconfig", "ensurepip", "venv",
	"pip", "setuptools", "distutils", "pkg_resources", "urllib", "urllib2", "http", "httplib", "ftplib", "smtplib",
	"telnetlib", "poplib", "imaplib", "xmlrpc", "requests", "aiohttp", "idlelib", "lib2to3", "uuid", "glob",
	"io", "_io", "fileinput", "linecache", "logging", "builtins.__import__",
	"torch.hub", "torch.jit", "torch._C", "torch.fx", "torch.package", "torch.utils.collect_env", "torch._dynamo",
	"torch._inductor", "torch.utils.cpp_extension", "torch.distributed.rpc", "torch._ops", "torch.ops",
	"numpy.testing", "numpy.f2py", "numpy.distutils", "numpy.lib.npyio", "numpy.load", "numpy.ctypeslib",
	"<extension registry>",
}

// dangerousNames are single callables reported as dangerous.
var dangerousNames = map[string]string{
	"eval": "evaluates Python code", "exec": "executes Python code", "execfile": "executes a Python file",
	"compile": "compiles Python code", "open": "opens files", "file": "opens files",
	"getattr": "reaches any attribute (obfuscates the real target)", "setattr": "sets attributes",
	"delattr": "deletes attributes", "__import__": "imports any module", "globals": "exposes the interpreter's globals",
	"locals": "exposes locals", "vars": "exposes an object's namespace", "input": "reads stdin",
	"breakpoint": "starts a debugger", "apply": "calls anything", "help": "starts the help system",
	"memoryview": "exposes raw memory", "type": "creates classes",
	"load": "loads another pickle or checkpoint", "loads": "loads another pickle",
}

// ScanHit is one global reference with its verdict.
type ScanHit struct {
	Global  string `json:"global"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	Record  string `json:"record,omitempty"` // zip record or "pickle N" where it was found
	Offset  int64  `json:"offset"`
	Opcode  string `json:"opcode"`
}

// ScanResult is the security scan of one file.
type ScanResult struct {
	Path      string    `json:"path"`
	Format    string    `json:"format"`
	Pickles   int       `json:"pickles"`
	Hits      []ScanHit `json:"globals"`
	Dangerous int       `json:"dangerous"`
	Unknown   int       `json:"unknown"`
	// Framework counts globals of the framework tier (VerdictFramework):
	// known frameworks' classes only referenced, or their plain data
	// classes built the plain way. They pass unless the scan is strict.
	Framework int      `json:"framework"`
	Errors    []string `json:"errors"`
	// NotUnderstood names content a loader could unpickle that the
	// scanner cannot read (a file in no format it knows, a .npy header it
	// cannot parse): neither safe nor known to be dangerous.
	NotUnderstood []string `json:"not_understood"`
	// Safe: every global is on the allowlist (or of the framework tier,
	// unless strict), every pickle decoded to its end and every part of the
	// file understood. Anything else fails.
	Safe bool `json:"safe"`
	// Status is the one word for the result, in order of precedence:
	// dangerous, unknown (globals off the allowlist), failed (a pickle not
	// read to its end), not-understood, framework (framework classes, no
	// code from the file run: safe unless strict), skipped (in a directory
	// scan: no loader in scope unpickles the file, Skipped says why), ok.
	Status  string `json:"status"`
	Skipped string `json:"skipped,omitempty"`

	allow  map[string]bool
	strict bool
	// skipWhy: no loader in scope unpickles the file; a directory scan
	// skips it for this reason.
	skipWhy string
}

// ScanOptions adjust a scan.
type ScanOptions struct {
	// Allow holds full dotted paths (module.qualname, e.g.
	// "mypkg.models.Net") of the user's own classes and functions, accepted
	// like the built-in allowlist.
	Allow []string
	// Strict fails the framework tier too: only the allowlist (and
	// Allow) passes.
	Strict bool
}

// scanLimits bound a scan's decode. Python's unpickler has no limit on
// nesting or marks, so neither has the scan (its decoder keeps an explicit
// stack and never recurses); size, opcodes, memo and stack stay bounded,
// and breaking one of those is a finding.
var scanLimits = func() pickle.Limits {
	l := pickle.DefaultLimits
	l.MaxDepth = math.MaxInt32
	l.MaxMarks = l.MaxStack
	return l
}()

// legacyPickles is how many consecutive pickles torch.load reads from a
// legacy file: the magic number, protocol version, sys_info, the object
// and the storage keys; raw storage data follows. Any other file is read
// pickle after pickle (pickle.load in a loop reads them all), up to
// maxPicklesPerFile: past it, what is left is a finding.
const (
	legacyPickles     = 5
	maxPicklesPerFile = 100_000
)

func isTorchConstant(name string) bool {
	if _, ok := torchDType(name); ok {
		return true
	}
	if _, ok := dtypeFromStorageClass(name); ok {
		return true
	}
	switch name {
	case "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn", "jagged",
		"contiguous_format", "channels_last", "channels_last_3d", "preserve_format",
		"per_tensor_affine", "per_channel_affine", "per_tensor_symmetric", "per_channel_symmetric",
		"per_channel_affine_float_qparams", "float8_e4m3fn", "float8_e5m2", "cfloat", "cdouble":
		return true
	}
	return false
}

// ScanFile scans one file for the globals its pickles reference. It finds
// pickles by content: every pickle record of a zip archive (even when a
// record's CRC is wrong or the central directory is gone), each pickle of a
// legacy torch file, and the consecutive pickles of a plain pickle file.
// Nothing is executed. err only when the file cannot be read.
func ScanFile(path string) (*ScanResult, error) { return ScanFileWith(path, ScanOptions{}) }

// ScanFileWith is ScanFile with options.
func ScanFileWith(path string, opts ScanOptions) (*ScanResult, error) {
	f, size, err := openFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res := newScanResult(path, detectFile(f, size), opts)
	if isDCPShard(path) {
		scanDCPShard(path, res, opts)
		return res, nil
	}
	scanReader(f, size, res)
	return res, nil
}

func newScanResult(path, format string, opts ScanOptions) *ScanResult {
	return &ScanResult{Path: path, Format: format, Hits: []ScanHit{}, Errors: []string{}, NotUnderstood: []string{}, allow: allowSet(opts.Allow), strict: opts.Strict}
}

// notUnderstood records content the scanner cannot read; where says which
// part of the file ("" for the file itself).
func (res *ScanResult) notUnderstood(where, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if where != "" {
		msg = where + ": " + msg
	}
	res.NotUnderstood = append(res.NotUnderstood, msg)
}

func allowSet(names []string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

func scanReader(r io.ReaderAt, size int64, res *ScanResult) {
	head := make([]byte, 4)
	n, _ := r.ReadAt(head, 0)
	head = head[:n]
	switch {
	case len(head) == 4 && string(head) == "PK\x03\x04":
		scanZip(r, size, res)
	case res.Format == "" && isNpy(r):
		// numpy.load reads its own magic before anything else.
		res.Format = FormatNpy
		scanNpy(r, size, "", res)
	case res.Format == "" && compressedFormat(head6(r)) != "":
		scanCompressed(r, size, compressedFormat(head6(r)), res)
	case res.Format == "" && lzmaAloneHeader(headN(r, 13)):
		// lzma.open reads a file without xz's magic as lzma's legacy
		// format when its header passes liblzma's checks. torch.load and
		// pickle.load(open(...)) read the same bytes as a pickle (such a
		// header ends one within its first five bytes) or, with a valid
		// tar header, as a tar: every view is scanned.
		scanCompressed(r, size, "lzma", res)
		scanPickleView(r, size, res)
		if pythonTarHeader(r) {
			scanTar(r, size, res)
		}
	case res.Format == FormatLFSPointer:
		// Not the file: nothing of it can be scanned, in a directory
		// as alone (never skipped in silence).
		p, _ := readLFSPointer(r, size)
		res.notUnderstood("", "%s, then scan it", p.describe())
	case res.Format == FormatSafetensors, res.Format == FormatTorchTar:
		if res.Format == FormatTorchTar {
			scanTar(r, size, res)
		} else {
			scanPickleView(r, size, res)
		}
	default:
		scanPickles(r, 0, size, "", res, true)
		// torch.load tries a non-zip file as a pre-1.0 tar first: a
		// pickle whose first block is also a valid tar header is loaded as
		// a tar, from its records.
		if pythonTarHeader(r) {
			scanTar(r, size, res)
		}
	}
	if res.Format == "" && res.Pickles == 0 && len(res.Errors) == 0 && len(res.Hits) == 0 && len(res.NotUnderstood) == 0 {
		// Not one of the formats above and no pickle at byte 0: torch.load
		// and pickle.load refuse it at its first byte, but what it is the
		// scanner cannot say.
		var b [1]byte
		r.ReadAt(b[:], 0)
		res.notUnderstood("", "in no format the scanner reads (first byte 0x%02x is no pickle opcode)", b[0])
		res.skipWhy = unknownFormatSkip
	}
	res.finish()
}

// unknownFormatSkip is the reason a directory scan gives for skipping a
// file in no format that no loader in scope unpickles.
const unknownFormatSkip = "in no checkpoint, numpy or pickle format, and its first byte is no pickle opcode: torch.load, numpy.load and pickle.load refuse it there"

func (res *ScanResult) finish() {
	res.Dangerous, res.Unknown, res.Framework = 0, 0, 0
	for _, h := range res.Hits {
		switch h.Verdict {
		case VerdictDangerous:
			res.Dangerous++
		case VerdictUnknown:
			res.Unknown++
		case VerdictFramework:
			res.Framework++
		}
	}
	res.Safe = res.Dangerous == 0 && res.Unknown == 0 && len(res.Errors) == 0 && len(res.NotUnderstood) == 0 && res.Skipped == "" &&
		(res.Framework == 0 || !res.strict)
	switch {
	case res.Dangerous > 0:
		res.Status = StatusDangerous
	case res.Unknown > 0:
		res.Status = StatusUnknown
	case len(res.Errors) > 0:
		res.Status = StatusFailed
	case len(res.NotUnderstood) > 0:
		res.Status = StatusNotUnderstood
	case res.Framework > 0:
		res.Status = StatusFramework
	case res.Skipped != "":
		res.Status = StatusSkipped
	default:
		res.Status = StatusOK
	}
}

// Scan statuses (ScanResult.Status).
const (
	StatusOK            = "ok"
	StatusDangerous     = "dangerous"
	StatusUnknown       = "unknown"
	StatusFailed        = "failed"
	StatusNotUnderstood = "not-understood"
	StatusSkipped       = "skipped"
	// StatusFramework: every global is allowlisted or of the framework
	// tier (VerdictFramework), and some are of that tier.
	StatusFramework = "framework"
)

// scanPickles decodes consecutive pickles starting at off, every one up
// to the end of the input or the first byte that is no opcode (where
// Python stops: "invalid load key"); a torch legacy file is read as
// torch reads it, five pickles and then raw storage data. Where a pickle
// ends inside a FRAME of 8 KiB or more, CPython's unpickler has read the
// frame whole, and from a file that cannot give bytes back (a raw or
// unbuffered stream, a tar member opened as torch opens it) the next
// load() starts at the frame's end instead: both chains are scanned.
// When probe is true, input that does not start like a pickle is not an
// error.
func scanPickles(r io.ReaderAt, off, size int64, record string, res *ScanResult, probe bool) {
	limit := maxPicklesPerFile
	if res.Format == FormatTorchLegacy && record == "" {
		limit = legacyPickles
	}
	type start struct {
		off int64
		n   int
	}
	todo := []start{{off, 0}}
	done := map[int64]bool{}
	for len(todo) > 0 {
		st := todo[0]
		todo = todo[1:]
		for off, i := st.off, st.n; off < size && !done[off]; i++ {
			done[off] = true
			if i == limit {
				if limit != legacyPickles {
					res.Errors = append(res.Errors, fmt.Sprintf("more than %d pickles: bytes from %d on are not scanned", limit, off))
				}
				break
			}
			var b [1]byte
			if _, err := r.ReadAt(b[:], off); err != nil {
				res.Errors = append(res.Errors, fmt.Sprintf("read at byte %d: %v", off, err))
				break
			}
			if (i > 0 || probe) && !pickle.IsOpcode(b[0]) {
				break
			}
			name := record
			if name == "" {
				name = fmt.Sprintf("pickle %d", i+1)
			}
			nErr := len(res.Errors)
			pr, ok := scanOne(r, off, size, name, res)
			if !ok && i == 0 && probe && off == 0 && res.Format == "" && refusedAtFirstOpcode(pr, res.Errors[nErr:]) {
				// Text whose first byte happens to be an opcode (YAML's
				// "b", CSV's "e"): CPython's unpickler raises at that
				// opcode, before anything is imported or called. It is
				// no pickle, as a first byte that is no opcode.
				res.Pickles--
				why := strings.TrimPrefix(res.Errors[nErr], name+": ")
				res.Errors = res.Errors[:nErr]
				res.notUnderstood("", "in no format the scanner reads, and not a pickle: CPython's unpickler refuses it at byte 0 (%s)", why)
				res.skipWhy = fmt.Sprintf("in no checkpoint, numpy or pickle format: torch.load, numpy.load and pickle.load refuse it at byte 0 (%s)", why)
				break
			}
			if !ok || record != "" {
				break // a zip record is read by one load()
			}
			if pr.FrameEnd > pr.End && pr.FrameLen >= 8<<10 {
				todo = append(todo, start{pr.FrameEnd, i + 1})
			}
			off = pr.End
		}
	}
}

// refusedAtFirstOpcode says whether a decode stopped at its first opcode
// with one of the grammar or type errors CPython raises at the same byte
// (a stack underflow, no MARK, a bad operand), having met no global, BUILD
// or persistent id. A bound of the decoder, a stop where CPython may go on
// and input cut short are not such a refusal.
func refusedAtFirstOpcode(pr *pickle.Result, errs []string) bool {
	if pr == nil || pr.ErrAt != 0 || len(errs) != 1 || len(pr.Globals) > 0 || len(pr.Builds) > 0 || len(pr.PersIDList) > 0 {
		return false
	}
	e := errs[0]
	return !strings.Contains(e, pickle.ErrLimit.Error()) && !strings.Contains(e, pickle.ErrOpaque.Error()) && !strings.Contains(e, "pickle truncated")
}

// scanOne decodes one pickle at off, classifies its globals and records a
// decode error; ok is false after an error.
func scanOne(r io.ReaderAt, off, size int64, name string, res *ScanResult) (*pickle.Result, bool) {
	pr, err := pickle.Decode(r, off, size, scanLimits)
	if pr != nil {
		res.Pickles++
		classifyGlobals(pr, name, res)
		checkSideEffects(pr, name, res)
	}
	if err != nil {
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", name, err))
		if pr != nil && pr.ErrAt >= off && strings.Contains(err.Error(), "runs past the input") {
			scanPastFrame(r, off, size, pr.ErrAt, name, res)
		}
		return pr, false
	}
	return pr, true
}

// maxPastFrame bounds the bytes scanPastFrame reads again.
const maxPastFrame = 64 << 20

// scanPastFrame names the globals a pickle reaches past a FRAME that
// declares more bytes than are left: CPython's C unpickler stops there,
// but Python's own pure-Python one (pickle._Unpickler) reads the short
// frame without checking its length and goes on to STOP, importing what
// follows. The scan decodes the pickle again without that FRAME opcode
// and classifies every global past it (the decode error stays a finding).
func scanPastFrame(r io.ReaderAt, off, size, frameAt int64, name string, res *ScanResult) {
	if size-off > maxPastFrame || frameAt+9 > size {
		return
	}
	buf := make([]byte, size-off)
	if n, _ := r.ReadAt(buf, off); int64(n) != size-off {
		return
	}
	rel := frameAt - off
	rest := append(buf[:rel:rel], buf[rel+9:]...)
	pr, _ := pickle.DecodeBytes(rest, scanLimits)
	if pr == nil {
		return
	}
	for _, g := range pr.Globals {
		if g.Offset < rel {
			continue // seen before the frame
		}
		v, why := Classify(g, res.allow)
		if g.Detail != "" {
			why = g.Detail + "; " + why
		}
		res.Hits = append(res.Hits, ScanHit{Global: g.String(), Verdict: v,
			Reason: why + fmt.Sprintf(" (past the damaged FRAME at byte %d, which Python's pure-Python unpickler reads on from)", frameAt),
			Record: name, Offset: off + g.Offset + 9, Opcode: g.Opcode})
	}
}

// classifyGlobals adds a hit for every global of a decoded pickle: its
// verdict by name (Classify), and for an unknown one of a known framework
// whose every use in the pickle is inert, the framework tier.
func classifyGlobals(pr *pickle.Result, name string, res *ScanResult) {
	verdicts := make([]string, len(pr.Globals))
	whys := make([]string, len(pr.Globals))
	var unknown []int
	for i, g := range pr.Globals {
		verdicts[i], whys[i] = Classify(g, res.allow)
		if verdicts[i] == VerdictUnknown && g.Resolved && !strings.Contains(g.Name, ".") {
			unknown = append(unknown, i)
		}
	}
	for i, why := range frameworkUses(pr, unknown) {
		verdicts[i], whys[i] = VerdictFramework, why
	}
	for i, g := range pr.Globals {
		why := whys[i]
		if g.Detail != "" {
			why = g.Detail + "; " + why
		}
		res.Hits = append(res.Hits, ScanHit{Global: g.String(), Verdict: verdicts[i], Reason: why, Record: name, Offset: g.Offset, Opcode: g.Opcode})
	}
}

// scanPickleView reads a file of another format the way torch.load and
// pickle.load(open(...)) read it, as a pickle from byte 0. A safetensors
// file holds no pickle, but torch.load, given one under any name,
// unpickles it from byte 0 (and an lzma-alone file is read the same way
// by everything but lzma.open). A header
// whose bytes also spell pickle opcodes reaching a global would run, so the
// scan decodes that view too and classifies every global it meets. A stop
// of the decoder is a finding when CPython would not stop there: a bound
// of the decoder, or an item opcode (APPENDS, SETITEMS, ADDITEMS) on an
// object the decoder knows only symbolically, whose own methods CPython
// calls (pickle.ErrOpaque). Every other stop is one of the grammar or
// type errors Python raises at the same byte (the operand rules are
// Python's, TestOperandsAsPython), so nothing after it runs. BUILDs and
// persistent ids in that view are checked as in any pickle.
func scanPickleView(r io.ReaderAt, size int64, res *ScanResult) {
	var b [1]byte
	if _, err := r.ReadAt(b[:], 0); err != nil || !pickle.IsOpcode(b[0]) {
		return
	}
	pr, err := pickle.Decode(r, 0, size, scanLimits)
	cpythonGoesOn := err != nil && (errors.Is(err, pickle.ErrLimit) || errors.Is(err, pickle.ErrOpaque))
	if len(pr.Globals) == 0 && len(pr.Builds) == 0 && len(pr.PersIDList) == 0 && !cpythonGoesOn {
		return
	}
	name := "the file read as a pickle (what torch.load does with it)"
	res.Pickles++
	classifyGlobals(pr, name, res)
	checkSideEffects(pr, name, res)
	if cpythonGoesOn {
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", name, err))
	}
}

// scanTarRecord scans every pickle torch's pre-1.0 loader reads from a
// record: "storages" is a count, then per storage a pickle (key, location,
// storage class) followed by an 8-byte element count and the raw elements,
// then a pickle of storage views; "tensors" is a count, then per tensor a
// pickle followed by ndim (4 bytes), 4 bytes, sizes and strides (8 bytes
// each per dimension) and an 8-byte offset. torch opens both members
// unbuffered, so each read after a pickle starts where the pickle's FRAME
// ends (pickle.Result.NextUnbuffered). A layout it cannot follow fails the
// scan: torch would read pickles the scan did not see.
func scanTarRecord(r io.ReaderAt, off, end int64, name string, res *ScanResult) {
	pr, ok := scanOne(r, off, end, name, res)
	if !ok || (name != "storages" && name != "tensors") {
		return
	}
	fail := func(format string, a ...any) {
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %s; torch reads pickles from here on that scan cannot find", name, fmt.Sprintf(format, a...)))
	}
	n, isInt := pr.Value.(int64)
	if !isInt || n < 0 || n > end-pr.NextUnbuffered() {
		fail("the count is %v, not a number of records", describeValue(pr.Value))
		return
	}
	off = pr.NextUnbuffered()
	le := func(at int64, w int) (int64, bool) {
		var b [8]byte
		if at < 0 || at+int64(w) > end {
			return 0, false
		}
		if _, err := r.ReadAt(b[:w], at); err != nil {
			return 0, false
		}
		var v uint64
		for i := w - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		if w == 4 {
			return int64(int32(v)), true
		}
		return int64(v), true
	}
	for i := int64(0); i < n; i++ {
		pr, ok := scanOne(r, off, end, fmt.Sprintf("%s pickle %d", name, i+2), res)
		if !ok {
			return
		}
		if name == "tensors" {
			ndim, ok := le(pr.NextUnbuffered(), 4)
			if !ok || ndim < 0 || ndim > 64 {
				fail("tensor %d: bad ndim", i)
				return
			}
			off = pr.NextUnbuffered() + 8 + 16*ndim + 8
			continue
		}
		args, _ := pr.Value.(pickle.Tuple)
		var g pickle.Global
		if len(args) == 3 {
			g, _ = args[2].(pickle.Global)
		}
		dt, known := dtypeFromStorageClass(g.Name)
		esize := elemSize[dt]
		count, ok := le(pr.NextUnbuffered(), 8)
		if !known || esize == 0 || !ok || count < 0 || count > (end-pr.NextUnbuffered())/esize {
			fail("storage %d: not (key, location, storage class) followed by its elements", i)
			return
		}
		off = pr.NextUnbuffered() + 8 + count*esize
	}
	if name == "storages" && off < end {
		// (torch stops with EOFError when the views pickle is missing)
		scanOne(r, off, end, name+" views", res)
	}
}

func describeValue(v any) string {
	switch v.(type) {
	case int64, string, bool, float64:
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("a %T", v)
}

func scanZip(r io.ReaderAt, size int64, res *ScanResult) {
	scanZipArchive(r, size, res) // zipscan.go
}

// pythonTarHeader says whether Python's tarfile opens r: its first block
// is not all NUL and carries a valid header checksum (the sum of the block
// with the checksum field read as spaces, bytes unsigned or signed).
func pythonTarHeader(r io.ReaderAt) bool {
	var blk [512]byte
	if n, _ := r.ReadAt(blk[:], 0); n < 512 || allNul(blk[:]) {
		return false
	}
	want, err := pyTarNumber(blk[148:156])
	if err != nil {
		return false
	}
	var us, ss int64 = 256, 256
	for i, c := range blk {
		if i >= 148 && i < 156 {
			continue
		}
		us += int64(c)
		ss += int64(int8(c))
	}
	return want == us || want == ss
}

func allNul(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func scanTar(r io.ReaderAt, size int64, res *ScanResult) {
	var off int64
	for off+512 <= size {
		var blk [512]byte
		if _, err := r.ReadAt(blk[:], off); err != nil || allNul(blk[:]) {
			return
		}
		// Extended headers rename the next member and links make
		// extraction read another member's data: torch would read
		// records scan cannot name.
		tf := blk[156]
		switch tf {
		case 0, '0', '3', '4', '5', '6', '7':
		default:
			res.Errors = append(res.Errors, fmt.Sprintf("tar member at byte %d has type %q (a link or an extended header): torch's loader may read records under other names than scan sees", off, tf))
			return
		}
		name := string(trimNul(blk[:100]))
		n, err := pyTarNumber(blk[124:136])
		if err != nil || n < 0 {
			res.Errors = append(res.Errors, fmt.Sprintf("tar member at byte %d: size field %q is not one tarfile reads", off, blk[124:136]))
			return
		}
		data := off + 512
		end := data + n
		if end > size {
			end = size
		}
		isFile := tarDataBlocks(tf, name, 1) > 0
		switch strings.TrimPrefix(name, "./") {
		case "pickle", "sys_info", "tensors", "storages":
			if isFile {
				scanTarRecord(r, data, end, strings.TrimPrefix(name, "./"), res)
			}
		}
		off = data + tarDataBlocks(tf, name, n)
	}
}

// ScanPath scans a file, or every regular file under a directory whatever
// its name. err only when path cannot be read.
func ScanPath(path string) ([]*ScanResult, error) { return ScanPathWith(path, ScanOptions{}) }

// ScanPathWith is ScanPath with options.
func ScanPathWith(path string, opts ScanOptions) ([]*ScanResult, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, Unreadable(err)
	}
	if !st.IsDir() {
		if !st.Mode().IsRegular() {
			return nil, &UnreadableError{fmt.Errorf("%s is not a regular file", path)}
		}
		r, err := ScanFileWith(path, opts)
		if err != nil {
			return nil, err
		}
		return []*ScanResult{r}, nil
	}
	var out []*ScanResult
	err = walkFollow(path, func(p string, d fs.DirEntry, err error) error { // fswalk.go: follows symlinks
		if err != nil {
			if p == path && !errors.Is(err, ErrDepthLimit) {
				return err
			}
			// A subdirectory it cannot read, or one too deep: what is
			// in it is not scanned, which is a finding, never silence.
			r := newScanResult(p, "", opts)
			r.Errors = append(r.Errors, fmt.Sprintf("directory not scanned: %v", unwrapPathErr(err)))
			r.finish()
			out = append(out, r)
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		r, err := ScanFileWith(p, opts)
		if err != nil {
			r := newScanResult(p, "", opts)
			r.Errors = append(r.Errors, err.Error())
			r.finish()
			out = append(out, r)
			return nil
		}
		if r.skipWhy != "" {
			r.NotUnderstood = r.NotUnderstood[:0]
			r.Skipped = r.skipWhy
			r.finish()
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, &UnreadableError{fmt.Errorf("scan %s: %w", path, err)}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// unwrapPathErr drops the system call's name from an os error ("open
// DIR: permission denied" reads "permission denied").
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func head6(r io.ReaderAt) []byte { return headN(r, 6) }

// headN is the file's first n bytes, fewer when it is shorter.
func headN(r io.ReaderAt, n int) []byte {
	b := make([]byte, n)
	k, _ := r.ReadAt(b, 0)
	return b[:k]
}
