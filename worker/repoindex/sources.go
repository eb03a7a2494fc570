package repoindex

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/worker/codegraph"
)

// sources.bin holds a snapshot's file contents, each compressed on its
// own so that one is read without the others: a header (magic, file
// count), a table of (offset, compressed length, length) per file in graph
// order, then the zstd frames.
const sourcesMagic = "a2farm-sources 1\n"

const sourcesEntry = 8 + 4 + 4

// writeSources writes the contents of files to path.
func writeSources(path string, files []codegraph.SourceFile) error {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return err
	}
	defer enc.Close()
	head := len(sourcesMagic) + 4 + sourcesEntry*len(files)
	var table, frames bytes.Buffer
	for _, f := range files {
		frame := enc.EncodeAll(f.Content, nil)
		var e [sourcesEntry]byte
		binary.LittleEndian.PutUint64(e[0:], uint64(head+frames.Len()))
		binary.LittleEndian.PutUint32(e[8:], uint32(len(frame)))
		binary.LittleEndian.PutUint32(e[12:], uint32(len(f.Content)))
		table.Write(e[:])
		frames.Write(frame)
	}
	var out bytes.Buffer
	out.Grow(head + frames.Len())
	out.WriteString(sourcesMagic)
	_ = binary.Write(&out, binary.LittleEndian, uint32(len(files)))
	out.Write(table.Bytes())
	out.Write(frames.Bytes())
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// entrySources reads an opened entry's contents from its sources.bin and
// its files' parse results from the cache's parse folder (parsing a file
// again when its result is gone). It is safe for concurrent use.
type entrySources struct {
	f     *os.File
	table []byte
	dec   *zstd.Decoder
	files []codegraph.SourceFile // path and blob of each file
	langs *lang.Set
	cache *Cache
}

func openSources(path string, c *Cache, langs *lang.Set) (*entrySources, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	head := make([]byte, len(sourcesMagic)+4)
	if _, err := f.ReadAt(head, 0); err != nil || string(head[:len(sourcesMagic)]) != sourcesMagic {
		f.Close()
		return nil, fmt.Errorf("%s: not a sources file", path)
	}
	n := int(binary.LittleEndian.Uint32(head[len(sourcesMagic):]))
	table := make([]byte, n*sourcesEntry)
	if _, err := f.ReadAt(table, int64(len(head))); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0))
	if err != nil {
		f.Close()
		return nil, err
	}
	return &entrySources{f: f, table: table, dec: dec, cache: c, langs: langs}, nil
}

// Content decompresses file fi.
func (s *entrySources) Content(fi int) ([]byte, error) {
	if fi < 0 || (fi+1)*sourcesEntry > len(s.table) {
		return nil, fmt.Errorf("sources: no file %d", fi)
	}
	e := s.table[fi*sourcesEntry:]
	off, clen, size := binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint32(e[8:]), binary.LittleEndian.Uint32(e[12:])
	frame := make([]byte, clen)
	if _, err := s.f.ReadAt(frame, int64(off)); err != nil {
		return nil, fmt.Errorf("sources: file %d: %w", fi, err)
	}
	out, err := s.dec.DecodeAll(frame, make([]byte, 0, size))
	if err != nil {
		return nil, fmt.Errorf("sources: file %d: %w", fi, err)
	}
	return out, nil
}

// Parsed reads file fi's parse result from the parse cache, or parses it.
func (s *entrySources) Parsed(fi int) (*lang.File, error) {
	f := s.files[fi]
	var pf lang.File
	if err := s.cache.readPiece(s.cache.parsePath(s.langs, f), &pf); err == nil && pf.Path == f.Path {
		return &pf, nil
	}
	l := s.langs.Reader(f.Path)
	if l == nil {
		return nil, fmt.Errorf("no language reads %s", f.Path)
	}
	content, err := s.Content(fi)
	if err != nil {
		return nil, err
	}
	p, err := l.NewParser()
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.Parse(f.Path, content)
}

func (s *entrySources) Close() error {
	s.dec.Close()
	return s.f.Close()
}

// graphPath and sourcesPath are an entry's opened parts.
func graphPath(dir string) string   { return filepath.Join(dir, "graph.bin") }
func sourcesPath(dir string) string { return filepath.Join(dir, "sources.bin") }
