// Package shard writes training shards: Parquet files (zstd) of
// schema.ShardRow, rotated by rows and bytes, each written to a temporary
// file and renamed into place, and a manifest.json listing every file with
// its rows, bytes and sha256 plus the hyperparameters that produced them.
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

// Manifest describes a shard set.
type Manifest struct {
	FormatVersion string         `json:"format_version"`
	Created       time.Time      `json:"created"`
	Rows          int            `json:"rows"`
	Files         []File         `json:"files"`
	Params        map[string]any `json:"params"`
}

// Writer buffers rows and writes them out in shards.
type Writer struct {
	cfg      Config
	buf      []schema.ShardRow
	bufBytes int64
	manifest Manifest
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
	return &Writer{cfg: cfg, manifest: Manifest{FormatVersion: schema.Version, Params: cfg.Params}}, nil
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

func rowBytes(r schema.ShardRow) int64 {
	n := int64(len(r.Tools)) + 8*int64(len(r.Weights)+len(r.Advantages)+len(r.Returns)+len(r.Rewards))
	for _, m := range r.Messages {
		n += int64(len(m.Content) + len(m.ToolCalls) + len(m.Role) + len(m.Name) + len(m.ToolCallID))
	}
	return n
}

func (w *Writer) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	name := fmt.Sprintf("shard-%05d.parquet", len(w.manifest.Files))
	path := filepath.Join(w.cfg.Dir, name)
	rec := schema.ShardCodec().Encode(nil, w.buf)
	defer rec.Release()
	if err := atomicfile.Write(path, func(out io.Writer) error { return schema.WriteParquet(nopCloser{out}, rec) }); err != nil {
		return err
	}
	sum, size, err := fileDigest(path)
	if err != nil {
		return err
	}
	w.manifest.Files = append(w.manifest.Files, File{Name: name, Rows: len(w.buf), Bytes: size, SHA256: sum})
	w.manifest.Rows += len(w.buf)
	w.buf, w.bufBytes = w.buf[:0], 0
	return nil
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
	w.manifest.Created = time.Now().UTC()
	data, err := json.MarshalIndent(w.manifest, "", "  ")
	if err != nil {
		return nil, err
	}
	err = atomicfile.Write(filepath.Join(w.cfg.Dir, "manifest.json"), func(out io.Writer) error {
		_, err := out.Write(append(data, '\n'))
		return err
	})
	return &w.manifest, err
}
