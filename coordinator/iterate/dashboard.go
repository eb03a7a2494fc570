package iterate

import (
	"maps"
	"path/filepath"
	"slices"

	"github.com/a2farm/a2farm/internal/tbevents"
)

// Dashboard plots each iteration's report row as TensorBoard scalars (step =
// iteration) in Dir/iterate, beside the trainer's runs Dir/it<k>. It is a
// view of report.jsonl, not the record: a row it cannot write is lost to
// the view only.
type Dashboard struct {
	// Dir is the dashboard's folder (tensorboard --logdir it).
	Dir string
	w   *tbevents.Writer
}

// Row plots r's scalars, sorted by tag, and flushes them.
func (d *Dashboard) Row(r Row) error {
	if d.w == nil {
		w, err := tbevents.Create(filepath.Join(d.Dir, "iterate"))
		if err != nil {
			return err
		}
		d.w = w
	}
	scalars := r.Scalars()
	for _, tag := range slices.Sorted(maps.Keys(scalars)) {
		if err := d.w.Scalar(tag, int64(r.Iteration), scalars[tag]); err != nil {
			return err
		}
	}
	return d.w.Flush()
}

// Close closes the event file, if one was opened.
func (d *Dashboard) Close() error {
	if d.w == nil {
		return nil
	}
	return d.w.Close()
}
