package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/a2farm/a2farm/schema"
)

func messageRow(i int) schema.ShardRow {
	return schema.ShardRow{
		Span: schema.Span{JobID: fmt.Sprintf("r/0/i/%d", i), RunID: "r", InstanceID: "i", Sample: int64(i), LastTurn: 1},
		Messages: []schema.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "task"},
			{Role: "assistant", Content: fmt.Sprintf("reply %d", i), ToolCalls: []schema.ToolCall{{ID: "c1", Type: "function",
				Function: schema.FunctionCall{Name: "finish", Arguments: `{"answer":"a.py"}`}}}}},
		Tools: []schema.ToolSpec{{Type: "function", Function: schema.ToolFunction{Name: "finish", Parameters: json.RawMessage(`{"type":"object"}`)}}},
		Turns: []int64{1}, Weights: []float64{0.5 * float64(i)}, Advantages: []float64{1}, Returns: []float64{2}, Rewards: []float64{3},
		F1: schema.LevelStats{File: 1, Module: 0.5},
	}
}

func tokenRow(i int) schema.TokenRow {
	return schema.TokenRow{Span: schema.Span{JobID: fmt.Sprintf("r/0/i/%d", i), RunID: "r", InstanceID: "i", Sample: int64(i)},
		InputIDs: []int32{1, 2, int32(i)}, LossWeights: []float32{0, 1, 1}}
}

// readBack decodes every row of the Parquet files the manifest lists,
// after checking each file's size and sha256.
func readBack[T any](t *testing.T, dir string, files []File, codec *schema.Codec[T]) []T {
	t.Helper()
	var out []T
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != f.SHA256 || int64(len(data)) != f.Bytes {
			t.Errorf("%s: manifest says %d bytes sha256 %s; the file has %d bytes sha256 %x", f.Name, f.Bytes, f.SHA256, len(data), sum)
		}
		fh, err := os.Open(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		err = schema.ReadParquet(fh, func(rec arrow.RecordBatch) error {
			rows, err := codec.Decode(rec)
			out, n = append(out, rows...), n+len(rows)
			return err
		})
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n != f.Rows {
			t.Errorf("%s holds %d rows, the manifest says %d", f.Name, n, f.Rows)
		}
	}
	return out
}

// TestWriterRotatesAndRecords writes 7 message rows and 5 token rows with
// three rows per file: files rotate in order, every file is what the
// manifest says (rows, bytes, sha256), rows read back equal, and the
// manifest on disk is the one Close returned.
func TestWriterRotatesAndRecords(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(Config{Dir: dir, MaxRows: 3, Params: map[string]any{"H": 2}})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []schema.ShardRow
	for i := range 7 {
		msgs = append(msgs, messageRow(i))
		if err := w.Add(msgs[i]); err != nil {
			t.Fatal(err)
		}
	}
	var toks []schema.TokenRow
	for i := range 5 {
		toks = append(toks, tokenRow(i))
	}
	if err := w.AddTokens(toks, TokenStats{Sequences: 5, Tokens: 15, WeightedTokens: 10, TurnsWithIDs: 6, Merged: 1, Mergeable: 2}); err != nil {
		t.Fatal(err)
	}
	m, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var rows []int
	for _, f := range append(append([]File{}, m.Files...), m.TokenFiles...) {
		names, rows = append(names, f.Name), append(rows, f.Rows)
	}
	wantNames := []string{"shard-00000.parquet", "shard-00001.parquet", "shard-00002.parquet", "tokens-00000.parquet", "tokens-00001.parquet"}
	if !reflect.DeepEqual(names, wantNames) || !reflect.DeepEqual(rows, []int{3, 3, 1, 3, 2}) {
		t.Errorf("files %v with rows %v; want %v with [3 3 1 3 2]", names, rows, wantNames)
	}
	if m.Rows != 7 || m.TokenRows != 5 || m.Tokens.MergeRate != 0.5 || m.TokenNote != "" {
		t.Errorf("manifest rows %d, token rows %d, merge rate %g, note %q", m.Rows, m.TokenRows, m.Tokens.MergeRate, m.TokenNote)
	}
	if got := readBack(t, dir, m.Files, schema.ShardCodec()); !reflect.DeepEqual(got, msgs) {
		t.Errorf("message rows read back differ:\n got %+v\nwant %+v", got, msgs)
	}
	if got := readBack(t, dir, m.TokenFiles, schema.TokenCodec()); !reflect.DeepEqual(got, toks) {
		t.Errorf("token rows read back differ:\n got %+v\nwant %+v", got, toks)
	}
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var onDisk Manifest
	if err := json.Unmarshal(data, &onDisk); err != nil {
		t.Fatal(err)
	}
	if onDisk.FormatVersion != schema.Version || onDisk.Params["H"] != float64(2) || !reflect.DeepEqual(onDisk.Files, m.Files) {
		t.Errorf("manifest on disk: version %q params %v files %v", onDisk.FormatVersion, onDisk.Params, onDisk.Files)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "*.tmp*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}
}

// TestWriterSaysWhyNoTokenShards: message rows without any token ids give
// no token files and a manifest note that says why.
func TestWriterSaysWhyNoTokenShards(t *testing.T) {
	w, err := NewWriter(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(messageRow(1)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTokens(nil, TokenStats{TurnsWithoutIDs: 1}); err != nil {
		t.Fatal(err)
	}
	m, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.TokenFiles) != 0 || m.TokenNote != NoTokenIDs || len(m.Files) != 1 {
		t.Errorf("token files %v, note %q, message files %v", m.TokenFiles, m.TokenNote, m.Files)
	}
}

func TestWriterRefusesBadConfig(t *testing.T) {
	for _, cfg := range []Config{{}, {Dir: t.TempDir(), MaxRows: -1}, {Dir: t.TempDir(), MaxBytes: -5}} {
		if _, err := NewWriter(cfg); err == nil {
			t.Errorf("NewWriter(%+v) accepted a bad config", cfg)
		}
	}
}
