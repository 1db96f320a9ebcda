package ckpt

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScanDCPItems: a DCP shard holds one torch.save item after another;
// scan reads each at the offset .metadata gives, as torch's reader
// torch.loads each slice. The "step" item of the fixture is replaced by a
// torch zip of the same length whose data.pkl runs the payload (a zip
// comment pads it), which torch.load of that slice runs.
func TestScanDCPItems(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "step-300")
	copyDir(t, "testdata/torch/dcp/step-300", dir)
	shard := filepath.Join(dir, "__0_0.distcp")
	res, err := ScanFile(shard)
	if err != nil || !res.Safe || res.Pickles < 2 {
		t.Fatalf("the real shard: %+v %v", res, err)
	}
	items, err := dcpStorageItems(dir)
	if err != nil {
		t.Fatal(err)
	}
	var step *dcpItem
	for i := range items {
		if items[i].name == "step" {
			step = &items[i]
		}
	}
	if step == nil || step.off == 0 {
		t.Fatalf("no step item past the first: %+v", items)
	}
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	for _, rec := range []struct{ name, data string }{{"archive/data.pkl", osSystemPayload}, {"archive/version", "3\n"}} {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: rec.name, Method: zip.Store, Modified: time.Unix(0, 0)})
		w.Write([]byte(rec.data))
	}
	zw.Close()
	pad := int(step.length) - zb.Len()
	if pad < 0 {
		t.Fatalf("payload zip (%d bytes) is longer than the item (%d)", zb.Len(), step.length)
	}
	zb.Reset()
	zw = zip.NewWriter(&zb)
	for _, rec := range []struct{ name, data string }{{"archive/data.pkl", osSystemPayload}, {"archive/version", "3\n"}} {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: rec.name, Method: zip.Store, Modified: time.Unix(0, 0)})
		w.Write([]byte(rec.data))
	}
	zw.SetComment(strings.Repeat(" ", pad))
	zw.Close()
	f, err := os.OpenFile(shard, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(zb.Bytes(), step.off)
	f.Close()
	res, err = ScanFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, h := range res.Hits {
		found = found || (h.Global == "os.system" && strings.HasPrefix(h.Record, "item step at byte "+strconv.FormatInt(step.off, 10)))
	}
	if res.Safe || !found {
		t.Errorf("payload item: %+v", res)
	}
	ran := runLoader(t, `
        import io, torch
        data = open(p, "rb").read()
        torch.load(io.BytesIO(data[`+strconv.FormatInt(step.off, 10)+`:`+strconv.FormatInt(step.off+step.length, 10)+`]))`, []string{shard})
	if !ran["__0_0.distcp"] {
		t.Error("torch.load of the item's slice did not run the payload")
	}
}
