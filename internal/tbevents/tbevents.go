// Package tbevents writes TensorBoard event files: scalars by tag and step,
// in the format TensorBoard, wandb's TensorBoard sync and every other reader
// of tfevents files take (TFRecord framing around Event protocol buffers),
// so that a2farm's own figures land on the same dashboard as the trainer's.
// It writes the few protocol-buffer fields a scalar needs by hand: the
// module carries no protobuf dependency for this.
package tbevents

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"time"
)

// Writer appends scalars to one event file.
type Writer struct {
	f *os.File
	w *bufio.Writer
}

// Create starts a new event file in dir (created when missing), named as
// TensorBoard names its own: events.out.tfevents.<unix seconds>.<host>.
func Create(dir string) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	now := time.Now()
	// The nanoseconds keep two writers of one second apart.
	path := filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%d.%s.%d.a2farm", now.Unix(), host, now.Nanosecond()))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	w := &Writer{f: f, w: bufio.NewWriter(f)}
	// Every event file starts with its version.
	ev := appendDouble(nil, 1, seconds(now))
	ev = appendBytes(ev, 3, []byte("brain.Event:2"))
	if err := w.record(ev); err != nil {
		f.Close()
		return nil, err
	}
	return w, w.Flush()
}

// Scalar records value under tag at step.
func (w *Writer) Scalar(tag string, step int64, value float64) error {
	val := appendBytes(nil, 1, []byte(tag))
	val = appendFloat(val, 2, float32(value))
	summary := appendBytes(nil, 1, val)
	ev := appendDouble(nil, 1, seconds(time.Now()))
	ev = appendVarint(ev, 2, uint64(step))
	ev = appendBytes(ev, 5, summary)
	return w.record(ev)
}

// Flush writes what is buffered to the file and syncs it, so that a reader
// (TensorBoard polls) sees whole records.
func (w *Writer) Flush() error {
	if err := w.w.Flush(); err != nil {
		return err
	}
	return w.f.Sync()
}

// Close flushes and closes the file.
func (w *Writer) Close() error {
	err := w.Flush()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// record frames data as TFRecord does: its length, the length's masked
// CRC-32C, the data, the data's masked CRC-32C.
func (w *Writer) record(data []byte) error {
	var head [12]byte
	binary.LittleEndian.PutUint64(head[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(head[8:], maskedCRC(head[:8]))
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], maskedCRC(data))
	for _, b := range [][]byte{head[:], data, tail[:]} {
		if _, err := w.w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's checksum: CRC-32C rotated right by 15 bits plus
// a constant.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// Protocol-buffer encoding of the fields used: a key is field<<3 | wire type.
func appendKey(b []byte, field, wire int) []byte {
	return binary.AppendUvarint(b, uint64(field<<3|wire))
}

func appendVarint(b []byte, field int, v uint64) []byte {
	return binary.AppendUvarint(appendKey(b, field, 0), v)
}

func appendDouble(b []byte, field int, v float64) []byte {
	return binary.LittleEndian.AppendUint64(appendKey(b, field, 1), math.Float64bits(v))
}

func appendBytes(b []byte, field int, v []byte) []byte {
	b = binary.AppendUvarint(appendKey(b, field, 2), uint64(len(v)))
	return append(b, v...)
}

func appendFloat(b []byte, field int, v float32) []byte {
	return binary.LittleEndian.AppendUint32(appendKey(b, field, 5), math.Float32bits(v))
}
