package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// IndexClaimTTL is how long a claim to build an index lives without being
// renewed: a builder that dies frees its snapshot this long after.
const IndexClaimTTL = 30 * time.Second

// SharedIndexes is the farm's store of built snapshot indexes: bundles
// keyed by what makes an index (repository, commit, engine, format), and
// claims that let one worker build a snapshot while the others wait for
// its bundle instead of building it too.
type SharedIndexes struct {
	store  jetstream.ObjectStore
	claims jetstream.KeyValue
	holder string
}

// SharedIndexes returns the farm's index store as holder (a worker id)
// uses it; ok is false on a farm without one.
func (b *Bus) SharedIndexes(holder string) (s *SharedIndexes, ok bool) {
	if b.Indexes == nil || b.IndexBuilds == nil {
		return nil, false
	}
	return &SharedIndexes{store: b.Indexes, claims: b.IndexBuilds, holder: holder}, true
}

// storeKey turns an index key into an object and claim name: object names
// may be anything, claim keys only a few characters.
func storeKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Get copies the bundle stored under key into w; found is false when none
// is stored.
func (s *SharedIndexes) Get(ctx context.Context, key string, w io.Writer) (found bool, err error) {
	obj, err := s.store.Get(ctx, storeKey(key))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("shared index %s: %w", key, err)
	}
	defer obj.Close()
	if _, err := io.Copy(w, obj); err != nil {
		return false, fmt.Errorf("shared index %s: %w", key, err)
	}
	return true, nil
}

// Put stores the bundle read from r under key.
func (s *SharedIndexes) Put(ctx context.Context, key string, r io.Reader) error {
	_, err := s.store.Put(ctx, jetstream.ObjectMeta{Name: storeKey(key), Description: key,
		Headers: map[string][]string{"A2farm-Built-By": {s.holder}}}, r)
	if err != nil {
		return fmt.Errorf("share index %s: %w", key, err)
	}
	return nil
}

// Claim takes the right to build key. held is false while another worker
// holds it. A held claim is renewed until release is called, which frees
// it at once; if the holder dies, the claim lapses after IndexClaimTTL.
func (s *SharedIndexes) Claim(ctx context.Context, key string) (held bool, release func(), err error) {
	name := storeKey(key)
	rev, err := s.claims.Create(ctx, name, []byte(s.holder))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("claim index %s: %w", key, err)
	}
	renewCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(IndexClaimTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-t.C:
				next, err := s.claims.Update(renewCtx, name, []byte(s.holder), rev)
				if err != nil {
					return // lost (expired and taken over): the next builder's bundle wins
				}
				rev = next
			}
		}
	}()
	var once sync.Once
	return true, func() {
		once.Do(func() {
			stop()
			wg.Wait()
			_ = s.claims.Delete(context.WithoutCancel(ctx), name, jetstream.LastRevision(rev))
		})
	}, nil
}
