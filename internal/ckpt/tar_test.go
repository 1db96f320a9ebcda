package ckpt

import (
	"bytes"
	"testing"
)

// legacyTar builds the pre-1.0 torch layout: a tar of pickles named
// sys_info, pickle, tensors and storages.
func legacyTar(t *testing.T, pickleRecord []byte) []byte {
	return tarOf(t, member{"sys_info", []byte("\x80\x02}q\x00.")}, member{"pickle", pickleRecord},
		member{"tensors", []byte("\x80\x02K\x00.")}, member{"storages", []byte("\x80\x02K\x00.")})
}

func TestLegacyTar(t *testing.T) {
	good := legacyTar(t, []byte("\x80\x02}q\x00X\x05\x00\x00\x00epochq\x01K\x02s."))
	rep := InspectReader(bytes.NewReader(good), int64(len(good)), Options{Structure: true})
	if rep.Format != FormatTorchTar || !rep.Valid {
		t.Fatalf("format %q valid %v: %s", rep.Format, rep.Valid, rep.Reason)
	}
	cut := good[:1500]
	rep = InspectReader(bytes.NewReader(cut), int64(len(cut)), Options{Structure: true})
	if rep.Valid {
		t.Fatal("truncated tar reported valid")
	}
	evil := legacyTar(t, []byte("\x80\x02cos\nsystem\nX\x02\x00\x00\x00idq\x00\x85R."))
	res := &ScanResult{Format: FormatTorchTar}
	scanReader(bytes.NewReader(evil), int64(len(evil)), res)
	if res.Dangerous != 1 || res.Pickles != 4 {
		t.Fatalf("dangerous %d, pickles %d: %+v", res.Dangerous, res.Pickles, res.Hits)
	}
}
