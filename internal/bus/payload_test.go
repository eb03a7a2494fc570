package bus

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/schema"
)

// heuristicTrajectories are real episodes of the built-in heuristic policy
// on the built-in sample (`a2farm localize --samples 4`), whose tool
// observations and repeated prompt columns give payloads their real shape.
func heuristicTrajectories(tb testing.TB) []schema.Trajectory {
	tb.Helper()
	trs, err := schema.ReadTrajectoryDir("testdata/heuristic")
	if err != nil || len(trs) == 0 {
		tb.Fatalf("read testdata: %d trajectories, %v", len(trs), err)
	}
	return trs
}

func TestPayloadRoundTrip(t *testing.T) {
	c := newPayloadCodec()
	for _, tr := range heuristicTrajectories(t) {
		data, err := c.encode(tr)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.decode(data, encodingZstd)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !reflect.DeepEqual(got[0], tr) {
			t.Fatalf("%s changed in a round trip", tr.JobID)
		}
	}
}

// TestPayloadDecodesPlainArrow: messages published before payloads were
// compressed whole (a plain, buffer-compressed Arrow IPC stream and no
// encoding header) still decode.
func TestPayloadDecodesPlainArrow(t *testing.T) {
	tr := heuristicTrajectories(t)[0]
	rec := schema.EncodeTrajectories(nil, tr)
	defer rec.Release()
	var buf bytes.Buffer
	if err := schema.WriteIPC(&buf, schema.TrajectorySchema(), rec); err != nil {
		t.Fatal(err)
	}
	got, err := newPayloadCodec().decode(buf.Bytes(), "")
	if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], tr) {
		t.Fatalf("plain payload decoded to %d trajectories, %v", len(got), err)
	}
}

func TestPayloadRejectsBadInput(t *testing.T) {
	c := newPayloadCodec()
	data, err := c.encode(heuristicTrajectories(t)[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, encoding, want string
		data                 []byte
	}{
		{"unknown encoding", "br", `unknown encoding "br"`, data},
		{"truncated frame", encodingZstd, "decompress trajectory payload", data[:len(data)/2]},
		{"not zstd", encodingZstd, "decompress trajectory payload", []byte("plain text")},
		{"compressed but sent as plain", "", "arrow", data},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.decode(tc.data, tc.encoding)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want one naming %q", err, tc.want)
			}
		})
	}
}

// BenchmarkTrajectoryPayload compares one-trajectory payloads written with
// Arrow's per-buffer zstd (what the bus published before) and as one
// zstd frame over the uncompressed stream (what it publishes now), over
// real heuristic trajectories; bytes/traj is the message size.
func BenchmarkTrajectoryPayload(b *testing.B) {
	trs := heuristicTrajectories(b)
	c := newPayloadCodec()
	encoders := []struct {
		name   string
		encode func(schema.Trajectory) ([]byte, error)
	}{
		{"arrow-buffers-zstd", func(tr schema.Trajectory) ([]byte, error) {
			rec := schema.EncodeTrajectories(nil, tr)
			defer rec.Release()
			var buf bytes.Buffer
			err := schema.WriteIPC(&buf, schema.TrajectorySchema(), rec)
			return buf.Bytes(), err
		}},
		{"whole-zstd", c.encode},
	}
	for _, enc := range encoders {
		b.Run(enc.name, func(b *testing.B) {
			size := 0
			for i := range b.N {
				data, err := enc.encode(trs[i%len(trs)])
				if err != nil {
					b.Fatal(err)
				}
				size += len(data)
			}
			b.ReportMetric(float64(size)/float64(b.N), "bytes/traj")
		})
	}
}
