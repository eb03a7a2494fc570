package schema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Codec converts between Go values of a struct type and Arrow record
// batches. The Arrow schema is derived from the struct's `arrow` tags:
//
//	string -> utf8, bool -> bool, int64/int -> int64, int32 -> int32,
//	float64 -> float64, float32 -> float32,
//	time.Time -> timestamp[us, UTC] (nullable; the zero time is null),
//	json.RawMessage -> utf8 (nullable; nil is null),
//	[]T -> list<T> (nullable; a nil slice is null, an empty one is []),
//	struct -> struct.
//
// A field tagged `arrow:"-"` is left out; `arrow:",inline"` flattens an
// embedded struct's columns into its parent.
type Codec[T any] struct {
	kind   string
	schema *arrow.Schema
	cols   []column
}

// column is one top-level Arrow column bound to a Go field path.
type column struct {
	path []int
	conv converter
}

// converter appends a Go value to a builder and reads it back from an array.
type converter struct {
	dtype    arrow.DataType
	nullable bool
	enc      func(b array.Builder, v reflect.Value)
	dec      func(a arrow.Array, i int, v reflect.Value) error
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// NewCodec derives the codec of T; kind names the contract in the schema
// metadata.
func NewCodec[T any](kind string) (*Codec[T], error) {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("codec %s: %s is not a struct", kind, t)
	}
	c := &Codec[T]{kind: kind}
	var fields []arrow.Field
	if err := c.collect(t, nil, &fields); err != nil {
		return nil, fmt.Errorf("codec %s: %w", kind, err)
	}
	md := arrow.NewMetadata([]string{MetaKind, MetaFormatVersion}, []string{kind, Version})
	c.schema = arrow.NewSchema(fields, &md)
	return c, nil
}

func (c *Codec[T]) collect(t reflect.Type, prefix []int, fields *[]arrow.Field) error {
	seen := map[string]bool{}
	for _, f := range *fields {
		seen[f.Name] = true
	}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name, opts, _ := strings.Cut(sf.Tag.Get("arrow"), ",")
		path := append(append([]int(nil), prefix...), i)
		switch {
		case name == "-":
			continue
		case opts == "inline":
			if sf.Type.Kind() != reflect.Struct {
				return fmt.Errorf("field %s: inline needs a struct", sf.Name)
			}
			if err := c.collect(sf.Type, path, fields); err != nil {
				return err
			}
			continue
		case name == "":
			return fmt.Errorf("field %s has no arrow tag", sf.Name)
		case seen[name]:
			return fmt.Errorf("column %q appears twice", name)
		}
		conv, err := converterFor(sf.Type)
		if err != nil {
			return fmt.Errorf("field %s: %w", sf.Name, err)
		}
		seen[name] = true
		*fields = append(*fields, arrow.Field{Name: name, Type: conv.dtype, Nullable: conv.nullable})
		c.cols = append(c.cols, column{path: path, conv: conv})
	}
	return nil
}

func converterFor(t reflect.Type) (converter, error) {
	switch {
	case t == timeType:
		return converter{
			dtype:    &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"},
			nullable: true,
			enc: func(b array.Builder, v reflect.Value) {
				tb := b.(*array.TimestampBuilder)
				tm := v.Interface().(time.Time)
				if tm.IsZero() {
					tb.AppendNull()
					return
				}
				tb.Append(arrow.Timestamp(tm.UnixMicro()))
			},
			dec: func(a arrow.Array, i int, v reflect.Value) error {
				if a.IsNull(i) {
					v.Set(reflect.Zero(timeType))
					return nil
				}
				us := int64(a.(*array.Timestamp).Value(i))
				v.Set(reflect.ValueOf(time.UnixMicro(us).UTC()))
				return nil
			},
		}, nil
	case t == rawType:
		return converter{
			dtype:    arrow.BinaryTypes.String,
			nullable: true,
			enc: func(b array.Builder, v reflect.Value) {
				if v.IsNil() {
					b.AppendNull()
					return
				}
				b.(*array.StringBuilder).Append(string(v.Bytes()))
			},
			dec: func(a arrow.Array, i int, v reflect.Value) error {
				if a.IsNull(i) {
					return nil
				}
				v.SetBytes([]byte(a.(*array.String).Value(i)))
				return nil
			},
		}, nil
	}
	switch t.Kind() {
	case reflect.String:
		return converter{
			dtype: arrow.BinaryTypes.String,
			enc:   func(b array.Builder, v reflect.Value) { b.(*array.StringBuilder).Append(v.String()) },
			dec: func(a arrow.Array, i int, v reflect.Value) error {
				v.SetString(a.(*array.String).Value(i))
				return nil
			},
		}, nil
	case reflect.Bool:
		return converter{
			dtype: arrow.FixedWidthTypes.Boolean,
			enc:   func(b array.Builder, v reflect.Value) { b.(*array.BooleanBuilder).Append(v.Bool()) },
			dec: func(a arrow.Array, i int, v reflect.Value) error {
				v.SetBool(a.(*array.Boolean).Value(i))
				return nil
			},
		}, nil
	case reflect.Int64, reflect.Int:
		return converter{
			dtype: arrow.PrimitiveTypes.Int64,
			enc:   func(b array.Builder, v reflect.Value) { b.(*array.Int64Builder).Append(v.Int()) },
			dec: func(a arrow.Array, i int, v reflect.Value) error {
				v.SetInt(a.(*array.Int64).Value(i))
				return nil
			},
		}, nil
	case reflect.Int32:
		return converter{
			dtype: arrow.PrimitiveTypes.Int32,
			enc:   func(b array.Builder, v reflect.Value) { b.(*array.Int32Builder).Append(int32(v.Int())) },
			dec: func(a arrow.Array, i int, v reflect.Value) error {
				v.SetInt(int64(a.(*array.Int32).Value(i)))
				return nil
			},
		}, nil
	case reflect.Float64:
		return converter{
			dtype: arrow.PrimitiveTypes.Float64,
			enc:   func(b array.Builder, v reflect.Value) { b.(*array.Float64Builder).Append(v.Float()) },
			dec: func(a arrow.Array, i int, v reflect.Value) error {
				v.SetFloat(a.(*array.Float64).Value(i))
				return nil
			},
		}, nil
	case reflect.Float32:
		return converter{
			dtype: arrow.PrimitiveTypes.Float32,
			enc:   func(b array.Builder, v reflect.Value) { b.(*array.Float32Builder).Append(float32(v.Float())) },
			dec: func(a arrow.Array, i int, v reflect.Value) error {
				v.SetFloat(float64(a.(*array.Float32).Value(i)))
				return nil
			},
		}, nil
	case reflect.Slice:
		return listConverter(t)
	case reflect.Struct:
		return structConverter(t)
	}
	return converter{}, fmt.Errorf("unsupported type %s", t)
}

func listConverter(t reflect.Type) (converter, error) {
	elem, err := converterFor(t.Elem())
	if err != nil {
		return converter{}, err
	}
	if c, ok := numericListConverter(t, elem); ok {
		return c, nil
	}
	return converter{
		dtype:    arrow.ListOfField(arrow.Field{Name: "element", Type: elem.dtype, Nullable: elem.nullable}),
		nullable: true,
		enc: func(b array.Builder, v reflect.Value) {
			lb := b.(*array.ListBuilder)
			if v.IsNil() {
				lb.AppendNull()
				return
			}
			lb.Append(true)
			vb := lb.ValueBuilder()
			for j := 0; j < v.Len(); j++ {
				elem.enc(vb, v.Index(j))
			}
		},
		dec: func(a arrow.Array, i int, v reflect.Value) error {
			la := a.(*array.List)
			if la.IsNull(i) {
				v.Set(reflect.Zero(t))
				return nil
			}
			start, end := la.ValueOffsets(i)
			s := reflect.MakeSlice(t, int(end-start), int(end-start))
			values := la.ListValues()
			for j := start; j < end; j++ {
				if err := elem.dec(values, int(j), s.Index(int(j-start))); err != nil {
					return err
				}
			}
			v.Set(s)
			return nil
		},
	}, nil
}

// numericListConverter copies lists of plain numbers (token ids, log
// probabilities, weights) in one call per list instead of one reflected
// call per element: token shards hold millions of ids.
func numericListConverter(t reflect.Type, elem converter) (converter, bool) {
	if t.Elem().Name() != t.Elem().Kind().String() { // a named type, e.g. time.Duration: keep the general path
		return converter{}, false
	}
	var appendAll func(vb array.Builder, v reflect.Value)
	var decodeAll func(values arrow.Array, start, end int64) reflect.Value
	switch t.Elem().Kind() {
	case reflect.Int32:
		appendAll, decodeAll = numbers(func(a arrow.Array) []int32 { return a.(*array.Int32).Int32Values() })
	case reflect.Int64:
		appendAll, decodeAll = numbers(func(a arrow.Array) []int64 { return a.(*array.Int64).Int64Values() })
	case reflect.Float32:
		appendAll, decodeAll = numbers(func(a arrow.Array) []float32 { return a.(*array.Float32).Float32Values() })
	case reflect.Float64:
		appendAll, decodeAll = numbers(func(a arrow.Array) []float64 { return a.(*array.Float64).Float64Values() })
	default:
		return converter{}, false
	}
	return converter{
		dtype:    arrow.ListOfField(arrow.Field{Name: "element", Type: elem.dtype, Nullable: elem.nullable}),
		nullable: true,
		enc: func(b array.Builder, v reflect.Value) {
			lb := b.(*array.ListBuilder)
			if v.IsNil() {
				lb.AppendNull()
				return
			}
			lb.Append(true)
			appendAll(lb.ValueBuilder(), v)
		},
		dec: func(a arrow.Array, i int, v reflect.Value) error {
			la := a.(*array.List)
			if la.IsNull(i) {
				v.Set(reflect.Zero(t))
				return nil
			}
			start, end := la.ValueOffsets(i)
			v.Set(decodeAll(la.ListValues(), start, end)) // a null element (another writer's) reads as 0
			return nil
		},
	}, true
}

// numbers copies a whole list of T into a builder, and a range of an
// array's values out, given how to read the array's values.
func numbers[T int32 | int64 | float32 | float64](values func(arrow.Array) []T) (
	appendAll func(array.Builder, reflect.Value), decodeAll func(arrow.Array, int64, int64) reflect.Value) {
	appendAll = func(vb array.Builder, v reflect.Value) {
		vb.(interface{ AppendValues([]T, []bool) }).AppendValues(v.Interface().([]T), nil)
	}
	decodeAll = func(a arrow.Array, start, end int64) reflect.Value {
		return reflect.ValueOf(slices.Clone(values(a)[start:end]))
	}
	return appendAll, decodeAll
}

func structConverter(t reflect.Type) (converter, error) {
	var fields []arrow.Field
	var convs []converter
	var index []int
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("arrow"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			return converter{}, fmt.Errorf("field %s.%s has no arrow tag", t.Name(), sf.Name)
		}
		conv, err := converterFor(sf.Type)
		if err != nil {
			return converter{}, fmt.Errorf("field %s.%s: %w", t.Name(), sf.Name, err)
		}
		fields = append(fields, arrow.Field{Name: name, Type: conv.dtype, Nullable: conv.nullable})
		convs = append(convs, conv)
		index = append(index, i)
	}
	return converter{
		dtype: arrow.StructOf(fields...),
		enc: func(b array.Builder, v reflect.Value) {
			sb := b.(*array.StructBuilder)
			sb.Append(true)
			for j, conv := range convs {
				conv.enc(sb.FieldBuilder(j), v.Field(index[j]))
			}
		},
		dec: func(a arrow.Array, i int, v reflect.Value) error {
			sa := a.(*array.Struct)
			for j, conv := range convs {
				if err := conv.dec(sa.Field(j), i, v.Field(index[j])); err != nil {
					return err
				}
			}
			return nil
		},
	}, nil
}

// Schema returns the Arrow schema, with kind and format version metadata.
func (c *Codec[T]) Schema() *arrow.Schema { return c.schema }

// Kind is the contract name stored in the schema metadata.
func (c *Codec[T]) Kind() string { return c.kind }

// Encode builds one record batch holding rows. The caller releases it.
func (c *Codec[T]) Encode(mem memory.Allocator, rows []T) arrow.RecordBatch {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	b := array.NewRecordBuilder(mem, c.schema)
	defer b.Release()
	c.reserve(b, rows)
	for i := range rows {
		v := reflect.ValueOf(&rows[i]).Elem()
		for j, col := range c.cols {
			col.conv.enc(b.Field(j), v.FieldByIndex(col.path))
		}
	}
	return b.NewRecordBatch()
}

// reserve sizes every builder for rows, and each top-level string column
// for its total length, so that long text columns (observations,
// prompts) are copied once instead of through a chain of doublings.
func (c *Codec[T]) reserve(b *array.RecordBuilder, rows []T) {
	b.Reserve(len(rows))
	for j, col := range c.cols {
		sb, ok := b.Field(j).(*array.StringBuilder)
		if !ok {
			continue
		}
		total := 0
		for i := range rows {
			switch v := reflect.ValueOf(&rows[i]).Elem().FieldByIndex(col.path); v.Kind() {
			case reflect.String, reflect.Slice:
				total += v.Len()
			}
		}
		sb.ReserveData(total)
	}
}

// Decode reads every row of rec. Columns are matched by name, so files
// written with columns in another order (or with extra columns) still
// decode; a missing column or a type mismatch is an error — except in
// data of an older format version (OldestReadable on), whose changes
// since only added columns: a column it lacks reads as the zero value.
func (c *Codec[T]) Decode(rec arrow.RecordBatch) ([]T, error) {
	if err := c.checkMetadata(rec.Schema()); err != nil {
		return nil, err
	}
	older := false
	if v, ok := rec.Schema().Metadata().GetValue(MetaFormatVersion); ok && v != Version {
		older = true
	}
	arrays := make([]arrow.Array, len(c.cols))
	for j, f := range c.schema.Fields() {
		idx := rec.Schema().FieldIndices(f.Name)
		if len(idx) == 0 {
			if older {
				continue // added since: zero
			}
			return nil, fmt.Errorf("%s: column %q is missing", c.kind, f.Name)
		}
		a := rec.Column(idx[0])
		if !arrow.TypeEqual(a.DataType(), f.Type) {
			return nil, fmt.Errorf("%s: column %q has type %s, want %s", c.kind, f.Name, a.DataType(), f.Type)
		}
		arrays[j] = a
	}
	rows := make([]T, rec.NumRows())
	for i := range rows {
		v := reflect.ValueOf(&rows[i]).Elem()
		for j, col := range c.cols {
			if arrays[j] == nil {
				continue
			}
			if err := col.conv.dec(arrays[j], i, v.FieldByIndex(col.path)); err != nil {
				return nil, fmt.Errorf("%s row %d column %q: %w", c.kind, i, c.schema.Field(j).Name, err)
			}
		}
	}
	return rows, nil
}

// OldestReadable is the oldest format version this build reads: every
// change since it added columns, nothing else.
const OldestReadable = 4

// checkMetadata rejects data of another contract or of a format version
// this build cannot read; data without metadata (written by other tools)
// is accepted.
func (c *Codec[T]) checkMetadata(s *arrow.Schema) error {
	md := s.Metadata()
	if kind, ok := md.GetValue(MetaKind); ok && kind != c.kind {
		return fmt.Errorf("data holds %s rows, want %s", kind, c.kind)
	}
	if v, ok := md.GetValue(MetaFormatVersion); ok && v != Version {
		current, _ := strconv.Atoi(Version)
		if n, err := strconv.Atoi(v); err != nil || n < OldestReadable || n > current {
			return fmt.Errorf("%s data has format version %s; this build reads versions %d to %s (read it with the a2farm release that wrote it)",
				c.kind, v, OldestReadable, Version)
		}
	}
	return nil
}
