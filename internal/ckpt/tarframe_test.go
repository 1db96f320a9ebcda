package ckpt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const osSystemPayload = "cos\nsystem\n(S'touch vg-pwned'\ntR."

// framedAfterStop: a harmless pickle whose STOP comes 9 000 bytes before
// the end of its FRAME, then the payload right after the frame, where
// CPython's next load() starts (the bytes after STOP are no opcode).
func framedAfterStop() []byte {
	inner := "K\x01." + strings.Repeat("\xfe", 9000)
	var b []byte
	b = append(b, "\x80\x04\x95"...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(inner)))
	b = append(b, inner...)
	return append(b, osSystemPayload...)
}

// sixPickles: five harmless pickles and the payload as the sixth.
func sixPickles() []byte {
	return []byte(strings.Repeat("\x80\x02K\x01.", 5) + osSystemPayload)
}

// tarAfterDir: a tar whose first member is a directory with a size field
// of one block: tarfile reads no data after a directory header, so the
// next header (storages, the payload) comes right after it. Its name is a
// harmless pickle, so the file reads as one too.
func tarAfterDir() []byte {
	var f []byte
	f = append(f, tarBlock("\x80\x02K\x01.", 512, '5')...)
	f = append(f, tarBlock("storages", len(osSystemPayload), '0')...)
	f = append(f, tarPad([]byte(osSystemPayload))...)
	return append(f, make([]byte, 1024)...)
}

// tarChecksum0o: a tar whose checksum field is written "0o…", which
// Python's int(s, 8) accepts.
func tarChecksum0o() []byte {
	first := tarBlock("\x80\x02K\x01.", 0, '0')
	copy(first[148:], fmt.Sprintf("0o%o\x00", tarSum(first)))
	var f []byte
	f = append(f, first...)
	f = append(f, tarBlock("storages", len(osSystemPayload), '0')...)
	f = append(f, tarPad([]byte(osSystemPayload))...)
	return append(f, make([]byte, 1024)...)
}

// tarFramedStorages: a tar whose storages member holds the count in a
// FRAME whose STOP comes pad bytes before the frame's end, then the payload
// at the frame's end: torch opens the member unbuffered, CPython's
// unpickler reads the whole frame, and the next load() starts there.
func tarFramedStorages(pad int) []byte {
	inner := "K\x01." + strings.Repeat("\xfe", pad)
	var data []byte
	data = append(data, "\x80\x04\x95"...)
	data = binary.LittleEndian.AppendUint64(data, uint64(len(inner)))
	data = append(data, inner...)
	data = append(data, osSystemPayload...)
	var f []byte
	f = append(f, tarBlock("storages", len(data), '0')...)
	f = append(f, data...)
	f = append(f, make([]byte, (512-len(data)%512)%512)...)
	return append(f, make([]byte, 1024)...)
}

// TestScanStreamsAsCPython: every pickle CPython's unpickler reads from a
// file and every member tarfile finds are scanned, and the real loaders
// run each payload (pickle.load in a loop, torch.load of the tars).
func TestScanStreamsAsCPython(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string][]byte{
		"framed.pkl":      framedAfterStop(),
		"six.pkl":         sixPickles(),
		"after_dir.pt":    tarAfterDir(),
		"checksum_0o.pt":  tarChecksum0o(),
		"framed_small.pt": tarFramedStorages(100),
		"framed_large.pt": tarFramedStorages(9000),
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := ScanFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Safe || res.Dangerous != 1 {
			t.Errorf("%s: safe=%v dangerous=%d hits %+v errors %v", name, res.Safe, res.Dangerous, res.Hits, res.Errors)
		}
	}
	pickles := runLoader(t, `
        f = open(p, "rb")
        while True:
            pickle.load(f)`, []string{filepath.Join(dir, "framed.pkl"), filepath.Join(dir, "six.pkl")})
	tars := runLoader(t, torchLoad, []string{filepath.Join(dir, "after_dir.pt"), filepath.Join(dir, "checksum_0o.pt"),
		filepath.Join(dir, "framed_small.pt"), filepath.Join(dir, "framed_large.pt")})
	for name, ran := range map[string]bool{"framed.pkl": pickles["framed.pkl"], "six.pkl": pickles["six.pkl"],
		"after_dir.pt": tars["after_dir.pt"], "checksum_0o.pt": tars["checksum_0o.pt"],
		"framed_small.pt": tars["framed_small.pt"], "framed_large.pt": tars["framed_large.pt"]} {
		if !ran {
			t.Errorf("%s: the real loader did not run the payload", name)
		}
	}
}

func TestPyTarNumber(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"0000644\x00": 0o644, "  17 \x00": 0o17, "0o17\x00": 0o17, "1_7\x00": 0o17, "\x00": 0, "  \x00": 0,
		"+17": 0o17, "0o_17": 0o17, "\x80\x00\x00\x00\x00\x00\x01\x00": 256,
	} {
		if got, err := pyTarNumber([]byte(in)); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"18", "1__7", "_17", "17_", "0x17", "1 7"} {
		if _, err := pyTarNumber([]byte(in)); err == nil {
			t.Errorf("%q accepted (Python's int(s, 8) refuses it)", in)
		}
	}
}

// TestSafetensorsViewStops: in the pickle view of a safetensors file, the
// decoder goes on where CPython does (ADDITEMS on what builtins.set
// returns adds the items), so the payload after it is found; a stop CPython
// need not make (ADDITEMS on an object known only symbolically, whose own
// add CPython calls) is a finding. pickle.loads runs the payload.
func TestSafetensorsViewStops(t *testing.T) {
	t.Parallel()
	view := []byte("\x80\x04cbuiltins\nset\n)R(K\x01\x900" + osSystemPayload)
	res := newScanResult("view", FormatSafetensors, ScanOptions{})
	scanPickleView(bytes.NewReader(view), int64(len(view)), res)
	res.finish()
	if res.Safe || res.Dangerous != 1 || len(res.Errors) != 0 {
		t.Errorf("set: safe=%v dangerous=%d errors %v hits %+v", res.Safe, res.Dangerous, res.Errors, res.Hits)
	}
	opaque := []byte("\x80\x04cmymod\nBag\n)R(K\x01\x900" + osSystemPayload)
	res = newScanResult("view", FormatSafetensors, ScanOptions{})
	scanPickleView(bytes.NewReader(opaque), int64(len(opaque)), res)
	res.finish()
	if res.Safe || len(res.Errors) != 1 || !strings.Contains(res.Errors[0], "CPython may go on") {
		t.Errorf("opaque: safe=%v errors %v hits %+v", res.Safe, res.Errors, res.Hits)
	}
	p := filepath.Join(t.TempDir(), "view.pkl")
	os.WriteFile(p, view, 0o644)
	if ran := runLoader(t, `
        pickle.loads(open(p, "rb").read())`, []string{p}); !ran["view.pkl"] {
		t.Error("pickle.loads did not go on to the payload")
	}
}
