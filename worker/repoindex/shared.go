package repoindex

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/a2farm/a2farm/internal/atomicfile"
	"github.com/a2farm/a2farm/internal/gitrepo"
)

// Shared is a store of built indexes that the workers of a farm share, on
// any host: bundles by key, and claims so that one worker builds a
// snapshot while the others wait for its bundle. internal/bus implements
// it over the NATS object store and a key-value bucket.
type Shared interface {
	// Get copies the bundle stored under key into w; found is false
	// when none is stored.
	Get(ctx context.Context, key string, w io.Writer) (found bool, err error)
	// Put stores a bundle under key.
	Put(ctx context.Context, key string, r io.Reader) error
	// Claim takes the right to build key; held is false while another
	// worker holds it. release frees a held claim.
	Claim(ctx context.Context, key string) (held bool, release func(), err error)
}

// sharedPoll is how often a worker waiting for another's build looks for
// its bundle (and whether the builder's claim lapsed).
const sharedPoll = 250 * time.Millisecond

// sharedKey names a snapshot's bundle by everything that makes its index.
func sharedKey(repo, commit string, opts BuildOptions) string {
	return sharedKeyOf(opts.Languages.Key(), repo, commit)
}

// sharedKeyOf is sharedKey of a languages key (an entry's meta holds it).
func sharedKeyOf(languages, repo, commit string) string {
	return fmt.Sprintf("v%d/%s/%s@%s", Version, languages, repo, commit)
}

// historyKey names a repository's commit records in the shared store.
func historyKey(repo string) string { return fmt.Sprintf("v%d/history/%s", Version, repo) }

// fromShared gets a missing cache entry from the farm: a bundle another
// worker stored, or — when this worker wins the claim — a build of its
// own, which it then stores for the others. While another worker builds,
// it waits for that bundle; if the builder dies, its claim lapses and a
// waiter builds instead. Sharing failures never fail the index: the
// worker builds for itself.
func (c *Cache) fromShared(ctx context.Context, r *gitrepo.Repo, repo, commit string, opts BuildOptions, dir string) (made, error) {
	key := sharedKey(repo, commit, opts)
	fetch := func() bool {
		found, err := c.fetch(ctx, opts.Shared, key, dir)
		return err == nil && found && c.complete(dir, opts)
	}
	for {
		if fetch() {
			return made{source: SourceShared}, nil
		}
		held, release, err := opts.Shared.Claim(ctx, key)
		if err != nil {
			return c.buildEntry(ctx, r, commit, repo, opts, dir)
		}
		if held {
			// The bundle may have landed between the look and the claim.
			if fetch() {
				release()
				return made{source: SourceShared}, nil
			}
			m, err := c.buildEntry(ctx, r, commit, repo, opts, dir)
			if err == nil {
				if m.shareErr = c.share(ctx, opts.Shared, key, dir, m.blobs); m.shareErr == nil {
					markShared(dir)
				}
			}
			release()
			return m, err
		}
		select {
		case <-ctx.Done():
			return made{}, ctx.Err()
		case <-time.After(sharedPoll):
		}
	}
}

// sharedMark, in an entry, says the farm's shared store holds its bundle
// (this worker stored or fetched it): only such a whole entry is a base for
// an overlay this worker shares.
const sharedMark = "shared"

func markShared(dir string) { _ = os.WriteFile(filepath.Join(dir, sharedMark), nil, 0o644) }

func inSharedStore(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, sharedMark))
	return err == nil
}

// A bundle is a zstd-compressed tar of the cache entry's files under
// entry/ and the parse results of the snapshot's files under parse/.
const (
	bundleEntry = "entry/"
	bundleParse = "parse/"
)

// parsedBlob names one cached parse result: the language that read the
// blob (readerKey) and the blob.
type parsedBlob struct{ reader, blob string }

// share stores the entry at dir, with the parse results of blobs, under
// key.
func (c *Cache) share(ctx context.Context, s Shared, key, dir string, blobs []parsedBlob) error {
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	add := func(name, file string) error {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		return add(bundleEntry+filepath.ToSlash(rel), p)
	})
	if err != nil {
		return fmt.Errorf("bundle %s: %w", key, err)
	}
	for _, b := range blobs {
		if err := add(bundleParse+b.reader+"/"+b.blob+".gob.zst", c.parsePathOf(b.reader, b.blob)); err != nil {
			return fmt.Errorf("bundle %s: %w", key, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return s.Put(ctx, key, &buf)
}

// fetch installs the bundle stored under key as the entry at dir (and
// its parse results); found is false when no bundle is stored.
func (c *Cache) fetch(ctx context.Context, s Shared, key, dir string) (found bool, err error) {
	var buf bytes.Buffer
	if found, err := s.Get(ctx, key, &buf); err != nil || !found {
		return false, err
	}
	zr, err := zstd.NewReader(&buf)
	if err != nil {
		return false, err
	}
	defer zr.Close()
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-*")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return false, fmt.Errorf("bundle %s: %w", key, err)
		}
		if err := c.unbundle(h, tr, tmp); err != nil {
			return false, fmt.Errorf("bundle %s: %w", key, err)
		}
	}
	meta, err := readMeta(tmp)
	if err != nil {
		return false, fmt.Errorf("bundle %s has no entry: %w", key, err)
	}
	if meta.Base != "" { // an overlay: its base comes first, from the store too
		release, err := c.fetchBase(ctx, s, meta, dir)
		if err != nil {
			return false, fmt.Errorf("bundle %s: its base %s: %w", key, meta.Base, err)
		}
		defer release()
	}
	if err := installEntry(tmp, dir); err != nil {
		return false, fmt.Errorf("bundle %s: %w", key, err)
	}
	markShared(dir)
	return true, nil
}

// fetchBase makes sure the whole entry an overlay fetched into dir's
// place is stored on is in the cache, fetching its bundle when it is
// missing, and holds it (a shared lock) until release, so that eviction
// cannot take it before the overlay that needs it is installed.
func (c *Cache) fetchBase(ctx context.Context, s Shared, overlay snapshotMeta, dir string) (release func(), err error) {
	baseDir := filepath.Join(filepath.Dir(dir), overlay.Base)
	lock, err := lockFile(baseDir+".lock", syscall.LOCK_SH)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	unlock := func() { lock.Close() }
	isBase := func() bool {
		meta, ok := entryMeta(baseDir, overlay.Languages)
		return ok && meta.Base == ""
	}
	if isBase() {
		return unlock, nil
	}
	build, err := lockFile(baseDir+".build.lock", syscall.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer build.Close()
	if isBase() {
		return unlock, nil // fetched by another process while this one waited
	}
	found, err := c.fetch(ctx, s, sharedKeyOf(overlay.Languages, overlay.Repo, overlay.Base), baseDir)
	if err == nil && !found {
		err = errors.New("the shared store does not hold it")
	}
	if err != nil {
		return nil, err
	}
	return unlock, nil
}

// unbundle writes one bundle member: an entry file under tmp, or a parse
// result into the blob cache. Names that would leave either are refused.
func (c *Cache) unbundle(h *tar.Header, r io.Reader, tmp string) error {
	if h.Typeflag != tar.TypeReg {
		return fmt.Errorf("member %q is not a regular file", h.Name)
	}
	clean := path.Clean(h.Name)
	if clean != h.Name || strings.HasPrefix(clean, "../") || path.IsAbs(clean) {
		return fmt.Errorf("member %q: bad name", h.Name)
	}
	switch {
	case strings.HasPrefix(clean, bundleEntry):
		dst := filepath.Join(tmp, filepath.FromSlash(strings.TrimPrefix(clean, bundleEntry)))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	case strings.HasPrefix(clean, bundleParse):
		reader, blob, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(clean, bundleParse), ".gob.zst"), "/")
		if len(blob) < 3 || strings.ContainsAny(blob, "/.") || reader == "" || reader == ".." || strings.ContainsAny(reader, "/\\") {
			return fmt.Errorf("member %q: bad parse result name", h.Name)
		}
		dst := c.parsePathOf(reader, blob)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return atomicfile.WriteCache(dst, func(w io.Writer) error {
			_, err := io.Copy(w, r)
			return err
		})
	}
	return fmt.Errorf("member %q: neither entry nor parse result", h.Name)
}
