package pickle

import (
	"testing"
)

// FuzzDecode: any input decodes or fails with an error; never a panic, and
// the small limits keep every allocation bounded.
func FuzzDecode(f *testing.F) {
	seeds := []string{
		"\x80\x02}q\x00X\x04\x00\x00\x00stepq\x01K\x05s.",
		"(dp0\nS'a'\np1\nI1\ns.",
		"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06system\x93.",
		"cos\nsystem\n(S'echo hi'\ntR.",
		"\x80\x02]q\x00h\x00a.",
		"\x80\x05\x97\x98.",
		"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	lim := Limits{MaxBytes: 1 << 20, MaxOps: 100_000, MaxMemo: 10_000, MaxStack: 100_000, MaxMarks: 1000, MaxString: 1 << 20}
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := DecodeBytes(b, lim)
		if res == nil {
			t.Fatal("nil result")
		}
		if err == nil && res.End > int64(len(b)) {
			t.Fatalf("End %d past input %d", res.End, len(b))
		}
	})
}
