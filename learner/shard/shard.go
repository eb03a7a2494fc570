// Package shard writes training shards: Parquet files (zstd) of
// schema.ShardRow (shard-NNNNN.parquet) and of schema.TokenRow
// (tokens-NNNNN.parquet), rotated by rows and bytes, each written to a
// temporary file and renamed into place, and a manifest.json listing every
// file with its rows, bytes and sha256, what the token sequences hold, and
// the hyperparameters that produced them.
package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/schema"
)

// Config configures a Writer.
type Config struct {
	Dir string
	// MaxRows and MaxBytes rotate files (defaults 2,000 rows, 256 MiB of
	// row payload before compression).
	MaxRows  int
	MaxBytes int64
	// Params are stored in the manifest (hyperparameters, code version,
	// anything needed to reproduce the shards).
	Params map[string]any
}

// File is one shard file in the manifest.
type File struct {
	Name   string `json:"name"`
	Rows   int    `json:"rows"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// ManifestName is the manifest's file in a shard folder.
const ManifestName = "manifest.json"

// Manifest describes a shard set.
type Manifest struct {
	FormatVersion string    `json:"format_version"`
	Created       time.Time `json:"created"`
	// Rows and Files are the message shards.
	Rows  int    `json:"rows"`
	Files []File `json:"files"`
	// TokenRows and TokenFiles are the token shards; Tokens describes
	// them, and TokenNote says why there are none.
	TokenRows  int            `json:"token_rows"`
	TokenFiles []File         `json:"token_files"`
	Tokens     TokenStats     `json:"tokens"`
	TokenNote  string         `json:"token_note,omitempty"`
	Params     map[string]any `json:"params"`
}

// TokenStats describe token sequences; they add up over trajectories.
type TokenStats struct {
	Sequences int `json:"sequences"`
	Tokens    int `json:"tokens"`
	// WeightedTokens are the completion ids, which carry their turn's weight.
	WeightedTokens int `json:"weighted_tokens"`
	// TurnsWithIDs had prompt and completion ids; TurnsWithoutIDs did not
	// and are in no sequence.
	TurnsWithIDs    int `json:"turns_with_ids"`
	TurnsWithoutIDs int `json:"turns_without_ids"`
	// Merged counts turns appended to the previous turn's sequence, out of
	// Mergeable turns that followed a turn with ids; MergeRate is their
	// ratio.
	Merged    int     `json:"merged"`
	Mergeable int     `json:"mergeable"`
	MergeRate float64 `json:"merge_rate"`
}

// Add accumulates o into s.
func (s *TokenStats) Add(o TokenStats) {
	s.Sequences += o.Sequences
	s.Tokens += o.Tokens
	s.WeightedTokens += o.WeightedTokens
	s.TurnsWithIDs += o.TurnsWithIDs
	s.TurnsWithoutIDs += o.TurnsWithoutIDs
	s.Merged += o.Merged
	s.Mergeable += o.Mergeable
	s.MergeRate = 0
	if s.Mergeable > 0 {
		s.MergeRate = float64(s.Merged) / float64(s.Mergeable)
	}
}

// NoTokenIDs is the manifest's note when no turn carried token ids.
const NoTokenIDs = "no turn of these trajectories carried token ids (the run did not ask the server for them: --return-token-ids); only message shards were written"

// Writer buffers rows and writes them out in shards. Files are encoded
// and written in the background — one file of each kind at a time, in
// order — while the caller builds the next rows; Close waits for them.
type Writer struct {
	cfg         Config
	buf         []schema.ShardRow
	bufBytes    int64
	tokens      []schema.TokenRow
	tokensBytes int64
	manifest    Manifest
	// messageSlot and tokenSlot hold the one write of each kind in
	// flight; mu guards the manifest's file lists and err while writes
	// finish.
	messageSlot, tokenSlot chan struct{}
	mu                     sync.Mutex
	err                    error
}

// NewWriter creates the shard folder.
func NewWriter(cfg Config) (*Writer, error) {
	if cfg.Dir == "" {
		return nil, errors.New("shards: an output folder is required")
	}
	if cfg.MaxRows == 0 {
		cfg.MaxRows = 2000
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 256 << 20
	}
	if cfg.MaxRows < 0 || cfg.MaxBytes < 0 {
		return nil, errors.New("shards: rotation limits must be positive")
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	return &Writer{cfg: cfg, manifest: Manifest{FormatVersion: schema.Version, Params: cfg.Params},
		messageSlot: make(chan struct{}, 1), tokenSlot: make(chan struct{}, 1)}, nil
}

// Add buffers a row, writing a shard when a limit is reached.
func (w *Writer) Add(row schema.ShardRow) error {
	w.buf = append(w.buf, row)
	w.bufBytes += rowBytes(row)
	if len(w.buf) >= w.cfg.MaxRows || w.bufBytes >= w.cfg.MaxBytes {
		return w.flush()
	}
	return nil
}

// AddTokens buffers token rows and accumulates their statistics.
func (w *Writer) AddTokens(rows []schema.TokenRow, stats TokenStats) error {
	w.manifest.Tokens.Add(stats)
	for _, r := range rows {
		w.tokens = append(w.tokens, r)
		w.tokensBytes += 8 * int64(len(r.InputIDs))
		if len(w.tokens) >= w.cfg.MaxRows || w.tokensBytes >= w.cfg.MaxBytes {
			if err := w.flushTokens(); err != nil {
				return err
			}
		}
	}
	return nil
}

func rowBytes(r schema.ShardRow) int64 {
	n := 8 * int64(len(r.Turns)+len(r.Weights)+len(r.Advantages)+len(r.Returns)+len(r.Rewards))
	for _, t := range r.Tools {
		n += int64(len(t.Function.Name) + len(t.Function.Description) + len(t.Function.Parameters))
	}
	for _, m := range r.Messages {
		n += int64(len(m.Content) + len(m.Reasoning) + len(m.Role) + len(m.Name) + len(m.ToolCallID))
		for _, c := range m.ToolCalls {
			n += int64(len(c.ID) + len(c.Type) + len(c.Function.Name) + len(c.Function.Arguments))
		}
	}
	return n
}

func (w *Writer) flush() error {
	if len(w.buf) == 0 {
		return w.failed()
	}
	name := fmt.Sprintf("shard-%05d.parquet", len(w.manifest.Files))
	w.manifest.Rows += len(w.buf)
	rows := w.buf
	w.buf, w.bufBytes = nil, 0
	return background(w, w.messageSlot, &w.manifest.Files, name, schema.ShardCodec(), rows)
}

func (w *Writer) flushTokens() error {
	if len(w.tokens) == 0 {
		return w.failed()
	}
	name := fmt.Sprintf("tokens-%05d.parquet", len(w.manifest.TokenFiles))
	w.manifest.TokenRows += len(w.tokens)
	rows := w.tokens
	w.tokens, w.tokensBytes = nil, 0
	return background(w, w.tokenSlot, &w.manifest.TokenFiles, name, schema.TokenCodec(), rows)
}

// background writes a file once the previous one of its kind is done,
// recording it in files in order; it returns the first error of any
// earlier write.
func background[T any](w *Writer, slot chan struct{}, files *[]File, name string, codec *schema.Codec[T], rows []T) error {
	slot <- struct{}{}
	w.mu.Lock()
	*files = append(*files, File{Name: name})
	i := len(*files) - 1
	err := w.err
	w.mu.Unlock()
	go func() {
		defer func() { <-slot }()
		f, err := writeFile(w.cfg.Dir, name, codec, rows)
		w.mu.Lock()
		defer w.mu.Unlock()
		(*files)[i] = f
		if err != nil && w.err == nil {
			w.err = fmt.Errorf("shard %s: %w", name, err)
		}
	}()
	return err
}

// wait lets every write finish and returns the first error.
func (w *Writer) wait() error {
	w.messageSlot <- struct{}{}
	w.tokenSlot <- struct{}{}
	<-w.messageSlot
	<-w.tokenSlot
	return w.failed()
}

func (w *Writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// writeFile writes rows as one Parquet file, durably, and describes it.
func writeFile[T any](dir, name string, codec *schema.Codec[T], rows []T) (File, error) {
	path := filepath.Join(dir, name)
	rec := codec.Encode(nil, rows)
	defer rec.Release()
	if err := atomicfile.Write(path, func(out io.Writer) error { return schema.WriteParquet(nopCloser{out}, rec) }); err != nil {
		return File{}, err
	}
	sum, size, err := fileDigest(path)
	if err != nil {
		return File{}, err
	}
	return File{Name: name, Rows: len(rows), Bytes: size, SHA256: sum}, nil
}

// nopCloser keeps the Parquet writer from closing the temporary file,
// which atomicfile syncs and closes itself.
type nopCloser struct{ io.Writer }

func fileDigest(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// Close writes the last shard and the manifest, and returns the manifest.
func (w *Writer) Close() (*Manifest, error) {
	if err := w.flush(); err != nil {
		return nil, err
	}
	if err := w.flushTokens(); err != nil {
		return nil, err
	}
	if err := w.wait(); err != nil {
		return nil, err
	}
	if w.manifest.Tokens.TurnsWithIDs == 0 && w.manifest.Rows > 0 {
		w.manifest.TokenNote = NoTokenIDs
	}
	w.manifest.Created = time.Now().UTC()
	data, err := json.MarshalIndent(w.manifest, "", "  ")
	if err != nil {
		return nil, err
	}
	err = atomicfile.Write(filepath.Join(w.cfg.Dir, ManifestName), func(out io.Writer) error {
		_, err := out.Write(append(data, '\n'))
		return err
	})
	return &w.manifest, err
}
