package schema

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// WriteIPC writes record batches as one zstd-compressed Arrow IPC stream.
func WriteIPC(w io.Writer, schema *arrow.Schema, recs ...arrow.RecordBatch) error {
	return writeIPC(w, schema, recs, ipc.WithZstd())
}

// WriteIPCUncompressed writes an Arrow IPC stream without buffer
// compression, for callers that compress the whole stream themselves.
func WriteIPCUncompressed(w io.Writer, schema *arrow.Schema, recs ...arrow.RecordBatch) error {
	return writeIPC(w, schema, recs)
}

func writeIPC(w io.Writer, schema *arrow.Schema, recs []arrow.RecordBatch, opts ...ipc.Option) error {
	iw := ipc.NewWriter(w, append([]ipc.Option{ipc.WithSchema(schema)}, opts...)...)
	for _, rec := range recs {
		if err := iw.Write(rec); err != nil {
			iw.Close()
			return fmt.Errorf("write arrow ipc: %w", err)
		}
	}
	if err := iw.Close(); err != nil {
		return fmt.Errorf("write arrow ipc: %w", err)
	}
	return nil
}

// ReadIPC reads every record batch of an Arrow IPC stream and calls fn with
// each; the batch is released after fn returns.
func ReadIPC(r io.Reader, fn func(arrow.RecordBatch) error) error {
	ir, err := ipc.NewReader(r, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return fmt.Errorf("read arrow ipc: %w", err)
	}
	defer ir.Release()
	for ir.Next() {
		if err := fn(ir.RecordBatch()); err != nil {
			return err
		}
	}
	if err := ir.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read arrow ipc: %w", err)
	}
	return nil
}

// ParquetProperties are the writer settings of every Parquet file a2farm
// writes: zstd, and the Arrow schema stored so nested nullability and
// metadata survive the round trip.
func parquetProperties() (*parquet.WriterProperties, pqarrow.ArrowWriterProperties) {
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithStats(true),
		// Token shards hold millions of values: a dictionary costs a hash
		// lookup per value (most of their write time) and gains nothing —
		// ids take most of a vocabulary, and zstd packs the long runs of
		// equal loss weights as well as dictionary runs would.
		parquet.WithDictionaryFor("input_ids.list.element", false),
		parquet.WithDictionaryFor("loss_weights.list.element", false),
		// Ids are close to random bytes to a compressor: its fastest level
		// packs them as well as the default at twice the speed.
		parquet.WithCompressionLevelFor("input_ids.list.element", 1),
	)
	return props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
}

// ParquetWriter writes record batches of one schema into a Parquet file.
type ParquetWriter struct {
	fw *pqarrow.FileWriter
}

// NewParquetWriter starts a Parquet file on w.
func NewParquetWriter(w io.Writer, schema *arrow.Schema) (*ParquetWriter, error) {
	props, arrProps := parquetProperties()
	fw, err := pqarrow.NewFileWriter(schema, w, props, arrProps)
	if err != nil {
		return nil, fmt.Errorf("parquet writer: %w", err)
	}
	return &ParquetWriter{fw: fw}, nil
}

// Write adds one record batch as a row group.
func (pw *ParquetWriter) Write(rec arrow.RecordBatch) error {
	if err := pw.fw.Write(rec); err != nil {
		return fmt.Errorf("write parquet: %w", err)
	}
	return nil
}

// Close writes the footer (and closes w when it is an io.Closer).
func (pw *ParquetWriter) Close() error {
	if err := pw.fw.Close(); err != nil {
		return fmt.Errorf("close parquet: %w", err)
	}
	return nil
}

// WriteParquet writes record batches (all of one schema) as one Parquet
// file on w, closing w when it is an io.Closer.
func WriteParquet(w io.Writer, recs ...arrow.RecordBatch) error {
	if len(recs) == 0 {
		return errors.New("write parquet: no record batches")
	}
	pw, err := NewParquetWriter(w, recs[0].Schema())
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if err := pw.Write(rec); err != nil {
			pw.Close()
			return err
		}
	}
	return pw.Close()
}

// ReadParquet reads a Parquet file and calls fn with its record batches
// (released after fn returns).
func ReadParquet(r parquet.ReaderAtSeeker, fn func(arrow.RecordBatch) error) error {
	pf, err := file.NewParquetReader(r)
	if err != nil {
		return fmt.Errorf("read parquet: %w", err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 4096}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("read parquet: %w", err)
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return fmt.Errorf("read parquet: %w", err)
	}
	defer rr.Release()
	for rr.Next() {
		if err := fn(rr.RecordBatch()); err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read parquet: %w", err)
	}
	return nil
}

// ReadTrajectories decodes every trajectory of an Arrow IPC stream.
func ReadTrajectories(r io.Reader) ([]Trajectory, error) {
	var out []Trajectory
	err := ReadIPC(r, func(rec arrow.RecordBatch) error {
		trs, err := DecodeTrajectories(rec)
		out = append(out, trs...)
		return err
	})
	return out, err
}

// ReadTrajectoryDir reads every *.arrow trajectory file (Arrow IPC
// streams) in dir.
func ReadTrajectoryDir(dir string) ([]Trajectory, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.arrow"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no .arrow trajectory files in %s", dir)
	}
	var all []Trajectory
	for _, p := range paths {
		trs, err := ReadTrajectoryFile(p)
		if err != nil {
			return nil, err
		}
		all = append(all, trs...)
	}
	return all, nil
}

// ReadTrajectoryFile reads the trajectories of one Arrow IPC file.
func ReadTrajectoryFile(path string) ([]Trajectory, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	trs, err := ReadTrajectories(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return trs, nil
}

// ExportJSONL writes every row of an Arrow IPC stream (trajectories) or a
// Parquet file (shards and other tables) as one JSON object per line, all
// columns included; it returns the number of rows. The format is detected
// from the file's first bytes.
func ExportJSONL(path string, w io.Writer) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil {
		return 0, fmt.Errorf("%s: too short to be Arrow or Parquet: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	rows := 0
	write := func(rec arrow.RecordBatch) error {
		rows += int(rec.NumRows())
		return array.RecordToJSON(rec, w)
	}
	switch {
	case string(magic) == "PAR1":
		err = ReadParquet(f, write)
	case string(magic) == "\xff\xff\xff\xff":
		err = ReadIPC(f, write)
	default:
		return 0, fmt.Errorf("%s is neither an Arrow IPC stream nor a Parquet file", path)
	}
	return rows, err
}
