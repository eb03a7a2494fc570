package history

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/emirpasic/gods/trees/binaryheap"

	"github.com/a2farm/a2farm/internal/gitrepo"
)

// A Store holds the commit records of one repository. History is
// append-only, so each commit is read from git (and its changed files
// computed) once per repository; a snapshot's history is then derived from
// the stored records: its most recent MaxCommits ancestors in the order
// `git log` walks them.
//
// On disk a store is one append-only log of records (docs/ARCHITECTURE.md,
// "Commit history once per repository"). Processes append under an
// exclusive flock; readers never lock, and ignore a torn record at the end.
// A Store is safe for concurrent use.
type Store struct {
	path string // "" for a store in memory only

	mu   sync.Mutex
	data []byte            // the log as read, then appended records
	at   map[commitID]int  // commit -> offset of its latest record in data
	new  map[commitID]bool // records added since the last Save
}

// commitID is a binary commit id.
type commitID [20]byte

func parseID(s string) (commitID, error) {
	var id commitID
	if len(s) != 40 {
		return id, fmt.Errorf("commit id %q: want 40 hex digits", s)
	}
	_, err := hex.Decode(id[:], []byte(s))
	return id, err
}

func (id commitID) String() string { return hex.EncodeToString(id[:]) }

// storeMagic opens every log; a file without it is not a store.
const storeMagic = "a2farm-history 1\n"

// OpenStore opens the store at path, creating it when missing; an empty
// path gives a store kept in memory only.
func OpenStore(path string) (*Store, error) {
	s := &Store{path: path, at: map[commitID]int{}, new: map[commitID]bool{}}
	if path == "" {
		s.data = []byte(storeMagic)
		return s, nil
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		data = []byte(storeMagic)
	case err != nil:
		return nil, fmt.Errorf("history store: %w", err)
	case !bytes.HasPrefix(data, []byte(storeMagic)):
		return nil, fmt.Errorf("history store %s: not a history log", path)
	}
	s.data = data
	s.data = s.data[:s.scan(len(storeMagic))] // a torn record at the end is dropped
	return s, nil
}

// Len is the number of commits stored.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at)
}

// Has reports whether the store holds a commit (by full id).
func (s *Store) Has(commit string) bool {
	id, err := parseID(commit)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.at[id]
	return ok
}

// Bytes is the size of the log.
func (s *Store) Bytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.data)
}

// scan indexes the records of s.data from off and returns the end of the
// last whole record.
func (s *Store) scan(off int) int {
	for off+4 <= len(s.data) {
		n := int(binary.LittleEndian.Uint32(s.data[off:]))
		if n < headerSize || off+4+n > len(s.data) {
			break
		}
		var id commitID
		copy(id[:], s.data[off+4:])
		s.at[id] = off
		off += 4 + n
	}
	return off
}

// A record is laid out as: length (u32, of what follows), commit id (20),
// tree id (20), commit time (i64, unix seconds), flags (u8: files known),
// parent count (u8) and ids (20 each), then author date, message and files
// as length-prefixed strings (u32; a u32 count of files first).
const headerSize = 20 + 20 + 8 + 1 + 1

const flagFiles = 1

// header is the part of a record a walk needs.
type header struct {
	tree     commitID
	time     int64
	files    bool
	parents  []commitID
	off      int // record offset in data
	id       commitID
	restFrom int // offset of the variable part
}

func (s *Store) header(off int) header {
	b := s.data[off+4:]
	h := header{off: off, time: int64(binary.LittleEndian.Uint64(b[40:])), files: b[48]&flagFiles != 0}
	copy(h.id[:], b)
	copy(h.tree[:], b[20:])
	n := int(b[49])
	h.parents = make([]commitID, n)
	for i := range n {
		copy(h.parents[i][:], b[headerSize+20*i:])
	}
	h.restFrom = off + 4 + headerSize + 20*n
	return h
}

// commit decodes the whole record at off.
func (s *Store) commit(off int) Commit {
	h := s.header(off)
	b := s.data[h.restFrom:]
	str := func() string {
		n := int(binary.LittleEndian.Uint32(b))
		v := string(b[4 : 4+n])
		b = b[4+n:]
		return v
	}
	c := Commit{SHA: h.id.String()}
	c.Date = str()
	msg := str()
	nf := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if nf > 0 {
		c.Files = make([]string, nf)
		for i := range nf {
			c.Files[i] = str()
		}
	}
	subject, _, _ := strings.Cut(msg, "\n")
	c.Message, c.Subject, c.Issues = msg, strings.TrimSpace(subject), IssueRefs(msg)
	return c
}

// add appends a record; files is nil when not known yet (hasFiles false).
func (s *Store) add(h gitrepo.CommitHeader, files []string, hasFiles bool) (header, error) {
	id, err := parseID(h.SHA)
	if err != nil {
		return header{}, err
	}
	tree, err := parseID(h.Tree)
	if err != nil {
		return header{}, err
	}
	var b bytes.Buffer
	b.Write(make([]byte, 4))
	b.Write(id[:])
	b.Write(tree[:])
	_ = binary.Write(&b, binary.LittleEndian, h.CommitTime.Unix())
	flags := byte(0)
	if hasFiles {
		flags = flagFiles
	}
	if len(h.Parents) > 255 {
		return header{}, fmt.Errorf("commit %s has %d parents", h.SHA, len(h.Parents))
	}
	b.WriteByte(flags)
	b.WriteByte(byte(len(h.Parents)))
	for _, p := range h.Parents {
		pid, err := parseID(p)
		if err != nil {
			return header{}, err
		}
		b.Write(pid[:])
	}
	putString := func(v string) {
		_ = binary.Write(&b, binary.LittleEndian, uint32(len(v)))
		b.WriteString(v)
	}
	putString(h.AuthorDate.Format("2006-01-02T15:04:05-07:00"))
	putString(strings.TrimRight(h.Message, "\n"))
	_ = binary.Write(&b, binary.LittleEndian, uint32(len(files)))
	for _, f := range files {
		putString(f)
	}
	rec := b.Bytes()
	binary.LittleEndian.PutUint32(rec, uint32(len(rec)-4))
	off := len(s.data)
	s.data = append(s.data, rec...)
	s.at[id] = off
	s.new[id] = true
	return s.header(off), nil
}

// withFiles rewrites a record whose files were not known.
func (s *Store) withFiles(h header, files []string) (header, error) {
	c := s.commit(h.off)
	parents := make([]string, len(h.parents))
	for i, p := range h.parents {
		parents[i] = p.String()
	}
	date, err := time.Parse("2006-01-02T15:04:05-07:00", c.Date)
	if err != nil {
		return header{}, fmt.Errorf("commit %s: stored date %q: %w", c.SHA, c.Date, err)
	}
	return s.add(gitrepo.CommitHeader{SHA: c.SHA, Tree: h.tree.String(), Parents: parents,
		CommitTime: time.Unix(h.time, 0), AuthorDate: date, Message: c.Message}, files, true)
}

// ViewStats says what deriving a view cost.
type ViewStats struct {
	Commits int // in the view
	// FromGit is how many commit objects were read from git, and Diffed how
	// many commits had their changed files computed; both 0 when the store
	// held everything.
	FromGit, Diffed int
}

// View returns the history of the snapshot at commit: its most recent
// limit ancestors (itself included; a patched snapshot's are its base's),
// newest first by committer time, the
// order go-git's and `git log`'s walks give. Records the store lacks are
// read from repo and added.
func (s *Store) View(ctx context.Context, repo *gitrepo.Repo, commit string, limit int) ([]Commit, ViewStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st ViewStats
	get := func(id commitID) (header, error) {
		if off, ok := s.at[id]; ok {
			return s.header(off), nil
		}
		h, err := repo.ReadCommit(id.String())
		if err != nil {
			return header{}, err
		}
		st.FromGit++
		return s.add(h, nil, false)
	}
	start, err := parseID(commit)
	if err != nil {
		return nil, st, err
	}
	first, err := get(start)
	if err != nil {
		return nil, st, err
	}
	// A patched snapshot's history is its base's: the patch is the task,
	// not a commit of the project (told from the record, not from git).
	for len(first.parents) > 0 && gitrepo.IsPatched(s.commit(first.off).Message, first.parents[0].String()) {
		if first, err = get(first.parents[0]); err != nil {
			return nil, st, err
		}
	}
	// The same heap and order as go-git's commit walker by committer time
	// (object.NewCommitIterCTime), so ties break the same way.
	heap := binaryheap.NewWith(func(a, b any) int {
		if a.(header).time < b.(header).time {
			return 1
		}
		return -1
	})
	heap.Push(first)
	seen := map[commitID]bool{}
	var walked []header
	for len(walked) < limit {
		if err := ctx.Err(); err != nil {
			return nil, st, err
		}
		v, ok := heap.Pop()
		if !ok {
			break
		}
		h := v.(header)
		if seen[h.id] {
			continue
		}
		seen[h.id] = true
		for _, p := range h.parents {
			if seen[p] {
				continue
			}
			ph, err := get(p)
			if err != nil {
				return nil, st, err
			}
			heap.Push(ph)
		}
		walked = append(walked, h)
	}
	if err := s.fillFiles(ctx, repo, walked, &st); err != nil {
		return nil, st, err
	}
	out := make([]Commit, len(walked))
	for i, h := range walked {
		out[i] = s.commit(s.at[h.id])
	}
	st.Commits = len(out)
	return out, st, nil
}

// fillFiles computes the changed files of the walked commits whose records
// lack them, newest first, in one batch.
func (s *Store) fillFiles(ctx context.Context, repo *gitrepo.Repo, walked []header, st *ViewStats) error {
	var todo []int
	var pairs []gitrepo.TreePair
	for i, h := range walked {
		if h.files {
			continue
		}
		if len(h.parents) > 1 { // a merge lists no files, as `git log --name-only`
			if _, err := s.withFiles(h, nil); err != nil {
				return err
			}
			continue
		}
		pair := gitrepo.TreePair{Tree: h.tree.String()}
		if len(h.parents) == 1 {
			off, ok := s.at[h.parents[0]]
			if !ok {
				ph, err := repo.ReadCommit(h.parents[0].String())
				if err != nil {
					return err
				}
				st.FromGit++
				if _, err := s.add(ph, nil, false); err != nil {
					return err
				}
				off = s.at[h.parents[0]]
			}
			pair.Parent = s.header(off).tree.String()
		}
		todo = append(todo, i)
		pairs = append(pairs, pair)
	}
	if len(pairs) == 0 {
		return nil
	}
	files, err := repo.ChangedFiles(ctx, pairs)
	if err != nil {
		return err
	}
	for j, i := range todo {
		if _, err := s.withFiles(walked[i], files[j]); err != nil {
			return err
		}
	}
	st.Diffed = len(pairs)
	return nil
}

// Save appends the records added since the last Save to the log, under an
// exclusive lock, after taking in what other processes appended
// meanwhile. A store in memory only keeps them.
func (s *Store) Save() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path == "" || len(s.new) == 0 {
		s.new = map[commitID]bool{}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(s.path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("history store: lock: %w", err)
	}
	f, err := os.OpenFile(s.path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	disk, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	if len(disk) > 0 && !bytes.HasPrefix(disk, []byte(storeMagic)) {
		return fmt.Errorf("history store %s: not a history log", s.path)
	}
	// What is on disk now (ours from before, others' appends) comes first;
	// a torn tail is cut before ours goes after it.
	merged := &Store{data: disk, at: map[commitID]int{}}
	end := len(storeMagic)
	if len(disk) == 0 {
		merged.data = []byte(storeMagic)
	} else {
		end = merged.scan(len(storeMagic))
	}
	var tail bytes.Buffer
	for id := range s.new {
		off := s.at[id]
		n := int(binary.LittleEndian.Uint32(s.data[off:]))
		tail.Write(s.data[off : off+4+n])
	}
	if len(disk) == 0 {
		if _, err := f.Write([]byte(storeMagic)); err != nil {
			return err
		}
	} else if err := f.Truncate(int64(end)); err != nil {
		return err
	}
	if _, err := f.WriteAt(tail.Bytes(), int64(end)); err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	merged.data = append(merged.data[:end], tail.Bytes()...)
	merged.scan(end)
	s.data, s.at, s.new = merged.data, merged.at, map[commitID]bool{}
	return nil
}

// Export writes the whole log (for the farm's shared store).
func (s *Store) Export(w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := w.Write(s.data)
	return err
}

// Import takes in the records of another store's log that this one lacks
// or holds without their files; they are saved with the next Save.
func (s *Store) Import(r io.Reader) (added int, err error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return 0, err
	}
	if !bytes.HasPrefix(data, []byte(storeMagic)) {
		return 0, errors.New("history store: not a history log")
	}
	other := &Store{data: data, at: map[commitID]int{}}
	other.scan(len(storeMagic))
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, off := range other.at {
		if mine, ok := s.at[id]; ok && (s.header(mine).files || !other.header(off).files) {
			continue
		}
		n := int(binary.LittleEndian.Uint32(other.data[off:]))
		at := len(s.data)
		s.data = append(s.data, other.data[off:off+4+n]...)
		s.at[id] = at
		s.new[id] = true
		added++
	}
	return added, nil
}
