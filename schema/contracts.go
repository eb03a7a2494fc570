package schema

import (
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Contract names, stored in the schema metadata under MetaKind.
const (
	KindInstance   = "instance"
	KindGold       = "gold"
	KindJob        = "job"
	KindTrajectory = "trajectory"
	KindShard      = "shard"
	KindTokens     = "tokens"
)

// mustCodec builds a codec for a contract type; the types are fixed at
// compile time, so failure is a programming error caught by every test.
func mustCodec[T any](kind string) func() *Codec[T] {
	return sync.OnceValue(func() *Codec[T] {
		c, err := NewCodec[T](kind)
		if err != nil {
			panic(err)
		}
		return c
	})
}

// trajectoryRow is one Arrow row of a trajectory: the trajectory's fields
// repeated on every row plus one turn's fields. A trajectory without turns
// (one that failed before its first step) is one row with turn = -1.
type trajectoryRow struct {
	Head Trajectory `arrow:",inline"`
	Turn Turn       `arrow:",inline"`
}

// NoTurn is the turn index of the single row of a trajectory without turns.
const NoTurn = -1

var (
	instanceCodec   = mustCodec[Instance](KindInstance)
	goldCodec       = mustCodec[Gold](KindGold)
	jobCodec        = mustCodec[Job](KindJob)
	trajectoryCodec = mustCodec[trajectoryRow](KindTrajectory)
	shardCodec      = mustCodec[ShardRow](KindShard)
	tokenCodec      = mustCodec[TokenRow](KindTokens)
)

// Codecs of the contracts. Each is built once and is safe for concurrent use.
func InstanceCodec() *Codec[Instance] { return instanceCodec() }

// GoldCodec is the codec of gold rows.
func GoldCodec() *Codec[Gold] { return goldCodec() }

// JobCodec is the codec of jobs.
func JobCodec() *Codec[Job] { return jobCodec() }

// ShardCodec is the codec of training-shard rows.
func ShardCodec() *Codec[ShardRow] { return shardCodec() }

// TokenCodec is the codec of token-shard rows.
func TokenCodec() *Codec[TokenRow] { return tokenCodec() }

// TrajectorySchema is the Arrow schema of trajectory record batches.
func TrajectorySchema() *arrow.Schema { return trajectoryCodec().Schema() }

// EncodeTrajectories builds one record batch holding the given
// trajectories, one row per turn. The caller releases it.
func EncodeTrajectories(mem memory.Allocator, trs ...Trajectory) arrow.RecordBatch {
	var rows []trajectoryRow
	for _, tr := range trs {
		head := tr
		head.Turns = nil
		if len(tr.Turns) == 0 {
			rows = append(rows, trajectoryRow{Head: head, Turn: Turn{Index: NoTurn}})
			continue
		}
		for _, turn := range tr.Turns {
			rows = append(rows, trajectoryRow{Head: head, Turn: turn})
		}
	}
	return trajectoryCodec().Encode(mem, rows)
}

// DecodeTrajectories reads the trajectories of a record batch; consecutive
// rows with the same job id form one trajectory.
func DecodeTrajectories(rec arrow.RecordBatch) ([]Trajectory, error) {
	rows, err := trajectoryCodec().Decode(rec)
	if err != nil {
		return nil, err
	}
	var out []Trajectory
	for _, r := range rows {
		if n := len(out); n == 0 || out[n-1].JobID != r.Head.JobID {
			tr := r.Head
			tr.Turns = nil
			out = append(out, tr)
		}
		if r.Turn.Index != NoTurn {
			last := &out[len(out)-1]
			last.Turns = append(last.Turns, r.Turn)
		}
	}
	return out, nil
}
