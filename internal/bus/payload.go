package bus

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/a2farm/a2farm/schema"
)

// encodingHeader names how a trajectory payload is compressed. A payload
// without it is a plain Arrow IPC stream (which may use Arrow's own
// per-buffer compression), so messages written before the header existed
// still decode.
const (
	encodingHeader = "A2farm-Encoding"
	encodingZstd   = "zstd"
)

// maxPayloadBytes bounds a decompressed trajectory so that a corrupt or
// hostile message cannot exhaust the learner's memory.
const maxPayloadBytes = 1 << 30

// maxPooledPlain is the largest uncompressed-stream buffer kept for reuse.
const maxPooledPlain = 4 << 20

// payloadCodec compresses a trajectory's uncompressed Arrow IPC stream as
// one zstd frame. Arrow's IPC compression compresses every column buffer
// on its own — about 150 encoder resets for a one-trajectory message —
// which costs more CPU than the episode of a fast policy and compresses
// worse, since the repeated prompt columns cannot share a window
// (BenchmarkTrajectoryPayload in docs/BENCHMARKS.md). Both halves are safe
// for concurrent use.
type payloadCodec struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
	// plain holds *bytes.Buffer for the uncompressed stream: reused, a
	// buffer stops growing after the first payloads instead of doubling
	// its way up for every trajectory.
	plain *sync.Pool
}

func newPayloadCodec() payloadCodec {
	// Neither constructor can fail with these options. EncodeAll and
	// DecodeAll start no goroutines, so nothing needs closing; each holds
	// GOMAXPROCS block coders, which bounds how many run at once.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(0), zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		panic(fmt.Sprintf("bus: zstd encoder: %v", err))
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxPayloadBytes))
	if err != nil {
		panic(fmt.Sprintf("bus: zstd decoder: %v", err))
	}
	return payloadCodec{enc: enc, dec: dec, plain: &sync.Pool{New: func() any { return new(bytes.Buffer) }}}
}

// encode returns the compressed payload of one trajectory.
func (c payloadCodec) encode(tr schema.Trajectory) ([]byte, error) {
	rec := schema.EncodeTrajectories(nil, tr)
	defer rec.Release()
	plain := c.plain.Get().(*bytes.Buffer)
	defer func() {
		if plain.Cap() <= maxPooledPlain { // one huge trajectory must not pin its buffer
			c.plain.Put(plain)
		}
	}()
	plain.Reset()
	if err := schema.WriteIPCUncompressed(plain, schema.TrajectorySchema(), rec); err != nil {
		return nil, err
	}
	return c.enc.EncodeAll(plain.Bytes(), make([]byte, 0, plain.Len()/4)), nil
}

// decode reads a payload written by encode, or a plain Arrow IPC stream
// when encoding is empty.
func (c payloadCodec) decode(data []byte, encoding string) ([]schema.Trajectory, error) {
	switch encoding {
	case "":
	case encodingZstd:
		var err error
		if data, err = c.dec.DecodeAll(data, nil); err != nil {
			return nil, fmt.Errorf("decompress trajectory payload: %w", err)
		}
	default:
		return nil, fmt.Errorf("trajectory payload has unknown encoding %q", encoding)
	}
	return schema.ReadTrajectories(bytes.NewReader(data))
}
