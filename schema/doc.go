// Package schema holds every wire and disk contract of a2farm: dataset
// instances, gold locations, jobs, trajectories and training-shard rows, as
// Go types and as Arrow schemas, plus the location-id rules shared by tools,
// rewards and metrics.
//
// The Arrow schemas are derived from the Go types (see Codec) and carry a
// format version in their metadata. Changing a type changes a golden file in
// testdata/; whoever updates it must bump Version.
package schema

// Version is the format version stored in the metadata of every Arrow
// schema a2farm writes. Bump it with any change to a contract.
const Version = "8"

// Metadata keys stored on every schema.
const (
	MetaFormatVersion = "a2farm.format_version"
	MetaKind          = "a2farm.kind"
)
