package gitrepo

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/a2farm/a2farm/internal/repogen"
)

// TestObjectsWithPrefix compares the pack-index lookup with go-git's own
// (which walks every index entry) on a repository holding both a pack and
// loose objects, for prefixes of every length 4-39, even and odd, some
// matching several objects and some none.
func TestObjectsWithPrefix(t *testing.T) {
	dir := t.TempDir()
	gen, err := repogen.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	commit := func(parent string, i int) string {
		id, err := gen.Commit(parent, repogen.Change{Message: fmt.Sprint("c", i),
			Write: map[string]string{fmt.Sprintf("pkg/m%d.py", i%7): fmt.Sprintf("x = %d\n", i)}})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	head := ""
	for i := range 120 {
		head = commit(head, i)
	}
	if err := gen.SetBranch("main", head); err != nil { // what a repack packs
		t.Fatal(err)
	}
	plain, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.RepackObjects(&git.RepackConfig{}); err != nil {
		t.Fatal(err)
	}
	// The repack leaves the loose copies; only the pack is to hold them.
	fanout, _ := filepath.Glob(filepath.Join(dir, "objects", "[0-9a-f][0-9a-f]"))
	for _, d := range fanout {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	for i := 120; i < 160; i++ { // loose, beside the pack
		head = commit(head, i)
	}
	packs, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.idx"))
	if len(packs) != 1 {
		t.Fatalf("want one pack index, found %v", packs)
	}

	if plain, err = git.PlainOpen(dir); err != nil { // sees the new pack
		t.Fatal(err)
	}
	var all []string
	iter, err := plain.Storer.IterEncodedObjects(plumbing.AnyObject)
	if err != nil {
		t.Fatal(err)
	}
	if err := iter.ForEach(func(o plumbing.EncodedObject) error {
		all = append(all, o.Hash().String())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	loose := 0
	for _, id := range all {
		if _, err := os.Stat(filepath.Join(dir, "objects", id[:2], id[2:])); err == nil {
			loose++
		}
	}
	if loose == 0 || loose == len(all) {
		t.Fatalf("%d of %d objects loose: want both kinds", loose, len(all))
	}

	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	prefixer := plain.Storer.(storer.PackedObjectStorer).(interface {
		HashesWithPrefix([]byte) ([]plumbing.Hash, error)
	})
	var prefixes []string
	for i, id := range all[:40] {
		prefixes = append(prefixes, id[:4+i%36], strings.ToUpper(id[:7]))
	}
	// Neighbours in id order that share 4 or more digits give prefixes
	// naming several objects (the ids are the same at every run).
	sorted := slices.Sorted(slices.Values(all))
	for i := 1; i < len(sorted); i++ {
		n := 0
		for n < 39 && sorted[i-1][n] == sorted[i][n] {
			n++
		}
		if n >= 4 {
			prefixes = append(prefixes, sorted[i][:n], sorted[i][:4])
		}
	}
	prefixes = append(prefixes, "0000000", "ffff", all[0][:3]+"x")
	several := 0
	for _, p := range prefixes {
		got, err := r.ObjectsWithPrefix(p)
		if strings.Contains(p, "x") {
			if err == nil {
				t.Errorf("%q: no error", p)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		lower := strings.ToLower(p)
		raw, _ := hex.DecodeString(lower[:len(lower)&^1])
		hashes, err := prefixer.HashesWithPrefix(raw)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, h := range hashes {
			if id := h.String(); strings.HasPrefix(id, lower) {
				want = append(want, id)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%q: got %v, go-git finds %v", p, got, want)
		}
		if len(want) > 1 {
			several++
		}
	}
	if several == 0 {
		t.Error("no prefix matched several objects: the test checks too little")
	}
	if n := r.ObjectsRead(); n != 0 {
		t.Errorf("the lookups read %d objects", n)
	}
}
