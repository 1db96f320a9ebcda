package ckpt

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vramguard/vramguard/internal/ckpt/pickle"
)

// Verdicts of the security scan.
const (
	VerdictSafe      = "safe"      // on the allowlist
	VerdictUnknown   = "unknown"   // not known to be dangerous, not on the allowlist
	VerdictDangerous = "dangerous" // can run code, touch files or the network, or cannot be resolved
)

// allowed is derived from PyTorch's weights-only unpickler
// (torch/_weights_only_unpickler.py), plus collections and numpy array
// reconstruction. Names under "torch" that are dtypes, storage classes,
// layouts, memory formats and qschemes are allowed by isTorchConstant.
var allowed = map[string]bool{
	"collections.OrderedDict": true, "collections.defaultdict": true, "collections.Counter": true, "collections.deque": true,
	"torch.nn.parameter.Parameter": true, "torch.serialization._get_layout": true,
	"torch.Size": true, "torch.Tensor": true, "torch.device": true,
	"torch._utils._rebuild_parameter": true, "torch._utils._rebuild_parameter_with_state": true,
	"torch._utils._rebuild_tensor": true, "torch._utils._rebuild_tensor_v2": true, "torch._utils._rebuild_tensor_v3": true,
	"torch._utils._rebuild_sparse_tensor": true, "torch._utils._rebuild_sparse_csr_tensor": true,
	"torch._utils._rebuild_meta_tensor_no_storage": true, "torch._utils._rebuild_nested_tensor": true,
	"torch._utils._rebuild_qtensor": true, "torch._utils._rebuild_wrapper_subclass": true,
	"torch._utils._rebuild_device_tensor_from_numpy": true, "torch._utils._rebuild_device_tensor_from_cpu_tensor": true,
	"torch._tensor._rebuild_from_type_v2": true, "torch._tensor._rebuild_from_type": true,
	"torch.storage.UntypedStorage": true, "torch.storage.TypedStorage": true,
	"_codecs.encode": true,
	"builtins.set":   true, "builtins.frozenset": true, "builtins.bytearray": true, "builtins.bytes": true,
	"builtins.complex": true, "builtins.slice": true, "builtins.range": true, "builtins.int": true, "builtins.float": true,
	"builtins.str": true, "builtins.bool": true, "builtins.tuple": true, "builtins.list": true, "builtins.dict": true,
	"__builtin__.set": true, "__builtin__.frozenset": true, "__builtin__.bytearray": true, "__builtin__.complex": true,
	"numpy.core.multiarray._reconstruct": true, "numpy._core.multiarray._reconstruct": true,
	"numpy.ndarray": true, "numpy.dtype": true,
	"numpy.core.multiarray.scalar": true, "numpy._core.multiarray.scalar": true,
}

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
	Errors    []string  `json:"errors"`
}

// Classify says whether a global reference is safe to load, dangerous, or
// unknown. resolved false (a STACK_GLOBAL from non-string operands, an
// extension-registry code) is always dangerous: what it names cannot be known
// without running the pickle.
func Classify(g pickle.Global, resolved bool) (verdict, reason string) {
	if !resolved {
		return VerdictDangerous, "the reference cannot be resolved without running the pickle"
	}
	full := g.Module + "." + g.Name
	if allowed[full] {
		return VerdictSafe, ""
	}
	if g.Module == "torch" && isTorchConstant(g.Name) {
		return VerdictSafe, ""
	}
	if g.Module == "numpy.dtypes" || g.Module == "numpy" && strings.HasSuffix(g.Name, "DType") {
		return VerdictSafe, ""
	}
	for _, m := range dangerousModules {
		if g.Module == m || strings.HasPrefix(g.Module, m+".") || full == m {
			return VerdictDangerous, "module " + m + " can run code, touch files or the network"
		}
	}
	if g.Module == "builtins" || g.Module == "__builtin__" || g.Module == "__builtins__" {
		if r, ok := dangerousNames[g.Name]; ok {
			return VerdictDangerous, "builtins." + g.Name + " " + r
		}
		return VerdictUnknown, "a builtin that is not on the allowlist"
	}
	switch g.Name {
	case "eval", "exec", "execfile", "getattr", "setattr", "__import__", "load", "loads", "apply", "open", "_load_from_bytes":
		return VerdictDangerous, g.Name + " can run code or load another pickle"
	}
	if g.Name == "system" || g.Name == "popen" || g.Name == "Popen" || strings.HasPrefix(g.Name, "exec") || strings.HasPrefix(g.Name, "spawn") {
		return VerdictDangerous, g.Name + " runs commands"
	}
	if strings.HasPrefix(g.Name, "__") && g.Name != "__newobj__" {
		return VerdictDangerous, "a dunder attribute reached directly"
	}
	return VerdictUnknown, "not on the weights-only allowlist"
}

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
func ScanFile(path string) (*ScanResult, error) {
	f, size, err := openFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res := &ScanResult{Path: path, Format: detectFile(f, size), Hits: []ScanHit{}, Errors: []string{}}
	scanReader(f, size, res)
	return res, nil
}

func scanReader(r io.ReaderAt, size int64, res *ScanResult) {
	head := make([]byte, 4)
	n, _ := r.ReadAt(head, 0)
	head = head[:n]
	switch {
	case len(head) == 4 && string(head) == "PK\x03\x04":
		scanZip(r, size, res)
	case res.Format == FormatSafetensors, res.Format == FormatTorchTar:
		// no pickle in a safetensors file; the tar layout's pickle record
		// is scanned below
		if res.Format == FormatTorchTar {
			scanTar(r, size, res)
		}
	default:
		scanPickles(r, 0, size, "", res, true)
	}
	res.Dangerous, res.Unknown = 0, 0
	for _, h := range res.Hits {
		switch h.Verdict {
		case VerdictDangerous:
			res.Dangerous++
		case VerdictUnknown:
			res.Unknown++
		}
	}
}

// scanPickles decodes consecutive pickles starting at off. When probe is
// true, input that does not start like a pickle is not an error.
func scanPickles(r io.ReaderAt, off, size int64, record string, res *ScanResult, probe bool) {
	for i := 0; off < size && i < 64; i++ {
		var b [1]byte
		if _, err := r.ReadAt(b[:], off); err != nil {
			return
		}
		if i > 0 || probe {
			if !startsPickle(b[0]) {
				if i == 0 && probe {
					res.Errors = append(res.Errors, "no pickle found")
				}
				return
			}
		}
		pr, err := decodePickle(r, off, size)
		name := record
		if name == "" {
			name = fmt.Sprintf("pickle %d", i+1)
		}
		if pr != nil {
			res.Pickles++
			for _, g := range pr.Globals {
				v, why := Classify(g.Global, g.Resolved)
				if g.Detail != "" {
					why = g.Detail + "; " + why
				}
				res.Hits = append(res.Hits, ScanHit{Global: g.String(), Verdict: v, Reason: why, Record: name, Offset: g.Offset, Opcode: g.Opcode})
			}
		}
		if err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", name, err))
			return
		}
		if record != "" {
			return
		}
		off = pr.End
	}
}

func startsPickle(c byte) bool {
	return c == 0x80 || strings.IndexByte("(]}cNIFSVLl)dpgXKJMUTG", c) >= 0
}

func scanZip(r io.ReaderAt, size int64, res *ScanResult) {
	scanZipArchive(r, size, res) // zipscan.go
}

type pickleBytes []byte

func (p pickleBytes) ReadAt(b []byte, off int64) (int, error) {
	if off >= int64(len(p)) {
		return 0, io.EOF
	}
	n := copy(b, p[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func scanTar(r io.ReaderAt, size int64, res *ScanResult) {
	var off int64
	for off+512 <= size {
		var blk [512]byte
		if _, err := r.ReadAt(blk[:], off); err != nil || blk[0] == 0 {
			return
		}
		name := string(trimNul(blk[:100]))
		n, err := parseOctal(blk[124:136])
		if err != nil {
			res.Errors = append(res.Errors, err.Error())
			return
		}
		data := off + 512
		end := data + n
		if end > size {
			end = size
		}
		switch strings.TrimPrefix(name, "./") {
		case "pickle", "sys_info", "tensors", "storages":
			scanPickles(r, data, end, name, res, false)
		}
		off = data + (n+511)/512*512
	}
}

// ScanPath scans a file, or every regular file under a directory whatever
// its name. err only when path cannot be read.
func ScanPath(path string) ([]*ScanResult, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &UnreadableError{fmt.Errorf("stat %s: %w", path, err)}
	}
	if !st.IsDir() {
		if !st.Mode().IsRegular() {
			return nil, &UnreadableError{fmt.Errorf("%s is not a regular file", path)}
		}
		r, err := ScanFile(path)
		if err != nil {
			return nil, err
		}
		return []*ScanResult{r}, nil
	}
	var out []*ScanResult
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == path {
				return err
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		r, err := ScanFile(p)
		if err != nil {
			out = append(out, &ScanResult{Path: p, Hits: []ScanHit{}, Errors: []string{err.Error()}})
			return nil
		}
		if r.Pickles > 0 || r.Format != "" {
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, &UnreadableError{fmt.Errorf("scan %s: %w", path, err)}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}
