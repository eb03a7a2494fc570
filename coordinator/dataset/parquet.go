package dataset

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// readParquet turns every row of a Parquet file into the same field map a
// JSON line decodes to, so both formats share one validator. Null cells are
// left out (and so reported as missing when required).
func readParquet(ctx context.Context, f *os.File) ([]rawRow, error) {
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return nil, fmt.Errorf("open parquet: %w", err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("open parquet: %w", err)
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	defer rr.Release()
	var rows []rawRow
	for rr.Next() {
		rec := rr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			row := rawRow{line: len(rows) + 1, fields: map[string]json.RawMessage{}}
			for c, col := range rec.Columns() {
				if col.IsNull(i) {
					continue
				}
				var v any
				switch a := col.(type) {
				case *array.String:
					v = a.Value(i)
				case *array.LargeString:
					v = a.Value(i)
				default:
					v = col.GetOneForMarshal(i)
				}
				raw, err := json.Marshal(v)
				if err != nil {
					row.err = fmt.Errorf("column %q: %w", rec.ColumnName(c), err)
					break
				}
				row.fields[rec.ColumnName(c)] = raw
			}
			rows = append(rows, row)
		}
	}
	if err := rr.Err(); err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	return rows, nil
}
