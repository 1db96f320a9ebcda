package ckpt

import "strings"

// elemSize is the byte size of one element of each torch dtype.
var elemSize = map[string]int64{
	"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
	"complex128": 16, "complex64": 8, "complex32": 4,
	"int64": 8, "int32": 4, "int16": 2, "int8": 1,
	"uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
	"qint8": 1, "quint8": 1, "qint32": 4, "quint4x2": 1, "quint2x4": 1,
	"float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
	"bits8": 1, "bits16": 2, "bits1x8": 1, "bits2x4": 1, "bits4x2": 1,
}

// storageDType maps torch's legacy typed-storage class names to dtypes.
var storageDType = map[string]string{
	"DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
	"ComplexDoubleStorage": "complex128", "ComplexFloatStorage": "complex64",
	"LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
	"ByteStorage": "uint8", "BoolStorage": "bool",
	"QInt8Storage": "qint8", "QUInt8Storage": "quint8", "QInt32Storage": "qint32",
	"QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
	"UntypedStorage": "uint8",
}

// dtypeFromStorageClass handles the known names and the generic
// "<Name>Storage" form newer torch versions use for new dtypes.
func dtypeFromStorageClass(name string) (string, bool) {
	if d, ok := storageDType[name]; ok {
		return d, true
	}
	if base, ok := strings.CutSuffix(name, "Storage"); ok {
		d := strings.ToLower(base)
		if _, ok := elemSize[d]; ok {
			return d, true
		}
	}
	return "", false
}

// torchDType maps the attribute name of a torch dtype global (torch.float32,
// torch.half, ...) to the canonical name.
func torchDType(name string) (string, bool) {
	alias := map[string]string{
		"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32",
		"short": "int16", "cfloat": "complex64", "cdouble": "complex128", "chalf": "complex32",
	}
	if a, ok := alias[name]; ok {
		return a, true
	}
	if _, ok := elemSize[name]; ok {
		return name, true
	}
	return "", false
}

// safetensorsDType maps safetensors dtype codes to torch names.
var safetensorsDType = map[string]string{
	"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
	"F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32",
	"F32": "float32", "F64": "float64", "I64": "int64", "U64": "uint64",
	"C64": "complex64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
}

// numpyDType maps numpy type codes (as pickled in a numpy.dtype call) to torch names.
func numpyDType(code string) (string, bool) {
	m := map[string]string{
		"f8": "float64", "f4": "float32", "f2": "float16", "c16": "complex128", "c8": "complex64",
		"i8": "int64", "i4": "int32", "i2": "int16", "i1": "int8",
		"u8": "uint64", "u4": "uint32", "u2": "uint16", "u1": "uint8", "b1": "bool",
	}
	d, ok := m[strings.TrimLeft(code, "<>|=")]
	return d, ok
}
