package tbevents

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// scalar is one decoded scalar event.
type scalar struct {
	tag   string
	step  int64
	value float32
}

// readEvents reads an event file back: each record's two checksums, the
// file version first, then the scalars. trainer/tests/test_iterate.py reads
// the files iterate writes with TensorBoard's own reader.
func readEvents(t *testing.T, path string) (version string, out []scalar) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for len(data) > 0 {
		if len(data) < 16 {
			t.Fatalf("a torn record: %d bytes left", len(data))
		}
		n := binary.LittleEndian.Uint64(data[:8])
		if got := binary.LittleEndian.Uint32(data[8:12]); got != maskedCRC(data[:8]) {
			t.Fatalf("length checksum %x, want %x", got, maskedCRC(data[:8]))
		}
		body := data[12 : 12+n]
		if got := binary.LittleEndian.Uint32(data[12+n : 16+n]); got != maskedCRC(body) {
			t.Fatalf("data checksum %x, want %x", got, maskedCRC(body))
		}
		data = data[16+n:]
		var s scalar
		walk(t, body, func(field int, v []byte, u uint64) {
			switch field {
			case 2:
				s.step = int64(u)
			case 3:
				version = string(v)
			case 5:
				walk(t, v, func(_ int, value []byte, _ uint64) {
					walk(t, value, func(f int, b []byte, u uint64) {
						if f == 1 {
							s.tag = string(b)
						} else if f == 2 {
							s.value = math.Float32frombits(uint32(u))
						}
					})
				})
				out = append(out, s)
			}
		})
	}
	return version, out
}

// walk calls f for each field of a protocol-buffer message: bytes for
// length-delimited fields, the number for the others.
func walk(t *testing.T, b []byte, f func(field int, v []byte, u uint64)) {
	t.Helper()
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		b = b[n:]
		switch key & 7 {
		case 0:
			v, n := binary.Uvarint(b)
			f(int(key>>3), nil, v)
			b = b[n:]
		case 1:
			f(int(key>>3), nil, binary.LittleEndian.Uint64(b))
			b = b[8:]
		case 2:
			l, n := binary.Uvarint(b)
			f(int(key>>3), b[n:n+int(l)], 0)
			b = b[n+int(l):]
		case 5:
			f(int(key>>3), nil, uint64(binary.LittleEndian.Uint32(b)))
			b = b[4:]
		default:
			t.Fatalf("wire type %d", key&7)
		}
	}
}

func TestScalarsReadBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs", "iterate")
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []scalar{{"iterate/eval/file_f1", 1, 0.25}, {"iterate/train/loss_last", 2, 1.5}, {"a/b", 300, -3}}
	for _, s := range want {
		if err := w.Scalar(s.tag, s.step, float64(s.value)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if len(files) != 1 {
		t.Fatalf("event files %v, want one", files)
	}
	version, got := readEvents(t, files[0])
	if version != "brain.Event:2" {
		t.Errorf("file version %q", version)
	}
	if len(got) != len(want) {
		t.Fatalf("read %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("scalar %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// TFRecord's masked CRC-32C of a known input (the empty string's
	// CRC-32C is 0, masked: 0xa282ead8).
	if c := maskedCRC(nil); c != 0xa282ead8 {
		t.Errorf("masked CRC of nothing: %x", c)
	}
}
