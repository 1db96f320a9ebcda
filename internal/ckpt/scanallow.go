package ckpt

import (
	"fmt"
	"sort"
	"strings"

	"github.com/vramguard/vramguard/internal/pickle"
)

// The scan allowlist. A global passes only when the object Python's
// find_class would reach for it is one of these; everything else (unknown,
// dangerous, unresolvable) fails the scan.
//
// Sources:
//   - weightsOnlyGlobals: every name torch 1.13's weights-only unpickler
//     allows (torch/_weights_only_unpickler.py, _get_allowed_globals; the
//     list below is what it returns on Debian's python3-torch), plus the
//     rebuild functions and types later torch releases added to it.
//   - torch dtypes, storage classes, layouts, memory formats and qschemes,
//     as torch pickles them (GLOBAL torch <name>): isTorchConstant.
//   - frameworkGlobals: known-safe names real torch.save output holds:
//     collections containers, numpy array and scalar reconstruction,
//     torch.distributed.checkpoint's .metadata dataclasses, and the
//     activation functions whole-model saves name. (The Python 2 names
//     protocol 2 writes, __builtin__.set and the like, reach these through
//     fix_imports.)
//   - nnModuleClasses: the nn.Module classes torch.nn defines (a whole
//     pickled model made of torch.nn layers). Unpickling one creates the
//     object with cls.__new__ and sets its __dict__ (Module.__setstate__);
//     calling one builds a layer. Neither imports or runs anything else, and
//     every hook or function the module's state names is itself a global
//     that has to pass this check.
//
// The names are matched after resolving them the way find_class does
// (resolveGlobal): the Python 2 names fix_imports maps below protocol 3,
// torch's own torch.tensor -> torch._tensor, and a dotted name is the
// object reached by walking it with getattr from the module, so "torch" +
// "_utils._rebuild_tensor_v2" is the same function as "torch._utils" +
// "_rebuild_tensor_v2". Only walks through packages to the canonical
// module are accepted (TestAllowlistAsPython checks each against
// Python).

var weightsOnlyGlobals = []string{
	"collections.OrderedDict", "torch.BFloat16Tensor", "torch.BoolTensor", "torch.ByteTensor",
	"torch.CharTensor", "torch.DoubleTensor", "torch.FloatTensor", "torch.HalfTensor", "torch.IntTensor",
	"torch.LongTensor", "torch.ShortTensor", "torch.Size", "torch.Tensor",
	"torch._utils._rebuild_meta_tensor_no_storage", "torch._utils._rebuild_parameter",
	"torch._utils._rebuild_sparse_csr_tensor", "torch._utils._rebuild_sparse_tensor",
	"torch._utils._rebuild_tensor", "torch._utils._rebuild_tensor_v2", "torch.cuda.BFloat16Storage",
	"torch.cuda.BFloat16Tensor", "torch.cuda.BoolStorage", "torch.cuda.BoolTensor", "torch.cuda.ByteStorage",
	"torch.cuda.ByteTensor", "torch.cuda.CharStorage", "torch.cuda.CharTensor",
	"torch.cuda.ComplexDoubleStorage", "torch.cuda.ComplexFloatStorage", "torch.cuda.DoubleStorage",
	"torch.cuda.DoubleTensor", "torch.cuda.FloatStorage", "torch.cuda.FloatTensor", "torch.cuda.HalfStorage",
	"torch.cuda.HalfTensor", "torch.cuda.IntStorage", "torch.cuda.IntTensor", "torch.cuda.LongStorage",
	"torch.cuda.LongTensor", "torch.cuda.ShortStorage", "torch.cuda.ShortTensor",
	"torch.cuda.sparse.BFloat16Tensor", "torch.cuda.sparse.ByteTensor", "torch.cuda.sparse.CharTensor",
	"torch.cuda.sparse.DoubleTensor", "torch.cuda.sparse.FloatTensor", "torch.cuda.sparse.HalfTensor",
	"torch.cuda.sparse.IntTensor", "torch.cuda.sparse.LongTensor", "torch.cuda.sparse.ShortTensor",
	"torch.nn.parameter.Parameter", "torch.serialization._get_layout", "torch.sparse.BFloat16Tensor",
	"torch.sparse.ByteTensor", "torch.sparse.CharTensor", "torch.sparse.DoubleTensor",
	"torch.sparse.FloatTensor", "torch.sparse.HalfTensor", "torch.sparse.IntTensor", "torch.sparse.LongTensor",
	"torch.sparse.ShortTensor", "torch.storage.TypedStorage", "torch.storage.UntypedStorage",
	// added by later torch releases to the weights-only allowlist
	"torch._utils._rebuild_tensor_v3", "torch._utils._rebuild_parameter_with_state",
	"torch._utils._rebuild_qtensor", "torch._utils._rebuild_nested_tensor",
	"torch._utils._rebuild_wrapper_subclass", "torch._utils._rebuild_device_tensor_from_numpy",
	"torch._utils._rebuild_device_tensor_from_cpu_tensor",
	"torch._tensor._rebuild_from_type_v2", "torch.device", "_codecs.encode",
	"builtins.set", "builtins.frozenset", "builtins.bytearray", "builtins.complex", "builtins.slice",
	"builtins.range", "builtins.int", "builtins.float", "builtins.str", "builtins.bool", "builtins.tuple",
	"builtins.list", "builtins.dict", "builtins.bytes",
}

var frameworkGlobals = []string{
	"collections.defaultdict", "collections.Counter", "collections.deque",
	"torch._tensor._rebuild_from_type",
	"numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
	"numpy.ndarray", "numpy.dtype",
	"numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar",
	// torch.distributed.checkpoint's .metadata dataclasses
	"torch.distributed.checkpoint.metadata.Metadata", "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
	"torch.distributed.checkpoint.metadata.TensorProperties", "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
	"torch.distributed.checkpoint.metadata.BytesStorageMetadata", "torch.distributed.checkpoint.metadata.MetadataIndex",
	"torch.distributed.checkpoint.filesystem._StorageInfo", "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
	"torch.distributed.checkpoint.metadata.StorageMeta",
	// parameters of lazy modules not run yet, and torch 2.5's Buffer
	"torch.nn.parameter.UninitializedParameter", "torch.nn.parameter.UninitializedBuffer", "torch.nn.parameter.Buffer",
	// activation functions a whole-module save names (TransformerEncoderLayer.activation)
	"torch.nn.functional.relu", "torch.nn.functional.gelu", "torch.nn.functional.silu",
	"torch.nn.functional.elu", "torch.nn.functional.leaky_relu", "torch.nn.functional.tanh",
	"torch.nn.functional.sigmoid", "torch.nn.functional.softmax", "torch.nn.functional.log_softmax",
}

var nnModuleClasses = []string{
	"torch.nn.modules.activation.CELU", "torch.nn.modules.activation.ELU", "torch.nn.modules.activation.GELU",
	"torch.nn.modules.activation.GLU", "torch.nn.modules.activation.Hardshrink",
	"torch.nn.modules.activation.Hardsigmoid", "torch.nn.modules.activation.Hardswish",
	"torch.nn.modules.activation.Hardtanh", "torch.nn.modules.activation.LeakyReLU",
	"torch.nn.modules.activation.LogSigmoid", "torch.nn.modules.activation.LogSoftmax",
	"torch.nn.modules.activation.Mish", "torch.nn.modules.activation.MultiheadAttention",
	"torch.nn.modules.activation.PReLU", "torch.nn.modules.activation.RReLU",
	"torch.nn.modules.activation.ReLU", "torch.nn.modules.activation.ReLU6", "torch.nn.modules.activation.SELU",
	"torch.nn.modules.activation.SiLU", "torch.nn.modules.activation.Sigmoid",
	"torch.nn.modules.activation.Softmax", "torch.nn.modules.activation.Softmax2d",
	"torch.nn.modules.activation.Softmin", "torch.nn.modules.activation.Softplus",
	"torch.nn.modules.activation.Softshrink", "torch.nn.modules.activation.Softsign",
	"torch.nn.modules.activation.Tanh", "torch.nn.modules.activation.Tanhshrink",
	"torch.nn.modules.activation.Threshold", "torch.nn.modules.adaptive.AdaptiveLogSoftmaxWithLoss",
	"torch.nn.modules.batchnorm.BatchNorm1d", "torch.nn.modules.batchnorm.BatchNorm2d",
	"torch.nn.modules.batchnorm.BatchNorm3d", "torch.nn.modules.batchnorm.LazyBatchNorm1d",
	"torch.nn.modules.batchnorm.LazyBatchNorm2d", "torch.nn.modules.batchnorm.LazyBatchNorm3d",
	"torch.nn.modules.batchnorm.SyncBatchNorm", "torch.nn.modules.batchnorm._BatchNorm",
	"torch.nn.modules.batchnorm._LazyNormBase", "torch.nn.modules.batchnorm._NormBase",
	"torch.nn.modules.channelshuffle.ChannelShuffle", "torch.nn.modules.container.ModuleDict",
	"torch.nn.modules.container.ModuleList", "torch.nn.modules.container.ParameterDict",
	"torch.nn.modules.container.ParameterList", "torch.nn.modules.container.Sequential",
	"torch.nn.modules.conv.Conv1d", "torch.nn.modules.conv.Conv2d", "torch.nn.modules.conv.Conv3d",
	"torch.nn.modules.conv.ConvTranspose1d", "torch.nn.modules.conv.ConvTranspose2d",
	"torch.nn.modules.conv.ConvTranspose3d", "torch.nn.modules.conv.LazyConv1d",
	"torch.nn.modules.conv.LazyConv2d", "torch.nn.modules.conv.LazyConv3d",
	"torch.nn.modules.conv.LazyConvTranspose1d", "torch.nn.modules.conv.LazyConvTranspose2d",
	"torch.nn.modules.conv.LazyConvTranspose3d", "torch.nn.modules.conv._ConvNd",
	"torch.nn.modules.conv._ConvTransposeMixin", "torch.nn.modules.conv._ConvTransposeNd",
	"torch.nn.modules.distance.CosineSimilarity", "torch.nn.modules.distance.PairwiseDistance",
	"torch.nn.modules.dropout.AlphaDropout", "torch.nn.modules.dropout.Dropout",
	"torch.nn.modules.dropout.Dropout1d", "torch.nn.modules.dropout.Dropout2d",
	"torch.nn.modules.dropout.Dropout3d", "torch.nn.modules.dropout.FeatureAlphaDropout",
	"torch.nn.modules.dropout._DropoutNd", "torch.nn.modules.flatten.Flatten",
	"torch.nn.modules.flatten.Unflatten", "torch.nn.modules.fold.Fold", "torch.nn.modules.fold.Unfold",
	"torch.nn.modules.instancenorm.InstanceNorm1d", "torch.nn.modules.instancenorm.InstanceNorm2d",
	"torch.nn.modules.instancenorm.InstanceNorm3d", "torch.nn.modules.instancenorm.LazyInstanceNorm1d",
	"torch.nn.modules.instancenorm.LazyInstanceNorm2d", "torch.nn.modules.instancenorm.LazyInstanceNorm3d",
	"torch.nn.modules.instancenorm._InstanceNorm", "torch.nn.modules.linear.Bilinear",
	"torch.nn.modules.linear.Identity", "torch.nn.modules.linear.LazyLinear", "torch.nn.modules.linear.Linear",
	"torch.nn.modules.linear.NonDynamicallyQuantizableLinear", "torch.nn.modules.loss.BCELoss",
	"torch.nn.modules.loss.BCEWithLogitsLoss", "torch.nn.modules.loss.CTCLoss",
	"torch.nn.modules.loss.CosineEmbeddingLoss", "torch.nn.modules.loss.CrossEntropyLoss",
	"torch.nn.modules.loss.GaussianNLLLoss", "torch.nn.modules.loss.HingeEmbeddingLoss",
	"torch.nn.modules.loss.HuberLoss", "torch.nn.modules.loss.KLDivLoss", "torch.nn.modules.loss.L1Loss",
	"torch.nn.modules.loss.MSELoss", "torch.nn.modules.loss.MarginRankingLoss",
	"torch.nn.modules.loss.MultiLabelMarginLoss", "torch.nn.modules.loss.MultiLabelSoftMarginLoss",
	"torch.nn.modules.loss.MultiMarginLoss", "torch.nn.modules.loss.NLLLoss", "torch.nn.modules.loss.NLLLoss2d",
	"torch.nn.modules.loss.PoissonNLLLoss", "torch.nn.modules.loss.SmoothL1Loss",
	"torch.nn.modules.loss.SoftMarginLoss", "torch.nn.modules.loss.TripletMarginLoss",
	"torch.nn.modules.loss.TripletMarginWithDistanceLoss", "torch.nn.modules.loss._Loss",
	"torch.nn.modules.loss._WeightedLoss", "torch.nn.modules.module.Module",
	"torch.nn.modules.normalization.CrossMapLRN2d", "torch.nn.modules.normalization.GroupNorm",
	"torch.nn.modules.normalization.LayerNorm", "torch.nn.modules.normalization.LocalResponseNorm",
	"torch.nn.modules.padding.ConstantPad1d", "torch.nn.modules.padding.ConstantPad2d",
	"torch.nn.modules.padding.ConstantPad3d", "torch.nn.modules.padding.ReflectionPad1d",
	"torch.nn.modules.padding.ReflectionPad2d", "torch.nn.modules.padding.ReflectionPad3d",
	"torch.nn.modules.padding.ReplicationPad1d", "torch.nn.modules.padding.ReplicationPad2d",
	"torch.nn.modules.padding.ReplicationPad3d", "torch.nn.modules.padding.ZeroPad2d",
	"torch.nn.modules.padding._ConstantPadNd", "torch.nn.modules.padding._ReflectionPadNd",
	"torch.nn.modules.padding._ReplicationPadNd", "torch.nn.modules.pixelshuffle.PixelShuffle",
	"torch.nn.modules.pixelshuffle.PixelUnshuffle", "torch.nn.modules.pooling.AdaptiveAvgPool1d",
	"torch.nn.modules.pooling.AdaptiveAvgPool2d", "torch.nn.modules.pooling.AdaptiveAvgPool3d",
	"torch.nn.modules.pooling.AdaptiveMaxPool1d", "torch.nn.modules.pooling.AdaptiveMaxPool2d",
	"torch.nn.modules.pooling.AdaptiveMaxPool3d", "torch.nn.modules.pooling.AvgPool1d",
	"torch.nn.modules.pooling.AvgPool2d", "torch.nn.modules.pooling.AvgPool3d",
	"torch.nn.modules.pooling.FractionalMaxPool2d", "torch.nn.modules.pooling.FractionalMaxPool3d",
	"torch.nn.modules.pooling.LPPool1d", "torch.nn.modules.pooling.LPPool2d",
	"torch.nn.modules.pooling.MaxPool1d", "torch.nn.modules.pooling.MaxPool2d",
	"torch.nn.modules.pooling.MaxPool3d", "torch.nn.modules.pooling.MaxUnpool1d",
	"torch.nn.modules.pooling.MaxUnpool2d", "torch.nn.modules.pooling.MaxUnpool3d",
	"torch.nn.modules.pooling._AdaptiveAvgPoolNd", "torch.nn.modules.pooling._AdaptiveMaxPoolNd",
	"torch.nn.modules.pooling._AvgPoolNd", "torch.nn.modules.pooling._LPPoolNd",
	"torch.nn.modules.pooling._MaxPoolNd", "torch.nn.modules.pooling._MaxUnpoolNd", "torch.nn.modules.rnn.GRU",
	"torch.nn.modules.rnn.GRUCell", "torch.nn.modules.rnn.LSTM", "torch.nn.modules.rnn.LSTMCell",
	"torch.nn.modules.rnn.RNN", "torch.nn.modules.rnn.RNNBase", "torch.nn.modules.rnn.RNNCell",
	"torch.nn.modules.rnn.RNNCellBase", "torch.nn.modules.sparse.Embedding",
	"torch.nn.modules.sparse.EmbeddingBag", "torch.nn.modules.transformer.Transformer",
	"torch.nn.modules.transformer.TransformerDecoder", "torch.nn.modules.transformer.TransformerDecoderLayer",
	"torch.nn.modules.transformer.TransformerEncoder", "torch.nn.modules.transformer.TransformerEncoderLayer",
	"torch.nn.modules.upsampling.Upsample", "torch.nn.modules.upsampling.UpsamplingBilinear2d",
	"torch.nn.modules.upsampling.UpsamplingNearest2d",
}

// allowIndex maps an allowed object's full dotted path to the module it
// lives in ("torch._utils._rebuild_tensor_v2" -> "torch._utils").
var allowIndex = func() map[string]string {
	m := map[string]string{}
	for _, list := range [][]string{weightsOnlyGlobals, frameworkGlobals, nnModuleClasses} {
		for _, full := range list {
			i := strings.LastIndexByte(full, '.')
			m[full] = full[:i]
		}
	}
	return m
}()

// AllowedGlobals lists the built-in allowlist (torch constants aside).
func AllowedGlobals() []string {
	out := make([]string, 0, len(allowIndex))
	for k := range allowIndex {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// resolveGlobal names the module and attribute path find_class is asked
// for after torch's and Python's renames: torch.load's unpickler maps the
// module torch.tensor to torch._tensor; below protocol 3, fix_imports maps
// Python 2 names (__builtin__.set -> builtins.set, copy_reg -> copyreg,
// commands -> subprocess, ...).
func resolveGlobal(module, name string, proto int) (string, string) {
	if module == "torch.tensor" {
		module = "torch._tensor"
	}
	if proto < 3 {
		if to, ok := nameMapping[[2]string{module, name}]; ok {
			return to[0], to[1]
		}
		if to, ok := importMapping[module]; ok {
			module = to
		}
	}
	return module, name
}

// allowedGlobal says whether module.name (already resolved) reaches an
// allowlisted object, or one the user allowed by its full dotted path.
func allowedGlobal(module, name string, extra map[string]bool) bool {
	if module == "" || name == "" {
		return false
	}
	full := module + "." + name
	if home, ok := allowIndex[full]; ok && (module == home || strings.HasPrefix(home, module+".")) {
		return true
	}
	if module == "torch" && isTorchConstant(name) {
		return true
	}
	if module == "numpy.dtypes" && isIdent(name) && strings.HasSuffix(name, "DType") {
		return true
	}
	return extra[full]
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// resolvers are functions that turn a string into any importable object:
// calling one through the pickle reaches what no global names.
var resolvers = map[string]bool{
	"_import_dotted_name": true, "locate": true, "import_module": true, "resolve_name": true,
	"attrgetter": true, "methodcaller": true, "_getattribute": true, "find_class": true,
	"import_string": true, "_load_global": true, "get_attr": true, "getattr": true, "__import__": true,
	"_locate": true, "import_from_string": true, "load_object": true, "instantiate": true, "call": true,
}

// Classify gives the verdict on one global reference: safe when it
// reaches an allowlisted object (or one in allow, full dotted paths the
// user trusts); dangerous when it can run code, touch files or the network
// or reach any object by name, or cannot be resolved without running the
// pickle; unknown otherwise. Only safe passes a scan.
func Classify(ref pickle.GlobalRef, allow map[string]bool) (verdict, reason string) {
	if !ref.Resolved {
		return VerdictDangerous, "the reference cannot be resolved without running the pickle"
	}
	module, name := resolveGlobal(ref.Module, ref.Name, ref.Proto)
	if allowedGlobal(module, name, allow) {
		return VerdictSafe, ""
	}
	via := ""
	if module != ref.Module || name != ref.Name {
		via = " (find_class reads it as " + module + "." + name + ")"
	}
	if r := dangerReason(module, name); r != "" {
		return VerdictDangerous, r + via
	}
	if strings.Contains(name, ".") {
		return VerdictUnknown, "a dotted name walked with getattr from module " + module + " that is not on the allowlist" + via
	}
	return VerdictUnknown, "not on the allowlist; torch.load would import and call it (--allow " + module + "." + name + " if you trust it)" + via
}

// dangerReason says why module.name is dangerous, or "" when it is merely
// unknown.
func dangerReason(module, name string) string {
	full := module + "." + name
	parts := strings.Split(name, ".")
	last := parts[len(parts)-1]
	for _, m := range dangerousModules {
		if module == m || strings.HasPrefix(module, m+".") || full == m || strings.HasPrefix(full, m+".") {
			return "module " + m + " can run code, touch files or the network"
		}
	}
	if resolvers[last] {
		return last + " resolves a string to any importable object (a resolver reaches what no global names)"
	}
	if module == "builtins" || module == "__builtin__" || module == "__builtins__" {
		if r, ok := dangerousNames[last]; ok {
			return "builtins." + last + " " + r
		}
	}
	for i, p := range parts[:len(parts)-1] {
		for _, m := range dangerousModules {
			if p == m || p == "builtins" || p == "__builtins__" {
				return "walks through attribute " + strings.Join(parts[:i+1], ".") + " (module " + p + ") to reach " + last
			}
		}
	}
	for _, p := range parts {
		if strings.HasPrefix(p, "__") && p != "__newobj__" {
			return "reaches the dunder attribute " + p
		}
	}
	switch last {
	case "eval", "exec", "execfile", "setattr", "load", "loads", "apply", "open", "_load_from_bytes", "system", "popen", "Popen":
		return last + " can run code, commands or load another pickle"
	}
	if strings.HasPrefix(last, "exec") || strings.HasPrefix(last, "spawn") {
		return last + " runs commands"
	}
	return ""
}

// nameMapping and importMapping are _compat_pickle.NAME_MAPPING and
// IMPORT_MAPPING of CPython 3.11: the Python 2 names find_class maps when
// the protocol in force is below 3 (fix_imports, on by default).
var nameMapping = map[[2]string][2]string{
	{"UserDict", "IterableUserDict"}:            {"collections", "UserDict"},
	{"UserDict", "UserDict"}:                    {"collections", "UserDict"},
	{"UserList", "UserList"}:                    {"collections", "UserList"},
	{"UserString", "UserString"}:                {"collections", "UserString"},
	{"__builtin__", "basestring"}:               {"builtins", "str"},
	{"__builtin__", "intern"}:                   {"sys", "intern"},
	{"__builtin__", "long"}:                     {"builtins", "int"},
	{"__builtin__", "reduce"}:                   {"functools", "reduce"},
	{"__builtin__", "unichr"}:                   {"builtins", "chr"},
	{"__builtin__", "unicode"}:                  {"builtins", "str"},
	{"__builtin__", "xrange"}:                   {"builtins", "range"},
	{"_multiprocessing", "Connection"}:          {"multiprocessing.connection", "Connection"},
	{"_socket", "fromfd"}:                       {"socket", "fromfd"},
	{"exceptions", "ArithmeticError"}:           {"builtins", "ArithmeticError"},
	{"exceptions", "AssertionError"}:            {"builtins", "AssertionError"},
	{"exceptions", "AttributeError"}:            {"builtins", "AttributeError"},
	{"exceptions", "BaseException"}:             {"builtins", "BaseException"},
	{"exceptions", "BufferError"}:               {"builtins", "BufferError"},
	{"exceptions", "BytesWarning"}:              {"builtins", "BytesWarning"},
	{"exceptions", "DeprecationWarning"}:        {"builtins", "DeprecationWarning"},
	{"exceptions", "EOFError"}:                  {"builtins", "EOFError"},
	{"exceptions", "EnvironmentError"}:          {"builtins", "EnvironmentError"},
	{"exceptions", "Exception"}:                 {"builtins", "Exception"},
	{"exceptions", "FloatingPointError"}:        {"builtins", "FloatingPointError"},
	{"exceptions", "FutureWarning"}:             {"builtins", "FutureWarning"},
	{"exceptions", "GeneratorExit"}:             {"builtins", "GeneratorExit"},
	{"exceptions", "IOError"}:                   {"builtins", "IOError"},
	{"exceptions", "ImportError"}:               {"builtins", "ImportError"},
	{"exceptions", "ImportWarning"}:             {"builtins", "ImportWarning"},
	{"exceptions", "IndentationError"}:          {"builtins", "IndentationError"},
	{"exceptions", "IndexError"}:                {"builtins", "IndexError"},
	{"exceptions", "KeyError"}:                  {"builtins", "KeyError"},
	{"exceptions", "KeyboardInterrupt"}:         {"builtins", "KeyboardInterrupt"},
	{"exceptions", "LookupError"}:               {"builtins", "LookupError"},
	{"exceptions", "MemoryError"}:               {"builtins", "MemoryError"},
	{"exceptions", "NameError"}:                 {"builtins", "NameError"},
	{"exceptions", "NotImplementedError"}:       {"builtins", "NotImplementedError"},
	{"exceptions", "OSError"}:                   {"builtins", "OSError"},
	{"exceptions", "OverflowError"}:             {"builtins", "OverflowError"},
	{"exceptions", "PendingDeprecationWarning"}: {"builtins", "PendingDeprecationWarning"},
	{"exceptions", "ReferenceError"}:            {"builtins", "ReferenceError"},
	{"exceptions", "RuntimeError"}:              {"builtins", "RuntimeError"},
	{"exceptions", "RuntimeWarning"}:            {"builtins", "RuntimeWarning"},
	{"exceptions", "StandardError"}:             {"builtins", "Exception"},
	{"exceptions", "StopIteration"}:             {"builtins", "StopIteration"},
	{"exceptions", "SyntaxError"}:               {"builtins", "SyntaxError"},
	{"exceptions", "SyntaxWarning"}:             {"builtins", "SyntaxWarning"},
	{"exceptions", "SystemError"}:               {"builtins", "SystemError"},
	{"exceptions", "SystemExit"}:                {"builtins", "SystemExit"},
	{"exceptions", "TabError"}:                  {"builtins", "TabError"},
	{"exceptions", "TypeError"}:                 {"builtins", "TypeError"},
	{"exceptions", "UnboundLocalError"}:         {"builtins", "UnboundLocalError"},
	{"exceptions", "UnicodeDecodeError"}:        {"builtins", "UnicodeDecodeError"},
	{"exceptions", "UnicodeEncodeError"}:        {"builtins", "UnicodeEncodeError"},
	{"exceptions", "UnicodeError"}:              {"builtins", "UnicodeError"},
	{"exceptions", "UnicodeTranslateError"}:     {"builtins", "UnicodeTranslateError"},
	{"exceptions", "UnicodeWarning"}:            {"builtins", "UnicodeWarning"},
	{"exceptions", "UserWarning"}:               {"builtins", "UserWarning"},
	{"exceptions", "ValueError"}:                {"builtins", "ValueError"},
	{"exceptions", "Warning"}:                   {"builtins", "Warning"},
	{"exceptions", "ZeroDivisionError"}:         {"builtins", "ZeroDivisionError"},
	{"itertools", "ifilter"}:                    {"builtins", "filter"},
	{"itertools", "ifilterfalse"}:               {"itertools", "filterfalse"},
	{"itertools", "imap"}:                       {"builtins", "map"},
	{"itertools", "izip"}:                       {"builtins", "zip"},
	{"itertools", "izip_longest"}:               {"itertools", "zip_longest"},
	{"multiprocessing", "AuthenticationError"}:  {"multiprocessing.context", "AuthenticationError"},
	{"multiprocessing", "BufferTooShort"}:       {"multiprocessing.context", "BufferTooShort"},
	{"multiprocessing", "ProcessError"}:         {"multiprocessing.context", "ProcessError"},
	{"multiprocessing", "TimeoutError"}:         {"multiprocessing.context", "TimeoutError"},
	{"multiprocessing.forking", "Popen"}:        {"multiprocessing.popen_fork", "Popen"},
	{"multiprocessing.process", "Process"}:      {"multiprocessing.context", "Process"},
	{"socket", "_socketobject"}:                 {"socket", "SocketType"},
	{"urllib", "ContentTooShortError"}:          {"urllib.error", "ContentTooShortError"},
	{"urllib", "getproxies"}:                    {"urllib.request", "getproxies"},
	{"urllib", "pathname2url"}:                  {"urllib.request", "pathname2url"},
	{"urllib", "quote"}:                         {"urllib.parse", "quote"},
	{"urllib", "quote_plus"}:                    {"urllib.parse", "quote_plus"},
	{"urllib", "unquote"}:                       {"urllib.parse", "unquote"},
	{"urllib", "unquote_plus"}:                  {"urllib.parse", "unquote_plus"},
	{"urllib", "url2pathname"}:                  {"urllib.request", "url2pathname"},
	{"urllib", "urlcleanup"}:                    {"urllib.request", "urlcleanup"},
	{"urllib", "urlencode"}:                     {"urllib.parse", "urlencode"},
	{"urllib", "urlopen"}:                       {"urllib.request", "urlopen"},
	{"urllib", "urlretrieve"}:                   {"urllib.request", "urlretrieve"},
	{"urllib2", "HTTPError"}:                    {"urllib.error", "HTTPError"},
	{"urllib2", "URLError"}:                     {"urllib.error", "URLError"},
	{"whichdb", "whichdb"}:                      {"dbm", "whichdb"},
}

var importMapping = map[string]string{
	"BaseHTTPServer":     "http.server",
	"CGIHTTPServer":      "http.server",
	"ConfigParser":       "configparser",
	"Cookie":             "http.cookies",
	"Dialog":             "tkinter.dialog",
	"DocXMLRPCServer":    "xmlrpc.server",
	"FileDialog":         "tkinter.filedialog",
	"HTMLParser":         "html.parser",
	"Queue":              "queue",
	"ScrolledText":       "tkinter.scrolledtext",
	"SimpleDialog":       "tkinter.simpledialog",
	"SimpleHTTPServer":   "http.server",
	"SimpleXMLRPCServer": "xmlrpc.server",
	"SocketServer":       "socketserver",
	"StringIO":           "io",
	"Tix":                "tkinter.tix",
	"Tkconstants":        "tkinter.constants",
	"Tkdnd":              "tkinter.dnd",
	"Tkinter":            "tkinter",
	"UserDict":           "collections",
	"UserList":           "collections",
	"UserString":         "collections",
	"__builtin__":        "builtins",
	"_abcoll":            "collections.abc",
	"_elementtree":       "xml.etree.ElementTree",
	"_winreg":            "winreg",
	"anydbm":             "dbm",
	"cPickle":            "pickle",
	"cStringIO":          "io",
	"commands":           "subprocess",
	"cookielib":          "http.cookiejar",
	"copy_reg":           "copyreg",
	"dbhash":             "dbm.bsd",
	"dbm":                "dbm.ndbm",
	"dumbdbm":            "dbm.dumb",
	"dummy_thread":       "_dummy_thread",
	"gdbm":               "dbm.gnu",
	"htmlentitydefs":     "html.entities",
	"httplib":            "http.client",
	"markupbase":         "_markupbase",
	"repr":               "reprlib",
	"robotparser":        "urllib.robotparser",
	"test.test_support":  "test.support",
	"thread":             "_thread",
	"tkColorChooser":     "tkinter.colorchooser",
	"tkCommonDialog":     "tkinter.commondialog",
	"tkFileDialog":       "tkinter.filedialog",
	"tkFont":             "tkinter.font",
	"tkMessageBox":       "tkinter.messagebox",
	"tkSimpleDialog":     "tkinter.simpledialog",
	"ttk":                "tkinter.ttk",
	"urllib2":            "urllib.request",
	"urlparse":           "urllib.parse",
	"whichdb":            "dbm",
	"xmlrpclib":          "xmlrpc.client",
}

// CheckAllowName checks a --allow argument: a full dotted path,
// module.qualname, of identifiers.
func CheckAllowName(s string) error {
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return fmt.Errorf("%q is not a full dotted path MODULE.QUALNAME (for example mypkg.models.Net)", s)
	}
	for _, p := range parts {
		if !isIdent(p) {
			return fmt.Errorf("%q is not a full dotted path MODULE.QUALNAME (for example mypkg.models.Net)", s)
		}
	}
	return nil
}
